//! The durable head: the last acknowledged sequence, the checksum of that
//! event and a running hash of every event up to it. The segment copy
//! (`segments.rs`) carries it in every record; a torn or cut sled data file
//! cannot take it along, so a start can tell that acknowledged events are
//! missing instead of carrying on without them.
//!
//! Logs written before the segment copy kept it in `<db>/tinycode.head`:
//! two 32-byte slots written in turn, each with its own checksum (a torn
//! write leaves the other slot whole, and the newer whole slot is the
//! head). A start reads that file once, builds the copy and removes it.

use std::path::{Path, PathBuf};

const MAGIC: &[u8; 4] = b"TCH1";
const SLOT: u64 = 32;

/// What the log has acknowledged.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Head {
    /// Last acknowledged sequence (0: nothing yet).
    pub sequence: u64,
    /// Checksum of the event at `sequence`.
    pub crc: u32,
    /// Running hash of every event's (sequence, checksum) up to `sequence`.
    pub chain: u64,
}

impl Head {
    /// The head after one more event.
    pub fn then(self, sequence: u64, crc: u32) -> Self {
        Self {
            sequence,
            crc,
            chain: chain(self.chain, sequence, crc),
        }
    }

    #[cfg(test)]
    pub(crate) fn encode(&self) -> [u8; SLOT as usize] {
        let mut out = [0u8; SLOT as usize];
        out[..4].copy_from_slice(MAGIC);
        out[4..12].copy_from_slice(&self.sequence.to_le_bytes());
        out[12..16].copy_from_slice(&self.crc.to_le_bytes());
        out[16..24].copy_from_slice(&self.chain.to_le_bytes());
        let sum = crc32fast::hash(&out[..24]);
        out[24..28].copy_from_slice(&sum.to_le_bytes());
        out
    }

    fn decode(bytes: &[u8]) -> Option<Self> {
        if bytes.len() < 28 || &bytes[..4] != MAGIC {
            return None;
        }
        let u64_at = |i: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&bytes[i..i + 8]);
            u64::from_le_bytes(b)
        };
        let u32_at = |i: usize| {
            let mut b = [0u8; 4];
            b.copy_from_slice(&bytes[i..i + 4]);
            u32::from_le_bytes(b)
        };
        (crc32fast::hash(&bytes[..24]) == u32_at(24)).then(|| Self {
            sequence: u64_at(4),
            crc: u32_at(12),
            chain: u64_at(16),
        })
    }
}

/// FNV-1a over (previous hash, sequence, checksum).
fn chain(previous: u64, sequence: u64, crc: u32) -> u64 {
    crate::fnv::fnv1a(
        previous
            .to_le_bytes()
            .into_iter()
            .chain(sequence.to_le_bytes())
            .chain(crc.to_le_bytes()),
    )
}

/// The newest whole slot of a head file's bytes, and the slot to write
/// next.
fn newest(bytes: &[u8]) -> Option<(Head, u64)> {
    let slot = |at: usize| bytes.get(at..at + SLOT as usize).and_then(Head::decode);
    match (slot(0), slot(SLOT as usize)) {
        (Some(a), Some(b)) if b.sequence > a.sequence => Some((b, 0)),
        (Some(a), _) => Some((a, 1)),
        (None, Some(b)) => Some((b, 0)),
        (None, None) => None,
    }
}

/// Where a log written before the segment copy kept its head.
pub fn path_of(db: &Path) -> PathBuf {
    db.join("tinycode.head")
}

/// The head a legacy head file at `path` holds (`None`: no file, or no
/// whole slot).
pub fn peek(path: &Path) -> Option<Head> {
    newest(&std::fs::read(path).ok()?).map(|(h, _)| h)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_newest_whole_slot_wins_and_a_torn_one_is_ignored() {
        let dir = tempfile::tempdir().unwrap();
        let path = path_of(dir.path());
        assert_eq!(peek(&path), None);
        let one = Head::default().then(1, 7);
        let two = one.then(2, 9);
        let mut bytes = [one.encode(), two.encode()].concat();
        std::fs::write(&path, &bytes).unwrap();
        assert_eq!(peek(&path), Some(two));
        // Tear the newer slot (slot 1): the older one is the head.
        bytes[SLOT as usize + 5] ^= 0xff;
        std::fs::write(&path, &bytes).unwrap();
        assert_eq!(peek(&path), Some(one));
        assert_ne!(one.chain, two.chain);
    }
}
