//! The event log on sled.
//!
//! - Tree `events`: global sequence (u64 BE) → encoded `tinycode.v1.Event`.
//! - Tree `streams`: `stream-id ‖ 0x00 ‖ version (u64 BE)` → global sequence.
//!
//! Guarantees: an append is atomic (one sled transaction over both trees);
//! a stale expected version is a [`StoreError::Conflict`]; sequences are
//! allocated under one writer lock so the global sequence has no gap; an
//! append returns only after a flush covers it (group commit, see
//! [`commit`]); readers and subscribers only ever see durable events.

mod commit;
mod error;
mod subscribe;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use prost::Message;
use sled::Transactional;
use sled::transaction::{ConflictableTransactionError, TransactionError};
use tinycode_shared::proto::{Event, event::Payload};
use tokio::sync::{broadcast, watch};

use commit::Committer;
pub use error::StoreError;
pub use subscribe::{Subscription, SubscriptionOptions};

/// Longest stream id accepted (bytes).
pub const MAX_STREAM_ID: usize = 200;
/// Tunables of [`EventStore::open_with`].
#[derive(Debug, Clone, Copy)]
pub struct StoreOptions {
    /// Live events buffered per subscriber before it lags (then it reads the
    /// store instead).
    pub live_buffer: usize,
    /// Events queued between a subscription's task and its consumer.
    pub subscriber_queue: usize,
    /// sled page cache, bytes.
    pub cache_bytes: u64,
}

impl Default for StoreOptions {
    fn default() -> Self {
        Self {
            live_buffer: 1024,
            subscriber_queue: 256,
            cache_bytes: 16 * 1024 * 1024,
        }
    }
}

/// What an append expects the stream's current version to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExpectedVersion {
    /// No check (the daemon's own lifecycle stream).
    Any,
    /// The stream must not exist yet.
    NoStream,
    /// The stream's last version must be exactly this.
    Exact(u64),
}

impl std::fmt::Display for ExpectedVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Any => f.write_str("any version"),
            Self::NoStream => f.write_str("no stream"),
            Self::Exact(v) => write!(f, "version {v}"),
        }
    }
}

/// Figures for `Daemon.GetStatus` and the benchmarks.
#[derive(Debug, Clone, Copy)]
pub struct StoreStats {
    pub last_sequence: u64,
    pub event_count: u64,
    pub store_bytes: u64,
    pub fsyncs: u64,
}

/// Handle to the event log; cheap to clone.
#[derive(Clone)]
pub struct EventStore {
    inner: Arc<Inner>,
}

struct Inner {
    db: sled::Db,
    events: sled::Tree,
    streams: sled::Tree,
    writer: Mutex<Writer>,
    committer: Arc<Committer>,
    live: broadcast::Sender<Arc<Event>>,
    subscriber_queue: usize,
    stop: watch::Sender<bool>,
    flusher: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

struct Writer {
    next_sequence: u64,
    /// Last version of each stream touched since open (filled lazily).
    versions: HashMap<String, u64>,
    closed: bool,
}

impl EventStore {
    /// Open (or create) the log at `path`. Must be called inside a tokio
    /// runtime: it starts the flusher task.
    pub fn open(path: &std::path::Path) -> Result<Self, StoreError> {
        Self::open_with(path, StoreOptions::default())
    }

    pub fn open_with(path: &std::path::Path, options: StoreOptions) -> Result<Self, StoreError> {
        let db = sled::Config::new()
            .path(path)
            .cache_capacity(options.cache_bytes)
            .flush_every_ms(None)
            .open()?;
        let events = db.open_tree("events")?;
        let streams = db.open_tree("streams")?;
        let last_sequence = match events.last()? {
            Some((key, _)) => decode_sequence(&key),
            None => 0,
        };
        let (live, _) = broadcast::channel(options.live_buffer.max(1));
        let committer = Arc::new(Committer::new(last_sequence, live.clone()));
        let (stop, stop_rx) = watch::channel(false);
        let flusher = tokio::spawn(Arc::clone(&committer).run(db.clone(), stop_rx));
        Ok(Self {
            inner: Arc::new(Inner {
                db,
                events,
                streams,
                writer: Mutex::new(Writer {
                    next_sequence: last_sequence + 1,
                    versions: HashMap::new(),
                    closed: false,
                }),
                committer,
                live,
                subscriber_queue: options.subscriber_queue.max(1),
                stop,
                flusher: Mutex::new(Some(flusher)),
            }),
        })
    }

    /// Append `payloads` to `stream` atomically; returns the stored events
    /// once they are durable.
    pub async fn append(
        &self,
        stream: &str,
        expected: ExpectedVersion,
        payloads: Vec<Payload>,
    ) -> Result<Vec<Arc<Event>>, StoreError> {
        validate_stream_id(stream)?;
        if payloads.is_empty() {
            return Err(StoreError::EmptyAppend);
        }
        let events = self.write(stream, expected, payloads)?;
        if let Some(last) = events.last() {
            self.inner.committer.wait_durable(last.sequence).await?;
        }
        Ok(events)
    }

    /// The synchronous half of an append: version check, sequence
    /// allocation and the sled transaction, all under the writer lock.
    fn write(
        &self,
        stream: &str,
        expected: ExpectedVersion,
        payloads: Vec<Payload>,
    ) -> Result<Vec<Arc<Event>>, StoreError> {
        let mut writer = self
            .inner
            .writer
            .lock()
            .map_err(|_| StoreError::Io("writer lock poisoned".into()))?;
        if writer.closed {
            return Err(StoreError::Closed);
        }
        let current = match writer.versions.get(stream) {
            Some(v) => *v,
            None => self.stream_version(stream)?,
        };
        let ok = match expected {
            ExpectedVersion::Any => true,
            ExpectedVersion::NoStream => current == 0,
            ExpectedVersion::Exact(v) => current == v,
        };
        if !ok {
            return Err(StoreError::Conflict {
                stream: stream.to_string(),
                expected,
                actual: current,
            });
        }
        let recorded_at = Some(prost_types::Timestamp::from(SystemTime::now()));
        let events: Vec<Arc<Event>> = payloads
            .into_iter()
            .enumerate()
            .map(|(i, payload)| {
                Arc::new(Event {
                    sequence: writer.next_sequence + i as u64,
                    stream_id: stream.to_string(),
                    stream_version: current + 1 + i as u64,
                    recorded_at,
                    payload: Some(payload),
                })
            })
            .collect();
        let rows: Vec<([u8; 8], Vec<u8>, Vec<u8>)> = events
            .iter()
            .map(|e| {
                (
                    e.sequence.to_be_bytes(),
                    e.encode_to_vec(),
                    stream_key(stream, e.stream_version),
                )
            })
            .collect();
        (&self.inner.events, &self.inner.streams)
            .transaction(|(ev, st)| {
                for (seq, body, skey) in &rows {
                    ev.insert(&seq[..], body.as_slice())?;
                    st.insert(skey.as_slice(), &seq[..])?;
                }
                Ok::<_, ConflictableTransactionError<()>>(())
            })
            .map_err(|e| match e {
                TransactionError::Storage(e) => StoreError::from(e),
                TransactionError::Abort(()) => StoreError::Io("transaction aborted".into()),
            })?;
        writer.next_sequence += events.len() as u64;
        writer
            .versions
            .insert(stream.to_string(), current + events.len() as u64);
        self.inner.committer.written(&events);
        Ok(events)
    }

    /// Current version of `stream` (0 when it does not exist).
    pub fn stream_version(&self, stream: &str) -> Result<u64, StoreError> {
        let prefix = stream_prefix(stream);
        Ok(match self.inner.streams.scan_prefix(&prefix).next_back() {
            Some(row) => {
                let (key, _) = row?;
                decode_sequence(&key[prefix.len()..])
            }
            None => 0,
        })
    }

    /// Events of one stream with `stream_version >= from_version`, up to `max`.
    pub fn read_stream(
        &self,
        stream: &str,
        from_version: u64,
        max: usize,
    ) -> Result<Vec<Event>, StoreError> {
        let durable = self.last_sequence();
        let start = stream_key(stream, from_version.max(1));
        let prefix = stream_prefix(stream);
        let mut out = Vec::new();
        for row in self.inner.streams.range(start..).take(max) {
            let (key, seq) = row?;
            if !key.starts_with(&prefix) {
                break;
            }
            let sequence = decode_sequence(&seq);
            if sequence > durable {
                break;
            }
            if let Some(event) = self.get(sequence)? {
                out.push(event);
            }
        }
        Ok(out)
    }

    /// Durable events with `from <= sequence <= to`, up to `max`.
    pub fn read_range(&self, from: u64, to: u64, max: usize) -> Result<Vec<Event>, StoreError> {
        let to = to.min(self.last_sequence());
        if from > to {
            return Ok(Vec::new());
        }
        self.inner
            .events
            .range(from.to_be_bytes()..=to.to_be_bytes())
            .take(max)
            .map(|row| {
                let (key, value) = row?;
                decode_event(decode_sequence(&key), &value)
            })
            .collect()
    }

    /// One event by sequence.
    pub fn get(&self, sequence: u64) -> Result<Option<Event>, StoreError> {
        self.inner
            .events
            .get(sequence.to_be_bytes())?
            .map(|v| decode_event(sequence, &v))
            .transpose()
    }

    /// Last durable sequence (= number of events: the log has no gaps).
    pub fn last_sequence(&self) -> u64 {
        self.inner.committer.durable_sequence()
    }

    pub fn stats(&self) -> StoreStats {
        let last = self.last_sequence();
        StoreStats {
            last_sequence: last,
            event_count: last,
            store_bytes: self.inner.db.size_on_disk().unwrap_or(0),
            fsyncs: self.inner.committer.fsyncs(),
        }
    }

    /// Refuse new appends, end every subscription, flush what was written
    /// and stop the flusher. Appends already past the version check complete.
    pub async fn close(&self) -> Result<(), StoreError> {
        if let Ok(mut writer) = self.inner.writer.lock() {
            writer.closed = true;
        }
        self.inner.stop.send_replace(true);
        let flusher = self.inner.flusher.lock().ok().and_then(|mut f| f.take());
        if let Some(flusher) = flusher {
            let _ = flusher.await;
        }
        self.inner.db.flush_async().await?;
        Ok(())
    }

    fn closing(&self) -> watch::Receiver<bool> {
        self.inner.stop.subscribe()
    }
}

fn validate_stream_id(stream: &str) -> Result<(), StoreError> {
    let reason = if stream.is_empty() {
        "it is empty"
    } else if stream.len() > MAX_STREAM_ID {
        "it is longer than 200 bytes"
    } else if stream.chars().any(char::is_control) {
        "it contains a control character"
    } else {
        return Ok(());
    };
    Err(StoreError::InvalidStream {
        stream: stream.chars().take(64).collect(),
        reason,
    })
}

fn stream_prefix(stream: &str) -> Vec<u8> {
    let mut key = Vec::with_capacity(stream.len() + 9);
    key.extend_from_slice(stream.as_bytes());
    key.push(0);
    key
}

fn stream_key(stream: &str, version: u64) -> Vec<u8> {
    let mut key = stream_prefix(stream);
    key.extend_from_slice(&version.to_be_bytes());
    key
}

fn decode_sequence(bytes: &[u8]) -> u64 {
    let mut buf = [0u8; 8];
    let n = bytes.len().min(8);
    buf[8 - n..].copy_from_slice(&bytes[bytes.len() - n..]);
    u64::from_be_bytes(buf)
}

fn decode_event(sequence: u64, bytes: &[u8]) -> Result<Event, StoreError> {
    Event::decode(bytes).map_err(|source| StoreError::Corrupt { sequence, source })
}

#[cfg(test)]
mod tests;
