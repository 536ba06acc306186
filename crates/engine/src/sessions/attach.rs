//! Following a session: what `Sessions.Attach` streams.
//!
//! Stored events from the requested sequence up to the head are replayed
//! first, then the text of the running step so far, then every live update
//! in the one order the session produced them. Deltas are never stored, so
//! the live side is the session's own channel, not a store subscription;
//! what that channel cannot give (a slow follower, two writers of one
//! session publishing out of order) is read from the store. Events go out
//! in stream order with no gap and no duplicate: an event ahead of the next
//! version is preceded by what it skipped, and a late one is dropped as a
//! repeat.

use std::sync::Arc;

use tokio::sync::broadcast::error::RecvError;
use tokio::sync::{mpsc, watch};

use super::{LiveUpdate, SessionError, Sessions};

/// Updates queued for a follower before it is waited for: with events of
/// at most 100 KiB, a slow client holds at most this many in the daemon
/// (beyond it, it reads the store when it catches up).
const QUEUE: usize = 16;
/// Stored events read per page while replaying or filling a gap: a long
/// session is never held whole in memory for one client.
const PAGE: usize = 64;

/// Followers attached now; when the last leaves, the heap their replays
/// used is handed back to the OS.
static FOLLOWERS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

struct Follower;

impl Follower {
    fn new() -> Self {
        FOLLOWERS.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        Self
    }
}

impl Drop for Follower {
    fn drop(&mut self) {
        if FOLLOWERS.fetch_sub(1, std::sync::atomic::Ordering::AcqRel) == 1 {
            crate::heap::release_free_memory();
        }
    }
}

impl Sessions {
    /// Follow session `raw` from `from_sequence` until the receiver is
    /// dropped or `stopping` turns true.
    pub async fn follow(
        self: Arc<Self>,
        raw: &str,
        from_sequence: u64,
        stopping: watch::Receiver<bool>,
    ) -> Result<mpsc::Receiver<Result<LiveUpdate, SessionError>>, SessionError> {
        let session = self.get(raw)?;
        let (live, so_far, head) = self.attach(&session.id)?;
        let from = from_sequence.max(1);
        let (tx, rx) = mpsc::channel(QUEUE);
        let mut feed = Feed {
            sessions: self,
            id: session.id,
            tx,
            // Asked for what comes after every event the model has of the
            // session (a client sending its next message): those are
            // skipped without being read, so attaching costs the same on
            // the session's thousandth turn as on its first.
            sent: if from > session.last_sequence {
                session.last_version
            } else {
                0
            },
        };
        tokio::spawn(async move {
            let _follower = Follower::new();
            if !feed.replay(from, head).await {
                return;
            }
            if let Some(delta) = so_far
                && !feed.send(Ok(LiveUpdate::Delta(delta))).await
            {
                return;
            }
            feed.follow_live(live, stopping).await;
        });
        Ok(rx)
    }
}

/// What one follower is sent, and how far.
struct Feed {
    sessions: Arc<Sessions>,
    /// The session followed.
    id: String,
    tx: mpsc::Sender<Result<LiveUpdate, SessionError>>,
    /// The last stream version sent (or skipped as older than asked).
    sent: u64,
}

impl Feed {
    /// Send one update; `false`: the follower left.
    async fn send(&self, update: Result<LiveUpdate, SessionError>) -> bool {
        self.tx.send(update).await.is_ok()
    }

    /// Stored events of the session from version `from`, at most `max`;
    /// `None` once the error reading them is sent.
    async fn page(&self, from: u64, max: usize) -> Option<Vec<tinycode_shared::proto::Event>> {
        match self.sessions.stored_versions(&self.id, from, max).await {
            Ok(page) => Some(page),
            Err(e) => {
                let _ = self.send(Err(e)).await;
                None
            }
        }
    }

    /// Stored events up to the head taken with the live channel, a page
    /// at a time; those before sequence `from` are skipped. `false`: stop
    /// (the follower left, or the store failed).
    async fn replay(&mut self, from: u64, head: u64) -> bool {
        loop {
            let Some(page) = self.page(self.sent + 1, PAGE).await else {
                return false;
            };
            let full = page.len() == PAGE;
            for e in page {
                if e.sequence > head {
                    return true;
                }
                self.sent = e.stream_version;
                if e.sequence >= from && !self.send(Ok(LiveUpdate::Event(Arc::new(e)))).await {
                    return false;
                }
            }
            if !full {
                return true;
            }
        }
    }

    /// Every live update, in order, until the follower leaves, the
    /// session's channel closes or `stopping` turns true.
    async fn follow_live(
        &mut self,
        mut live: tokio::sync::broadcast::Receiver<LiveUpdate>,
        mut stopping: watch::Receiver<bool>,
    ) {
        loop {
            let received = tokio::select! {
                u = live.recv() => u,
                () = async { let _ = stopping.wait_for(|s| *s).await; } => return,
                () = self.tx.closed() => return,
            };
            // Stored events after `sent` and before version `to`.
            let missed_before = match &received {
                Ok(LiveUpdate::Event(e)) if e.stream_version <= self.sent => continue,
                Ok(LiveUpdate::Event(e)) => e.stream_version,
                // A slow follower: what it missed comes from the store.
                Err(RecvError::Lagged(_)) => u64::MAX,
                _ => self.sent + 1,
            };
            if !self.fill_gap(missed_before).await {
                return;
            }
            let update = match received {
                Ok(LiveUpdate::Event(e)) => {
                    self.sent = e.stream_version;
                    LiveUpdate::Event(e)
                }
                Ok(delta @ LiveUpdate::Delta(_)) => delta,
                Err(RecvError::Lagged(_)) => continue,
                Err(RecvError::Closed) => return,
            };
            if !self.send(Ok(update)).await {
                return; // the follower left; the turn goes on
            }
        }
    }

    /// Send the stored events after `sent` and before version
    /// `missed_before` (as far as the store has them). `false`: stop.
    async fn fill_gap(&mut self, missed_before: u64) -> bool {
        while missed_before > self.sent + 1 {
            let want = (missed_before - self.sent - 1).min(PAGE as u64) as usize;
            let Some(page) = self.page(self.sent + 1, want).await else {
                return false;
            };
            if page.is_empty() {
                break;
            }
            for e in page {
                self.sent = e.stream_version;
                if !self.send(Ok(LiveUpdate::Event(Arc::new(e)))).await {
                    return false;
                }
            }
        }
        true
    }
}
