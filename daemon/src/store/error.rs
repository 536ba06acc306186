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
    #[error("the event store failed to write to disk: {0}")]
    Io(String),
}

impl From<sled::Error> for StoreError {
    fn from(e: sled::Error) -> Self {
        Self::Io(e.to_string())
    }
}
