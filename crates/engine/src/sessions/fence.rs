//! A turn's side of self-fencing: before each step and each tool call it
//! waits while its daemon's lease on a shared log is not renewed
//! (`Cluster::hold`), and after a lapse goes on only if the turn is still
//! this daemon's — another daemon that took it over has recorded its end
//! or started it itself.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use futures::FutureExt;
use futures::future::BoxFuture;

use super::Sessions;
use crate::agent::Fence;

/// Shared by the turn's loop and its writer: once either finds the turn
/// taken over, both stop, and nothing more of it is stored.
pub(super) struct TurnFence {
    sessions: Arc<Sessions>,
    id: String,
    turn: u64,
    /// The lapses counted when the turn last made sure it was its own.
    lapses: AtomicU64,
    handed: OnceLock<String>,
    checking: tokio::sync::Mutex<()>,
}

impl TurnFence {
    pub(super) fn new(sessions: &Arc<Sessions>, id: &str, turn: u64) -> Self {
        Self {
            sessions: Arc::clone(sessions),
            id: id.to_string(),
            turn,
            lapses: AtomicU64::new(sessions.cluster.lapses()),
            handed: OnceLock::new(),
            checking: tokio::sync::Mutex::new(()),
        }
    }

    /// Why the turn was handed over, once it was.
    pub(super) fn handed_over(&self) -> Option<&str> {
        self.handed.get().map(String::as_str)
    }

    /// Whether the turn is still this daemon's to run, as the log has it.
    async fn still_mine(&self) -> Result<(), String> {
        let sessions = &self.sessions;
        // What other daemons stored while this one was cut off, read to
        // the database's head (the feed may not have brought it yet).
        let head = sessions.store.latest().await.map_err(|e| e.to_string())?;
        sessions.read_at(head).await.map_err(|e| e.to_string())?;
        let state = sessions.get(&self.id).map_err(|e| e.to_string())?;
        let me = sessions.cluster.id();
        match state.turns.get(&self.turn) {
            Some(t) if t.outcome.is_none() && (t.runner.is_empty() || t.runner == me) => Ok(()),
            Some(t) if t.outcome.is_some() => Err(format!(
                "turn {} was ended by another daemon while this one's lease had lapsed",
                self.turn
            )),
            Some(t) => Err(format!(
                "turn {} was taken over by daemon {} while this one's lease had lapsed",
                self.turn, t.runner
            )),
            None => Err(format!("turn {} is no longer in the log", self.turn)),
        }
    }
}

impl Fence for TurnFence {
    fn hold(&self) -> BoxFuture<'_, Result<(), String>> {
        async move {
            let lapses = self.sessions.cluster.hold().await;
            // One verdict at a time: the loop and the writer both ask, and
            // the second must not take the first's check for its own.
            let _checking = self.checking.lock().await;
            if let Some(why) = self.handed_over() {
                return Err(why.to_string());
            }
            if self.lapses.load(Ordering::Acquire) == lapses {
                return Ok(());
            }
            match self.still_mine().await {
                Ok(()) => {
                    self.lapses.store(lapses, Ordering::Release);
                    Ok(())
                }
                Err(why) => {
                    let _ = self.handed.set(why.clone());
                    Err(why)
                }
            }
        }
        .boxed()
    }
}
