//! The follower: the one task that publishes committed events to live
//! subscribers, in sequence order, with no gap. It learns of new events
//! three ways: the committer hands over this daemon's own batches; `LISTEN`
//! wakes it for any daemon's commit; and a poll of the head each second
//! covers a notification lost with a broken connection. Whatever it has not
//! been handed it reads from the table.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use tinycode_shared::proto::Event;
use tokio::sync::{broadcast, mpsc, watch};
use tokio_postgres::AsyncMessage;

use super::{CHANNEL, READ_BATCH, Reader, connect};

/// How often the head is read when no notification came.
const POLL: Duration = Duration::from_secs(1);

/// Wait before listening again after the listening connection failed.
const RELISTEN: Duration = Duration::from_secs(1);

pub(super) struct Follower {
    pub config: super::tls::Conn,
    pub target: String,
    pub reader: Arc<Reader>,
    pub committed: mpsc::UnboundedReceiver<Vec<Arc<Event>>>,
    pub published: watch::Sender<u64>,
    pub live: broadcast::Sender<Arc<Event>>,
    pub stopping: watch::Receiver<bool>,
    /// Who hears this log's notifications: another daemon's heartbeat
    /// says it is there, and this one's appends start waking it.
    pub peers: Peers,
}

/// What a heartbeat's notification tells the listener: this daemon (its
/// id, from the fence) and whether its appends notify.
#[derive(Clone)]
pub(super) struct Peers {
    pub fence: super::Fence,
    pub notify: Arc<std::sync::atomic::AtomicBool>,
}

impl Peers {
    /// A notification's payload that is not a sequence: `daemon:<id>`,
    /// sent with each heartbeat.
    fn heard(&self, payload: &str) {
        let Some(id) = payload.strip_prefix(super::BEAT_PREFIX) else {
            return;
        };
        let mine = self
            .fence
            .read()
            .ok()
            .and_then(|f| f.as_ref().map(|(me, _)| me == id))
            .unwrap_or(false);
        if !mine {
            self.notify
                .store(true, std::sync::atomic::Ordering::Relaxed);
        }
    }
}

pub(super) async fn run(mut f: Follower) {
    let (hints_tx, mut hints) = mpsc::unbounded_channel();
    tokio::spawn(listen(
        f.config.clone(),
        f.target.clone(),
        hints_tx,
        f.stopping.clone(),
        f.peers.clone(),
    ));
    let mut poll = tokio::time::interval(POLL);
    poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            biased;
            events = f.committed.recv() => match events {
                Some(events) => f.own(events).await,
                // The committer is gone (closed): nothing more to publish.
                None => return,
            },
            Some(hint) = hints.recv() => f.catch_up(hint).await,
            _ = poll.tick() => {
                match f.client().await {
                    Ok(reader) => match reader.head().await {
                        Ok(head) => f.catch_up(head).await,
                        Err(e) => tracing::warn!(error = %e, "reading the PostgreSQL store's head failed"),
                    },
                    Err(e) => tracing::warn!(error = %e, "the PostgreSQL store is unreachable"),
                }
            }
        }
    }
}

impl Follower {
    fn head(&self) -> u64 {
        *self.published.borrow()
    }

    async fn client(&mut self) -> Result<Arc<Reader>, super::StoreError> {
        if self.reader.is_closed() {
            let client = connect(&self.config, &self.target).await?;
            self.reader = Arc::new(Reader::new(client, &self.target).await?);
        }
        Ok(Arc::clone(&self.reader))
    }

    /// This daemon's own batch: publish it, after anything before it.
    async fn own(&mut self, events: Vec<Arc<Event>>) {
        let Some(first) = events.first().map(|e| e.sequence) else {
            return;
        };
        if first > self.head() + 1 {
            self.catch_up(first - 1).await;
        }
        if first > self.head() + 1 {
            // Could not read what came before; the next poll retries, and
            // these events are read back then.
            return;
        }
        for event in events {
            if event.sequence == self.head() + 1 {
                self.publish(event);
            }
        }
    }

    /// Publish everything up to `to` from the table.
    async fn catch_up(&mut self, to: u64) {
        while self.head() < to {
            let client = match self.client().await {
                Ok(c) => c,
                Err(e) => {
                    tracing::warn!(error = %e, "the PostgreSQL store is unreachable");
                    return;
                }
            };
            let from = self.head() + 1;
            let batch = match client.range(from, to, READ_BATCH as usize).await {
                Ok(batch) => batch,
                Err(e) => {
                    tracing::warn!(error = %e, from, to, "reading committed events failed");
                    return;
                }
            };
            if batch.first().map(|e| e.sequence) != Some(from) {
                tracing::warn!(from, to, "committed events are not readable yet");
                return;
            }
            for event in batch {
                if event.sequence != self.head() + 1 {
                    break;
                }
                self.publish(Arc::new(event));
            }
        }
    }

    /// The head moves first: a subscriber that reads the head after this
    /// replays the event from the table and skips the live copy.
    fn publish(&self, event: Arc<Event>) {
        self.published.send_replace(event.sequence);
        let _ = self.live.send(event);
    }
}

/// Keep a connection listening on its schema's [`CHANNEL`]; each notification's payload
/// (a sequence) goes to `hints`. Reconnects until `stopping`.
async fn listen(
    config: super::tls::Conn,
    target: String,
    hints: mpsc::UnboundedSender<u64>,
    mut stopping: watch::Receiver<bool>,
    peers: Peers,
) {
    while !*stopping.borrow() {
        match config.pg.connect(config.tls.clone()).await {
            Ok((client, mut connection)) => {
                config.health.reached();
                let (tx, mut notes) = mpsc::unbounded_channel();
                let peers = peers.clone();
                let driver = tokio::spawn(async move {
                    let mut messages =
                        futures::stream::poll_fn(move |cx| connection.poll_message(cx));
                    while let Some(message) = messages.next().await {
                        match message {
                            Ok(AsyncMessage::Notification(n)) => match n.payload().parse::<u64>() {
                                Ok(sequence) => {
                                    let _ = tx.send(sequence);
                                }
                                Err(_) => peers.heard(n.payload()),
                            },
                            Ok(_) => {}
                            Err(e) => {
                                tracing::warn!(error = %e, "the PostgreSQL listening connection failed");
                                break;
                            }
                        }
                    }
                });
                let listening = async {
                    let row = client.query_one(&format!("SELECT {CHANNEL}"), &[]).await?;
                    let channel: String = row.get(0);
                    client.batch_execute(&format!("LISTEN \"{channel}\"")).await
                };
                match listening.await {
                    Ok(()) => loop {
                        tokio::select! {
                            note = notes.recv() => match note {
                                Some(sequence) => {
                                    if hints.send(sequence).is_err() {
                                        driver.abort();
                                        return;
                                    }
                                }
                                None => break,
                            },
                            _ = stopping.wait_for(|s| *s) => {
                                driver.abort();
                                return;
                            }
                        }
                    },
                    Err(e) => {
                        tracing::warn!(error = %e, %target, "LISTEN on the PostgreSQL store failed")
                    }
                }
                driver.abort();
            }
            Err(e) => {
                config.health.failed(&super::cause(&e));
                tracing::warn!(error = %e, %target, "cannot reach PostgreSQL to listen for new events")
            }
        }
        tokio::select! {
            () = tokio::time::sleep(RELISTEN) => {}
            _ = stopping.wait_for(|s| *s) => return,
        }
    }
}
