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
        "the event log cannot be read ({reason}); it had acknowledged events up to {acknowledged}; nothing was changed — restore a backup with `tinycode admin import FILE`"
    )]
    Unreadable { acknowledged: u64, reason: String },
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
    /// The store's database cannot be reached (PostgreSQL).
    #[error("{0}")]
    Unreachable(String),
    /// The store's database answered with an error (PostgreSQL).
    #[error("the event store's database failed: {0}")]
    Database(String),
    #[error(
        "the event store's schema is at version {found}, newer than this tinycoded knows ({known}); upgrade tinycoded on this machine"
    )]
    SchemaNewer { found: i32, known: i32 },
}

impl From<sled::Error> for StoreError {
    fn from(e: sled::Error) -> Self {
        Self::Io(e.to_string())
    }
}

/// "event 7 was" / "events 7–9 were".
fn lost(from: u64, to: u64) -> String {
    if from == to {
        format!("event {from} was")
    } else {
        format!("events {from}–{to} were")
    }
}
