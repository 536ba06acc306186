//! What the log knows about its own soundness: the start-up check against
//! the durable head, recovery on request, `verify` of the whole log, and the
//! portable export file (the backup, and the way out of a damaged store).

use std::io::{BufReader, BufWriter, Read, Write};
use std::path::Path;

use tinycode_shared::proto::event::Payload;
use tinycode_shared::proto::{Event, LogRecovered};

use super::head::{Head, HeadFile};
use super::keys::{decode_checked, decode_sequence, encode_event, stream_key};
use super::{StoreError, stream_version_in};

/// The log as a start finds it.
pub(super) struct Opened {
    /// The head to extend (every readable event folded in).
    pub head: Head,
    /// Sequences up to this one are taken (the next append gets the next).
    pub last_sequence: u64,
    /// Set when this start recovered a damaged log.
    pub recovered: Option<LogRecovered>,
}

/// The last event from the end that reads whole, and the highest key.
fn readable_tail(events: &sled::Tree) -> Result<(u64, u64), StoreError> {
    let mut highest = 0;
    for row in events.iter().rev() {
        let (key, value) = row?;
        let sequence = decode_sequence(&key);
        highest = highest.max(sequence);
        if decode_checked(sequence, &value).is_ok() {
            return Ok((sequence, highest));
        }
    }
    Ok((0, highest))
}

/// Fold every readable event from `from` to `to` into `head`.
fn extend(events: &sled::Tree, mut head: Head, from: u64, to: u64) -> Result<Head, StoreError> {
    if from > to {
        return Ok(head);
    }
    for row in events.range(from.to_be_bytes()..=to.to_be_bytes()) {
        let (key, value) = row?;
        let sequence = decode_sequence(&key);
        let (_, crc) = decode_checked(sequence, &value)?;
        head = head.then(sequence, crc);
    }
    Ok(head)
}

/// Check the log against its durable head at start. A damaged log is
/// refused, or recovered when `recover` is set.
pub(super) fn open(
    db: &sled::Db,
    events: &sled::Tree,
    streams: &sled::Tree,
    head_file: &mut HeadFile,
    stored: Option<Head>,
    recover: bool,
) -> Result<Opened, StoreError> {
    let (readable, highest) = readable_tail(events)?;
    let Some(acked) = stored else {
        // A new log, or one written before the head existed: start one.
        let head = extend(events, Head::default(), 1, readable)?;
        if readable > 0 {
            tracing::warn!(
                sequence = readable,
                "the log had no durable head; recorded one at its last event"
            );
        }
        head_file.reset(&head)?;
        return Ok(Opened {
            head,
            last_sequence: highest.max(readable),
            recovered: None,
        });
    };
    let at_head = match events.get(acked.sequence.to_be_bytes())? {
        Some(v) => decode_checked(acked.sequence, &v).ok().map(|(_, crc)| crc),
        None => None,
    };
    let intact = acked.sequence == 0 || (at_head == Some(acked.crc) && readable >= acked.sequence);
    if intact && readable == highest {
        // Durable but never acknowledged (a crash before the head write):
        // kept, and folded into the head.
        let head = extend(events, acked, acked.sequence + 1, readable)?;
        return Ok(Opened {
            head,
            last_sequence: readable,
            recovered: None,
        });
    }
    let lost_from = if intact {
        acked.sequence + 1
    } else {
        (readable + 1).min(acked.sequence)
    };
    let lost = LogRecovered {
        lost_from,
        lost_to: acked.sequence.max(highest),
        readable: lost_from - 1,
    };
    if !recover {
        return Err(StoreError::Damaged {
            lost_from: lost.lost_from,
            lost_to: lost.lost_to,
            readable: lost.readable,
        });
    }
    recover_from(db, events, streams, head_file, lost)
}

/// Drop what cannot be read, record `LogRecovered` after the lost range,
/// and clear every read model (they rebuild from what is left).
fn recover_from(
    db: &sled::Db,
    events: &sled::Tree,
    streams: &sled::Tree,
    head_file: &mut HeadFile,
    lost: LogRecovered,
) -> Result<Opened, StoreError> {
    tracing::warn!(
        lost_from = lost.lost_from,
        lost_to = lost.lost_to,
        "recovering a damaged log: the lost range is recorded and never reused"
    );
    let mut batch_events = sled::Batch::default();
    for row in events.range(lost.lost_from.to_be_bytes()..) {
        batch_events.remove(row?.0);
    }
    let mut batch_streams = sled::Batch::default();
    for row in streams.iter() {
        let (key, value) = row?;
        if decode_sequence(&value) >= lost.lost_from {
            batch_streams.remove(key);
        }
    }
    events.apply_batch(batch_events)?;
    streams.apply_batch(batch_streams)?;
    for name in db.tree_names() {
        if name.starts_with(b"proj-") {
            db.drop_tree(&name)?;
        }
    }
    let head = extend(events, Head::default(), 1, lost.readable)?;
    let sequence = lost.lost_to + 1;
    let event = Event {
        sequence,
        stream_id: crate::lifecycle::DAEMON_STREAM.into(),
        stream_version: stream_version_in(streams, crate::lifecycle::DAEMON_STREAM)? + 1,
        recorded_at: Some(prost_types::Timestamp::from(std::time::SystemTime::now())),
        payload: Some(Payload::LogRecovered(lost)),
    };
    let (value, crc) = encode_event(&event);
    events.insert(sequence.to_be_bytes(), value)?;
    streams.insert(
        stream_key(&event.stream_id, event.stream_version),
        &sequence.to_be_bytes(),
    )?;
    db.flush()?;
    let head = head.then(sequence, crc);
    head_file.reset(&head)?;
    Ok(Opened {
        head,
        last_sequence: sequence,
        recovered: Some(lost),
    })
}

/// What `verify` found.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Report {
    pub events: u64,
    pub last_sequence: u64,
    /// Ranges lost in a recovery (recorded by `LogRecovered`).
    pub recovered_gaps: Vec<(u64, u64)>,
    /// One line per problem; empty when the log is sound.
    pub problems: Vec<String>,
}

/// Check the whole log: every event's checksum and sequence, no gap but
/// the recovered ones, stream versions 1, 2, 3… with an index entry each,
/// and the running hash against the durable head.
pub(super) fn verify(
    events: &sled::Tree,
    streams: &sled::Tree,
    acked: Option<Head>,
) -> Result<Report, StoreError> {
    const MAX_PROBLEMS: usize = 20;
    let mut report = Report::default();
    let problem = |report: &mut Report, p: String| {
        if report.problems.len() < MAX_PROBLEMS {
            report.problems.push(p);
        }
    };
    let mut head = Head::default();
    let mut expected = 1;
    let mut versions: std::collections::HashMap<String, u64> = std::collections::HashMap::new();
    for row in events.iter() {
        let (key, value) = row?;
        let sequence = decode_sequence(&key);
        let (event, crc) = match decode_checked(sequence, &value) {
            Ok(x) => x,
            Err(e) => {
                problem(&mut report, e.to_string());
                expected = sequence + 1;
                continue;
            }
        };
        if sequence != expected {
            let covered = report
                .recovered_gaps
                .iter()
                .any(|(from, to)| *from == expected && *to + 1 == sequence);
            let recovers = matches!(&event.payload, Some(Payload::LogRecovered(r)) if r.lost_from == expected && r.lost_to + 1 == sequence);
            if recovers {
                report.recovered_gaps.push((expected, sequence - 1));
            } else if !covered {
                problem(
                    &mut report,
                    format!("events {expected}–{} are missing", sequence - 1),
                );
            }
        }
        expected = sequence + 1;
        let version = versions.entry(event.stream_id.clone()).or_insert(0);
        if event.stream_version != *version + 1 {
            problem(
                &mut report,
                format!(
                    "event {sequence} is version {} of {:?}, after version {}",
                    event.stream_version, event.stream_id, version
                ),
            );
        }
        *version = event.stream_version;
        match streams.get(stream_key(&event.stream_id, event.stream_version))? {
            Some(v) if decode_sequence(&v) == sequence => {}
            _ => problem(
                &mut report,
                format!("event {sequence} is missing from the stream index"),
            ),
        }
        head = head.then(sequence, crc);
        if acked.is_some_and(|a| a.sequence == sequence && a.chain != head.chain) {
            problem(
                &mut report,
                format!("the running hash differs from the durable head at event {sequence}"),
            );
        }
        report.events += 1;
        report.last_sequence = sequence;
    }
    if let Some(a) = acked
        && a.sequence > report.last_sequence
    {
        let missing = format!(
            "events {}–{} were acknowledged but are not in the log",
            report.last_sequence + 1,
            a.sequence
        );
        problem(&mut report, missing);
    }
    Ok(report)
}

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

/// Write imported events into an empty log (in batches) and record the
/// head; returns the head.
pub(super) fn import(
    db: &sled::Db,
    events: &sled::Tree,
    streams: &sled::Tree,
    head_file: &mut HeadFile,
    path: &Path,
) -> Result<Head, StoreError> {
    if !events.is_empty() {
        return Err(StoreError::Io(
            "the log is not empty; import restores into an empty state directory".into(),
        ));
    }
    let mut head = Head::default();
    let mut batch = (sled::Batch::default(), sled::Batch::default(), 0usize);
    read_export(path, |event| {
        let (value, crc) = encode_event(&event);
        batch.0.insert(&event.sequence.to_be_bytes(), value);
        batch.1.insert(
            stream_key(&event.stream_id, event.stream_version),
            &event.sequence.to_be_bytes(),
        );
        batch.2 += 1;
        head = head.then(event.sequence, crc);
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
    head_file.reset(&head)?;
    Ok(head)
}
