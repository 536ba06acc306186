//! Group commit, for writes and flushes alike. Appenders queue their
//! request and wait; one committer thread takes every queued request, checks
//! expected versions and assigns sequences in arrival order, writes all
//! accepted events in one sled transaction, flushes once, publishes the
//! now-durable events to live subscribers and then answers each appender.
//! Requests arriving meanwhile form the next batch, so the cost of the
//! transaction and of the flush is shared by everyone waiting.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use sled::Transactional;
use sled::transaction::{ConflictableTransactionError, TransactionError};
use tinycode_shared::proto::Event;
use tokio::sync::broadcast;

use super::segments::SegmentLog;
use super::{StoreError, keys};

pub(crate) use super::super::batch::Request;
use super::super::batch::{Accepted, Sequenced, accept};

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
    db: sled::Db,
    /// sled's data file: `Db::flush` ends with `sync_file_range`, which
    /// neither flushes the device cache nor the file's metadata, so the
    /// committer follows it with a real `fdatasync` of this file.
    data_file: Option<std::fs::File>,
    next_sequence: u64,
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
            data_file: files.data_file,
            next_sequence: self.durable_sequence() + 1,
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
                    queue = self.wake.wait(queue).unwrap_or_else(|p| p.into_inner());
                }
                if queue.requests.is_empty() {
                    return; // stopping, nothing left
                }
                queue.requests.drain(..).collect()
            };
            self.commit(&mut writer, batch);
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
        if let Err((e, sticky)) = write_and_flush(writer, &accepted) {
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
/// both trees, one flush. A failure of the copy leaves nothing behind and
/// the next batch tries again; sled's own failure is sticky (`true`: sled
/// refuses every later write until the daemon restarts).
fn write_and_flush(writer: &mut Writer, accepted: &[Accepted]) -> Result<(), (StoreError, bool)> {
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
    (&writer.events, &writer.streams)
        .transaction(|(ev, st)| {
            for (seq, body, skey, _) in &rows {
                ev.insert(&seq[..], body.as_slice())?;
                st.insert(skey.as_slice(), &seq[..])?;
            }
            Ok::<_, ConflictableTransactionError<()>>(())
        })
        .map_err(|e| match e {
            TransactionError::Storage(e) => sticky(StoreError::from(e)),
            TransactionError::Abort(()) => sticky(StoreError::Io("transaction aborted".into())),
        })?;
    writer.db.flush().map_err(|e| sticky(e.into()))?;
    if let Some(file) = &writer.data_file {
        file.sync_data()
            .map_err(|e| sticky(StoreError::Io(format!("fdatasync failed: {e}"))))?;
    }
    Ok(())
}
