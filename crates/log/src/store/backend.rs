//! What a log backend must provide. [`super::EventStore`] is the handle the
//! daemon uses; it validates, injects test failures, runs catch-up
//! subscriptions and hands out projection trees, and leaves the log itself
//! to a `Backend`: sled (`super::sled`, the embedded default) or any other
//! store that passes the conformance suite (`super::conformance`).
//!
//! The contract, which the suite checks:
//! - `append` is atomic: all of `payloads` or none; a stale expected
//!   version is [`StoreError::Conflict`] and stores nothing.
//! - Sequences are global, start at 1, have no gap, and commit order equals
//!   sequence order: once `last_sequence()` is N, events 1..=N are durable
//!   and readable, and no event below N can still appear.
//! - An append returns only once its events are durable, after they were
//!   offered to `live()` receivers in sequence order.
//! - Reads never return events above `last_sequence()`.
//! - After `close`, appends fail with [`StoreError::Closed`] and `closing()`
//!   reads `true`.

use std::sync::Arc;

use futures::future::BoxFuture;
use tinycode_shared::proto::{Event, LogRecovered, event::Payload};
use tokio::sync::{broadcast, watch};

use super::{ExpectedVersion, StoreError, StoreStats};

pub trait Backend: Send + Sync + 'static {
    /// Short name for status and logs (`sled`, `postgres`).
    fn name(&self) -> &'static str;

    /// Append `payloads` (already validated: non-empty, each within the
    /// size limit) to `stream` atomically.
    fn append(
        &self,
        stream: String,
        expected: ExpectedVersion,
        payloads: Vec<Payload>,
    ) -> BoxFuture<'_, Result<Vec<Arc<Event>>, StoreError>>;

    /// Current durable version of `stream` (0 when it does not exist).
    fn stream_version(&self, stream: String) -> BoxFuture<'_, Result<u64, StoreError>>;

    /// Events of one stream with `stream_version >= from_version`, in
    /// order, up to `max`.
    fn read_stream(
        &self,
        stream: String,
        from_version: u64,
        max: usize,
    ) -> BoxFuture<'_, Result<Vec<Event>, StoreError>>;

    /// Durable events with `from <= sequence <= to`, in order, up to `max`.
    fn read_range(
        &self,
        from: u64,
        to: u64,
        max: usize,
    ) -> BoxFuture<'_, Result<Vec<Event>, StoreError>>;

    /// Highest durable sequence this process knows of.
    fn last_sequence(&self) -> u64;

    /// Events as they become durable, in sequence order (a receiver that
    /// lags reads the rest with `read_range`).
    fn live(&self) -> broadcast::Receiver<Arc<Event>>;

    /// Turns `true` on close.
    fn closing(&self) -> watch::Receiver<bool>;

    fn stats(&self) -> StoreStats;

    /// Refuse new appends, finish queued ones, make everything durable.
    fn close(&self) -> BoxFuture<'_, Result<(), StoreError>>;

    /// What this open recovered from a damaged log, if anything.
    fn recovered(&self) -> Option<&LogRecovered> {
        None
    }

    /// Why appends are refused right now (e.g. a full disk), if they are;
    /// they resume by themselves.
    fn writes_paused(&self) -> Option<String> {
        None
    }

    /// Whether other daemons may write to this log (a shared database);
    /// `false`: this process is its only writer.
    fn shared(&self) -> bool {
        false
    }

    /// The highest sequence in the log as its database has it now (others'
    /// appends included, published here or not); a log only this process
    /// writes answers [`Backend::last_sequence`].
    fn latest(&self) -> BoxFuture<'_, Result<u64, StoreError>> {
        Box::pin(futures::future::ready(Ok(self.last_sequence())))
    }

    /// Whether another live daemon shares the log and must be woken by
    /// this one's appends (PostgreSQL: `NOTIFY`, which serializes commits
    /// across the whole server; a daemon alone on its log skips it).
    fn wake_others(&self, _others: bool) {}

    /// From now on refuse this process's appends when `id` has not been
    /// heard from within `lease` by the store's clock ([`StoreError::Fenced`]):
    /// a daemon cut off longer than its lease makes no change once another
    /// may have taken its work. `None`: no such check (leaving, or alone).
    fn fence(&self, _holder: Option<(String, std::time::Duration)>) {}

    /// Record that `me` is alive now, by the store's clock (a log only one
    /// daemon opens has nobody to tell: the default does nothing).
    fn heartbeat(&self, _me: Member) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(futures::future::ready(Ok(())))
    }

    /// The daemons sharing this log, with how long ago each was last heard
    /// from (by the store's clock, so machines' clocks do not matter).
    fn members(&self) -> BoxFuture<'_, Result<Vec<Member>, StoreError>> {
        Box::pin(futures::future::ready(Ok(Vec::new())))
    }

    /// `id` stopped cleanly: forget it (its leases are free at once).
    fn leave(&self, _id: String) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(futures::future::ready(Ok(())))
    }
}

/// A daemon sharing the log.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Member {
    /// Stable per state dir (`<state dir>/daemon-id`).
    pub id: String,
    pub host: String,
    pub pid: u32,
    pub socket: String,
    pub workspace: String,
    /// Unix seconds.
    pub started_at: i64,
    /// Milliseconds since its last heartbeat (0 when just sent).
    pub heartbeat_age_ms: u64,
}
