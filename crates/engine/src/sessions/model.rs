//! The sessions read model (tree `proj-sessions`), a [`Projection`] of the
//! `session-<id>` streams and the only code that folds them into stored
//! state:
//!
//! - `s/<id>` → the session's [`SessionState`] without its turns (JSON; no
//!   message bodies);
//! - `t/<id>/<turn>` → each turn's [`TurnBrief`] (a few dozen bytes, see
//!   [`encode_turn`]), so an event rewrites its own turn and the session's
//!   head, not every turn the session had (a 100-turn session's state was
//!   30 KiB rewritten by every batch);
//! - `o/<last sequence><id>` → `()` for each session not deleted, so the
//!   newest are listed first without reading the others;
//! - `u/<id>/<turn>` → `()` for each turn without an outcome, so a start
//!   finds the turns a previous run left unfinished without a scan;
//! - `c/<parent id>/<child id>` → `()` for each worker session, so a
//!   session's workers are listed without a scan.
//!
//! Turn numbers in keys are 8 bytes big-endian, so a session's turns are
//! read in order.

use std::collections::BTreeMap;

use tinycode_shared::proto::event::Payload;
use tinycode_shared::proto::{Event, TurnOutcome};

use super::SessionState;
use super::state::TurnBrief;
use crate::projection::{Projection, ProjectionError, Writes};

const STATE: &[u8] = b"s/";
const TURN: &[u8] = b"t/";
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

/// `<prefix><id>/<turn>`, or the prefix of all a session's rows with
/// `turn` `None`.
fn turn_key(prefix: &[u8], id: &str, turn: Option<u64>) -> Vec<u8> {
    let turn = turn.map(u64::to_be_bytes);
    [
        prefix,
        id.as_bytes(),
        b"/",
        turn.as_ref().map_or(&[][..], |t| &t[..]),
    ]
    .concat()
}

fn decode(bytes: &[u8]) -> Result<SessionState, ProjectionError> {
    serde_json::from_slice(bytes)
        .map_err(|e| ProjectionError::Corrupt(format!("a stored session: {e}")))
}

/// The head (its turns, which have rows of their own, already taken out).
fn encode(head: &SessionState) -> Result<Vec<u8>, ProjectionError> {
    serde_json::to_vec(head).map_err(|e| ProjectionError::Storage(e.to_string()))
}

/// Fixed part of a stored turn: sequence, version, started, outcome (-1:
/// none), messages, chars, steps, tool calls; the runner's id follows.
const TURN_FIXED: usize = 8 + 8 + 1 + 4 + 4 + 8 + 4 + 4;

/// A turn's row: little-endian fields, then the runner's id (decoded by
/// [`decode_turn`], the model's version changes with the layout).
fn encode_turn(t: &TurnBrief) -> Vec<u8> {
    let mut out = Vec::with_capacity(TURN_FIXED + t.runner.len());
    out.extend_from_slice(&t.user_sequence.to_le_bytes());
    out.extend_from_slice(&t.user_version.to_le_bytes());
    out.push(u8::from(t.started));
    out.extend_from_slice(&t.outcome.map_or(-1, |o| o as i32).to_le_bytes());
    out.extend_from_slice(&t.messages.to_le_bytes());
    out.extend_from_slice(&t.chars.to_le_bytes());
    out.extend_from_slice(&t.steps.to_le_bytes());
    out.extend_from_slice(&t.tool_calls.to_le_bytes());
    out.extend_from_slice(t.runner.as_bytes());
    out
}

fn decode_turn(bytes: &[u8]) -> Result<TurnBrief, ProjectionError> {
    let corrupt = || ProjectionError::Corrupt("a stored turn is too short".into());
    let (fixed, runner) = bytes.split_at_checked(TURN_FIXED).ok_or_else(corrupt)?;
    let mut at = 0;
    let mut take = |n: usize| {
        at += n;
        &fixed[at - n..at]
    };
    let u64_of = |b: &[u8]| u64::from_le_bytes(b.try_into().unwrap_or_default());
    let u32_of = |b: &[u8]| u32::from_le_bytes(b.try_into().unwrap_or_default());
    let user_sequence = u64_of(take(8));
    let user_version = u64_of(take(8));
    let started = take(1)[0] != 0;
    let outcome = i32::from_le_bytes(take(4).try_into().unwrap_or_default());
    Ok(TurnBrief {
        user_sequence,
        user_version,
        started,
        outcome: (outcome >= 0)
            .then(|| TurnOutcome::try_from(outcome).unwrap_or(TurnOutcome::Unspecified)),
        messages: u32_of(take(4)),
        chars: u64_of(take(8)),
        steps: u32_of(take(4)),
        tool_calls: u32_of(take(4)),
        runner: String::from_utf8_lossy(runner).into_owned(),
    })
}

/// The turn number at the end of a `t/` or `u/` key.
fn turn_of(key: &[u8]) -> u64 {
    key.len()
        .checked_sub(8)
        .and_then(|at| key[at..].try_into().ok())
        .map_or(0, u64::from_be_bytes)
}

/// A session's turns as stored.
fn turns(tree: &sled::Tree, id: &str) -> Result<BTreeMap<u64, TurnBrief>, ProjectionError> {
    let mut found = BTreeMap::new();
    for row in tree.scan_prefix(turn_key(TURN, id, None)) {
        let (key, value) = row?;
        found.insert(turn_of(&key), decode_turn(&value)?);
    }
    Ok(found)
}

/// A session's stored state, its turns included.
pub fn read(tree: &sled::Tree, id: &str) -> Result<Option<SessionState>, ProjectionError> {
    let Some(head) = tree.get(state_key(id))? else {
        return Ok(None);
    };
    let mut state = decode(&head)?;
    state.turns = turns(tree, id)?;
    Ok(Some(state))
}

/// One turn of a session as stored.
pub fn read_turn(
    tree: &sled::Tree,
    id: &str,
    turn: u64,
) -> Result<Option<TurnBrief>, ProjectionError> {
    tree.get(turn_key(TURN, id, Some(turn)))?
        .map(|v| decode_turn(&v))
        .transpose()
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
    let mut found: Vec<SessionState> = Vec::new();
    for row in tree.scan_prefix(UNFINISHED) {
        let (key, _) = row?;
        let Some(id) = key.get(UNFINISHED.len()..key.len().saturating_sub(9)) else {
            continue;
        };
        let id = String::from_utf8_lossy(id);
        if found.last().is_some_and(|s| s.id == id) {
            continue; // another of its turns
        }
        found.extend(read(tree, &id)?);
    }
    Ok(found)
}

/// The turns an event changes.
enum Touched {
    None,
    One(u64),
    /// Every turn (a compaction drops some).
    All,
}

impl Touched {
    fn by(payload: Option<&Payload>) -> Self {
        match payload {
            Some(Payload::SessionCompacted(_)) => Self::All,
            Some(Payload::TurnStarted(e)) => Self::One(e.turn),
            Some(Payload::TurnCompleted(e)) => Self::One(e.turn),
            Some(p) => super::state::entry(p).map_or(Self::None, |(turn, _)| Self::One(turn)),
            None => Self::None,
        }
    }
}

/// The stored turns `event` changes, as of this batch.
fn touched(
    writes: &Writes<'_>,
    id: &str,
    event: &Event,
) -> Result<BTreeMap<u64, TurnBrief>, ProjectionError> {
    let mut found = BTreeMap::new();
    match Touched::by(event.payload.as_ref()) {
        Touched::None => {}
        Touched::One(turn) => {
            if let Some(bytes) = writes.get(&turn_key(TURN, id, Some(turn)))? {
                found.insert(turn, decode_turn(&bytes)?);
            }
        }
        Touched::All => {
            for (key, value) in writes.scan_prefix(&turn_key(TURN, id, None))? {
                found.insert(turn_of(&key), decode_turn(&value.unwrap_or_default())?);
            }
        }
    }
    Ok(found)
}

/// The sessions read model.
pub struct SessionsModel;

impl SessionsModel {
    /// Write the turns `before` held and `state` holds now: changed rows
    /// put, dropped ones removed, each unfinished turn marked.
    fn write_turns(
        writes: &mut Writes<'_>,
        id: &str,
        before: &BTreeMap<u64, TurnBrief>,
        state: &SessionState,
    ) {
        for (turn, old) in before {
            if !state.turns.contains_key(turn) {
                writes.remove(turn_key(TURN, id, Some(*turn)));
                if old.outcome.is_none() {
                    writes.remove(turn_key(UNFINISHED, id, Some(*turn)));
                }
            }
        }
        for (turn, brief) in &state.turns {
            let old = before.get(turn);
            if old == Some(brief) {
                continue;
            }
            writes.put(turn_key(TURN, id, Some(*turn)), encode_turn(brief));
            let was_open = old.is_some_and(|t| t.outcome.is_none());
            match (was_open, brief.outcome.is_none()) {
                (false, true) => writes.put(turn_key(UNFINISHED, id, Some(*turn)), Vec::new()),
                (true, false) => writes.remove(turn_key(UNFINISHED, id, Some(*turn))),
                _ => {}
            }
        }
    }
}

impl Projection for SessionsModel {
    fn name(&self) -> &'static str {
        "sessions"
    }

    fn version(&self) -> u32 {
        // 2: `last_at`; 3: workers (`parent`, `agents`, `c/`); 4:
        // `last_version`, turn runners; 5: turns in rows of their own.
        5
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
        let listed = (!state.deleted && state.last_sequence != 0).then_some(state.last_sequence);
        let before = touched(writes, id, event)?;
        state.turns = before.clone();
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
        Self::write_turns(writes, id, &before, &state);
        state.turns.clear();
        writes.put(key, encode(&state)?);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use tinycode_shared::proto::{SessionCreated, TurnCompleted, TurnStarted, UserMessageAdded};

    use super::*;

    fn event(sequence: u64, payload: Payload) -> Event {
        Event {
            stream_id: "session-s1".into(),
            sequence,
            stream_version: sequence,
            payload: Some(payload),
            ..Default::default()
        }
    }

    fn user(turn: u64) -> Payload {
        Payload::UserMessageAdded(UserMessageAdded {
            turn,
            text: format!("question {turn}"),
            ..Default::default()
        })
    }

    /// Fold `events` one batch each; the keys each batch wrote.
    fn fold(tree: &sled::Tree, events: &[Event]) -> Vec<Vec<Vec<u8>>> {
        events
            .iter()
            .map(|e| {
                let mut writes = Writes::new(tree);
                SessionsModel.apply(&mut writes, e).unwrap();
                writes.commit(e.sequence).unwrap();
                writes.changed().map(|(k, _)| k.to_vec()).collect()
            })
            .collect()
    }

    #[test]
    fn an_event_writes_its_own_turn_and_the_head_not_the_others() {
        let db = sled::Config::new().temporary(true).open().unwrap();
        let tree = db.open_tree("s").unwrap();
        let mut events = vec![event(1, Payload::SessionCreated(SessionCreated::default()))];
        for turn in 1..=20 {
            let at = events.len() as u64 + 1;
            events.push(event(at, user(turn)));
            events.push(event(
                at + 1,
                Payload::TurnCompleted(TurnCompleted {
                    turn,
                    outcome: TurnOutcome::Completed as i32,
                    ..Default::default()
                }),
            ));
        }
        let at = events.len() as u64 + 1;
        events.push(event(at, user(21)));
        events.push(event(
            at + 1,
            Payload::TurnStarted(TurnStarted {
                turn: 21,
                daemon_id: "d1".into(),
            }),
        ));
        let written = fold(&tree, &events);
        let started = written.last().unwrap();
        assert!(
            started
                .iter()
                .all(|k| !k.starts_with(TURN) || *k == turn_key(TURN, "s1", Some(21))),
            "only turn 21's row: {started:?}"
        );
        let mut whole = SessionState::default();
        events.iter().for_each(|e| whole.apply(e));
        let stored = read(&tree, "s1").unwrap().unwrap();
        assert_eq!(stored, whole);
        assert_eq!(stored.turns.len(), 21);
        assert_eq!(
            read_turn(&tree, "s1", 21).unwrap(),
            whole.turns.get(&21).cloned()
        );
        let open = with_unfinished_turns(&tree).unwrap();
        assert_eq!(open.len(), 1);
        assert_eq!(open[0].unfinished(), [21]);
    }

    #[test]
    fn a_turn_row_reads_back_and_a_short_one_is_named_corrupt() {
        let brief = TurnBrief {
            user_sequence: 7,
            user_version: 3,
            started: true,
            outcome: Some(TurnOutcome::Interrupted),
            messages: 4,
            chars: 1 << 40,
            runner: "daemon-é".into(),
            steps: 2,
            tool_calls: 1,
        };
        assert_eq!(decode_turn(&encode_turn(&brief)).unwrap(), brief);
        let open = TurnBrief::default();
        assert_eq!(decode_turn(&encode_turn(&open)).unwrap(), open);
        let e = decode_turn(&encode_turn(&brief)[..TURN_FIXED - 1]).unwrap_err();
        assert!(e.to_string().contains("too short"), "{e}");
    }
}
