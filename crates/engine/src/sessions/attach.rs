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
        mut stopping: watch::Receiver<bool>,
    ) -> Result<mpsc::Receiver<Result<LiveUpdate, SessionError>>, SessionError> {
        let session = self.get(raw)?;
        let (mut live, so_far, head) = self.attach(&session.id)?;
        let from = from_sequence.max(1);
        let (tx, rx) = mpsc::channel(QUEUE);
        tokio::spawn(async move {
            let _follower = Follower::new();
            let send =
                async |update: Result<LiveUpdate, SessionError>| tx.send(update).await.is_ok();
            // The last stream version sent (or skipped as older than asked).
            let mut sent = 0u64;
            // Stored events up to the head taken with the live channel, a
            // page at a time.
            'replay: loop {
                let page = match self.stored_versions(&session.id, sent + 1, PAGE).await {
                    Ok(page) => page,
                    Err(e) => {
                        let _ = send(Err(e)).await;
                        return;
                    }
                };
                let full = page.len() == PAGE;
                for e in page {
                    if e.sequence > head {
                        break 'replay;
                    }
                    sent = e.stream_version;
                    if e.sequence >= from && !send(Ok(LiveUpdate::Event(Arc::new(e)))).await {
                        return;
                    }
                }
                if !full {
                    break;
                }
            }
            if let Some(delta) = so_far
                && !send(Ok(LiveUpdate::Delta(delta))).await
            {
                return;
            }
            loop {
                let received = tokio::select! {
                    u = live.recv() => u,
                    () = async { let _ = stopping.wait_for(|s| *s).await; } => return,
                    () = tx.closed() => return,
                };
                // Stored events after `sent` and before version `to`.
                let missed_before = match &received {
                    Ok(LiveUpdate::Event(e)) if e.stream_version <= sent => continue,
                    Ok(LiveUpdate::Event(e)) => e.stream_version,
                    // A slow follower: what it missed comes from the store.
                    Err(RecvError::Lagged(_)) => u64::MAX,
                    _ => sent + 1,
                };
                while missed_before > sent + 1 {
                    let want = (missed_before - sent - 1).min(PAGE as u64) as usize;
                    let page = match self.stored_versions(&session.id, sent + 1, want).await {
                        Ok(page) => page,
                        Err(e) => {
                            let _ = send(Err(e)).await;
                            return;
                        }
                    };
                    if page.is_empty() {
                        break;
                    }
                    for e in page {
                        sent = e.stream_version;
                        if !send(Ok(LiveUpdate::Event(Arc::new(e)))).await {
                            return;
                        }
                    }
                }
                let update = match received {
                    Ok(LiveUpdate::Event(e)) => {
                        sent = e.stream_version;
                        LiveUpdate::Event(e)
                    }
                    Ok(delta @ LiveUpdate::Delta(_)) => delta,
                    Err(RecvError::Lagged(_)) => continue,
                    Err(RecvError::Closed) => return,
                };
                if !send(Ok(update)).await {
                    return; // the follower left; the turn goes on
                }
            }
        });
        Ok(rx)
    }
}
