use super::ExpectedVersion;

/// Everything that can go wrong in the event log. Mapped to gRPC status codes
/// in `server::status`.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("stream {stream:?} is at version {actual}, but the append expected {expected}")]
    Conflict {
        stream: String,
        expected: ExpectedVersion,
        actual: u64,
    },
    #[error("invalid stream id {stream:?}: {reason}")]
    InvalidStream {
        stream: String,
        reason: &'static str,
    },
    #[error("an append needs at least one event")]
    EmptyAppend,
    #[error("the event store is closed (daemon stopping)")]
    Closed,
    #[error("stored event at sequence {sequence} cannot be decoded: {source}")]
    Corrupt {
        sequence: u64,
        #[source]
        source: prost::DecodeError,
    },
    #[error("stored event at sequence {sequence} is damaged: its checksum does not match")]
    Checksum { sequence: u64 },
    #[error(
        "the event log is damaged: {} acknowledged but can no longer be read (it reads up to {readable}); nothing was changed — restore a backup with `tinycode admin import FILE`, or start on what can be read with `tinycoded --recover` (the loss is recorded and no sequence number is reused); `tinycode admin verify` checks the whole log",
        lost(*.lost_from, *.lost_to)
    )]
    Damaged {
        lost_from: u64,
        lost_to: u64,
        readable: u64,
    },
    #[error(
        "the event log cannot be read ({reason}); it had acknowledged events up to {acknowledged}; nothing was changed — `tinycoded --recover` rebuilds it from the log's segment copy (`db/segments/`; sled's files are kept aside), or restore a backup with `tinycode admin import FILE`"
    )]
    Unreadable { acknowledged: u64, reason: String },
    /// sled lost acknowledged events and a start could not simply write
    /// them again from the segment copy (sled holds unreadable events past
    /// them, or the copy's record of them is damaged too).
    #[error(
        "the event log is damaged: {} acknowledged but sled can no longer read {} (it reads up to {readable}); start with `tinycoded --recover` to restore {} from the log's segment copy (what the copy cannot give either is recorded as lost, and its sequences never reused), or restore a backup with `tinycode admin import FILE`; nothing was changed",
        lost(*.lost_from, *.lost_to), them(*.lost_from, *.lost_to), them(*.lost_from, *.lost_to)
    )]
    Behind {
        lost_from: u64,
        lost_to: u64,
        readable: u64,
    },
    /// A non-empty log whose durable head is gone.
    #[error(
        "the event log holds {events} events but its durable head is missing (neither `db/segments/` nor `db/tinycode.head` is there), so nothing proves it whole; nothing was changed — restore a backup with `tinycode admin import FILE`, or start on it as it is with `tinycoded --recover` (a new head is recorded at its last readable event)"
    )]
    NoHead { events: u64 },
    #[error(
        "an event of {bytes} bytes for stream {stream:?} is over the limit of {limit} bytes per stored event"
    )]
    TooLarge {
        stream: String,
        bytes: usize,
        limit: usize,
    },
    #[error("the event store failed to write to disk: {0}")]
    Io(String),
    /// Too little free space to write safely; appends resume by themselves.
    #[error(
        "writes paused: disk full ({free_mib} MiB free on {dir}, {needed_mib} MiB needed); they resume by themselves once space is freed"
    )]
    DiskFull {
        free_mib: u64,
        needed_mib: u64,
        dir: String,
    },
    /// The store's database cannot be reached (PostgreSQL).
    #[error("{0}")]
    Unreachable(String),
    /// This daemon's lease on the shared log lapsed: the database refuses
    /// its appends until a heartbeat renews it (another daemon may have
    /// taken its work meanwhile).
    #[error(
        "this daemon's lease on the shared log lapsed (not heard from within {lease_ms} ms by the database); its appends are refused until its heartbeat is renewed — another daemon may have taken over its work"
    )]
    Fenced { lease_ms: u64 },
    /// The store's database answered with an error (PostgreSQL).
    #[error("the event store's database failed: {0}")]
    Database(String),
    #[error(
        "the event store's schema is at version {found}, newer than this tinycoded knows ({known}); upgrade tinycoded on this machine"
    )]
    SchemaNewer { found: i32, known: i32 },
}

impl StoreError {
    /// Whether the same append may succeed later by itself: the database
    /// was away or answered with an error, the disk was full, this
    /// daemon's lease had lapsed.
    pub fn transient(&self) -> bool {
        matches!(
            self,
            Self::Unreachable(_) | Self::Database(_) | Self::DiskFull { .. } | Self::Fenced { .. }
        )
    }

    /// The same error again, for each of several waiters (an I/O error
    /// keeps its text; nothing is wrapped twice).
    pub(crate) fn again(&self) -> Self {
        match self {
            Self::Io(cause) => Self::Io(cause.clone()),
            Self::DiskFull {
                free_mib,
                needed_mib,
                dir,
            } => Self::DiskFull {
                free_mib: *free_mib,
                needed_mib: *needed_mib,
                dir: dir.clone(),
            },
            Self::Closed => Self::Closed,
            other => Self::Io(other.to_string()),
        }
    }
}

impl From<sled::Error> for StoreError {
    fn from(e: sled::Error) -> Self {
        Self::Io(e.to_string())
    }
}

/// "it" / "them".
fn them(from: u64, to: u64) -> &'static str {
    if from == to { "it" } else { "them" }
}

/// "event 7 was" / "events 7–9 were".
fn lost(from: u64, to: u64) -> String {
    if from == to {
        format!("event {from} was")
    } else {
        format!("events {from}–{to} were")
    }
}
