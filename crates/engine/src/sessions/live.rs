//! The live side of a session: its actor's job queue, the ordered channel
//! attached clients follow, and the text of the running step so far.
//!
//! A session has a live side only while it is busy or watched: an actor
//! with no job, no queued turn and no attached client retires, and the
//! next job or attach starts a new one. Jobs are submitted and clients
//! subscribe under the map's lock, and an actor retires under it too, so
//! no job and no subscriber can land on a retired actor.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tinycode_shared::proto::Delta;
use tinycode_shared::proto::event::Payload;
use tokio::sync::{broadcast, mpsc, watch};

use super::Sessions;
pub use super::jobs::DeltaKind;
use super::jobs::Job;
use crate::sync::lock;

/// What attached clients receive live, in the one order every client sees.
#[derive(Debug, Clone)]
pub enum LiveUpdate {
    /// A stored event of the session (published after it is durable).
    Event(Arc<tinycode_shared::proto::Event>),
    /// An ephemeral text or thinking delta.
    Delta(Delta),
}

/// Whether a stored event ends the running step (its answer, or the
/// turn's end): the step's streamed text is in it.
pub(super) fn ends_step(payload: &Payload) -> bool {
    matches!(
        payload,
        Payload::AssistantMessageAdded(_) | Payload::TurnCompleted(_)
    )
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
    pub(crate) fn emit(&self, turn: u64, kind: DeltaKind, text: &str) {
        let mut partial = lock(&self.partial);
        if kind == DeltaKind::Text {
            if partial.0 != turn {
                *partial = (turn, String::new());
            }
            partial.1.push_str(text);
        }
        let delta = Delta {
            turn,
            kind: kind.as_str().into(),
            text: text.into(),
        };
        let _ = self.updates.send(LiveUpdate::Delta(delta));
    }

    /// Publish stored events; a stored assistant message (or the end of
    /// the turn) ends the step, so the text so far is cleared with it.
    pub(crate) fn publish(&self, events: &[Arc<tinycode_shared::proto::Event>]) {
        let mut partial = lock(&self.partial);
        for e in events {
            if e.payload.as_ref().is_some_and(ends_step) {
                partial.1.clear();
            }
            let _ = self.updates.send(LiveUpdate::Event(Arc::clone(e)));
        }
    }
}

impl Sessions {
    /// Publish stored events to the clients attached right now (none when
    /// the session has no live side).
    pub(super) fn publish(&self, id: &str, events: &[Arc<tinycode_shared::proto::Event>]) {
        if let Some(live) = lock(&self.live).get(id) {
            live.publish(events);
        }
    }

    /// Several daemons on one log: publish what other daemons store in a
    /// session to the clients attached here, from `from` on. A session
    /// whose turn runs here publishes its own events already (and its
    /// deltas); the follower of an attach drops repeats and fills gaps
    /// from the store, so the order stays the stream's.
    pub(super) async fn follow_remote(self: Arc<Self>, from: u64) {
        if !self.store.shared() {
            return; // alone on its log
        }
        let mut feed = self
            .store
            .follow_forever("session-", from, "sessions of other daemons");
        while let Some(event) = feed.recv().await {
            let id = event.stream_id.get("session-".len()..).unwrap_or_default();
            // A message sent through another daemon for a turn to run here
            // (a repeat of one sent here is skipped by the actor).
            if let Some(Payload::UserMessageAdded(m)) = &event.payload
                && m.daemon_id == self.cluster.id()
                && let Err(e) = self.submit(id, Job::Turn(m.turn))
            {
                tracing::warn!(session = id, turn = m.turn, error = %e, "cannot run a turn sent through another daemon");
            }
            let live = lock(&self.live).get(id).cloned();
            // A cancel asked through another daemon, of a turn running here.
            if let (Some(Payload::TurnCancelRequested(c)), Some(live)) = (&event.payload, &live)
                && live.running.load(Ordering::Acquire) == c.turn
            {
                tracing::info!(
                    session = id,
                    turn = c.turn,
                    "cancelled through another daemon"
                );
                live.cancel.send_replace(true);
            }
            if let Some(live) = live
                && live.running.load(Ordering::Acquire) == 0
                && live.updates.receiver_count() > 0
            {
                live.publish(&[event]);
            }
        }
    }

    /// Called by an idle actor: leave the map when nothing needs it.
    /// `true` when it retired (and must stop).
    pub(super) fn retire(
        &self,
        id: &str,
        live: &Arc<Live>,
        jobs: &mpsc::UnboundedReceiver<Job>,
    ) -> bool {
        let mut map = lock(&self.live);
        let idle = jobs.is_empty()
            && live.updates.receiver_count() == 0
            && live.running.load(Ordering::Acquire) == 0
            && live.queued.load(Ordering::Acquire) == 0;
        if idle && map.get(id).is_some_and(|l| Arc::ptr_eq(l, live)) {
            map.remove(id);
        }
        idle
    }
}
