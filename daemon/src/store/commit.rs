//! Group commit: appenders write to sled under the writer lock, then wait
//! here until a flush covers their last sequence. One flusher task serves all
//! of them: appends that arrive while a flush is running share the next one.
//! After each flush the newly durable events are published to live
//! subscribers, in sequence order.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tinycode_shared::proto::Event;
use tokio::sync::{Notify, broadcast, watch};

use super::StoreError;

/// What the flusher has made durable so far.
#[derive(Debug, Clone, Default)]
pub(crate) struct Durable {
    pub(crate) sequence: u64,
    /// Set when a flush failed: the store stops acknowledging appends.
    pub(crate) error: Option<Arc<str>>,
}

pub(crate) struct Committer {
    /// Highest sequence written to sled (not necessarily flushed).
    written: AtomicU64,
    durable: watch::Sender<Durable>,
    wake: Notify,
    /// Written but not yet durable, in sequence order; published after flush.
    unpublished: Mutex<VecDeque<Arc<Event>>>,
    live: broadcast::Sender<Arc<Event>>,
    fsyncs: AtomicU64,
}

impl Committer {
    pub(crate) fn new(last_sequence: u64, live: broadcast::Sender<Arc<Event>>) -> Self {
        Self {
            written: AtomicU64::new(last_sequence),
            durable: watch::Sender::new(Durable {
                sequence: last_sequence,
                error: None,
            }),
            wake: Notify::new(),
            unpublished: Mutex::new(VecDeque::new()),
            live,
            fsyncs: AtomicU64::new(0),
        }
    }

    /// Called under the writer lock right after the events are in sled.
    pub(crate) fn written(&self, events: &[Arc<Event>]) {
        if let Ok(mut queue) = self.unpublished.lock() {
            queue.extend(events.iter().cloned());
        }
        if let Some(last) = events.last() {
            self.written.fetch_max(last.sequence, Ordering::AcqRel);
        }
        self.wake.notify_one();
    }

    /// Wait until `sequence` is durable.
    pub(crate) async fn wait_durable(&self, sequence: u64) -> Result<(), StoreError> {
        let mut rx = self.durable.subscribe();
        let state = rx
            .wait_for(|d| d.sequence >= sequence || d.error.is_some())
            .await
            .map_err(|_| StoreError::Closed)?;
        match &state.error {
            Some(e) if state.sequence < sequence => Err(StoreError::Io(e.to_string())),
            _ => Ok(()),
        }
    }

    pub(crate) fn durable_sequence(&self) -> u64 {
        self.durable.borrow().sequence
    }

    pub(crate) fn fsyncs(&self) -> u64 {
        self.fsyncs.load(Ordering::Relaxed)
    }

    /// The flusher loop. Runs until `stop` is set and nothing is left to flush.
    pub(crate) async fn run(self: Arc<Self>, db: sled::Db, mut stop: watch::Receiver<bool>) {
        loop {
            if self.durable.borrow().error.is_some() {
                // A failed flush is fatal for acknowledgements; wait to stop.
                let _ = stop.wait_for(|s| *s).await;
                return;
            }
            let stopping = *stop.borrow();
            let target = self.written.load(Ordering::Acquire);
            if target > self.durable_sequence() {
                self.flush_to(&db, target).await;
                continue;
            }
            if stopping {
                return;
            }
            tokio::select! {
                () = self.wake.notified() => {}
                _ = stop.changed() => {}
            }
        }
    }

    async fn flush_to(&self, db: &sled::Db, target: u64) {
        let db = db.clone();
        let result = tokio::task::spawn_blocking(move || db.flush()).await;
        self.fsyncs.fetch_add(1, Ordering::Relaxed);
        match result {
            Ok(Ok(_)) => {
                self.durable
                    .send_modify(|d| d.sequence = d.sequence.max(target));
                self.publish_up_to(target);
            }
            Ok(Err(e)) => self.fail(e.to_string()),
            Err(e) => self.fail(e.to_string()),
        }
    }

    fn publish_up_to(&self, target: u64) {
        let Ok(mut queue) = self.unpublished.lock() else {
            return;
        };
        while queue.front().is_some_and(|e| e.sequence <= target) {
            if let Some(event) = queue.pop_front() {
                // No receivers is fine: nobody is subscribed right now.
                let _ = self.live.send(event);
            }
        }
    }

    fn fail(&self, message: String) {
        tracing::error!(error = %message, "flushing the event store failed");
        self.durable
            .send_modify(|d| d.error = Some(Arc::from(message.as_str())));
    }
}
