//! Group commit, for writes and flushes alike. Appenders queue their
//! request and wait; one committer thread takes every queued request, checks
//! expected versions and assigns sequences in arrival order, appends all
//! accepted events to the log's segment copy in one record made durable by
//! one `fdatasync`, writes them into sled in one transaction, publishes the
//! now-durable events to live subscribers and then answers each appender.
//! Requests arriving meanwhile form the next batch, so the cost of the
//! write and of the `fdatasync` is shared by everyone waiting.
//!
//! sled is not flushed per batch: the segment copy is what makes an append
//! durable, and sled is the index a start brings up to the copy's head
//! (`integrity::open` rolls the events sled lacks forward from the copy).
//! Flushing sled as well cost a second `fdatasync` and sled's
//! `sync_file_range`s on every append's path. The committer flushes sled
//! itself, at most every [`FLUSH_EVERY`] after answering a batch and once
//! more when the queue has been idle that long, and only after the free
//! space check passed: sled's own flusher thread would write while the
//! disk is full, and sled's write errors are sticky (`space.rs`).

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use sled::Transactional;
use sled::transaction::{ConflictableTransactionError, TransactionError};
use tinycode_shared::proto::Event;
use tokio::sync::broadcast;

use super::segments::SegmentLog;
use super::{StoreError, keys};

pub(crate) use super::super::batch::Request;
use super::super::batch::{Accepted, Sequenced, accept};

/// How often, at most, the committer flushes sled (see the module's note).
const FLUSH_EVERY: Duration = Duration::from_millis(500);

pub(crate) struct Committer {
    queue: Mutex<Queue>,
    wake: Condvar,
    /// Highest durable sequence; readers never see beyond it.
    durable: AtomicU64,
    live: broadcast::Sender<Arc<Event>>,
    fsyncs: AtomicU64,
}

#[derive(Default)]
struct Queue {
    requests: VecDeque<Request>,
    stop: bool,
}

/// What only the committer thread touches.
struct Writer {
    events: sled::Tree,
    streams: sled::Tree,
    next_sequence: u64,
    db: sled::Db,
    /// Whether sled has written any event to its files: the first batch of
    /// a new log is flushed at once, so a start that finds sled reading
    /// nothing knows its file was lost, not left behind by a crash.
    sled_holds_events: bool,
    /// Events written into sled since its last flush.
    unflushed: bool,
    /// When sled was last flushed, or a flush last tried.
    last_flush: Instant,
    /// sled's data file, for that first flush only: sled's flush ends with
    /// `sync_file_range`, which does not flush the device's cache.
    data_file: Option<std::fs::File>,
    /// Last version of each stream touched since open (filled lazily).
    versions: HashMap<String, u64>,
    /// sled's own write error: sled refuses every later write of this
    /// database, so appends are refused until the daemon restarts.
    failed: Option<StoreError>,
    /// Free space on the log's file system, checked before each batch.
    space: Arc<super::super::space::DiskSpace>,
    /// The log's segment copy: each batch is appended there (and made
    /// durable) before sled sees it; it carries the durable head.
    segments: SegmentLog,
}

/// What the committer thread is given at start.
pub(crate) struct Files {
    pub db: sled::Db,
    pub events: sled::Tree,
    pub streams: sled::Tree,
    /// sled's data file when the log is new (see `Writer::data_file`).
    pub data_file: Option<std::fs::File>,
    pub segments: SegmentLog,
    pub space: Arc<super::super::space::DiskSpace>,
}

impl Committer {
    pub(crate) fn new(last_sequence: u64, live: broadcast::Sender<Arc<Event>>) -> Self {
        Self {
            queue: Mutex::new(Queue::default()),
            wake: Condvar::new(),
            durable: AtomicU64::new(last_sequence),
            live,
            fsyncs: AtomicU64::new(0),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Queue> {
        crate::sync::lock(&self.queue)
    }

    /// Queue an append; the reply arrives once it is durable (or refused).
    pub(crate) fn submit(&self, request: Request) {
        let mut queue = self.lock();
        if queue.stop {
            drop(queue);
            let _ = request.reply.send(Err(StoreError::Closed));
            return;
        }
        queue.requests.push_back(request);
        drop(queue);
        self.wake.notify_one();
    }

    pub(crate) fn durable_sequence(&self) -> u64 {
        self.durable.load(Ordering::Acquire)
    }

    pub(crate) fn fsyncs(&self) -> u64 {
        self.fsyncs.load(Ordering::Relaxed)
    }

    /// Refuse new appends; the committer finishes what is queued and exits.
    pub(crate) fn stop(&self) {
        self.lock().stop = true;
        self.wake.notify_one();
    }

    /// The committer loop, on its own thread.
    pub(crate) fn run(&self, files: Files) {
        let mut writer = Writer {
            next_sequence: self.durable_sequence() + 1,
            sled_holds_events: self.durable_sequence() > 0,
            unflushed: false,
            last_flush: Instant::now(),
            data_file: files.data_file,
            db: files.db,
            events: files.events,
            streams: files.streams,
            versions: HashMap::new(),
            failed: None,
            segments: files.segments,
            space: files.space,
        };
        loop {
            let batch: Vec<Request> = {
                let mut queue = self.lock();
                while queue.requests.is_empty() && !queue.stop {
                    if !writer.unflushed {
                        queue = self.wake.wait(queue).unwrap_or_else(|p| p.into_inner());
                        continue;
                    }
                    let due = FLUSH_EVERY.saturating_sub(writer.last_flush.elapsed());
                    let (q, waited) = self
                        .wake
                        .wait_timeout(queue, due)
                        .unwrap_or_else(|p| p.into_inner());
                    queue = q;
                    if waited.timed_out() && queue.requests.is_empty() {
                        drop(queue);
                        writer.flush_sled();
                        queue = self.lock();
                    }
                }
                if queue.requests.is_empty() {
                    return; // stopping, nothing left
                }
                queue.requests.drain(..).collect()
            };
            self.commit(&mut writer, batch);
            if writer.unflushed && writer.last_flush.elapsed() >= FLUSH_EVERY {
                writer.flush_sled();
            }
        }
    }

    fn commit(&self, writer: &mut Writer, batch: Vec<Request>) {
        let refused = writer.failed.as_ref().map(StoreError::again).or_else(|| {
            // A full disk refuses the batch before sled sees it (sled's
            // write errors are sticky; see `space.rs`).
            let bytes = batch.iter().map(|r| r.size() as u64).sum();
            writer.space.check(bytes).err()
        });
        if let Some(e) = refused {
            for request in batch {
                let _ = request.reply.send(Err(e.again()));
            }
            return;
        }
        // Check and sequence every request against the writer's versions;
        // they become real only if the write succeeds.
        let Sequenced {
            accepted,
            next,
            versions: touched,
        } = accept(batch, writer.next_sequence, |stream| {
            match writer.versions.get(stream) {
                Some(v) => Ok(*v),
                None => super::stream_version_in(&writer.streams, stream),
            }
        });
        if accepted.is_empty() {
            return;
        }
        if let Err((e, sticky)) = write_batch(writer, &accepted) {
            self.fsyncs.fetch_add(1, Ordering::Relaxed);
            if sticky {
                tracing::error!(error = %e, "writing the event store failed; appends are refused until the daemon restarts");
            } else {
                crate::error_limited!("segment-write", error = %e, "an append could not be written; nothing of it was kept");
            }
            for (reply, _) in accepted {
                let _ = reply.send(Err(e.again()));
            }
            if sticky {
                writer.failed = Some(e);
            }
            return;
        }
        self.fsyncs.fetch_add(1, Ordering::Relaxed);
        writer.next_sequence = next;
        writer.versions.extend(touched);
        self.durable.store(next - 1, Ordering::Release);
        // Publish before acknowledging: by the time an append returns, every
        // live subscriber has been offered its events.
        for (_, events) in &accepted {
            for event in events {
                // No receivers is fine: nobody is subscribed right now.
                let _ = self.live.send(Arc::clone(event));
            }
        }
        for (reply, events) in accepted {
            let _ = reply.send(Ok(events));
        }
    }
}

/// One stored event: sequence key, value, stream-index key, checksum.
type Row = ([u8; 8], Vec<u8>, Vec<u8>, u32);

/// The batch into the segment copy (durable), then one transaction over
/// both trees (flushed later, see the module note). A failure of the copy leaves nothing behind and
/// the next batch tries again; sled's own failure is sticky (`true`: sled
/// refuses every later write until the daemon restarts).
fn write_batch(writer: &mut Writer, accepted: &[Accepted]) -> Result<(), (StoreError, bool)> {
    let rows: Vec<Row> = accepted
        .iter()
        .flat_map(|(_, events)| events.iter())
        .map(|e| {
            let (value, crc) = keys::encode_event(e);
            (
                e.sequence.to_be_bytes(),
                value,
                keys::stream_key(&e.stream_id, e.stream_version),
                crc,
            )
        })
        .collect();
    // Rows are in sequence order: batches are sequenced in order.
    let copy: Vec<(u64, &[u8], u32)> = rows
        .iter()
        .map(|(seq, value, _, crc)| (u64::from_be_bytes(*seq), value.as_slice(), *crc))
        .collect();
    writer.segments.append(&copy).map_err(|e| (e, false))?;
    let sticky = |e: StoreError| (e, true);
    insert_events(&writer.events, &writer.streams, || {
        rows.iter()
            .map(|(seq, body, skey, _)| (&seq[..], body.as_slice(), skey.as_slice()))
    })
    .map_err(sticky)?;
    if !writer.sled_holds_events {
        writer.db.flush().map_err(|e| sticky(e.into()))?;
        if let Some(file) = writer.data_file.take() {
            file.sync_data()
                .map_err(|e| sticky(StoreError::Io(format!("fdatasync failed: {e}"))))?;
        }
        writer.sled_holds_events = true;
        writer.last_flush = Instant::now();
    } else {
        writer.unflushed = true;
    }
    Ok(())
}

impl Writer {
    /// Flush sled if the disk has room (a full disk leaves it for later:
    /// the segment copy holds the events, and sled's write errors are
    /// sticky). A failed flush is sticky as a failed write is.
    fn flush_sled(&mut self) {
        // An attempt counts as a flush for the cadence: a full disk is
        // asked again FLUSH_EVERY later, not in a loop.
        self.last_flush = Instant::now();
        if self.failed.is_some() {
            self.unflushed = false; // sled refuses writes until a restart
            return;
        }
        if self.space.check(0).is_err() {
            return;
        }
        match self.db.flush() {
            Ok(_) => self.unflushed = false,
            Err(e) => {
                let e = StoreError::from(e);
                tracing::error!(error = %e, "flushing the event store failed; appends are refused until the daemon restarts");
                self.failed = Some(e);
            }
        }
    }
}

/// Events into both trees in one sled transaction, each a (sequence key,
/// stored value, stream-index key); `rows` is called again when sled
/// retries the transaction. The committer's writes and a start's
/// roll-forward from the segment copy (`integrity.rs`) both go through it.
pub(super) fn insert_events<'r, I>(
    events: &sled::Tree,
    streams: &sled::Tree,
    rows: impl Fn() -> I,
) -> Result<(), StoreError>
where
    I: Iterator<Item = (&'r [u8], &'r [u8], &'r [u8])>,
{
    (events, streams)
        .transaction(|(ev, st)| {
            for (sequence, body, stream_key) in rows() {
                ev.insert(sequence, body)?;
                st.insert(stream_key, sequence)?;
            }
            Ok::<_, ConflictableTransactionError<()>>(())
        })
        .map_err(|e| match e {
            TransactionError::Storage(e) => StoreError::from(e),
            TransactionError::Abort(()) => StoreError::Io("transaction aborted".into()),
        })
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::sync::atomic::AtomicBool;

    use super::super::super::space::DiskSpace;
    use super::*;

    static FULL: AtomicBool = AtomicBool::new(true);

    fn probe(_: &Path) -> std::io::Result<(u64, u64)> {
        let free = if FULL.load(Ordering::Relaxed) {
            0
        } else {
            1 << 30
        };
        Ok((free, 1 << 30))
    }

    /// sled's own flusher wrote while the disk was full and its error is
    /// sticky; the committer's flush waits for the space check instead.
    #[test]
    fn sled_is_not_flushed_while_the_disk_is_full() {
        let dir = tempfile::tempdir().unwrap();
        let db = sled::Config::new()
            .path(dir.path())
            .flush_every_ms(None)
            .open()
            .unwrap();
        let (segments, _) = SegmentLog::open(dir.path()).unwrap();
        let mut writer = Writer {
            events: db.open_tree("events").unwrap(),
            streams: db.open_tree("streams").unwrap(),
            next_sequence: 1,
            db,
            sled_holds_events: true,
            unflushed: true,
            last_flush: Instant::now(),
            data_file: None,
            versions: HashMap::new(),
            failed: None,
            space: Arc::new(DiskSpace::with_probe(dir.path(), Some(1), probe)),
            segments,
        };
        writer.events.insert(b"k", b"v").unwrap();
        writer.flush_sled();
        assert!(writer.unflushed, "flushed on a full disk");
        assert!(writer.failed.is_none());
        FULL.store(false, Ordering::Relaxed);
        writer.flush_sled();
        assert!(!writer.unflushed, "not flushed once space came back");
        assert!(writer.failed.is_none());
    }
}
