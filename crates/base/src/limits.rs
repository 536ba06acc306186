//! Size limits shared by every way in (RPCs, tools, files read back from
//! the workspace), so nothing a file brings in can outgrow what a request
//! could, and every stored value stays below the store's per-event limit
//! (`store::MAX_EVENT_BYTES`, 100 KiB).

/// A ticket's subject, bytes.
pub const MAX_SUBJECT: usize = 500;
/// A name (customer, title…), bytes.
pub const MAX_NAME: usize = 200;
/// One message, reply, note or body, bytes.
pub const MAX_TEXT: usize = 64 * 1024;
/// A ticket file read back from `tickets/`, bytes (its import event holds
/// all of it).
pub const MAX_TICKET_FILE: u64 = 96 * 1024;
/// An article file read back from `knowledge/`, bytes.
pub const MAX_ARTICLE_FILE: u64 = 64 * 1024;
/// A ticket as stored (all its messages and notes), bytes: a change that
/// would grow it past this is refused.
pub const MAX_TICKET_BYTES: usize = 96 * 1024;
