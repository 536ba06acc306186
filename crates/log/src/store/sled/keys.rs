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

/// Marks a stored value as `0x01 ‖ crc32 (LE) ‖ encoded Event`. Values
/// written before checksums start with the protobuf tag of `sequence`
/// (0x08) and are read as they are.
const CHECKED: u8 = 0x01;

/// The stored form of an event, and its checksum.
pub(crate) fn encode_event(event: &Event) -> (Vec<u8>, u32) {
    let body = event.encode_to_vec();
    let crc = crc32fast::hash(&body);
    let mut out = Vec::with_capacity(body.len() + 5);
    out.push(CHECKED);
    out.extend_from_slice(&crc.to_le_bytes());
    out.extend_from_slice(&body);
    (out, crc)
}

/// Decode a stored event, checking its checksum and its sequence; returns
/// it with its checksum.
pub(crate) fn decode_checked(sequence: u64, bytes: &[u8]) -> Result<(Event, u32), StoreError> {
    let (body, crc) = match bytes.first() {
        Some(&CHECKED) if bytes.len() >= 5 => {
            let mut stored = [0u8; 4];
            stored.copy_from_slice(&bytes[1..5]);
            let body = &bytes[5..];
            let crc = crc32fast::hash(body);
            if crc != u32::from_le_bytes(stored) {
                return Err(StoreError::Checksum { sequence });
            }
            (body, crc)
        }
        _ => (bytes, crc32fast::hash(bytes)),
    };
    let event = Event::decode(body).map_err(|source| StoreError::Corrupt { sequence, source })?;
    if event.sequence != sequence {
        return Err(StoreError::Checksum { sequence });
    }
    Ok((event, crc))
}

pub(crate) fn decode_event(sequence: u64, bytes: &[u8]) -> Result<Event, StoreError> {
    decode_checked(sequence, bytes).map(|(event, _)| event)
}
