//! The event log: [`EventStore`] is the handle every part of the daemon
//! uses; the log itself is a [`Backend`] (`backend.rs` states its contract;
//! `conformance.rs` is the test-suite every backend must pass). sled
//! (`sled/`) is the embedded default.
//!
//! The handle adds what does not depend on the backend: validation of
//! stream ids and event sizes, catch-up subscriptions (`subscribe.rs`), the
//! projection trees (a local sled database: the log's own with the sled
//! backend), and injected failures for tests.

pub mod backend;
mod batch;
#[cfg(test)]
pub(crate) mod conformance;
mod error;
pub(crate) mod postgres;
pub(crate) mod sled;
pub mod space;
mod subscribe;

use std::sync::{Arc, Mutex};

use tinycode_shared::proto::{Event, event::Payload};
use tokio::sync::watch;

pub use backend::{Backend, Member};
pub use error::StoreError;
pub use sled::Report;
use sled::SledLog;
pub use subscribe::{Subscription, SubscriptionOptions};

/// The largest stored event: sled writes values near its blob threshold
/// (a quarter of its 512 KiB segment) to separate files it never fsyncs,
/// so every value stays well below it; every backend keeps the same limit
/// so a log can move between them.
pub const MAX_EVENT_BYTES: usize = 100 * 1024;

/// The daemon's lifecycle stream (`DaemonStarted`, `DaemonStopped`,
/// `LogRecovered`); on a shared log each daemon has `daemon-<id>`. The
/// store owns the name: a recovery records its loss there.
pub const DAEMON_STREAM: &str = "daemon";

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

impl ExpectedVersion {
    /// Number `payloads` for `stream`, now at version `current`, from global
    /// sequence `next` — or the conflict, when this is not the version
    /// expected. Every backend's committer sequences with this.
    pub(crate) fn sequence(
        self,
        stream: String,
        current: u64,
        next: u64,
        payloads: Vec<Payload>,
        recorded_at: Option<prost_types::Timestamp>,
    ) -> Result<Vec<Arc<Event>>, StoreError> {
        let ok = match self {
            Self::Any => true,
            Self::NoStream => current == 0,
            Self::Exact(v) => current == v,
        };
        if !ok {
            return Err(StoreError::Conflict {
                stream,
                expected: self,
                actual: current,
            });
        }
        Ok(payloads
            .into_iter()
            .enumerate()
            .map(|(i, payload)| {
                Arc::new(Event {
                    sequence: next + i as u64,
                    stream_id: stream.clone(),
                    stream_version: current + 1 + i as u64,
                    recorded_at,
                    payload: Some(payload),
                })
            })
            .collect())
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
    /// Bytes that must stay free on the log's file system for an append
    /// to be written (`None`: a twentieth of it, 4–64 MiB; see `space.rs`).
    pub reserve_bytes: Option<u64>,
}

impl Default for StoreOptions {
    fn default() -> Self {
        Self {
            live_buffer: 256,
            subscriber_queue: 256,
            cache_bytes: 4 * 1024 * 1024,
            recover: false,
            reserve_bytes: None,
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

impl StoreStats {
    /// A gap-free log's figures: as many events as its last sequence.
    pub(crate) fn of(last_sequence: u64, store_bytes: u64, fsyncs: u64) -> Self {
        Self {
            last_sequence,
            event_count: last_sequence,
            store_bytes,
            fsyncs,
        }
    }
}

/// Handle to the event log; cheap to clone.
#[derive(Clone)]
pub struct EventStore {
    inner: Arc<Inner>,
}

struct Inner {
    log: Box<dyn Backend>,
    /// Where projections keep their trees.
    local: ::sled::Db,
    subscriber_queue: usize,
    /// Tests: fail one append to a stream with this prefix, after letting
    /// this many through.
    fail: Mutex<Option<(String, u64)>>,
    /// Tests: store the first append this matches, then answer it as a
    /// connection that died before the answer came back.
    lose_answer: Mutex<Option<LoseAnswer>>,
}

/// Which append's answer a test loses (stream, payloads).
type LoseAnswer = Box<dyn Fn(&str, &[Payload]) -> bool + Send + Sync>;

impl EventStore {
    /// Open (or create) the sled log at `path`.
    pub fn open(path: &std::path::Path) -> Result<Self, StoreError> {
        Self::open_with(path, StoreOptions::default())
    }

    pub fn open_with(path: &std::path::Path, options: StoreOptions) -> Result<Self, StoreError> {
        let (log, db) = SledLog::open(path, options)?;
        Ok(Self::with_backend(Box::new(log), db, options))
    }

    /// The log in PostgreSQL at `url`; projections keep their trees in a
    /// sled database at `local` (per daemon).
    pub async fn open_postgres(
        url: &str,
        local: &std::path::Path,
        options: StoreOptions,
    ) -> Result<Self, StoreError> {
        let log = postgres::PgLog::open(url, options).await?;
        let local = ::sled::Config::new()
            .path(local)
            .cache_capacity(options.cache_bytes)
            .open()?;
        Ok(Self::with_backend(Box::new(log), local, options))
    }

    /// A handle on any backend; projections keep their trees in `local`.
    pub fn with_backend(log: Box<dyn Backend>, local: ::sled::Db, options: StoreOptions) -> Self {
        Self {
            inner: Arc::new(Inner {
                log,
                local,
                subscriber_queue: options.subscriber_queue.max(1),
                fail: Mutex::new(None),
                lose_answer: Mutex::new(None),
            }),
        }
    }

    /// Restore an export (of an embedded log) into the empty PostgreSQL
    /// log at `url`, every event at its sequence; returns the number of
    /// events.
    pub async fn import_postgres(url: &str, file: &std::path::Path) -> Result<u64, StoreError> {
        postgres::import(url, file).await
    }

    /// Record that `me` is alive (see [`Backend::heartbeat`]).
    pub async fn heartbeat(&self, me: Member) -> Result<(), StoreError> {
        self.inner.log.heartbeat(me).await
    }

    /// The log's head as its database has it now (see [`Backend::latest`]).
    pub async fn latest(&self) -> Result<u64, StoreError> {
        self.inner.log.latest().await
    }

    /// Whether appends wake other daemons (see [`Backend::wake_others`]).
    pub fn wake_others(&self, others: bool) {
        self.inner.log.wake_others(others);
    }

    /// Appends refused once `holder`'s lease lapsed (see [`Backend::fence`]).
    pub fn fence(&self, holder: Option<(String, std::time::Duration)>) {
        self.inner.log.fence(holder);
    }

    /// The daemons sharing this log (see [`Backend::members`]).
    pub async fn members(&self) -> Result<Vec<Member>, StoreError> {
        self.inner.log.members().await
    }

    /// `id` stopped cleanly (see [`Backend::leave`]).
    pub async fn leave(&self, id: &str) -> Result<(), StoreError> {
        self.inner.log.leave(id.to_string()).await
    }

    /// Whether other daemons may write to this log (see [`Backend::shared`]).
    pub fn shared(&self) -> bool {
        self.inner.log.shared()
    }

    /// Which backend holds the log (`sled`, `postgres`).
    pub fn backend(&self) -> &'static str {
        self.inner.log.name()
    }

    /// What this open recovered from a damaged log, if anything.
    pub fn recovered(&self) -> Option<&tinycode_shared::proto::LogRecovered> {
        self.inner.log.recovered()
    }

    /// Check the whole sled log at `path` (checksums, sequences, stream
    /// versions, the running hash against the durable head). Call it on a
    /// log nobody writes to.
    pub fn verify(path: &std::path::Path) -> Result<Report, StoreError> {
        SledLog::verify(path)
    }

    /// Write the sled log at `path` to `file`; returns the number of events.
    pub fn export(path: &std::path::Path, file: &std::path::Path) -> Result<u64, StoreError> {
        SledLog::export(path, file)
    }

    /// Restore an export into an empty sled log at `path`; returns the
    /// number of events.
    pub fn import(path: &std::path::Path, file: &std::path::Path) -> Result<u64, StoreError> {
        SledLog::import(path, file)
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
        if self.injected_failure(stream) {
            return Err(StoreError::Io("injected failure (test)".into()));
        }
        // Nothing stored holds a secret the daemon knows, whatever carried
        // it here (a provider's echo, an MCP error, a customer's paste).
        let payloads = scrub_secrets(payloads);
        let lost = self.answer_lost(stream, &payloads);
        let stored = self
            .inner
            .log
            .append(stream.to_string(), expected, payloads)
            .await?;
        if lost {
            return Err(StoreError::Unreachable(
                "injected: stored, but the answer was lost (test)".into(),
            ));
        }
        Ok(stored)
    }

    /// Current durable version of `stream` (0 when it does not exist).
    pub async fn stream_version(&self, stream: &str) -> Result<u64, StoreError> {
        self.inner.log.stream_version(stream.to_string()).await
    }

    /// Events of one stream with `stream_version >= from_version`, up to `max`.
    pub async fn read_stream(
        &self,
        stream: &str,
        from_version: u64,
        max: usize,
    ) -> Result<Vec<Event>, StoreError> {
        self.inner
            .log
            .read_stream(stream.to_string(), from_version, max)
            .await
    }

    /// Durable events with `from <= sequence <= to`, up to `max`.
    pub async fn read_range(
        &self,
        from: u64,
        to: u64,
        max: usize,
    ) -> Result<Vec<Event>, StoreError> {
        self.inner.log.read_range(from, to, max).await
    }

    /// One durable event by sequence.
    pub async fn get(&self, sequence: u64) -> Result<Option<Event>, StoreError> {
        Ok(self.read_range(sequence, sequence, 1).await?.pop())
    }

    /// The sled tree of a projection (with the sled backend the same
    /// database as the log, so sled's flush covers both).
    pub fn projection_tree(&self, name: &str) -> Result<::sled::Tree, StoreError> {
        Ok(self.inner.local.open_tree(name)?)
    }

    /// Tests (of this crate and the ones above it): let `appends` more
    /// appends to streams starting with `prefix` through, then refuse one
    /// (a transient failure: the store goes on).
    #[doc(hidden)]
    pub fn inject_failure(&self, prefix: &str, appends: u64) {
        *crate::sync::lock(&self.inner.fail) = Some((prefix.to_string(), appends));
    }

    /// Tests: the first append `matches` accepts is stored, then answered
    /// with a transient error, as when the connection to PostgreSQL died
    /// after its commit.
    #[doc(hidden)]
    pub fn inject_lost_answer(
        &self,
        matches: impl Fn(&str, &[Payload]) -> bool + Send + Sync + 'static,
    ) {
        *crate::sync::lock(&self.inner.lose_answer) = Some(Box::new(matches));
    }

    /// Is this append the one whose answer is lost (once)?
    fn answer_lost(&self, stream: &str, payloads: &[Payload]) -> bool {
        let mut lose = crate::sync::lock(&self.inner.lose_answer);
        let hit = lose.as_ref().is_some_and(|m| m(stream, payloads));
        if hit {
            *lose = None;
        }
        hit
    }

    /// Is this append the one to fail?
    fn injected_failure(&self, stream: &str) -> bool {
        let mut fail = crate::sync::lock(&self.inner.fail);
        let Some((prefix, left)) = fail.as_mut() else {
            return false;
        };
        if !stream.starts_with(prefix.as_str()) {
            return false;
        }
        if *left == 0 {
            *fail = None;
            return true;
        }
        *left -= 1;
        false
    }

    /// Last durable sequence (= number of events, but for a range a
    /// recovery recorded as lost).
    pub fn last_sequence(&self) -> u64 {
        self.inner.log.last_sequence()
    }

    pub fn stats(&self) -> StoreStats {
        self.inner.log.stats()
    }

    /// Why appends are refused right now (a full disk), if they are.
    pub fn writes_paused(&self) -> Option<String> {
        self.inner.log.writes_paused()
    }

    /// Refuse new appends, end every subscription, let the committer finish
    /// what is queued (those appends complete normally) and flush.
    pub async fn close(&self) -> Result<(), StoreError> {
        self.inner.log.close().await?;
        self.inner.local.flush_async().await?;
        Ok(())
    }

    pub fn closing(&self) -> watch::Receiver<bool> {
        self.inner.log.closing()
    }
}

/// `payloads` with every known secret redacted (see
/// `tinycode_shared::secrets`); unchanged, and cheap, when none holds one.
fn scrub_secrets(mut payloads: Vec<Payload>) -> Vec<Payload> {
    if !tinycode_shared::secrets::any() {
        return payloads;
    }
    for payload in &mut payloads {
        let event = Event {
            payload: Some(payload.clone()),
            ..Default::default()
        };
        if let Some(Event {
            payload: Some(clean),
            ..
        }) = tinycode_shared::secrets::scrub("tinycode.v1.Event", &event)
        {
            *payload = clean;
        }
    }
    payloads
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
mod tests;
