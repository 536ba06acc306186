//! `tinycoded`: the daemon that owns every ticket, session and approval as
//! an append-only event log, and serves gRPC over a Unix socket.
//!
//! Data flows one way: `server` → (later: sessions → agent → tools → domain)
//! → `store`; events flow back from `store` to every subscriber.

pub mod agent;
pub mod approvals;
pub mod calls;
pub mod clock;
pub mod cluster;
pub mod config;
pub mod context;
pub mod control;
pub mod doctor;
pub mod domain;
pub mod eval;
pub mod extensions;
pub mod files;
pub mod fnv;
pub mod heap;
pub mod learn;
pub mod lifecycle;
pub mod mcp;
pub mod model;
pub mod paging;
pub mod permissions;
pub mod projection;
pub mod ratelimit;
pub mod server;
pub mod sessions;
pub mod skills;
pub mod store;
pub mod sync;
pub mod tools;
pub mod triage;
