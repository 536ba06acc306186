//! Group commit on PostgreSQL: the committer task takes every queued
//! append, and in one transaction takes the append lock, reads the head
//! and the touched streams' versions, checks expected versions, inserts
//! the accepted events after the head, notifies and commits. Requests
//! arriving meanwhile form the next batch.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use prost::Message;
use tinycode_shared::proto::Event;
use tokio::sync::{mpsc, watch};
use tokio_postgres::{Client, Statement};

use super::{CHANNEL, StoreError, cause, connect, from_i64, to_i64};

/// Serializes appends across every daemon on the database.
pub(super) const APPEND_LOCK: i64 = 0x7469_6e79_0002;

/// A batch stops growing at this many requests or bytes.
const MAX_BATCH: usize = 1024;
const MAX_BATCH_BYTES: usize = 4 << 20;

pub(crate) use super::super::batch::Request;
use super::super::batch::{Accepted, accept};

pub(super) struct Committer {
    pub config: super::tls::Conn,
    pub target: String,
    pub client: Option<Prepared>,
    pub queue: mpsc::UnboundedReceiver<Request>,
    pub stopping: watch::Receiver<bool>,
    /// What was committed, for the follower to publish.
    pub committed: mpsc::UnboundedSender<Vec<Arc<Event>>>,
    pub published: watch::Receiver<u64>,
    pub transactions: Arc<AtomicU64>,
}

pub(super) async fn run(mut c: Committer) {
    let mut stopping = c.stopping.clone();
    loop {
        let first = tokio::select! {
            r = c.queue.recv() => r,
            _ = stopping.wait_for(|s| *s) => None,
        };
        let Some(first) = first else { break };
        let batch = c.gather(first);
        c.commit(batch).await;
    }
    // Stopping: what is already queued still commits.
    while let Ok(first) = c.queue.try_recv() {
        let batch = c.gather(first);
        c.commit(batch).await;
    }
}

impl Committer {
    async fn connect(&self) -> Result<Prepared, StoreError> {
        let client = connect(&self.config, &self.target).await?;
        Prepared::new(client)
            .await
            .map_err(|e| super::failed(&self.target, &e))
    }

    fn gather(&mut self, first: Request) -> Vec<Request> {
        let mut bytes = first.size();
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH && bytes < MAX_BATCH_BYTES {
            match self.queue.try_recv() {
                Ok(r) => {
                    bytes += r.size();
                    batch.push(r);
                }
                Err(_) => break,
            }
        }
        batch
    }

    async fn commit(&mut self, batch: Vec<Request>) {
        let client = match self.client.take() {
            Some(c) if !c.is_closed() => c,
            _ => match self.connect().await {
                Ok(c) => c,
                Err(e) => {
                    let message = e.to_string();
                    for r in batch {
                        let _ = r.reply.send(Err(StoreError::Unreachable(message.clone())));
                    }
                    return;
                }
            },
        };
        let result = transact(&client, batch).await;
        self.transactions.fetch_add(1, Ordering::Relaxed);
        if !client.is_closed() {
            self.client = Some(client);
        }
        let accepted = match result {
            Ok(accepted) => accepted,
            Err((accepted, e)) => {
                let message = cause(&e);
                tracing::error!(error = %message, "appending to the PostgreSQL store failed");
                for (reply, _) in accepted {
                    let _ = reply.send(Err(super::failed(&self.target, &e)));
                }
                return;
            }
        };
        let events: Vec<Arc<Event>> = accepted
            .iter()
            .flat_map(|(_, events)| events.iter().cloned())
            .collect();
        let Some(last) = events.last().map(|e| e.sequence) else {
            return;
        };
        let _ = self.committed.send(events);
        // Answer once the follower has published the batch: a read after
        // the append then sees it. The next batch does not wait for this.
        let mut published = self.published.clone();
        tokio::spawn(async move {
            let done = published.wait_for(|p| *p >= last).await.is_ok();
            for (reply, events) in accepted {
                let _ = reply.send(if done {
                    Ok(events)
                } else {
                    Err(StoreError::Closed)
                });
            }
        });
    }
}

/// The committer's statements, prepared once per connection.
pub(super) struct Prepared {
    client: Client,
    /// The head, and each named stream's version (one row per stream).
    versions: Statement,
    /// Insert the batch and notify, in one statement.
    insert: Statement,
}

impl Prepared {
    pub(super) async fn new(client: Client) -> Result<Self, tokio_postgres::Error> {
        let versions = client
            .prepare(
                "SELECT (SELECT coalesce(max(sequence), 0) FROM tinycode_events), s.id, \
                 (SELECT coalesce(max(stream_version), 0) FROM tinycode_events e WHERE e.stream_id = s.id) \
                 FROM unnest($1::text[]) AS s(id)",
            )
            .await?;
        let insert = client
            .prepare(
                "WITH written AS (\
                     INSERT INTO tinycode_events (sequence, stream_id, stream_version, body) \
                     SELECT * FROM unnest($1::bigint[], $2::text[], $3::bigint[], $4::bytea[])) \
                 SELECT pg_notify($5, $6)",
            )
            .await?;
        Ok(Self {
            client,
            versions,
            insert,
        })
    }

    pub(super) fn is_closed(&self) -> bool {
        self.client.is_closed()
    }
}

/// The transaction of one batch, four round trips: begin and lock, read
/// the head and versions, insert and notify, commit. Requests that
/// conflict are answered here (they store nothing); the accepted ones are
/// returned, with the error if the transaction failed.
async fn transact(
    db: &Prepared,
    batch: Vec<Request>,
) -> Result<Vec<Accepted>, (Vec<Accepted>, tokio_postgres::Error)> {
    let client = &db.client;
    if let Err(e) = client
        .batch_execute(&format!(
            "BEGIN; SELECT pg_advisory_xact_lock({APPEND_LOCK})"
        ))
        .await
    {
        let _ = client.batch_execute("ROLLBACK").await;
        return Err((refuse_all(batch), e));
    }
    let mut streams: Vec<&str> = batch.iter().map(|r| r.stream.as_str()).collect();
    streams.sort_unstable();
    streams.dedup();
    let rows = match client.query(&db.versions, &[&streams]).await {
        Ok(rows) => rows,
        Err(e) => {
            let _ = client.batch_execute("ROLLBACK").await;
            return Err((refuse_all(batch), e));
        }
    };
    let head = rows.first().map_or(0, |r| from_i64(r.get(0)));
    let versions: HashMap<String, u64> = rows
        .iter()
        .map(|row| (row.get::<_, String>(1), from_i64(row.get(2))))
        .collect();
    let accepted = accept(batch, head + 1, |s| {
        Ok(versions.get(s).copied().unwrap_or(0))
    })
    .accepted;
    if accepted.is_empty() {
        let _ = client.batch_execute("ROLLBACK").await;
        return Ok(accepted);
    }
    let written = async {
        let events = accepted.iter().flat_map(|(_, events)| events.iter());
        let mut sequences = Vec::new();
        let mut streams = Vec::new();
        let mut versions = Vec::new();
        let mut bodies = Vec::new();
        for e in events {
            sequences.push(to_i64(e.sequence));
            streams.push(e.stream_id.as_str());
            versions.push(to_i64(e.stream_version));
            bodies.push(e.encode_to_vec());
        }
        let last = sequences.last().copied().unwrap_or_default().to_string();
        client
            .query(
                &db.insert,
                &[&sequences, &streams, &versions, &bodies, &CHANNEL, &last],
            )
            .await?;
        client.batch_execute("COMMIT").await
    }
    .await;
    match written {
        Ok(()) => Ok(accepted),
        Err(e) => {
            let _ = client.batch_execute("ROLLBACK").await;
            Err((accepted, e))
        }
    }
}

/// A batch that never got to sequencing: every request is "accepted" for
/// the purpose of answering it with the error.
fn refuse_all(batch: Vec<Request>) -> Vec<Accepted> {
    batch.into_iter().map(|r| (r.reply, Vec::new())).collect()
}
