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

/// Metadata key a bridging client (the web page's) sets to name the person
/// acting through it, percent-encoded UTF-8 ([`encode_person`]); the daemon
/// records `<person> (via <client>)`.
pub const PERSON_METADATA: &str = "x-tinycode-person";

/// `name` as [`PERSON_METADATA`] carries it: every byte outside visible
/// ASCII (and `%`) percent-encoded.
pub fn encode_person(name: &str) -> String {
    let mut out = String::new();
    for b in name.bytes() {
        if b.is_ascii_graphic() && b != b'%' || b == b' ' {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// What [`encode_person`] wrote, as text (invalid bytes replaced).
pub fn decode_person(value: &str) -> String {
    let bytes = value.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match (bytes[i], bytes.get(i + 1), bytes.get(i + 2)) {
            (b'%', Some(&h), Some(&l)) if hex(h).is_some() && hex(l).is_some() => {
                out.push((hex(h).unwrap_or(0) * 16 + hex(l).unwrap_or(0)) as u8);
                i += 3;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod person_tests {
    use super::*;

    #[test]
    fn a_persons_name_survives_metadata() {
        for name in ["Ana", "张伟", "O'Brien 100%", "a\u{1b}[31mb"] {
            let encoded = encode_person(name);
            assert!(
                encoded.bytes().all(|b| b.is_ascii_graphic() || b == b' '),
                "{encoded}"
            );
            assert_eq!(decode_person(&encoded), name);
        }
    }
}
