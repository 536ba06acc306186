//! `tinycoded`: the daemon that owns every ticket, session and approval as
//! an append-only event log, and serves gRPC over a Unix socket.
//!
//! This crate is the top of the house: [`server`] (the tonic services:
//! convert a request, call one engine method, convert back) and
//! [`lifecycle`] (start-up and shutdown). Everything else is
//! `tinycode-engine` and the crates below it, re-exported here so
//! `tinycoded::sessions`, `tinycoded::store`, … name them.
#![forbid(unsafe_code)]

pub mod cli;
pub mod lifecycle;
pub mod maintenance;
pub mod server;

pub use tinycode_engine::*;
