//! The session actor: takes queued jobs (turns, resumes, compactions) one
//! at a time; a session's live side is started here with its actor, and
//! jobs are submitted to it. A turn itself is `turn.rs`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{broadcast, mpsc, watch};

use super::compaction::compact;
use super::jobs::Job;
use super::turn::run_turn;
use super::{Live, SessionError, Sessions};
use crate::sync::lock;

pub(super) async fn run(
    sessions: Arc<Sessions>,
    id: String,
    live: Arc<Live>,
    mut jobs: mpsc::UnboundedReceiver<Job>,
) {
    loop {
        let job = match tokio::time::timeout(IDLE_CHECK, jobs.recv()).await {
            Ok(Some(job)) => job,
            Ok(None) => return,
            Err(_) if sessions.retire(&id, &live, &jobs) => return,
            Err(_) => continue,
        };
        match job {
            Job::Turn(turn) | Job::Resume(turn) => {
                let resume = matches!(job, Job::Resume(_));
                live.queued.fetch_sub(1, Ordering::AcqRel);
                live.cancel.send_replace(false);
                live.running.store(turn, Ordering::Release);
                run_turn(&sessions, &id, &live, turn, resume).await;
                live.running.store(0, Ordering::Release);
            }
            Job::Compact { by, reply } => {
                let done = compact(&sessions, &id, &live, None, Some(by)).await;
                let _ = reply.send(done);
            }
        }
        if sessions.retire(&id, &live, &jobs) {
            return;
        }
    }
}

/// How often an idle actor checks whether it can retire (an attached
/// client keeps it; the check after a job catches the common case).
const IDLE_CHECK: Duration = Duration::from_secs(1);

impl Sessions {
    /// Run `f` on the session's live side (started if needed) under the
    /// map's lock.
    pub(super) fn with_live<T>(
        self: &Arc<Self>,
        id: &str,
        f: impl FnOnce(&Live) -> T,
    ) -> Result<T, SessionError> {
        if !super::model::exists(self.projector.tree(), id)? {
            return Err(SessionError::NotFound(id.to_string()));
        }
        let mut map = lock(&self.live);
        if let Some(l) = map.get(id) {
            return Ok(f(l));
        }
        let (jobs, rx) = mpsc::unbounded_channel();
        let (cancel, _) = watch::channel(false);
        let (updates, _) = broadcast::channel(256);
        let l = Arc::new(Live {
            jobs,
            cancel,
            running: AtomicU64::new(0),
            queued: AtomicU64::new(0),
            partial: Mutex::new((0, String::new())),
            updates,
        });
        map.insert(id.to_string(), Arc::clone(&l));
        tokio::spawn(run(Arc::clone(self), id.to_string(), Arc::clone(&l), rx));
        Ok(f(&l))
    }

    /// Queue a job for the session's actor. Returns whether it waits behind
    /// a running or queued turn.
    pub(super) fn submit(self: &Arc<Self>, id: &str, job: Job) -> Result<bool, SessionError> {
        self.with_live(id, |live| {
            let busy = live.running.load(Ordering::Acquire) != 0
                || live.queued.load(Ordering::Acquire) > 0;
            if matches!(job, Job::Turn(_) | Job::Resume(_)) {
                live.queued.fetch_add(1, Ordering::AcqRel);
            }
            // The receiver lives while the entry is in the map.
            let _ = live.jobs.send(job);
            busy
        })
    }
}
