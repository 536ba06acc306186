//! `tinycode-log`: the event log and what follows it.
//!
//! - [`store`]: the `EventStore` every layer above appends to and reads
//!   from, its backends (sled, the embedded default; PostgreSQL, shared by
//!   several daemons) and the conformance suite both pass.
//! - [`projection`]: read models that follow the log from a checkpoint.
//! - [`cluster`]: the daemons sharing one log — heartbeats and liveness.
//!
//! It knows nothing of tickets, sessions or the daemon: the names of the
//! system streams it needs are its own.
#![forbid(unsafe_code)]

pub mod cluster;
pub mod projection;
pub mod store;

pub(crate) use tinycode_base::{error_limited, warn_limited};
pub(crate) use tinycode_base::{files, fnv, sync};
