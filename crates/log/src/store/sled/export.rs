//! The portable export file: the backup, and the way out of a damaged
//! store (and into PostgreSQL).

use std::io::{BufReader, BufWriter, Read, Write};
use std::path::Path;

use tinycode_shared::proto::Event;

use super::StoreError;
use super::head::{self, Head};
use super::integrity::sled_rows;
use super::keys::{decode_checked, decode_sequence, encode_event, stream_key};
use super::segments;

/// First line of an export file.
const EXPORT_MAGIC: &[u8] = b"tinycode-log v1\n";

/// Write every event to `path`: a header line, then per event its length
/// (u32 LE), its CRC-32 (u32 LE) and the encoded `tinycode.v1.Event`.
/// Returns the number of events written.
pub(super) fn export(events: &sled::Tree, path: &Path) -> Result<u64, StoreError> {
    let io = |e: std::io::Error| StoreError::Io(format!("cannot write {}: {e}", path.display()));
    let temp = path.with_extension("partial");
    let file = std::fs::File::create(&temp).map_err(io)?;
    let mut out = BufWriter::new(file);
    out.write_all(EXPORT_MAGIC).map_err(io)?;
    let mut n = 0;
    for row in events.iter() {
        let (key, value) = row?;
        let (event, _) = decode_checked(decode_sequence(&key), &value)?;
        let body = prost::Message::encode_to_vec(&event);
        out.write_all(&(body.len() as u32).to_le_bytes())
            .map_err(io)?;
        out.write_all(&crc32fast::hash(&body).to_le_bytes())
            .map_err(io)?;
        out.write_all(&body).map_err(io)?;
        n += 1;
    }
    let file = out.into_inner().map_err(|e| io(e.into_error()))?;
    file.sync_all().map_err(io)?;
    std::fs::rename(&temp, path).map_err(io)?;
    Ok(n)
}

/// Read an export file, checking every record (and that sequences only
/// grow); calls `each` per event.
pub(crate) fn read_export(
    path: &Path,
    mut each: impl FnMut(Event) -> Result<(), StoreError>,
) -> Result<u64, StoreError> {
    let bad =
        |why: String| StoreError::Io(format!("{} is not a sound export: {why}", path.display()));
    let file = std::fs::File::open(path)
        .map_err(|e| StoreError::Io(format!("cannot read {}: {e}", path.display())))?;
    let mut input = BufReader::new(file);
    let mut magic = vec![0u8; EXPORT_MAGIC.len()];
    input
        .read_exact(&mut magic)
        .map_err(|_| bad("no header".into()))?;
    if magic != EXPORT_MAGIC {
        return Err(bad("the header is not `tinycode-log v1`".into()));
    }
    let (mut n, mut last) = (0u64, 0u64);
    loop {
        let mut frame = [0u8; 8];
        match input.read_exact(&mut frame) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => break,
            Err(e) => return Err(bad(e.to_string())),
        }
        let len = u32::from_le_bytes([frame[0], frame[1], frame[2], frame[3]]) as usize;
        let crc = u32::from_le_bytes([frame[4], frame[5], frame[6], frame[7]]);
        if len > super::super::MAX_EVENT_BYTES * 2 {
            return Err(bad(format!("record {} claims {len} bytes", n + 1)));
        }
        let mut body = vec![0u8; len];
        input
            .read_exact(&mut body)
            .map_err(|_| bad(format!("record {} is cut short", n + 1)))?;
        if crc32fast::hash(&body) != crc {
            return Err(bad(format!("record {} fails its checksum", n + 1)));
        }
        let event: Event = prost::Message::decode(body.as_slice())
            .map_err(|e| bad(format!("record {}: {e}", n + 1)))?;
        if event.sequence <= last {
            return Err(bad(format!(
                "event {} comes after event {last}",
                event.sequence
            )));
        }
        last = event.sequence;
        each(event)?;
        n += 1;
    }
    Ok(n)
}

/// Write imported events into an empty log (in batches), then its segment
/// copy; returns the head.
pub(super) fn import(
    path: &Path,
    db: &sled::Db,
    events: &sled::Tree,
    streams: &sled::Tree,
    file: &Path,
) -> Result<Head, StoreError> {
    if !events.is_empty() {
        return Err(StoreError::Io(
            "the log is not empty; import restores into an empty state directory".into(),
        ));
    }
    let mut batch = (sled::Batch::default(), sled::Batch::default(), 0usize);
    read_export(file, |event| {
        let (value, _) = encode_event(&event);
        batch.0.insert(&event.sequence.to_be_bytes(), value);
        batch.1.insert(
            stream_key(&event.stream_id, event.stream_version),
            &event.sequence.to_be_bytes(),
        );
        batch.2 += 1;
        if batch.2 >= 4096 {
            let (e, s, _) = std::mem::take(&mut batch);
            events.apply_batch(e)?;
            streams.apply_batch(s)?;
        }
        Ok(())
    })?;
    let (e, s, _) = batch;
    events.apply_batch(e)?;
    streams.apply_batch(s)?;
    db.flush()?;
    let head = segments::rebuild(path, sled_rows(events, 1))?;
    let _ = std::fs::remove_file(head::path_of(path));
    Ok(head)
}
