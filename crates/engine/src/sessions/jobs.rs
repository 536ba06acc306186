//! What a session's actor is given and what its turn's writer handles:
//! the messages between the registry, the live side, the approver and the
//! actor (kept apart so none of them imports another for a type).

use tinycode_shared::proto::ClientRef;
use tinycode_shared::proto::event::Payload;
use tokio::sync::oneshot;

use super::SessionError;

/// Most events one append of a turn's writer carries (`writer.rs`).
pub(super) const WRITE_BATCH: usize = 64;

/// How long, at most, a batch of the writer waits for the write after a
/// [`Write::StoreWithNext`].
pub(super) const WITH_NEXT_WITHIN: std::time::Duration = std::time::Duration::from_millis(20);

/// What a session's actor does, one at a time, in the order received.
pub(crate) enum Job {
    Turn(u64),
    /// Continue a turn a restart interrupted while an approval was pending.
    Resume(u64),
    /// Summarise older turns now (the Compact RPC).
    Compact {
        by: ClientRef,
        reply: oneshot::Sender<Result<Compacted, SessionError>>,
    },
}

/// What a compaction did (the Compact RPC's answer).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Compacted {
    pub compacted: bool,
    pub summarized_messages: u32,
    pub tokens_before: u64,
    pub tokens_after: u64,
    pub first_kept_turn: u64,
    pub sequence: u64,
}

/// What the turn's writer handles, in order.
pub(super) enum Write {
    Store(Box<Payload>),
    /// Store together with the next write when it comes within
    /// [`WITH_NEXT_WITHIN`] of the batch's first, else without it: a
    /// turn's start, answers and tool results. When the model answers at
    /// once (the offline model, a local one) a step's result, the next
    /// answer and the turn's end reach the log in one append, where there
    /// was one durable point per event kind; with a remote model each
    /// step is stored as before, at most that much later. What must be
    /// durable before the turn goes on (an approval's request) is
    /// `StoreAck`, stored at once with what waits before it.
    StoreWithNext(Box<Payload>),
    /// Store what waits now (a tool starts: its call is stored while it
    /// runs, as it was before steps waited for each other).
    Boundary,
    /// Store, then say whether it is durable (an approval wait starts only
    /// after its request is stored).
    StoreAck(Box<Payload>, oneshot::Sender<Result<(), String>>),
    /// Say once everything sent before is durable (or why not).
    Flush(oneshot::Sender<Result<(), String>>),
    Delta(DeltaKind, String),
}

/// What an ephemeral delta carries (`Delta.kind` on the wire).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeltaKind {
    /// Answer text of the running step.
    Text,
    /// The model's thinking.
    Thinking,
}

impl DeltaKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Text => "text",
            Self::Thinking => "thinking",
        }
    }
}
