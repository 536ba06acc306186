//! The live side of a session: the ordered channel attached clients follow
//! and the text of the running step so far.

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

use tinycode_shared::proto::Delta;
use tinycode_shared::proto::event::Payload;
use tokio::sync::{broadcast, mpsc, watch};

use super::actor::Job;
use crate::sync::lock;

/// What attached clients receive live, in the one order every client sees.
#[derive(Debug, Clone)]
pub enum LiveUpdate {
    /// A stored event of the session (published after it is durable).
    Event(Arc<tinycode_shared::proto::Event>),
    /// An ephemeral text or thinking delta.
    Delta(Delta),
}

/// The live side of a session: its actor's queue and what attached
/// clients need while a turn runs.
pub(crate) struct Live {
    pub(super) jobs: mpsc::UnboundedSender<Job>,
    pub(super) cancel: watch::Sender<bool>,
    /// Turn running now (0: none) and turns waiting.
    pub(super) running: AtomicU64,
    pub(super) queued: AtomicU64,
    /// Text of the current step so far, and the update channel; one lock
    /// so an attaching client gets the text so far and every later update,
    /// with no gap and no duplicate.
    pub(super) partial: Mutex<(u64, String)>,
    pub(super) updates: broadcast::Sender<LiveUpdate>,
}

impl Live {
    pub(crate) fn emit(&self, turn: u64, kind: &str, text: &str) {
        let mut partial = lock(&self.partial);
        if kind == "text" {
            if partial.0 != turn {
                *partial = (turn, String::new());
            }
            partial.1.push_str(text);
        }
        let delta = Delta {
            turn,
            kind: kind.into(),
            text: text.into(),
        };
        let _ = self.updates.send(LiveUpdate::Delta(delta));
    }

    /// Publish stored events; a stored assistant message (or the end of
    /// the turn) ends the step, so the text so far is cleared with it.
    pub(crate) fn publish(&self, events: &[Arc<tinycode_shared::proto::Event>]) {
        let mut partial = lock(&self.partial);
        for e in events {
            if matches!(
                e.payload,
                Some(Payload::AssistantMessageAdded(_)) | Some(Payload::TurnCompleted(_))
            ) {
                partial.1.clear();
            }
            let _ = self.updates.send(LiveUpdate::Event(Arc::clone(e)));
        }
    }
}
