//! `tinycode-tui`: a terminal client of `tinycoded`. Everything it shows
//! comes from the daemon's events; quitting never stops a turn.
//!
//! - [`app`]: state, keys and daemon events → [`rpc::Rpc`] requests (no I/O).
//! - [`net`]: the gRPC side: attach with reconnect, approvals, requests.
//! - [`ui`]: one frame ([`transcript`], [`views`], [`dialog`], [`status`]).
#![forbid(unsafe_code)]

pub mod app;
pub mod dialog;
pub mod editor;
pub mod net;
pub mod report;
pub mod rpc;
pub mod slash;
pub mod status;
pub mod transcript;
pub mod ui;
pub mod view;
pub mod views;

#[doc(hidden)]
pub mod fixtures;

#[cfg(test)]
mod app_tests;
#[cfg(test)]
mod ui_tests;
