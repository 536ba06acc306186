//! The sessions read model (tree `proj-sessions`), a [`Projection`] of the
//! `session-<id>` streams and the only code that folds them into stored
//! state:
//!
//! - `s/<id>` → the session's [`SessionState`] (JSON; no message bodies);
//! - `o/<last sequence><id>` → `()` for each session not deleted, so the
//!   newest are listed first without reading the others;
//! - `u/<id>` → `()` while the session has turns without an outcome, so a
//!   start finds the turns a previous run left unfinished without a scan;
//! - `c/<parent id>/<child id>` → `()` for each worker session, so a
//!   session's workers are listed without a scan.

use tinycode_shared::proto::Event;
use tinycode_shared::proto::event::Payload;

use super::SessionState;
use crate::projection::{Projection, ProjectionError, Writes};

const STATE: &[u8] = b"s/";
const ORDER: &[u8] = b"o/";
const UNFINISHED: &[u8] = b"u/";
const CHILD: &[u8] = b"c/";

fn child_key(parent: &str, child: &str) -> Vec<u8> {
    [CHILD, parent.as_bytes(), b"/", child.as_bytes()].concat()
}

fn state_key(id: &str) -> Vec<u8> {
    [STATE, id.as_bytes()].concat()
}

fn order_key(sequence: u64, id: &str) -> Vec<u8> {
    [ORDER, &sequence.to_be_bytes(), id.as_bytes()].concat()
}

fn unfinished_key(id: &str) -> Vec<u8> {
    [UNFINISHED, id.as_bytes()].concat()
}

fn decode(bytes: &[u8]) -> Result<SessionState, ProjectionError> {
    serde_json::from_slice(bytes)
        .map_err(|e| ProjectionError::Corrupt(format!("a stored session: {e}")))
}

fn encode(state: &SessionState) -> Result<Vec<u8>, ProjectionError> {
    serde_json::to_vec(state).map_err(|e| ProjectionError::Storage(e.to_string()))
}

/// A session's stored state.
pub fn read(tree: &sled::Tree, id: &str) -> Result<Option<SessionState>, ProjectionError> {
    tree.get(state_key(id))?.map(|v| decode(&v)).transpose()
}

/// Does the model have this session (deleted or not)?
pub fn exists(tree: &sled::Tree, id: &str) -> Result<bool, ProjectionError> {
    Ok(tree.contains_key(state_key(id))?)
}

/// Sessions not deleted, the most recently active first.
pub fn newest(
    tree: &sled::Tree,
) -> impl Iterator<Item = Result<SessionState, ProjectionError>> + '_ {
    tree.scan_prefix(ORDER).rev().filter_map(move |row| {
        let id = match row {
            Ok((key, _)) => String::from_utf8_lossy(&key[ORDER.len() + 8..]).to_string(),
            Err(e) => return Some(Err(e.into())),
        };
        read(tree, &id).transpose()
    })
}

/// The ids of `parent`'s worker sessions.
pub fn children(tree: &sled::Tree, parent: &str) -> Result<Vec<String>, ProjectionError> {
    let prefix = child_key(parent, "");
    let mut found = Vec::new();
    for row in tree.scan_prefix(&prefix) {
        let (key, _) = row?;
        found.push(String::from_utf8_lossy(&key[prefix.len()..]).to_string());
    }
    Ok(found)
}

/// Sessions with turns that have no outcome.
pub fn with_unfinished_turns(tree: &sled::Tree) -> Result<Vec<SessionState>, ProjectionError> {
    let mut found = Vec::new();
    for row in tree.scan_prefix(UNFINISHED) {
        let (key, _) = row?;
        if let Some(state) = read(tree, &String::from_utf8_lossy(&key[UNFINISHED.len()..]))? {
            found.push(state);
        }
    }
    Ok(found)
}

/// The sessions read model.
pub struct SessionsModel;

impl Projection for SessionsModel {
    fn name(&self) -> &'static str {
        "sessions"
    }

    fn version(&self) -> u32 {
        4 // 2: `last_at`; 3: workers (`parent`, `agents`, `c/`); 4: `last_version`, turn runners
    }

    fn apply(&self, writes: &mut Writes<'_>, event: &Event) -> Result<(), ProjectionError> {
        let Some(id) = event.stream_id.strip_prefix("session-") else {
            return Ok(());
        };
        let key = state_key(id);
        let mut state = match writes.get(&key)? {
            Some(bytes) => decode(&bytes)?,
            None if matches!(event.payload, Some(Payload::SessionCreated(_))) => {
                SessionState::default()
            }
            // Events of a session whose creation the log does not have.
            None => return Ok(()),
        };
        if event.sequence <= state.last_sequence {
            return Ok(()); // folded before (cannot happen past a checkpoint)
        }
        let (listed, was_unfinished) = (
            (!state.deleted && state.last_sequence != 0).then_some(state.last_sequence),
            !state.unfinished().is_empty(),
        );
        state.apply(event);
        if let (Some(Payload::SessionCreated(_)), Some(parent)) = (&event.payload, &state.parent) {
            writes.put(child_key(&parent.session_id, id), Vec::new());
        }
        if let Some(sequence) = listed {
            writes.remove(order_key(sequence, id));
        }
        if !state.deleted {
            writes.put(order_key(state.last_sequence, id), Vec::new());
        }
        match (was_unfinished, !state.unfinished().is_empty()) {
            (false, true) => writes.put(unfinished_key(id), Vec::new()),
            (true, false) => writes.remove(unfinished_key(id)),
            _ => {}
        }
        writes.put(key, encode(&state)?);
        Ok(())
    }
}
