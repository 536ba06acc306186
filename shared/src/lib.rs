//! `tinycode-shared`: what every tinycode program needs to talk to the daemon.
//!
//! - [`proto`]: the generated protocol (messages, clients, servers) — the one
//!   definition of the wire and of stored events.
//! - [`paths`]: workspace discovery, state dir, socket path (same rules for
//!   the daemon and its clients).
//! - [`client`]: connect over the Unix socket, auto-start the daemon.
//! - [`render`]: event → text / JSON, shared by the CLI and the TUI.
//! - [`text`]: display width (CJK takes two columns), clipping, wrapping.
#![forbid(unsafe_code)]

pub mod client;
pub mod hint;
pub mod logging;
pub mod paths;
pub mod render;
pub mod secrets;
pub mod text;

/// Generated from `proto/tinycode/v1/*.proto`.
#[allow(clippy::all, missing_docs)]
pub mod proto {
    tonic::include_proto!("tinycode.v1");

    /// The encoded `FileDescriptorSet` of the protocol (reflection, JSON).
    pub const FILE_DESCRIPTOR_SET: &[u8] =
        include_bytes!(concat!(env!("OUT_DIR"), "/tinycode_descriptor.bin"));
}

/// Version of the protocol in `proto/tinycode/v1`; bumped on breaking changes.
pub const PROTOCOL_VERSION: u32 = 1;

/// Metadata key a client sets to name itself (recorded with its actions).
pub const CLIENT_NAME_METADATA: &str = "x-tinycode-client";
