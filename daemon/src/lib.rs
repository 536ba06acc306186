//! `tinycoded`: the daemon that owns every ticket, session and approval as
//! an append-only event log, and serves gRPC over a Unix socket.
//!
//! Data flows one way: `server` → (later: sessions → agent → tools → domain)
//! → `store`; events flow back from `store` to every subscriber.

pub mod agent;
pub mod calls;
pub mod config;
pub mod context;
pub mod control;
pub mod doctor;
pub mod eval;
pub mod extensions;
pub mod lifecycle;
pub mod mcp;
pub mod offline;
pub mod server;
pub mod sessions;
pub mod tools;
pub mod triage;

#[cfg(test)]
mod testing;

// The layers below the daemon, by their old paths (`crate::store::…`).
pub(crate) use tinycode_base::error_limited;
pub use tinycode_base::{clock, files, fnv, heap, paging, ratelimit, sync};
pub use tinycode_domain as domain;
pub use tinycode_domain::{approvals, permissions, skills};
pub use tinycode_learn as learn;
pub use tinycode_log::{cluster, projection, store};
pub use tinycode_model as model;
