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

/// Serializes appends to one log across every daemon: the advisory lock
/// of (this key, the log's schema), so desks in other schemas of the same
/// database never wait for each other.
const APPEND_KEY: i32 = 0x7469_6e79;

/// Take the append lock of the log in the session's current schema, for
/// the transaction.
pub(super) fn lock_sql() -> String {
    format!("SELECT pg_advisory_xact_lock({APPEND_KEY}, hashtext(current_schema()))")
}

/// A transaction of the committer that waits this long for its next
/// statement is ended by the server (its daemon is cut off).
const STALLED_TRANSACTION: std::time::Duration = std::time::Duration::from_secs(5);

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
    /// Whose lease the database checks before each batch (see `Backend::fence`).
    pub fence: super::Fence,
    /// Whether to `NOTIFY` other daemons of each batch.
    pub notify: Arc<std::sync::atomic::AtomicBool>,
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
        let holder = self
            .fence
            .read()
            .map(|f| f.clone())
            .unwrap_or_else(|p| p.into_inner().clone());
        let notify = self.notify.load(Ordering::Relaxed);
        let result = transact(&client, batch, holder, notify).await;
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
    /// The head, each named stream's version (one row per stream), and
    /// whether the fence holder's lease is current by the database's clock.
    versions: Statement,
    /// Insert the batch and notify, in one statement.
    insert: Statement,
    /// Insert the batch, nobody to notify.
    insert_quiet: Statement,
}

impl Prepared {
    pub(super) async fn new(client: Client) -> Result<Self, tokio_postgres::Error> {
        // A committer cut off mid-transaction holds the append lock, and
        // with it every daemon's appends: the server ends such a session.
        client
            .batch_execute(&format!(
                "SET idle_in_transaction_session_timeout = {}",
                STALLED_TRANSACTION.as_millis()
            ))
            .await?;
        let versions = client
            .prepare(
                "SELECT (SELECT coalesce(max(sequence), 0) FROM tinycode_events), s.id, \
                 (SELECT coalesce(max(stream_version), 0) FROM tinycode_events e WHERE e.stream_id = s.id), \
                 ($2::text = '' OR EXISTS (SELECT 1 FROM tinycode_daemons d WHERE d.id = $2 \
                   AND d.heartbeat_at > clock_timestamp() - $3::bigint * interval '1 millisecond')) \
                 FROM unnest($1::text[]) AS s(id)",
            )
            .await?;
        let insert_sql = "INSERT INTO tinycode_events (sequence, stream_id, stream_version, body) \
             SELECT * FROM unnest($1::bigint[], $2::text[], $3::bigint[], $4::bytea[])";
        let insert = client
            .prepare(&format!(
                "WITH written AS ({insert_sql}) SELECT pg_notify({CHANNEL}, $5)"
            ))
            .await?;
        let insert_quiet = client.prepare(insert_sql).await?;
        Ok(Self {
            client,
            versions,
            insert,
            insert_quiet,
        })
    }

    pub(super) fn is_closed(&self) -> bool {
        self.client.is_closed()
    }
}

/// The transaction of one batch, four round trips: begin and lock, read
/// the head and versions (and whether `holder`'s lease is current),
/// insert and notify, commit. Requests that conflict, or that a lapsed
/// lease fences off, are answered here (they store nothing); the accepted
/// ones are returned, with the error if the transaction failed.
async fn transact(
    db: &Prepared,
    batch: Vec<Request>,
    holder: Option<(String, std::time::Duration)>,
    notify: bool,
) -> Result<Vec<Accepted>, (Vec<Accepted>, tokio_postgres::Error)> {
    let client = &db.client;
    if let Err(e) = client
        .batch_execute(&format!("BEGIN; {}", lock_sql()))
        .await
    {
        let _ = client.batch_execute("ROLLBACK").await;
        return Err((refuse_all(batch), e));
    }
    let mut streams: Vec<&str> = batch.iter().map(|r| r.stream.as_str()).collect();
    streams.sort_unstable();
    streams.dedup();
    let (id, lease) = holder.unwrap_or_default();
    let lease_ms = i64::try_from(lease.as_millis()).unwrap_or(i64::MAX);
    let rows = match client
        .query(&db.versions, &[&streams, &id, &lease_ms])
        .await
    {
        Ok(rows) => rows,
        Err(e) => {
            let _ = client.batch_execute("ROLLBACK").await;
            return Err((refuse_all(batch), e));
        }
    };
    if rows.first().is_some_and(|r| !r.get::<_, bool>(3)) {
        let _ = client.batch_execute("ROLLBACK").await;
        refuse_fenced(batch, lease_ms);
        return Ok(Vec::new());
    }
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
        insert(db, &accepted, notify).await?;
        db.client.batch_execute("COMMIT").await
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

/// Insert the accepted events in one statement (and `NOTIFY` the log's
/// channel with the last sequence when `notify`).
async fn insert(
    db: &Prepared,
    accepted: &[Accepted],
    notify: bool,
) -> Result<(), tokio_postgres::Error> {
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
    if notify {
        let last = sequences.last().copied().unwrap_or_default().to_string();
        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 5] =
            [&sequences, &streams, &versions, &bodies, &last];
        db.client.query(&db.insert, &params).await?;
    } else {
        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 4] =
            [&sequences, &streams, &versions, &bodies];
        db.client.execute(&db.insert_quiet, &params).await?;
    }
    Ok(())
}

/// This daemon's lease lapsed by the database's clock: every request of
/// the batch is refused, nothing stored.
fn refuse_fenced(batch: Vec<Request>, lease_ms: i64) {
    let fenced = || StoreError::Fenced {
        lease_ms: u64::try_from(lease_ms).unwrap_or(0),
    };
    tracing::warn!(error = %fenced(), "an append was refused: this daemon's lease lapsed");
    for r in batch {
        let _ = r.reply.send(Err(fenced()));
    }
}

/// A batch that never got to sequencing: every request is "accepted" for
/// the purpose of answering it with the error.
fn refuse_all(batch: Vec<Request>) -> Vec<Accepted> {
    batch.into_iter().map(|r| (r.reply, Vec::new())).collect()
}
