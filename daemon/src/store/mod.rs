//! The event log on sled.
//!
//! - Tree `events`: global sequence (u64 BE) → encoded `tinycode.v1.Event`.
//! - Tree `streams`: `stream-id ‖ 0x00 ‖ version (u64 BE)` → global sequence.
//!
//! - Beside sled's data file, `<db>/tinycode.head`: the durable head
//!   (`head.rs`).
//!
//! Every stored event carries a CRC-32 of its encoding (`keys.rs`); a start
//! checks the log against its durable head and refuses a log that lost
//! acknowledged events, unless told to recover (`integrity.rs`).
//!
//! Guarantees: an append is atomic (one sled transaction over both trees);
//! a stale expected version is a [`StoreError::Conflict`]; one committer
//! thread assigns sequences, so the global sequence has no gap; an append
//! returns only after a flush covers it, and concurrent appends share both
//! the transaction and the flush (group commit, see [`commit`]); readers and
//! subscribers only ever see durable events.

mod commit;
mod error;
mod head;
mod integrity;
pub(crate) mod keys;
mod subscribe;

use std::sync::{Arc, Mutex};

use tinycode_shared::proto::{Event, event::Payload};
use tokio::sync::{broadcast, oneshot, watch};

use commit::{Committer, Files, Request};
pub use error::StoreError;
pub use integrity::Report;
pub use keys::MAX_EVENT_BYTES;
use keys::{decode_sequence, stream_key, stream_prefix};
pub use subscribe::{Subscription, SubscriptionOptions};

/// Longest stream id accepted (bytes).
pub const MAX_STREAM_ID: usize = 200;

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
    /// Start on a damaged log: drop what cannot be read, record
    /// `LogRecovered` (`tinycoded --recover`).
    pub recover: bool,
}

impl Default for StoreOptions {
    fn default() -> Self {
        Self {
            live_buffer: 256,
            subscriber_queue: 256,
            cache_bytes: 4 * 1024 * 1024,
            recover: false,
        }
    }
}

/// Figures for `Daemon.GetStatus` and the benchmarks.
#[derive(Debug, Clone, Copy)]
pub struct StoreStats {
    pub last_sequence: u64,
    pub event_count: u64,
    pub store_bytes: u64,
    /// Flushes (write + fsync cycles) since open.
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
    committer: Arc<Committer>,
    live: broadcast::Sender<Arc<Event>>,
    subscriber_queue: usize,
    /// Set on close: subscriptions end.
    stop: watch::Sender<bool>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    /// What this open recovered (`--recover` on a damaged log).
    recovered: Option<tinycode_shared::proto::LogRecovered>,
}

impl EventStore {
    /// Open (or create) the log at `path`.
    pub fn open(path: &std::path::Path) -> Result<Self, StoreError> {
        Self::open_with(path, StoreOptions::default())
    }

    pub fn open_with(path: &std::path::Path, options: StoreOptions) -> Result<Self, StoreError> {
        let db = sled::Config::new()
            .path(path)
            .cache_capacity(options.cache_bytes)
            .flush_every_ms(None)
            .open()
            .map_err(|e| unreadable(path, e))?;
        let events = db.open_tree("events")?;
        let streams = db.open_tree("streams")?;
        let (mut head_file, stored_head) = head::HeadFile::open(&head::path_of(path))?;
        let opened = integrity::open(
            &db,
            &events,
            &streams,
            &mut head_file,
            stored_head,
            options.recover,
        )?;
        let (live, _) = broadcast::channel(options.live_buffer.max(1));
        let committer = Arc::new(Committer::new(opened.last_sequence, live.clone()));
        // sled 0.34 keeps its log in `<path>/db`.
        let data_file = std::fs::File::open(path.join("db"))
            .inspect_err(|e| tracing::warn!(error = %e, "cannot open sled's data file for fdatasync; relying on sled's flush alone"))
            .ok();
        let thread = {
            let committer = Arc::clone(&committer);
            let files = Files {
                db: db.clone(),
                events: events.clone(),
                streams: streams.clone(),
                data_file,
                head: opened.head,
                head_file,
            };
            std::thread::Builder::new()
                .name("tinycoded-commit".into())
                .spawn(move || committer.run(files))
                .map_err(|e| StoreError::Io(format!("cannot start the committer thread: {e}")))?
        };
        let (stop, _) = watch::channel(false);
        Ok(Self {
            inner: Arc::new(Inner {
                db,
                events,
                streams,
                committer,
                live,
                subscriber_queue: options.subscriber_queue.max(1),
                stop,
                thread: Mutex::new(Some(thread)),
                recovered: opened.recovered,
            }),
        })
    }

    /// What this open recovered from a damaged log, if anything.
    pub fn recovered(&self) -> Option<&tinycode_shared::proto::LogRecovered> {
        self.inner.recovered.as_ref()
    }

    /// Check the whole log (checksums, sequences, stream versions, the
    /// running hash against the durable head). Reads sled while the
    /// committer may append: call it on a log nobody writes to.
    pub fn verify(path: &std::path::Path) -> Result<Report, StoreError> {
        let db = sled::Config::new()
            .path(path)
            .open()
            .map_err(|e| unreadable(path, e))?;
        let (_, head) = head::HeadFile::open(&head::path_of(path))?;
        integrity::verify(&db.open_tree("events")?, &db.open_tree("streams")?, head)
    }

    /// Write the log to `file` (see `integrity::export` for the format);
    /// returns the number of events.
    pub fn export(path: &std::path::Path, file: &std::path::Path) -> Result<u64, StoreError> {
        let db = sled::Config::new()
            .path(path)
            .open()
            .map_err(|e| unreadable(path, e))?;
        integrity::export(&db.open_tree("events")?, file)
    }

    /// Restore an export into an empty log at `path`; returns the number
    /// of events.
    pub fn import(path: &std::path::Path, file: &std::path::Path) -> Result<u64, StoreError> {
        // A bulk load: sled's throughput mode (runtime only, not stored)
        // measured steadier and faster than its default (docs/BENCHMARKS.md).
        let db = sled::Config::new()
            .path(path)
            .flush_every_ms(None)
            .mode(sled::Mode::HighThroughput)
            .open()?;
        let (events, streams) = (db.open_tree("events")?, db.open_tree("streams")?);
        let (mut head_file, _) = head::HeadFile::open(&head::path_of(path))?;
        let head = integrity::import(&db, &events, &streams, &mut head_file, file)?;
        Ok(head.sequence)
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
        for p in &payloads {
            // The stored value: the event's envelope (at its largest) and
            // the checksum header around the payload.
            let bytes = p.encoded_len() + stream.len() + 48;
            if bytes > MAX_EVENT_BYTES {
                return Err(StoreError::TooLarge {
                    stream: stream.chars().take(64).collect(),
                    bytes,
                    limit: MAX_EVENT_BYTES,
                });
            }
        }
        let (reply, answer) = oneshot::channel();
        self.inner.committer.submit(Request {
            stream: stream.to_string(),
            expected,
            payloads,
            reply,
        });
        answer.await.map_err(|_| StoreError::Closed)?
    }

    /// Current durable version of `stream` (0 when it does not exist).
    pub fn stream_version(&self, stream: &str) -> Result<u64, StoreError> {
        stream_version_in(&self.inner.streams, stream)
    }

    /// Events of one stream with `stream_version >= from_version`, up to `max`.
    pub fn read_stream(
        &self,
        stream: &str,
        from_version: u64,
        max: usize,
    ) -> Result<Vec<Event>, StoreError> {
        let durable = self.last_sequence();
        let prefix = stream_prefix(stream);
        let mut out = Vec::new();
        for row in self
            .inner
            .streams
            .range(stream_key(stream, from_version.max(1))..)
            .take(max)
        {
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
                keys::decode_event(decode_sequence(&key), &value)
            })
            .collect()
    }

    /// One durable event by sequence.
    pub fn get(&self, sequence: u64) -> Result<Option<Event>, StoreError> {
        if sequence > self.last_sequence() {
            return Ok(None);
        }
        self.inner
            .events
            .get(sequence.to_be_bytes())?
            .map(|v| keys::decode_event(sequence, &v))
            .transpose()
    }

    /// The sled tree of a projection (same database as the log, so one
    /// flush covers both).
    pub(crate) fn projection_tree(&self, name: &str) -> Result<sled::Tree, StoreError> {
        Ok(self.inner.db.open_tree(name)?)
    }

    /// Tests: let `appends` more appends to streams starting with `prefix`
    /// through, then refuse one.
    #[cfg(test)]
    pub(crate) fn inject_failure(&self, prefix: &str, appends: u64) {
        self.inner.committer.inject_failure(prefix, appends);
    }

    /// Last durable sequence (= number of events, but for a range a
    /// recovery recorded as lost).
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

    /// Refuse new appends, end every subscription, let the committer finish
    /// what is queued (those appends complete normally) and flush.
    pub async fn close(&self) -> Result<(), StoreError> {
        self.inner.stop.send_replace(true);
        self.inner.committer.stop();
        let thread = self.inner.thread.lock().ok().and_then(|mut t| t.take());
        if let Some(thread) = thread {
            let _ = tokio::task::spawn_blocking(move || thread.join()).await;
        }
        self.inner.db.flush_async().await?;
        Ok(())
    }

    fn closing(&self) -> watch::Receiver<bool> {
        self.inner.stop.subscribe()
    }
}

/// sled could not open the log: say how much it had acknowledged.
fn unreadable(path: &std::path::Path, e: sled::Error) -> StoreError {
    match head::HeadFile::peek(&head::path_of(path)) {
        Some(h) if h.sequence > 0 && !matches!(e, sled::Error::Io(_)) => StoreError::Unreadable {
            acknowledged: h.sequence,
            reason: match e {
                sled::Error::Corruption { .. } => "sled finds its data file corrupted".into(),
                other => other.to_string(),
            },
        },
        _ => e.into(),
    }
}

/// Last version of `stream` in the index tree (0 when it has none).
pub(crate) fn stream_version_in(streams: &sled::Tree, stream: &str) -> Result<u64, StoreError> {
    let prefix = stream_prefix(stream);
    Ok(match streams.scan_prefix(&prefix).next_back() {
        Some(row) => {
            let (key, _) = row?;
            decode_sequence(&key[prefix.len()..])
        }
        None => 0,
    })
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

#[cfg(test)]
mod damage_tests;
#[cfg(test)]
mod tests;
