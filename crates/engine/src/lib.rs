//! `tinycode-engine`: what the daemon does, below its gRPC surface — the
//! offline policy, context, config, tools and MCP, the agent loop, sessions,
//! evaluations and extensions, the triage worker, direct calls, the
//! daemon's own controls (reload, drain) and `doctor`. The `tinycoded`
//! crate above it only serves this over gRPC and runs the process.
//!
//! Layer order inside (lowest first; an import runs only downwards, and
//! `tests/tests/layers.rs` checks it): offline · context · config · tools ·
//! mcp · agent · sessions · eval, extensions · triage, calls · control,
//! doctor. Everything below (`store`, `domain`, `model`, …) is a crate of
//! its own, re-exported here by its old path.
#![forbid(unsafe_code)]

pub mod agent;
pub mod auth;
pub mod calls;
pub mod config;
pub mod connectors;
pub mod context;
pub mod control;
pub mod doctor;
pub mod eval;
pub mod extensions;
pub mod mcp;
pub mod offline;
pub mod reports;
pub mod sessions;
pub mod tools;
pub mod triage;

#[cfg(test)]
mod testing;

// The layers below, by their old paths (`crate::store::…`).
pub(crate) use tinycode_base::error_limited;
pub use tinycode_base::{clock, files, fnv, heap, paging, progress, ratelimit, sync};
pub use tinycode_domain as domain;
pub use tinycode_domain::{approvals, permissions, skills};
pub use tinycode_learn as learn;
pub use tinycode_log::{cluster, projection, store};
pub use tinycode_model as model;
