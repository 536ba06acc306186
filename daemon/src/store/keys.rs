//! Key layout of the sled trees, and decoding of stored events.

use prost::Message;
use tinycode_shared::proto::Event;

use super::StoreError;

/// `stream-id ‖ 0x00`: the NUL keeps `ticket-1` from prefixing `ticket-10`
/// (stream ids cannot contain control characters).
pub(crate) fn stream_prefix(stream: &str) -> Vec<u8> {
    let mut key = Vec::with_capacity(stream.len() + 9);
    key.extend_from_slice(stream.as_bytes());
    key.push(0);
    key
}

/// `stream-id ‖ 0x00 ‖ version (u64 BE)`.
pub(crate) fn stream_key(stream: &str, version: u64) -> Vec<u8> {
    let mut key = stream_prefix(stream);
    key.extend_from_slice(&version.to_be_bytes());
    key
}

/// The big-endian u64 at the end of `bytes` (shorter input is zero-padded).
pub(crate) fn decode_sequence(bytes: &[u8]) -> u64 {
    let mut buf = [0u8; 8];
    let n = bytes.len().min(8);
    buf[8 - n..].copy_from_slice(&bytes[bytes.len() - n..]);
    u64::from_be_bytes(buf)
}

pub(crate) fn decode_event(sequence: u64, bytes: &[u8]) -> Result<Event, StoreError> {
    Event::decode(bytes).map_err(|source| StoreError::Corrupt { sequence, source })
}
