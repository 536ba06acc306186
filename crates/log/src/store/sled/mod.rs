//! The embedded log on sled, the default backend.
//!
//! - Tree `events`: global sequence (u64 BE) → encoded `tinycode.v1.Event`.
//! - Tree `streams`: `stream-id ‖ 0x00 ‖ version (u64 BE)` → global sequence.
//! - Beside sled's data file, `<db>/tinycode.head`: the durable head
//!   (`head.rs`).
//!
//! Every stored event carries a CRC-32 of its encoding (`keys.rs`); a start
//! checks the log against its durable head and refuses a log that lost
//! acknowledged events, unless told to recover (`integrity.rs`).
//!
//! An append is one record of the log's segment copy, `fdatasync`ed, then
//! one sled transaction over both trees; one committer thread assigns
//! sequences, so the global sequence has no gap; an append returns only
//! after the copy's `fdatasync` covers it, and concurrent appends share the
//! record, the `fdatasync` and the transaction (group commit, see
//! [`commit`]). The committer flushes sled at most every 500 ms, after
//! its free-space check; a start writes what sled lacks at its end from
//! the copy.
//!
//! Projection trees live in the same sled database (sled's flush covers
//! them with the log; a crash leaves both a prefix of what was written).

mod commit;
mod export;
mod head;
mod integrity;
pub(crate) mod keys;
mod segments;

use std::path::Path;
use std::sync::{Arc, Mutex};

use futures::future::{BoxFuture, FutureExt, ready};
use tinycode_shared::proto::{Event, LogRecovered, event::Payload};
use tokio::sync::{broadcast, oneshot, watch};

use super::backend::Backend;
use super::{ExpectedVersion, StoreError, StoreOptions, StoreStats};
use commit::{Committer, Files, Request};
pub(crate) use export::read_export;
pub use integrity::Report;
use keys::{decode_sequence, stream_key, stream_prefix};

pub(crate) struct SledLog {
    db: sled::Db,
    events: sled::Tree,
    streams: sled::Tree,
    committer: Arc<Committer>,
    live: broadcast::Sender<Arc<Event>>,
    stop: watch::Sender<bool>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    recovered: Option<LogRecovered>,
    space: Arc<super::space::DiskSpace>,
}

impl SledLog {
    /// Open (or create) the log at `path`; also returns the database, where
    /// the projections keep their trees.
    pub(crate) fn open(path: &Path, options: StoreOptions) -> Result<(Self, sled::Db), StoreError> {
        let (db, events, streams, opened) = match open_checked(path, options) {
            Ok(open) => open,
            Err(e)
                if options.recover
                    && rebuildable(&e)
                    && !segments::list(&segments::dir_of(path))?.is_empty() =>
            {
                // sled cannot read its own files: they are kept aside and
                // sled is rebuilt from the log's segment copy.
                let aside = set_aside(path)?;
                tracing::warn!(error = %e, aside = %aside.display(), "sled cannot read its files; they are kept aside and the log is rebuilt from its segment copy");
                open_checked(path, options)?
            }
            Err(e) => return Err(e),
        };
        let (live, _) = broadcast::channel(options.live_buffer.max(1));
        let space = Arc::new(super::space::DiskSpace::new(path, options.reserve_bytes));
        let committer = Arc::new(Committer::new(opened.last_sequence, live.clone()));
        // sled 0.34 keeps its log in `<path>/db`; a new log's first batch
        // is made durable there too (`commit.rs`).
        let data_file = (opened.last_sequence == 0)
            .then(|| std::fs::File::open(path.join("db")))
            .transpose()
            .inspect_err(|e| tracing::warn!(error = %e, "cannot open sled's data file for fdatasync; relying on sled's flush alone"))
            .ok()
            .flatten();
        let thread = {
            let committer = Arc::clone(&committer);
            let files = Files {
                data_file,
                db: db.clone(),
                events: events.clone(),
                streams: streams.clone(),
                segments: opened.segments,
                space: Arc::clone(&space),
            };
            std::thread::Builder::new()
                .name("tinycoded-commit".into())
                .spawn(move || committer.run(files))
                .map_err(|e| StoreError::Io(format!("cannot start the committer thread: {e}")))?
        };
        let (stop, _) = watch::channel(false);
        let log = Self {
            db: db.clone(),
            events,
            streams,
            committer,
            live,
            stop,
            thread: Mutex::new(Some(thread)),
            recovered: opened.recovered,
            space,
        };
        Ok((log, db))
    }

    /// Check the whole log (checksums, sequences, stream versions, the
    /// running hash against the durable head). Call it on a log nobody
    /// writes to.
    pub(crate) fn verify(path: &Path) -> Result<Report, StoreError> {
        let db = sled::Config::new()
            .path(path)
            .open()
            .map_err(|e| unreadable(path, e))?;
        let (head, copy_problems) = segments::verify(path)?;
        // A whole copy gives the events sled had not written when the
        // daemon stopped (the next start writes them into sled).
        let copy_whole = head.sequence > 0 && copy_problems.is_empty();
        let head = (head.sequence > 0)
            .then_some(head)
            .or_else(|| head::peek(&head::path_of(path)));
        let (events, streams) = (db.open_tree("events")?, db.open_tree("streams")?);
        let mut report = integrity::verify(&events, &streams, head, copy_whole)?;
        report.problems.extend(copy_problems);
        if head.is_none() && report.events > 0 {
            report.problems.push(
                "the log has no durable head (`db/segments/` is missing): nothing proves it whole"
                    .into(),
            );
        }
        Ok(report)
    }

    /// Write the log to `file` (see `export::export` for the format);
    /// returns the number of events.
    pub(crate) fn export(path: &Path, file: &Path) -> Result<u64, StoreError> {
        let db = sled::Config::new()
            .path(path)
            .open()
            .map_err(|e| unreadable(path, e))?;
        export::export(&db.open_tree("events")?, file)
    }

    /// Restore an export into an empty log at `path`; returns the number
    /// of events.
    pub(crate) fn import(path: &Path, file: &Path) -> Result<u64, StoreError> {
        // A bulk load: sled's throughput mode (runtime only, not stored)
        // measured steadier and faster than its default (docs/BENCHMARKS.md).
        let db = sled::Config::new()
            .path(path)
            .flush_every_ms(None)
            .mode(sled::Mode::HighThroughput)
            .open()?;
        let (events, streams) = (db.open_tree("events")?, db.open_tree("streams")?);
        let head = export::import(path, &db, &events, &streams, file)?;
        Ok(head.sequence)
    }

    fn read_stream_now(
        &self,
        stream: &str,
        from_version: u64,
        max: usize,
    ) -> Result<Vec<Event>, StoreError> {
        let durable = self.last_sequence();
        let prefix = stream_prefix(stream);
        let mut out = Vec::new();
        for row in self
            .streams
            .range(stream_key(stream, from_version.max(1))..)
            .take(max)
        {
            let (key, seq) = row?;
            if !key.starts_with(&prefix) {
                break;
            }
            let sequence = decode_sequence(&seq);
            if sequence > durable {
                break;
            }
            if let Some(value) = self.events.get(sequence.to_be_bytes())? {
                out.push(keys::decode_event(sequence, &value)?);
            }
        }
        Ok(out)
    }

    fn read_range_now(&self, from: u64, to: u64, max: usize) -> Result<Vec<Event>, StoreError> {
        let to = to.min(self.last_sequence());
        if from > to {
            return Ok(Vec::new());
        }
        self.events
            .range(from.to_be_bytes()..=to.to_be_bytes())
            .take(max)
            .map(|row| {
                let (key, value) = row?;
                keys::decode_event(decode_sequence(&key), &value)
            })
            .collect()
    }
}

impl Backend for SledLog {
    fn name(&self) -> &'static str {
        "sled"
    }

    fn append(
        &self,
        stream: String,
        expected: ExpectedVersion,
        payloads: Vec<Payload>,
    ) -> BoxFuture<'_, Result<Vec<Arc<Event>>, StoreError>> {
        let (reply, answer) = oneshot::channel();
        self.committer.submit(Request {
            stream,
            expected,
            payloads,
            reply,
        });
        async move { answer.await.map_err(|_| StoreError::Closed)? }.boxed()
    }

    fn stream_version(&self, stream: String) -> BoxFuture<'_, Result<u64, StoreError>> {
        ready(stream_version_in(&self.streams, &stream)).boxed()
    }

    fn read_stream(
        &self,
        stream: String,
        from_version: u64,
        max: usize,
    ) -> BoxFuture<'_, Result<Vec<Event>, StoreError>> {
        ready(self.read_stream_now(&stream, from_version, max)).boxed()
    }

    fn read_range(
        &self,
        from: u64,
        to: u64,
        max: usize,
    ) -> BoxFuture<'_, Result<Vec<Event>, StoreError>> {
        ready(self.read_range_now(from, to, max)).boxed()
    }

    fn last_sequence(&self) -> u64 {
        self.committer.durable_sequence()
    }

    fn live(&self) -> broadcast::Receiver<Arc<Event>> {
        self.live.subscribe()
    }

    fn closing(&self) -> watch::Receiver<bool> {
        self.stop.subscribe()
    }

    fn stats(&self) -> StoreStats {
        StoreStats::of(
            self.last_sequence(),
            self.db.size_on_disk().unwrap_or(0),
            self.committer.fsyncs(),
        )
    }

    fn close(&self) -> BoxFuture<'_, Result<(), StoreError>> {
        async move {
            self.stop.send_replace(true);
            self.committer.stop();
            let thread = self.thread.lock().ok().and_then(|mut t| t.take());
            if let Some(thread) = thread {
                let _ = tokio::task::spawn_blocking(move || thread.join()).await;
            }
            self.db.flush_async().await?;
            Ok(())
        }
        .boxed()
    }

    fn recovered(&self) -> Option<&LogRecovered> {
        self.recovered.as_ref()
    }

    fn writes_paused(&self) -> Option<String> {
        self.space.paused()
    }
}

/// Open sled at `path` and check it against the durable head.
fn open_checked(
    path: &Path,
    options: StoreOptions,
) -> Result<(sled::Db, sled::Tree, sled::Tree, integrity::Opened), StoreError> {
    let db = sled::Config::new()
        .path(path)
        .cache_capacity(options.cache_bytes)
        .flush_every_ms(None)
        .open()
        .map_err(|e| unreadable(path, e))?;
    let events = db.open_tree("events").map_err(|e| unreadable(path, e))?;
    let streams = db.open_tree("streams").map_err(|e| unreadable(path, e))?;
    let opened = integrity::open(path, &db, &events, &streams, options.recover)?;
    Ok((db, events, streams, opened))
}

/// A failure that rebuilding sled from the segment copy mends.
fn rebuildable(e: &StoreError) -> bool {
    matches!(
        e,
        StoreError::Unreadable { .. } | StoreError::Corrupt { .. } | StoreError::Checksum { .. }
    )
}

/// Move sled's own files out of `path` (the segment copy stays), into
/// `<path>.damaged-<unix seconds>`; returns where.
fn set_aside(path: &Path) -> Result<std::path::PathBuf, StoreError> {
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let mut name = path.as_os_str().to_owned();
    name.push(format!(".damaged-{stamp}"));
    let aside = std::path::PathBuf::from(name);
    let io = |e: std::io::Error| {
        StoreError::Io(format!(
            "cannot keep sled's files aside in {}: {e}",
            aside.display()
        ))
    };
    std::fs::create_dir_all(&aside).map_err(io)?;
    for entry in std::fs::read_dir(path).map_err(io)? {
        let entry = entry.map_err(io)?;
        if entry.file_name() == "segments" {
            continue;
        }
        std::fs::rename(entry.path(), aside.join(entry.file_name())).map_err(io)?;
    }
    Ok(aside)
}

/// How far the log had been acknowledged, by its segment copy (or a
/// legacy head file).
fn acknowledged(path: &Path) -> u64 {
    let mut last = 0;
    let copy = segments::for_each(path, u64::MAX, |_, _| Ok(()));
    if let Ok((head, _)) = copy {
        last = head.sequence;
    }
    if last == 0 {
        last = head::peek(&head::path_of(path)).map_or(0, |h| h.sequence);
    }
    last
}

/// sled could not open the log: say how much it had acknowledged.
fn unreadable(path: &Path, e: sled::Error) -> StoreError {
    match acknowledged(path) {
        n if n > 0 && !matches!(e, sled::Error::Io(_)) => StoreError::Unreadable {
            acknowledged: n,
            reason: match e {
                sled::Error::Corruption { .. } => "sled finds its data file corrupted".into(),
                other => other.to_string(),
            },
        },
        _ => e.into(),
    }
}

/// Last version of `stream` in the index tree (0 when it has none).
pub(crate) fn stream_version_in(streams: &sled::Tree, stream: &str) -> Result<u64, StoreError> {
    let prefix = stream_prefix(stream);
    Ok(match streams.scan_prefix(&prefix).next_back() {
        Some(row) => {
            let (key, _) = row?;
            decode_sequence(&key[prefix.len()..])
        }
        None => 0,
    })
}

#[cfg(test)]
mod damage_tests;
