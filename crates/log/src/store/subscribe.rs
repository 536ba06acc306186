//! Catch-up subscriptions: register for live events first, replay history
//! from the store, then hand over to live events with no gap and no
//! duplicate. A subscriber that falls behind the live buffer (slow client)
//! is not skipped: it reads what it missed from the store and carries on.

use std::sync::Arc;

use tinycode_shared::proto::Event;
use tokio::sync::{broadcast, mpsc};

use super::{EventStore, StoreError};

/// Events read from the store per batch during replay.
const REPLAY_BATCH: usize = 512;

#[derive(Debug, Clone, Default)]
pub struct SubscriptionOptions {
    /// First sequence to deliver (0 and 1 both mean the beginning).
    pub from_sequence: u64,
    /// Only events whose stream id starts with this.
    pub stream_prefix: String,
    /// Stay open for new events; otherwise end at the last durable event.
    pub follow: bool,
}

/// The receiving end of a subscription. Dropping it stops the task.
pub type Subscription = mpsc::Receiver<Result<Arc<Event>, StoreError>>;

impl EventStore {
    /// Follow the streams starting with `prefix` from `from` for as long as
    /// the store is open: a subscription that fails (a lost connection to a
    /// shared log) is opened again from the next event not yet delivered,
    /// after a pause that doubles up to 30 s. `what` names the follower in
    /// the log.
    pub fn follow_forever(
        &self,
        prefix: &str,
        from: u64,
        what: &'static str,
    ) -> mpsc::Receiver<Arc<Event>> {
        let (tx, rx) = mpsc::channel(self.inner.subscriber_queue);
        let store = self.clone();
        let prefix = prefix.to_string();
        tokio::spawn(async move {
            let mut next = from.max(1);
            let mut pause = std::time::Duration::from_secs(1);
            loop {
                let mut sub = store.subscribe(SubscriptionOptions {
                    from_sequence: next,
                    stream_prefix: prefix.clone(),
                    follow: true,
                });
                while let Some(event) = sub.recv().await {
                    match event {
                        Ok(e) => {
                            next = e.sequence + 1;
                            pause = std::time::Duration::from_secs(1);
                            if tx.send(e).await.is_err() {
                                return;
                            }
                        }
                        Err(e) => {
                            crate::warn_limited!("follower-feed", error = %e, follower = what, retry_in = ?pause, "a follower of the log lost its feed; it resumes where it was");
                            break;
                        }
                    }
                }
                if *store.closing().borrow() || tx.is_closed() {
                    return;
                }
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(std::time::Duration::from_secs(30));
            }
        });
        rx
    }

    pub fn subscribe(&self, options: SubscriptionOptions) -> Subscription {
        let (tx, rx) = mpsc::channel(self.inner.subscriber_queue);
        // Registered before anything is read: nothing published from here on
        // can be missed.
        let live = self.inner.log.live();
        let store = self.clone();
        tokio::spawn(async move {
            let mut feed = Feed {
                store,
                tx,
                prefix: options.stream_prefix,
                next: options.from_sequence.max(1),
            };
            if let Err(e) = feed.run(live, options.follow).await {
                let _ = feed.tx.send(Err(e)).await;
            }
        });
        rx
    }
}

struct Feed {
    store: EventStore,
    tx: mpsc::Sender<Result<Arc<Event>, StoreError>>,
    prefix: String,
    /// The next global sequence this subscriber has not yet been shown.
    next: u64,
}

/// Why a feed stopped without an error.
enum Stop {
    ConsumerGone,
}

impl Feed {
    async fn run(
        &mut self,
        mut live: broadcast::Receiver<Arc<Event>>,
        follow: bool,
    ) -> Result<(), StoreError> {
        let mut closing = self.store.closing();
        let head = self.store.last_sequence();
        if self.replay_to(head).await?.is_some() || !follow {
            return Ok(());
        }
        loop {
            let received = tokio::select! {
                r = live.recv() => r,
                _ = closing.wait_for(|stop| *stop) => return Ok(()),
                () = self.tx.closed() => return Ok(()),
            };
            let stopped = match received {
                Ok(event) if event.sequence < self.next => None, // seen in replay
                Ok(event) => {
                    // Anything between what we showed and this event (a
                    // publish that raced our registration) comes from disk.
                    match self.replay_to(event.sequence - 1).await? {
                        Some(stop) => Some(stop),
                        None => self.deliver(event).await,
                    }
                }
                Err(broadcast::error::RecvError::Lagged(missed)) => {
                    tracing::debug!(
                        missed,
                        next = self.next,
                        "subscriber lagged; reading the store"
                    );
                    let head = self.store.last_sequence();
                    self.replay_to(head).await?
                }
                Err(broadcast::error::RecvError::Closed) => return Ok(()),
            };
            if let Some(Stop::ConsumerGone) = stopped {
                return Ok(());
            }
        }
    }

    /// Deliver every stored event from `self.next` through `to`.
    async fn replay_to(&mut self, to: u64) -> Result<Option<Stop>, StoreError> {
        while self.next <= to {
            let batch = self.store.read_range(self.next, to, REPLAY_BATCH).await?;
            let Some(last) = batch.last().map(|e| e.sequence) else {
                break;
            };
            for event in batch {
                if let Some(stop) = self.deliver(Arc::new(event)).await {
                    return Ok(Some(stop));
                }
            }
            self.next = last + 1;
        }
        Ok(None)
    }

    async fn deliver(&mut self, event: Arc<Event>) -> Option<Stop> {
        self.next = event.sequence + 1;
        if !event.stream_id.starts_with(&self.prefix) {
            return None;
        }
        self.tx
            .send(Ok(event))
            .await
            .err()
            .map(|_| Stop::ConsumerGone)
    }
}
