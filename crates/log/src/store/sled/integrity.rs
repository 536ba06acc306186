//! What the log knows about its own soundness: the start-up check against
//! the durable head, recovery on request, and `verify` of the whole log.
//! The portable export file is in `export.rs`.

use std::path::Path;

use tinycode_shared::proto::event::Payload;
use tinycode_shared::proto::{Event, LogRecovered};

use super::head::{self, Head};
use super::keys::{decode_checked, decode_sequence, encode_event, stream_key};
use super::segments::{self, SegmentLog};
use super::{StoreError, stream_version_in};

/// The log as a start finds it.
pub(super) struct Opened {
    /// Sequences up to this one are taken (the next append gets the next).
    pub last_sequence: u64,
    /// Set when this start recovered a damaged log.
    pub recovered: Option<LogRecovered>,
    /// The segment copy, open for appending; its head is the log's.
    pub segments: SegmentLog,
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

/// Every readable event of sled from `from` on, as the segments store them.
pub(super) fn sled_rows(
    events: &sled::Tree,
    from: u64,
) -> impl Iterator<Item = Result<(u64, Vec<u8>, u32), StoreError>> + '_ {
    events.range(from.to_be_bytes()..).map(|row| {
        let (key, value) = row?;
        let sequence = decode_sequence(&key);
        let (_, crc) = decode_checked(sequence, &value)?;
        Ok((sequence, value.to_vec(), crc))
    })
}

/// Check the log against its durable head — the segment copy's — at
/// start. A damaged log is refused, or recovered when `recover` is set:
/// what sled lost comes back from the copy, and only what neither holds is
/// recorded as lost.
pub(super) fn open(
    path: &Path,
    db: &sled::Db,
    events: &sled::Tree,
    streams: &sled::Tree,
    recover: bool,
) -> Result<Opened, StoreError> {
    let (mut segments, acked) = SegmentLog::open(path)?;
    let (readable, highest) = readable_tail(events).map_err(|e| StoreError::Unreadable {
        acknowledged: acked.map_or(0, |h| h.sequence),
        reason: format!("sled cannot read its events ({e})"),
    })?;
    let Some(acked) = acked else {
        return adopt(
            path, db, events, streams, segments, recover, readable, highest,
        );
    };
    let intact = is_intact(events, acked, readable)?;
    if intact && readable == highest {
        if readable > acked.sequence {
            copy_behind(events, &mut segments, acked.sequence, readable)?;
        }
        return Ok(Opened {
            last_sequence: readable.max(acked.sequence),
            recovered: None,
            segments,
        });
    }
    // The copy is made durable first and sled is flushed later
    // (`commit.rs`): a crash leaves sled a prefix of the log, without the
    // copy's last records. They are rolled forward into sled from the copy.
    // A sled that reads nothing is not a crash's doing (the first batch of
    // a log is flushed at once), unless the copy holds only that batch (a
    // kill -9 before its flush): otherwise its file was lost or damaged.
    if !intact
        && readable == highest
        && (readable > 0 || segments.last_record_first() == 1)
        && readable < acked.sequence
        && roll_forward_tail(path, db, events, streams, readable, acked)?
    {
        return Ok(Opened {
            last_sequence: acked.sequence,
            recovered: None,
            segments,
        });
    }
    let lost_from = if intact {
        acked.sequence + 1
    } else {
        (readable + 1).min(acked.sequence)
    };
    if !intact && !recover {
        return Err(StoreError::Behind {
            lost_from,
            lost_to: acked.sequence,
            readable: lost_from - 1,
        });
    }
    if intact {
        // Unreadable keys beyond everything acknowledged: a write the
        // crash cut short. Dropped (never acknowledged).
        drop_from(events, streams, lost_from)?;
        db.flush()?;
        return Ok(Opened {
            last_sequence: acked.sequence,
            recovered: None,
            segments,
        });
    }
    restore(path, db, events, streams, segments, lost_from, acked)
}

/// Does sled hold every event up to the durable head `acked`, the one at
/// the head with the head's checksum? (`readable`: the last event from
/// the end that reads whole.)
fn is_intact(events: &sled::Tree, acked: Head, readable: u64) -> Result<bool, StoreError> {
    let at_head = match events.get(acked.sequence.to_be_bytes())? {
        Some(v) => decode_checked(acked.sequence, &v).ok().map(|(_, crc)| crc),
        None => None,
    };
    Ok(acked.sequence == 0 || (at_head == Some(acked.crc) && readable >= acked.sequence))
}

/// sled holds events the copy does not (a copy cut short by hand), from
/// `acked + 1` to `readable`: they are durable; the copy takes them too.
fn copy_behind(
    events: &sled::Tree,
    segments: &mut SegmentLog,
    acked: u64,
    readable: u64,
) -> Result<(), StoreError> {
    tracing::warn!(
        from = acked + 1,
        to = readable,
        "the log's segment copy was behind sled; it takes the missing events from sled"
    );
    for row in sled_rows(events, acked + 1) {
        let (seq, value, crc) = row?;
        segments.append(&[(seq, value.as_slice(), crc)])?;
    }
    Ok(())
}

/// Write the copy's events after `readable` into sled; `true` when that
/// brought sled up to the durable head (flushed). `false`: the copy cannot
/// give them all, one after another (damaged), and nothing was written.
fn roll_forward_tail(
    path: &Path,
    db: &sled::Db,
    events: &sled::Tree,
    streams: &sled::Tree,
    readable: u64,
    acked: Head,
) -> Result<bool, StoreError> {
    let Some(rows) = copy_rows(path, readable + 1, acked.sequence)? else {
        return Ok(false);
    };
    // Both trees in one transaction a chunk: sled's background flush may
    // write any moment, and an event must never be there without its
    // stream-index entry (a crash between chunks leaves a shorter prefix,
    // which the next start rolls forward again).
    for chunk in rows.chunks(4096) {
        super::commit::insert_events(events, streams, || {
            chunk
                .iter()
                .map(|(seq, value, skey)| (&seq[..], value.as_slice(), skey.as_slice()))
        })?;
    }
    db.flush()?;
    tracing::info!(
        from = readable + 1,
        to = acked.sequence,
        "sled had not written the log's last events when the daemon stopped; written to sled from the log's segment copy"
    );
    Ok(true)
}

/// One event for sled: sequence key, stored value, stream-index key.
type CopyRow = ([u8; 8], Vec<u8>, Vec<u8>);

/// The copy's events `from..=to`, or `None` unless it gives every one of
/// them whole and in order.
fn copy_rows(path: &Path, from: u64, to: u64) -> Result<Option<Vec<CopyRow>>, StoreError> {
    let mut rows = Vec::new();
    let mut next = from;
    let mut broken = None;
    let (_, stopped) = segments::for_each(path, from, |sequence, value| {
        if broken.is_some() {
            return Ok(());
        }
        if sequence != next || sequence > to {
            broken = Some(format!(
                "the copy gives event {sequence} where {next} belongs"
            ));
            return Ok(());
        }
        let (event, _) = decode_checked(sequence, value)?;
        rows.push((
            sequence.to_be_bytes(),
            value.to_vec(),
            stream_key(&event.stream_id, event.stream_version),
        ));
        next += 1;
        Ok(())
    })?;
    if let Some(why) = stopped.or(broken) {
        tracing::warn!(%why, "the log's segment copy cannot give the events sled lacks");
        return Ok(None);
    }
    Ok((next == to + 1).then_some(rows))
}

/// Remove sled's events from `from` on and their stream-index entries.
fn drop_from(events: &sled::Tree, streams: &sled::Tree, from: u64) -> Result<(), StoreError> {
    let mut batch_events = sled::Batch::default();
    for row in events.range(from.to_be_bytes()..) {
        batch_events.remove(row?.0);
    }
    let mut batch_streams = sled::Batch::default();
    for row in streams.iter() {
        let (key, value) = row?;
        if decode_sequence(&value) >= from {
            batch_streams.remove(key);
        }
    }
    events.apply_batch(batch_events)?;
    streams.apply_batch(batch_streams)?;
    Ok(())
}

/// Clear every read model: they rebuild from the log.
fn clear_read_models(db: &sled::Db) -> Result<(), StoreError> {
    for name in db.tree_names() {
        if name.starts_with(b"proj-") {
            db.drop_tree(&name)?;
        }
    }
    Ok(())
}

/// `--recover` on a log whose sled lost events from `lost_from` on: they
/// are written again from the segment copy; what the copy cannot give
/// either (a damaged segment) is recorded as lost (`LogRecovered`).
fn restore(
    path: &Path,
    db: &sled::Db,
    events: &sled::Tree,
    streams: &sled::Tree,
    mut segments: SegmentLog,
    lost_from: u64,
    acked: Head,
) -> Result<Opened, StoreError> {
    drop_from(events, streams, lost_from)?;
    let mut batch = (sled::Batch::default(), sled::Batch::default(), 0usize);
    let mut restored_to = lost_from - 1;
    let (_, stopped) = segments::for_each(path, lost_from, |sequence, value| {
        let (event, _) = decode_checked(sequence, value)?;
        batch.0.insert(&sequence.to_be_bytes(), value);
        batch.1.insert(
            stream_key(&event.stream_id, event.stream_version),
            &sequence.to_be_bytes(),
        );
        batch.2 += 1;
        restored_to = sequence;
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
    clear_read_models(db)?;
    db.flush()?;
    if restored_to >= acked.sequence {
        tracing::warn!(
            from = lost_from,
            to = acked.sequence,
            "recovered: sled had lost these events; they were restored from the log's segment copy (nothing acknowledged is lost)"
        );
        return Ok(Opened {
            last_sequence: acked.sequence,
            recovered: None,
            segments,
        });
    }
    let lost = LogRecovered {
        lost_from: restored_to + 1,
        lost_to: acked.sequence,
        readable: restored_to,
    };
    tracing::warn!(
        lost_from = lost.lost_from,
        lost_to = lost.lost_to,
        why = stopped.as_deref().unwrap_or("the copy ends early"),
        "recovering a damaged log: neither sled nor its segment copy holds these events; the lost range is recorded and never reused"
    );
    // The copy is rebuilt from what sled now holds, then the loss is
    // recorded in both.
    let head = segments::rebuild(path, sled_rows(events, 1))?;
    segments = SegmentLog::open(path)?.0;
    segments.set_head(head);
    record_loss(events, streams, &mut segments, lost)?;
    db.flush()?;
    Ok(Opened {
        last_sequence: lost.lost_to + 1,
        recovered: Some(lost),
        segments,
    })
}

/// Append `LogRecovered` at `lost_to + 1` to sled and to the copy.
fn record_loss(
    events: &sled::Tree,
    streams: &sled::Tree,
    segments: &mut SegmentLog,
    lost: LogRecovered,
) -> Result<(), StoreError> {
    let sequence = lost.lost_to + 1;
    let event = Event {
        sequence,
        stream_id: super::super::DAEMON_STREAM.into(),
        stream_version: stream_version_in(streams, super::super::DAEMON_STREAM)? + 1,
        recorded_at: Some(prost_types::Timestamp::from(std::time::SystemTime::now())),
        payload: Some(Payload::LogRecovered(lost)),
    };
    let (value, crc) = encode_event(&event);
    segments.append(&[(sequence, value.as_slice(), crc)])?;
    events.insert(sequence.to_be_bytes(), value)?;
    streams.insert(
        stream_key(&event.stream_id, event.stream_version),
        &sequence.to_be_bytes(),
    )?;
    Ok(())
}

/// A log without a segment copy: a new log, or one written before the copy
/// existed (its head in `tinycode.head`), which gets its copy now. A
/// non-empty log with neither cannot be proved whole and is refused
/// unless told to start on it as it is.
#[allow(clippy::too_many_arguments)]
fn adopt(
    path: &Path,
    db: &sled::Db,
    events: &sled::Tree,
    streams: &sled::Tree,
    mut segments: SegmentLog,
    recover: bool,
    readable: u64,
    highest: u64,
) -> Result<Opened, StoreError> {
    let head_path = head::path_of(path);
    let legacy = head::peek(&head_path);
    if highest == 0 {
        let _ = std::fs::remove_file(&head_path);
        return Ok(Opened {
            last_sequence: 0,
            recovered: None,
            segments,
        });
    }
    let mut recovered = None;
    match legacy {
        Some(acked) => {
            let intact = is_intact(events, acked, readable)?;
            if !(intact && readable == highest) {
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
                drop_from(events, streams, lost.lost_from)?;
                clear_read_models(db)?;
                recovered = Some(lost);
            }
        }
        None if !recover => return Err(StoreError::NoHead { events: readable }),
        None => tracing::warn!(
            events = readable,
            "started on a log with no durable head, as it is: a new head is recorded at its last readable event"
        ),
    }
    let head = segments::rebuild(path, sled_rows(events, 1))?;
    segments = SegmentLog::open(path)?.0;
    segments.set_head(head);
    let mut last_sequence = head.sequence;
    if let Some(lost) = recovered {
        record_loss(events, streams, &mut segments, lost)?;
        last_sequence = lost.lost_to + 1;
    }
    db.flush()?;
    let _ = std::fs::remove_file(&head_path);
    tracing::info!(
        events = head.sequence,
        "the log now keeps its segment copy beside sled (it carries the durable head)"
    );
    Ok(Opened {
        last_sequence,
        recovered,
        segments,
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
/// and the running hash against the durable head. Acknowledged events
/// sled lacks at its end are a problem unless the segment copy is whole
/// (`copy_whole`) and sled reads some (a start refuses a sled that reads
/// none): sled is flushed later than the copy, and a start writes them into
/// sled from the copy.
pub(super) fn verify(
    events: &sled::Tree,
    streams: &sled::Tree,
    acked: Option<Head>,
    copy_whole: bool,
) -> Result<Report, StoreError> {
    let mut check = Verifier {
        streams,
        acked,
        report: Report::default(),
        head: Head::default(),
        expected: 1,
        versions: std::collections::HashMap::new(),
    };
    for row in events.iter() {
        let (key, value) = row?;
        check.event(decode_sequence(&key), &value)?;
    }
    if let Some(a) = acked
        && a.sequence > check.report.last_sequence
        && !(copy_whole && check.report.last_sequence > 0)
    {
        let missing = format!(
            "events {}–{} were acknowledged but are not in the log",
            check.report.last_sequence + 1,
            a.sequence
        );
        check.problem(missing);
    }
    Ok(check.report)
}

/// `verify` going through the events in order.
struct Verifier<'a> {
    streams: &'a sled::Tree,
    acked: Option<Head>,
    report: Report,
    /// The running hash up to the last event checked.
    head: Head,
    /// The sequence the next event should have.
    expected: u64,
    /// Each stream's last version met.
    versions: std::collections::HashMap<String, u64>,
}

impl Verifier<'_> {
    fn problem(&mut self, p: String) {
        const MAX_PROBLEMS: usize = 20;
        if self.report.problems.len() < MAX_PROBLEMS {
            self.report.problems.push(p);
        }
    }

    /// Check the event stored at `sequence`.
    fn event(&mut self, sequence: u64, value: &[u8]) -> Result<(), StoreError> {
        let (event, crc) = match decode_checked(sequence, value) {
            Ok(x) => x,
            Err(e) => {
                self.problem(e.to_string());
                self.expected = sequence + 1;
                return Ok(());
            }
        };
        if sequence != self.expected {
            self.gap(sequence, &event);
        }
        self.expected = sequence + 1;
        let version = self.versions.entry(event.stream_id.clone()).or_insert(0);
        let after = *version;
        *version = event.stream_version;
        if event.stream_version != after + 1 {
            self.problem(format!(
                "event {sequence} is version {} of {:?}, after version {}",
                event.stream_version, event.stream_id, after
            ));
        }
        match self
            .streams
            .get(stream_key(&event.stream_id, event.stream_version))?
        {
            Some(v) if decode_sequence(&v) == sequence => {}
            _ => self.problem(format!("event {sequence} is missing from the stream index")),
        }
        self.head = self.head.then(sequence, crc);
        if self
            .acked
            .is_some_and(|a| a.sequence == sequence && a.chain != self.head.chain)
        {
            self.problem(format!(
                "the running hash differs from the durable head at event {sequence}"
            ));
        }
        self.report.events += 1;
        self.report.last_sequence = sequence;
        Ok(())
    }

    /// Events before `sequence` are missing: a problem, unless a recovery
    /// recorded them lost (`event` may be that record).
    fn gap(&mut self, sequence: u64, event: &Event) {
        let expected = self.expected;
        let covered = self
            .report
            .recovered_gaps
            .iter()
            .any(|(from, to)| *from == expected && *to + 1 == sequence);
        let recovers = matches!(&event.payload, Some(Payload::LogRecovered(r)) if r.lost_from == expected && r.lost_to + 1 == sequence);
        if recovers {
            self.report.recovered_gaps.push((expected, sequence - 1));
        } else if !covered {
            self.problem(format!("events {expected}–{} are missing", sequence - 1));
        }
    }
}
