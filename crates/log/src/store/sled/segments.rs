//! The log's own copy, beside sled: every committed batch appended to
//! checksummed segment files in the same group commit, before sled sees
//! it. sled is the index the daemon reads (events by sequence, streams by
//! version); the segments are what survives sled losing its data file —
//! `--recover` rebuilds sled from them, and they carry the durable head.
//!
//! Layout: `<db>/segments/<first sequence, 20 digits>.seg`. A file is a run
//! of records, one per group commit:
//!
//! ```text
//! 0..4    magic "TCS1"
//! 4..8    body length (u32 LE)
//! 8..16   first sequence (u64 LE)
//! 16..20  events in the record (u32 LE)
//! 20..24  checksum of the last event (u32 LE)
//! 24..32  running hash after the record (u64 LE; see `head.rs`)
//! 32..36  CRC-32 of bytes 4..32 and the body (u32 LE)
//! 36..40  zero
//! body    per event: length (u32 LE), the stored value (`keys.rs`:
//!         0x01 ‖ CRC-32 ‖ encoded Event), for sequences first, first+1, …
//! ```
//!
//! A record is written with `pwrite` at the end of the last whole one and
//! `fdatasync`ed; a write that fails is cut off again, so a failed append
//! leaves nothing behind. A crash mid-record leaves a torn tail, which the
//! next open cuts off (that batch was never acknowledged). A file holds at
//! least one record; the next record after [`SEGMENT_BYTES`] starts a new
//! file. Files before the last are sealed: never written again.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use super::StoreError;
use super::head::Head;

const MAGIC: &[u8; 4] = b"TCS1";
const HEADER: usize = 40;
/// A segment file is sealed once it is this long.
pub const SEGMENT_BYTES: u64 = 32 * 1024 * 1024;
/// No record is larger (a batch of the committer is far smaller).
const MAX_RECORD: usize = 1 << 30;

/// Where the segments of the log at `db` live.
pub fn dir_of(db: &Path) -> PathBuf {
    db.join("segments")
}

fn file_name(first: u64) -> String {
    format!("{first:020}.seg")
}

fn io(what: &str, path: &Path, e: std::io::Error) -> StoreError {
    StoreError::Io(format!("{what} {}: {e}", path.display()))
}

/// The segment files under `dir`, by first sequence (none: an empty list).
pub fn list(dir: &Path) -> Result<Vec<(u64, PathBuf)>, StoreError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io("cannot list the log's segments in", dir, e)),
    };
    let mut files: Vec<(u64, PathBuf)> = entries
        .filter_map(Result::ok)
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let first = name.strip_suffix(".seg")?.parse().ok()?;
            Some((first, e.path()))
        })
        .collect();
    files.sort();
    Ok(files)
}

/// One whole record, as read.
pub struct Record<'a> {
    pub first: u64,
    pub count: u32,
    /// The head after this record.
    pub head: Head,
    body: &'a [u8],
}

impl<'a> Record<'a> {
    /// The record's events: (sequence, stored value).
    pub fn events(&self) -> impl Iterator<Item = (u64, &'a [u8])> + 'a {
        let mut rest = self.body;
        let first = self.first;
        (0..u64::from(self.count)).map_while(move |i| {
            let len = u32::from_le_bytes(rest.get(..4)?.try_into().ok()?) as usize;
            let value = rest.get(4..4 + len)?;
            rest = &rest[4 + len..];
            Some((first + i, value))
        })
    }
}

fn u32_at(b: &[u8], i: usize) -> u32 {
    let mut x = [0u8; 4];
    x.copy_from_slice(&b[i..i + 4]);
    u32::from_le_bytes(x)
}

fn u64_at(b: &[u8], i: usize) -> u64 {
    let mut x = [0u8; 8];
    x.copy_from_slice(&b[i..i + 8]);
    u64::from_le_bytes(x)
}

/// The record at the start of `bytes`, with its length; `Err` says why it
/// is not whole.
fn parse(bytes: &[u8]) -> Result<(Record<'_>, usize), String> {
    if bytes.len() < HEADER {
        return Err(format!(
            "{} bytes where a record header needs {HEADER}",
            bytes.len()
        ));
    }
    if &bytes[..4] != MAGIC {
        return Err("no record header".into());
    }
    let len = u32_at(bytes, 4) as usize;
    if len > MAX_RECORD || bytes.len() < HEADER + len {
        return Err("the record is cut short".into());
    }
    let mut crc = crc32fast::Hasher::new();
    crc.update(&bytes[4..32]);
    crc.update(&bytes[HEADER..HEADER + len]);
    if crc.finalize() != u32_at(bytes, 32) {
        return Err("the record fails its checksum".into());
    }
    let count = u32_at(bytes, 16);
    let record = Record {
        first: u64_at(bytes, 8),
        count,
        head: Head {
            sequence: u64_at(bytes, 8) + u64::from(count).saturating_sub(1),
            crc: u32_at(bytes, 20),
            chain: u64_at(bytes, 24),
        },
        body: &bytes[HEADER..HEADER + len],
    };
    if count == 0 || record.events().count() != count as usize {
        return Err("the record's events do not add up".into());
    }
    Ok((record, HEADER + len))
}

/// What a scan of one file found: where its whole records end, the head
/// after the last, why a record was not whole, and whether that was a torn
/// tail (nothing whole after it: the last write, cut by a crash) or damage
/// (whole records follow: the file was changed after it was written).
struct Scanned {
    end: u64,
    last: Option<Head>,
    /// The first sequence of the last whole record.
    last_first: u64,
    stopped: Option<String>,
    damaged: bool,
}

/// The next offset after `from` where a whole record starts, if any.
fn next_whole(bytes: &[u8], from: usize) -> Option<usize> {
    let mut at = from;
    while let Some(i) = bytes.get(at..)?.windows(4).position(|w| w == MAGIC) {
        let start = at + i;
        if parse(&bytes[start..]).is_ok() {
            return Some(start);
        }
        at = start + 1;
    }
    None
}

/// Read `path`'s records in order, calling `each` for every one up to the
/// first that is not whole (`stop_at_damage`), or for every whole one.
fn scan_file(
    path: &Path,
    stop_at_damage: bool,
    mut each: impl FnMut(&Record<'_>) -> Result<(), StoreError>,
) -> Result<Scanned, StoreError> {
    let bytes = std::fs::read(path).map_err(|e| io("cannot read the log segment", path, e))?;
    let mut at = 0usize;
    let mut last: Option<Head> = None;
    let mut last_first = 0;
    let mut stopped = None;
    let mut damaged = false;
    while at < bytes.len() {
        let why = match parse(&bytes[at..]) {
            Ok((record, len)) if last.is_none_or(|h| record.first > h.sequence) => {
                if !(damaged && stop_at_damage) {
                    each(&record)?;
                }
                last = Some(record.head);
                last_first = record.first;
                at += len;
                continue;
            }
            Ok((record, _)) => format!(
                "a record at byte {at} starts at event {}, not after {}",
                record.first,
                last.map_or(0, |h| h.sequence)
            ),
            Err(why) => format!("byte {at}: {why}"),
        };
        match next_whole(&bytes, at + 1) {
            Some(next) => {
                stopped.get_or_insert(why);
                damaged = true;
                at = next;
            }
            None => {
                stopped.get_or_insert(why);
                break;
            }
        }
    }
    Ok(Scanned {
        end: if damaged {
            bytes.len() as u64
        } else {
            at as u64
        },
        last,
        last_first,
        stopped,
        damaged,
    })
}

/// The segment files, open for appending.
pub struct SegmentLog {
    dir: PathBuf,
    /// The last file and its length (the end of its last whole record);
    /// `None` before the first record (a new log) or after sealing one.
    current: Option<(File, u64)>,
    head: Head,
    /// The first sequence of the last record (0: none yet).
    last_first: u64,
}

impl SegmentLog {
    /// Open the segments of the log at `db`: the head they carry (`None`:
    /// there are none — a new log, or one written before them). A torn
    /// last record is cut off (it was never acknowledged).
    pub fn open(db: &Path) -> Result<(Self, Option<Head>), StoreError> {
        let dir = dir_of(db);
        let mut files = list(&dir)?;
        while let Some((_, path)) = files.last().cloned() {
            let scanned = scan_file(&path, false, |_| Ok(()))?;
            match &scanned.stopped {
                Some(why) if scanned.damaged => {
                    tracing::error!(file = %path.display(), %why, "a record of the log's segment copy is damaged; `tinycode admin verify` names it");
                }
                Some(why) => {
                    tracing::warn!(file = %path.display(), %why, "the log segment's last record is torn; cut off (it was never acknowledged)");
                }
                None => {}
            }
            let Some(head) = scanned.last else {
                // Not one whole record: a file the crash caught as it was
                // being started. Nothing acknowledged is in it.
                std::fs::remove_file(&path).map_err(|e| io("cannot remove", &path, e))?;
                files.pop();
                continue;
            };
            let file = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open(&path)
                .map_err(|e| io("cannot open the log segment", &path, e))?;
            if scanned.stopped.is_some() && !scanned.damaged {
                file.set_len(scanned.end)
                    .and_then(|()| file.sync_all())
                    .map_err(|e| io("cannot cut the torn tail of", &path, e))?;
            }
            let current = (scanned.end < SEGMENT_BYTES).then_some((file, scanned.end));
            return Ok((
                Self {
                    dir,
                    current,
                    head,
                    last_first: scanned.last_first,
                },
                Some(head),
            ));
        }
        Ok((
            Self {
                dir,
                current: None,
                head: Head::default(),
                last_first: 0,
            },
            None,
        ))
    }

    /// The first sequence of the last record (1: the copy holds one, the
    /// log's first group commit).
    pub fn last_record_first(&self) -> u64 {
        self.last_first
    }

    /// Continue from `head` (a log whose segments were just written).
    pub fn set_head(&mut self, head: Head) {
        self.head = head;
    }

    /// Append one record of `events` — (sequence, stored value, checksum),
    /// consecutive from the head's next sequence (or after a recorded
    /// gap) — durably. On failure nothing of it remains.
    pub fn append(&mut self, events: &[(u64, &[u8], u32)]) -> Result<Head, StoreError> {
        let Some(&(first, _, _)) = events.first() else {
            return Ok(self.head);
        };
        let head = events
            .iter()
            .fold(self.head, |h, (seq, _, crc)| h.then(*seq, *crc));
        let body_len: usize = events.iter().map(|(_, v, _)| 4 + v.len()).sum();
        let mut buf = Vec::with_capacity(HEADER + body_len);
        buf.extend_from_slice(MAGIC);
        buf.extend_from_slice(&(body_len as u32).to_le_bytes());
        buf.extend_from_slice(&first.to_le_bytes());
        buf.extend_from_slice(&(events.len() as u32).to_le_bytes());
        buf.extend_from_slice(&head.crc.to_le_bytes());
        buf.extend_from_slice(&head.chain.to_le_bytes());
        buf.extend_from_slice(&[0u8; 8]);
        for (_, value, _) in events {
            buf.extend_from_slice(&(value.len() as u32).to_le_bytes());
            buf.extend_from_slice(value);
        }
        let mut crc = crc32fast::Hasher::new();
        crc.update(&buf[4..32]);
        crc.update(&buf[HEADER..]);
        let sum = crc.finalize();
        buf[32..36].copy_from_slice(&sum.to_le_bytes());
        let (file, len) = match self.current.take() {
            Some(open) => open,
            None => (self.start_file(first)?, 0),
        };
        let written = file.write_all_at(&buf, len).and_then(|()| file.sync_data());
        if let Err(e) = written {
            // Leave no partial record: the next append writes here again.
            let _ = file.set_len(len).and_then(|()| file.sync_data());
            self.current = Some((file, len));
            return Err(StoreError::Io(format!(
                "cannot write the log's segment copy in {}: {e}",
                self.dir.display()
            )));
        }
        let end = len + buf.len() as u64;
        self.current = (end < SEGMENT_BYTES).then_some((file, end));
        self.head = head;
        self.last_first = first;
        Ok(head)
    }

    /// A new file for records from `first` on (its name made durable).
    fn start_file(&self, first: u64) -> Result<File, StoreError> {
        std::fs::create_dir_all(&self.dir)
            .map_err(|e| io("cannot create the log's segment folder", &self.dir, e))?;
        let path = self.dir.join(file_name(first));
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .map_err(|e| io("cannot create the log segment", &path, e))?;
        crate::files::sync_dir(&self.dir)
            .map_err(|e| io("cannot make the new log segment durable in", &self.dir, e))?;
        Ok(file)
    }
}

/// Every event the segments of `db` hold from sequence `from` on, in order:
/// `each(sequence, stored value)`. Returns the head after the last whole
/// record read, and why reading stopped early (a damaged record: what
/// follows it cannot be trusted).
pub fn for_each(
    db: &Path,
    from: u64,
    mut each: impl FnMut(u64, &[u8]) -> Result<(), StoreError>,
) -> Result<(Head, Option<String>), StoreError> {
    let files = list(&dir_of(db))?;
    let mut head = Head::default();
    for (i, (first, path)) in files.iter().enumerate() {
        // A whole file below `from` is skipped unread.
        if files.get(i + 1).is_some_and(|(next, _)| *next <= from) {
            continue;
        }
        let mut expect_first = Some(*first);
        let scanned = scan_file(path, true, |record| {
            if expect_first.take().is_some_and(|f| f != record.first) {
                return Err(StoreError::Io(format!(
                    "the log segment {} starts at event {}, not {first}",
                    path.display(),
                    record.first
                )));
            }
            for (seq, value) in record.events() {
                if seq >= from {
                    each(seq, value)?;
                }
            }
            Ok(())
        })?;
        if let Some(h) = scanned.last {
            head = h;
        }
        if scanned.damaged {
            let why = scanned.stopped.unwrap_or_default();
            return Ok((head, Some(format!("{}: {why}", path.display()))));
        }
    }
    Ok((head, None))
}

/// Write fresh segments for `events` (sequence, stored value, checksum, in
/// order) into a new folder that replaces `db`'s segments whole; returns
/// the head. For a log that had none, and for `--recover` and `import`.
pub fn rebuild(
    db: &Path,
    events: impl Iterator<Item = Result<(u64, Vec<u8>, u32), StoreError>>,
) -> Result<Head, StoreError> {
    let dir = dir_of(db);
    let temp = db.join("segments.new");
    if temp.exists() {
        std::fs::remove_dir_all(&temp).map_err(|e| io("cannot clear", &temp, e))?;
    }
    let mut log = SegmentLog {
        dir: temp.clone(),
        current: None,
        head: Head::default(),
        last_first: 0,
    };
    let mut batch: Vec<(u64, Vec<u8>, u32)> = Vec::new();
    let mut bytes = 0usize;
    let flush = |log: &mut SegmentLog, batch: &mut Vec<(u64, Vec<u8>, u32)>| {
        let rows: Vec<(u64, &[u8], u32)> = batch
            .iter()
            .map(|(s, v, c)| (*s, v.as_slice(), *c))
            .collect();
        let result = log.append(&rows);
        batch.clear();
        result
    };
    for event in events {
        let (seq, value, crc) = event?;
        // A gap (a recovered range) starts a record of its own.
        if batch.last().is_some_and(|(last, _, _)| *last + 1 != seq) {
            flush(&mut log, &mut batch)?;
            bytes = 0;
        }
        bytes += value.len();
        batch.push((seq, value, crc));
        if bytes >= 1 << 20 {
            flush(&mut log, &mut batch)?;
            bytes = 0;
        }
    }
    flush(&mut log, &mut batch)?;
    std::fs::create_dir_all(&temp).map_err(|e| io("cannot create", &temp, e))?;
    if dir.exists() {
        let old = db.join("segments.old");
        let _ = std::fs::remove_dir_all(&old);
        std::fs::rename(&dir, &old).map_err(|e| io("cannot set aside", &dir, e))?;
        std::fs::rename(&temp, &dir).map_err(|e| io("cannot put in place", &dir, e))?;
        let _ = std::fs::remove_dir_all(&old);
    } else {
        std::fs::rename(&temp, &dir).map_err(|e| io("cannot put in place", &dir, e))?;
    }
    crate::files::sync_dir(db).map_err(|e| io("cannot make durable", db, e))?;
    Ok(log.head)
}

/// Check every segment of `db`: each record whole, files and records in
/// sequence, each event's own checksum. Returns the head and one line per
/// problem.
pub fn verify(db: &Path) -> Result<(Head, Vec<String>), StoreError> {
    let mut problems = Vec::new();
    let mut last = 0u64;
    let mut head = Head::default();
    let (end, stopped) = for_each(db, 1, |seq, value| {
        match super::keys::decode_checked(seq, value) {
            Ok((_, crc)) => head = head.then(seq, crc),
            Err(e) => problems.push(format!("in the log's segment copy: {e}")),
        }
        last = seq;
        Ok(())
    })?;
    if let Some(why) = stopped {
        problems.push(format!(
            "the log's segment copy is damaged after event {last} ({why}); `admin verify` of the rest is unsure"
        ));
    }
    if end.chain != head.chain {
        problems.push(format!(
            "the log's segment copy's running hash differs from its events at event {}",
            end.sequence
        ));
    }
    Ok((end, problems))
}

#[cfg(test)]
#[path = "segments_tests.rs"]
mod tests;
