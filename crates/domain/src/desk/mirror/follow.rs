//! The mirror's task: follow the log and write the files each batch of
//! events touched (records and checkpoint committed together), poll the
//! workspace for hand edits, rebuild on request, and wait out a disk that
//! cannot be written.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tinycode_shared::proto::Event;

use super::{
    COALESCE, FileStamps, Kind, MAX_BATCH, MIRROR_RETRY, VERSION, Written, sync_dir, warn_rejected,
};
use crate::desk::{Desk, DomainError, lock};
use crate::projection::{self, ProjectionError, RebuildReply, Reporter, Writes};
use crate::store::StoreError;

impl Desk {
    /// Follow the log and poll the files until the store closes.
    pub(in crate::desk) async fn run_mirror(
        self: Arc<Self>,
        mut checkpoint: u64,
        mut reporter: Reporter,
        poll: Duration,
        mut stamps: FileStamps,
    ) {
        let mut pending = projection::PendingRebuild::default();
        // The file a failed write left listed in `refused`.
        let mut failing: Option<String> = None;
        'follow: loop {
            let mut sub = projection::follow(&self.store, checkpoint);
            let mut next_scan = tokio::time::Instant::now() + poll;
            loop {
                pending.progress(checkpoint);
                let first = tokio::select! {
                    first = sub.recv() => first,
                    _ = tokio::time::sleep_until(next_scan) => {
                        next_scan = self.poll_files(checkpoint, poll, &mut stamps).await;
                        continue;
                    }
                    request = reporter.rebuild_requested() => match request {
                        Some(reply) => {
                            if !self.start_rebuild(reply, &mut stamps, &reporter, &mut pending).await {
                                continue;
                            }
                            checkpoint = 0;
                            continue 'follow;
                        }
                        None => return,
                    },
                };
                let Some(first) = first else { return };
                let mut batch = vec![first];
                projection::take_queued(&mut sub, &mut batch, MAX_BATCH);
                if batch.len() < MAX_BATCH && touches_files(&batch) {
                    tokio::time::sleep(COALESCE).await;
                    projection::take_queued(&mut sub, &mut batch, MAX_BATCH);
                }
                match self.mirror_batch(batch).await {
                    Ok(Some((last, written))) => {
                        checkpoint = last;
                        reporter.applied(last);
                        // Our own writes are not changes to read back.
                        stamps.extend(written);
                        if let Some(file) = failing.take() {
                            lock(&self.refused).remove(&file);
                            tracing::info!(file, "the workspace files are written again");
                        }
                    }
                    Ok(None) => {}
                    Err(DomainError::Io {
                        action,
                        path,
                        source,
                    }) => {
                        // A full or failing disk under the workspace: the
                        // files wait, the log goes on; the same events are
                        // written again in a moment.
                        failing = Some(self.refuse_unwritable(action, &path, &source));
                        if !self.pause_before_retry().await {
                            return;
                        }
                        continue 'follow;
                    }
                    Err(e) => {
                        tracing::error!(error = %e, "the workspace mirror stopped");
                        pending.fail(ProjectionError::Storage(e.to_string()));
                        reporter.failed(e.to_string());
                        return;
                    }
                }
            }
        }
    }

    /// The poll is due: read the files back once the mirror has caught up
    /// (while it writes, they are behind by design). When the next poll is
    /// due: a scan costs a stat per file, so the next one waits at least
    /// 20 times as long as this one took, and a huge workspace costs at
    /// most 5 % of a core.
    async fn poll_files(
        &self,
        checkpoint: u64,
        poll: Duration,
        stamps: &mut FileStamps,
    ) -> tokio::time::Instant {
        if checkpoint >= self.store.last_sequence() {
            let started = tokio::time::Instant::now();
            if let Err(e) = self.rescan(stamps).await {
                crate::error_limited!("mirror-rescan", error = %e, "cannot scan the workspace files");
            }
            tokio::time::Instant::now() + poll.max(started.elapsed() * 20)
        } else {
            tokio::time::Instant::now() + poll
        }
    }

    /// A rebuild was asked for: clear the records, to write every file
    /// again from sequence 0. `false`: they could not be cleared (the
    /// reply says why) and the mirror goes on where it was.
    async fn start_rebuild(
        &self,
        reply: RebuildReply,
        stamps: &mut FileStamps,
        reporter: &Reporter,
        pending: &mut projection::PendingRebuild,
    ) -> bool {
        // Hand edits not read back yet are imported before the records
        // that tell them apart go.
        if let Err(e) = self.rescan(stamps).await {
            tracing::error!(error = %e, "cannot scan the workspace files");
        }
        if let Err(e) = projection::reset_tree(self.mirror.tree(), VERSION) {
            reply.send(Err(e));
            return false;
        }
        self.mirror_persisted.store(0, Ordering::Release);
        reporter.applied(0);
        pending.start(reply, self.store.last_sequence(), "mirror");
        true
    }

    /// A workspace file cannot be written: say so (rate-limited) and list
    /// it as refused. The file, relative to the workspace.
    fn refuse_unwritable(&self, action: &str, path: &Path, source: &std::io::Error) -> String {
        let file = self.relative(path);
        crate::error_limited!("mirror-write", file, error = %source, "cannot {action} a workspace file; retrying every second");
        lock(&self.refused).insert(
            file.clone(),
            format!("cannot be written ({source}); the mirror retries every second"),
        );
        file
    }

    /// Wait before writing the files again. `false`: the store closed
    /// meanwhile.
    async fn pause_before_retry(&self) -> bool {
        let mut closing = self.store.closing();
        tokio::select! {
            _ = tokio::time::sleep(MIRROR_RETRY) => true,
            _ = closing.wait_for(|c| *c) => false,
        }
    }

    /// Write the files a batch of events touched; commit records and
    /// checkpoint together.
    async fn mirror_batch(
        self: &Arc<Self>,
        batch: Vec<Result<Arc<Event>, StoreError>>,
    ) -> Result<Option<(u64, Written)>, DomainError> {
        let mut touched = BTreeSet::new();
        let mut last = None;
        for event in batch {
            let event = event?;
            if let Some((kind, id)) = Kind::of_stream(&event.stream_id) {
                touched.insert((kind, id.to_string()));
            }
            last = Some(event.sequence);
        }
        let Some(last) = last else { return Ok(None) };
        if touched.is_empty() {
            // No file to write: only the checkpoint moves, and it is
            // written only every so often (replaying other events is free).
            if last - self.mirror_persisted.load(Ordering::Acquire) >= projection::CHECKPOINT_EVERY
            {
                Writes::new(self.mirror.tree())
                    .commit(last)
                    .map_err(DomainError::from)?;
                self.mirror_persisted.store(last, Ordering::Release);
            }
            return Ok(Some((last, Vec::new())));
        }
        // The files render the models: wait until they have this batch.
        self.tickets.wait_for(last).await?;
        self.kb.wait_for(last).await?;
        // File writes and fsyncs block: off the async workers, so the
        // projectors and the RPCs never wait behind a disk flush.
        let desk = Arc::clone(self);
        let written = tokio::task::spawn_blocking(move || desk.write_files(&touched, last))
            .await
            .map_err(|e| {
                DomainError::from(ProjectionError::Stopped {
                    name: "mirror",
                    reason: e.to_string(),
                })
            })??;
        Ok(Some((last, written)))
    }

    /// Write the touched files, then commit their records with the
    /// checkpoint and flush them.
    fn write_files(
        &self,
        touched: &BTreeSet<(Kind, String)>,
        last: u64,
    ) -> Result<Written, DomainError> {
        let mut writes = Writes::new(self.mirror.tree());
        let mut rejected = Vec::new();
        let mut written = Vec::new();
        // Which directories had a file renamed into them (tickets,
        // knowledge): only those are synced.
        let mut renamed = [false; 2];
        for (kind, id) in touched {
            let imported = match kind {
                Kind::Ticket => self.unchanged_import(id, last)?,
                Kind::Article => None,
            };
            let synced = match imported {
                Some(synced) => Some(synced),
                None => self.sync_file(*kind, id, last, false, &mut rejected)?,
            };
            if let Some(synced) = synced {
                writes.put(synced.key, synced.record.encode());
                if let Some(stamp) = synced.written {
                    renamed[usize::from(*kind == Kind::Article)] = true;
                    written.push((self.file_path(*kind, id), stamp));
                }
            }
        }
        warn_rejected(&rejected);
        for (dir, renamed) in [&self.tickets_dir, &self.knowledge_dir]
            .into_iter()
            .zip(renamed)
        {
            if renamed {
                sync_dir(dir);
            }
        }
        // The records become durable as sled writes this batch (no flush
        // here). A crash before that leaves a record behind its file: the file
        // then equals a version newer than the record, which reads as ours
        // (see `read_back`); a hand edit of such a file is kept aside.
        writes.commit(last).map_err(DomainError::from)?;
        self.mirror_persisted.store(last, Ordering::Release);
        Ok(written)
    }
}

/// Does an event of `batch` change a ticket or an article (a file)?
fn touches_files(batch: &[Result<Arc<Event>, StoreError>]) -> bool {
    batch
        .iter()
        .flatten()
        .any(|event| Kind::of_stream(&event.stream_id).is_some())
}
