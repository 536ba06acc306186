//! The workspace mirror: the one writer of `tickets/<id>.json` and
//! `knowledge/<id>.md`, a projector that follows the log from its
//! checkpoint (tree `proj-mirror`).
//!
//! For every ticket or article event it writes the file from the tickets or
//! knowledge projection (temp file + fsync + rename, then the directory is
//! fsynced), and records per file, in the same sled batch as its
//! checkpoint, the stream version, the sequence and the content hash it
//! wrote. Files are read back by [`Mirror::scan`] (at start, and every poll):
//!
//! - content equal to what the mirror last wrote: ours (re-written when the
//!   log has moved on);
//! - content equal to the model, or to an earlier version of it (a write a
//!   crash cut short): ours, re-written if behind, never imported;
//! - anything else is a hand edit and is imported (`TicketUpdatedFromFile`,
//!   `KnowledgeUpdatedFromFile`) at the version the file was written at; a
//!   hand edit that lost a race with a newer change is kept beside the file
//!   as `<name>.rejected` and the file is re-written;
//! - a file with no stream is imported; a model entry with no file gets one.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use futures::StreamExt;
use tinycode_shared::proto::event::Payload;
use tinycode_shared::proto::{Event, KnowledgeFileRead, TicketImported, TicketUpdatedFromFile};

use super::models::{article_content, stored_article};
use super::{Desk, DomainError, LoadReport, Stamp, article_stream, ticket_stream};
use crate::domain::ids::sanitize_id;
use crate::domain::knowledge::parse_article;
use crate::domain::limits;
use crate::domain::ticket::{parse_ticket_file, render_ticket_file, same_content};
use crate::projection::{self, ProjectionError, Reporter, Writes, decode_u64};
use crate::store::{ExpectedVersion, StoreError};

/// Version of the mirror's records.
const VERSION: u32 = 1;
const RECORD_PREFIX: &[u8] = b"f/";
/// Files appended concurrently during an import (shares flushes).
const IMPORT_CONCURRENCY: usize = 64;
/// A ticket or article file larger than this is never read (the largest
/// limit of either kind).
pub const MAX_FILE_BYTES: u64 = crate::domain::limits::MAX_TICKET_FILE;
/// Events handled per batch at most.
const MAX_BATCH: usize = 256;

/// Each file's stamp at the last scan.
pub type FileStamps = HashMap<PathBuf, Stamp>;

/// A file brought up to the model: its record, and its stamp when the
/// mirror wrote it.
struct Synced {
    key: Vec<u8>,
    record: Record,
    written: Option<Stamp>,
}

/// Files the mirror wrote, with their stamps.
type Written = Vec<(PathBuf, Stamp)>;

/// What the mirror last wrote to one file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Record {
    version: u64,
    sequence: u64,
    hash: u64,
    /// The file's stamp once it held that content: a file with this stamp
    /// still holds it, and a start need not read it.
    stamp: Option<Stamp>,
}

impl Record {
    fn encode(&self) -> Vec<u8> {
        let stamp = self.stamp.map(|s| [s.mtime_ns, s.len, s.ino]);
        [self.version, self.sequence, self.hash]
            .into_iter()
            .chain(stamp.into_iter().flatten())
            .flat_map(|n| n.to_be_bytes())
            .collect()
    }

    fn decode(bytes: &[u8]) -> Option<Self> {
        let n = |i: usize| decode_u64(&bytes[i * 8..i * 8 + 8]);
        matches!(bytes.len(), 24 | 48).then(|| Self {
            version: n(0),
            sequence: n(1),
            hash: n(2),
            stamp: (bytes.len() == 48).then(|| Stamp {
                mtime_ns: n(3),
                len: n(4),
                ino: n(5),
            }),
        })
    }
}

/// FNV-1a, 64 bits: stable across builds (the records outlive the binary).
fn content_hash(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// The two kinds of mirrored file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Kind {
    Ticket,
    Article,
}

impl Kind {
    fn of_stream(stream: &str) -> Option<(Self, &str)> {
        if let Some(id) = stream.strip_prefix("ticket-") {
            Some((Self::Ticket, id))
        } else {
            stream.strip_prefix("kb-").map(|id| (Self::Article, id))
        }
    }

    /// The kind of a mirrored file, by its extension.
    fn of_path(path: &Path) -> Self {
        if path.extension().is_some_and(|e| e == "md") {
            Self::Article
        } else {
            Self::Ticket
        }
    }

    fn stream(self, id: &str) -> String {
        match self {
            Self::Ticket => ticket_stream(id),
            Self::Article => article_stream(id),
        }
    }

    fn ext(self) -> &'static str {
        match self {
            Self::Ticket => "json",
            Self::Article => "md",
        }
    }
}

/// A file's content as the model has it, with the stream version.
struct Desired {
    text: String,
    version: u64,
    /// The ticket itself (tickets only), to compare a parsed file with.
    ticket: Option<tinycode_shared::proto::Ticket>,
}

/// A file read back: what it means against the log.
enum Finding {
    /// Nothing to do (ours and current, or recorded now).
    InSync,
    /// Ours but behind the log (or missing): write it again.
    Stale,
    /// Differs from the model, and the mirror has no record of writing it
    /// (its records were rebuilt, or an older daemon wrote it): kept aside,
    /// then written from the model.
    Unknown,
    /// New or edited by hand: append this.
    Import {
        expected: ExpectedVersion,
        payload: Box<Payload>,
    },
}

impl Desk {
    fn dir(&self, kind: Kind) -> &Path {
        match kind {
            Kind::Ticket => &self.tickets_dir,
            Kind::Article => &self.knowledge_dir,
        }
    }

    fn file_path(&self, kind: Kind, id: &str) -> PathBuf {
        self.dir(kind).join(format!("{id}.{}", kind.ext()))
    }

    fn record_key(&self, path: &Path) -> Vec<u8> {
        [RECORD_PREFIX, self.relative(path).as_bytes()].concat()
    }

    fn record(&self, path: &Path) -> Result<Option<Record>, ProjectionError> {
        Ok(self
            .mirror
            .tree()
            .get(self.record_key(path))?
            .and_then(|v| Record::decode(&v)))
    }

    /// The file as the model has it now.
    fn desired(&self, kind: Kind, id: &str) -> Result<Option<Desired>, DomainError> {
        Ok(match kind {
            Kind::Ticket => self.stored_ticket(id)?.map(|t| Desired {
                text: render_ticket_file(&t),
                version: t.version,
                ticket: Some(t),
            }),
            Kind::Article => stored_article(self.kb.tree(), id)
                .map_err(DomainError::from)?
                .map(|(text, version)| Desired {
                    text,
                    version,
                    ticket: None,
                }),
        })
    }

    /// Bring one file up to the model; the record to store, if any, and
    /// the file's stamp when it was written. Content that is neither the
    /// model nor what the mirror last wrote is kept aside first (named in
    /// `rejected`), unless `trusted` (the read-back just found it is ours).
    fn sync_file(
        &self,
        kind: Kind,
        id: &str,
        sequence: u64,
        trusted: bool,
        rejected: &mut Vec<String>,
    ) -> Result<Option<Synced>, DomainError> {
        let Some(desired) = self.desired(kind, id)? else {
            return Ok(None);
        };
        let path = self.file_path(kind, id);
        let record = self.record(&path).map_err(DomainError::from)?;
        let current = std::fs::read_to_string(&path).ok();
        let synced = |hash, stamp: Option<Stamp>, written| Synced {
            key: self.record_key(&path),
            record: Record {
                version: desired.version,
                sequence,
                hash,
                stamp,
            },
            written,
        };
        if let Some(current) = &current {
            let hash = content_hash(current);
            if current == &desired.text || Self::same_as_model(current, &desired) {
                // Already there (a file just imported keeps its layout).
                return Ok(Some(synced(hash, Stamp::read(&path), None)));
            }
            if !trusted && record.is_none_or(|r| r.hash != hash) {
                // Edited by hand and not imported (the log moved on, or
                // the mirror has no record of this file): keep the edit.
                let aside = self
                    .dir(kind)
                    .join(format!("{id}.{}.rejected-{sequence}", kind.ext()));
                super::write_atomic(&aside, current)?;
                rejected.push(self.relative(&aside));
            }
        }
        let stamp = super::write_atomic(&path, &desired.text)?;
        Ok(Some(synced(
            content_hash(&desired.text),
            Some(stamp),
            Some(stamp),
        )))
    }

    /// Does `text` parse to what the model holds?
    fn same_as_model(text: &str, desired: &Desired) -> bool {
        match &desired.ticket {
            Some(ticket) => parse_ticket_file(text).is_ok_and(|t| same_content(&t, ticket)),
            None => text == desired.text,
        }
    }

    /// Follow the log and poll the files until the store closes.
    pub(super) async fn run_mirror(
        self: Arc<Self>,
        mut checkpoint: u64,
        mut reporter: Reporter,
        poll: Duration,
        mut stamps: FileStamps,
    ) {
        let mut pending = projection::PendingRebuild::default();
        'follow: loop {
            let mut sub = projection::follow(&self.store, checkpoint);
            let mut next_scan = tokio::time::Instant::now() + poll;
            loop {
                pending.progress(checkpoint);
                let first = tokio::select! {
                    first = sub.recv() => first,
                    _ = tokio::time::sleep_until(next_scan) => {
                        // Files are read back once the mirror has caught up
                        // (while it writes, they are behind by design), and
                        // a scan costs a stat per file: the next one waits
                        // at least 20 times as long as this one took, so
                        // a huge workspace costs at most 5 % of a core.
                        if checkpoint >= self.store.last_sequence() {
                            let started = tokio::time::Instant::now();
                            if let Err(e) = self.rescan(&mut stamps).await {
                                tracing::error!(error = %e, "cannot scan the workspace files");
                            }
                            next_scan = tokio::time::Instant::now() + poll.max(started.elapsed() * 20);
                        } else {
                            next_scan = tokio::time::Instant::now() + poll;
                        }
                        continue;
                    }
                    request = reporter.rebuild_requested() => match request {
                        Some(reply) => {
                            // Hand edits not read back yet are imported
                            // before the records that tell them apart go.
                            if let Err(e) = self.rescan(&mut stamps).await {
                                tracing::error!(error = %e, "cannot scan the workspace files");
                            }
                            if let Err(e) = projection::reset_tree(self.mirror.tree(), VERSION) {
                                reply.send(Err(e));
                                continue;
                            }
                            checkpoint = 0;
                            self.mirror_persisted.store(0, Ordering::Release);
                            reporter.applied(0);
                            pending.start(reply, self.store.last_sequence(), "mirror");
                            continue 'follow;
                        }
                        None => return,
                    },
                };
                let Some(first) = first else { return };
                let mut batch = vec![first];
                while batch.len() < MAX_BATCH {
                    match sub.try_recv() {
                        Ok(next) => batch.push(next),
                        Err(_) => break,
                    }
                }
                match self.mirror_batch(batch).await {
                    Ok(Some((last, written))) => {
                        checkpoint = last;
                        reporter.applied(last);
                        // Our own writes are not changes to read back.
                        stamps.extend(written);
                    }
                    Ok(None) => {}
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
        for (kind, id) in touched {
            if let Some(synced) = self.sync_file(*kind, id, last, false, &mut rejected)? {
                writes.put(synced.key, synced.record.encode());
                if let Some(stamp) = synced.written {
                    written.push((self.file_path(*kind, id), stamp));
                }
            }
        }
        warn_rejected(&rejected);
        sync_dir(&self.tickets_dir);
        sync_dir(&self.knowledge_dir);
        // The records become durable with the log's next flush. A crash
        // before that leaves a record one write behind its file: the file
        // then equals a version newer than the record, which reads as ours
        // (see `read_back`); a hand edit of such a file is kept aside.
        writes.commit(last).map_err(DomainError::from)?;
        self.mirror_persisted.store(last, Ordering::Release);
        Ok(written)
    }

    /// Read back the files that changed (or vanished) since the last scan.
    async fn rescan(&self, stamps: &mut FileStamps) -> Result<(), DomainError> {
        let mut changed = Vec::new();
        let mut present = std::collections::HashSet::new();
        for kind in [Kind::Ticket, Kind::Article] {
            for path in list_dir(self.dir(kind), kind.ext()) {
                let now = Stamp::read(&path);
                present.insert(path.clone());
                if stamps.get(&path) != now.as_ref() {
                    if let Some(now) = now {
                        stamps.insert(path.clone(), now);
                    }
                    changed.push((kind, path));
                }
            }
        }
        let vanished: Vec<PathBuf> = stamps
            .keys()
            .filter(|p| !present.contains(*p))
            .cloned()
            .collect();
        for path in vanished {
            stamps.remove(&path);
            let kind = Kind::of_path(&path);
            changed.push((kind, path));
        }
        if changed.is_empty() {
            return Ok(());
        }
        // Files are compared with the models as they are now (a rebuild
        // may have cleared them a moment ago).
        let head = self.store.last_sequence();
        self.tickets.wait_for(head).await?;
        self.kb.wait_for(head).await?;
        let mut report = LoadReport::default();
        let paths = changed.iter().map(|(k, p)| (*k, p.clone(), None)).collect();
        if let Err(e) = self.scan(paths, &mut report).await {
            // Read them again next time.
            for (_, path) in &changed {
                stamps.remove(path);
            }
            return Err(e);
        }
        for warning in &report.warnings {
            tracing::warn!("{warning}");
        }
        if report.imported + report.updated > 0 {
            tracing::info!(
                imported = report.imported,
                updated = report.updated,
                "picked up workspace files"
            );
        }
        Ok(())
    }

    /// Every file of the workspace, and every model entry with no file.
    /// Read back every file (at start), stamping each first: a file
    /// changed from then on is read again by the mirror's first poll.
    pub(super) async fn scan_all(
        &self,
        report: &mut LoadReport,
        stamps: &mut FileStamps,
    ) -> Result<(), DomainError> {
        let mut paths = Vec::new();
        for kind in [Kind::Ticket, Kind::Article] {
            for path in list_dir(self.dir(kind), kind.ext()) {
                let meta = std::fs::metadata(&path).ok();
                if let Some(m) = &meta {
                    stamps.insert(path.clone(), Stamp::of(m));
                }
                paths.push((kind, path, meta));
            }
        }
        let present: std::collections::HashSet<(Kind, String)> =
            paths.iter().map(|(k, p, _)| (*k, file_stem(p))).collect();
        self.scan(paths, report).await?;
        // Files the mirror wrote that are gone get written again (one the
        // mirror has not written yet, it writes when it catches up: its
        // record and its checkpoint are committed together).
        let mut missing = Vec::new();
        for key in self.mirror.tree().scan_prefix(RECORD_PREFIX).keys() {
            let key = key.map_err(ProjectionError::from)?;
            let path = self
                .workspace
                .join(String::from_utf8_lossy(&key[RECORD_PREFIX.len()..]).as_ref());
            let item = (Kind::of_path(&path), file_stem(&path));
            if !present.contains(&item) {
                missing.push(item);
            }
        }
        self.rewrite(&missing, true)
    }

    /// Write these files from the model now and record them (`trusted`:
    /// the read-back found them ours, so nothing is kept aside).
    fn rewrite(&self, items: &[(Kind, String)], trusted: bool) -> Result<(), DomainError> {
        if items.is_empty() {
            return Ok(());
        }
        let mut batch = sled::Batch::default();
        let mut rejected = Vec::new();
        for (kind, id) in items {
            let applied = self.kb.applied().min(self.tickets.applied());
            if let Some(synced) = self.sync_file(*kind, id, applied, trusted, &mut rejected)? {
                batch.insert(synced.key, synced.record.encode());
            }
        }
        warn_rejected(&rejected);
        sync_dir(&self.tickets_dir);
        sync_dir(&self.knowledge_dir);
        self.mirror
            .tree()
            .apply_batch(batch)
            .map_err(|e| DomainError::from(ProjectionError::from(e)))
    }

    /// Read `paths` and act on what each means: import, re-write, nothing.
    async fn scan(
        &self,
        paths: Vec<(Kind, PathBuf, Option<std::fs::Metadata>)>,
        report: &mut LoadReport,
    ) -> Result<(), DomainError> {
        let mut imports = Vec::new();
        let mut stale = Vec::new();
        let mut unknown = Vec::new();
        // Reading back is mostly `stat`s and record lookups: on a large
        // desk, both cores share it.
        let findings: Vec<(Kind, PathBuf, Result<Finding, String>)> = if paths.len() < 2048 {
            paths
                .into_iter()
                .map(|(kind, path, meta)| {
                    let found = self.read_back(kind, &path, meta);
                    (kind, path, found)
                })
                .collect()
        } else {
            let half = paths.len() / 2;
            let mut paths = paths;
            let second = paths.split_off(half);
            let read = |part: Vec<(Kind, PathBuf, Option<std::fs::Metadata>)>| {
                part.into_iter()
                    .map(|(kind, path, meta)| {
                        let found = self.read_back(kind, &path, meta);
                        (kind, path, found)
                    })
                    .collect::<Vec<_>>()
            };
            std::thread::scope(|scope| {
                let other = scope.spawn(|| read(second));
                let mut all = read(paths);
                all.extend(
                    other
                        .join()
                        .unwrap_or_else(|p| std::panic::resume_unwind(p)),
                );
                all
            })
        };
        for (kind, path, found) in findings {
            let id = file_stem(&path);
            match found {
                Ok(Finding::InSync) => {}
                Ok(Finding::Stale) => stale.push((kind, id)),
                Ok(Finding::Unknown) => {
                    report.warnings.push(format!(
                        "not imported {}: it differs from the log and this daemon has no record of writing it",
                        self.relative(&path)
                    ));
                    unknown.push((kind, id));
                }
                Ok(Finding::Import { expected, payload }) => {
                    imports.push((kind.stream(&id), path, expected, *payload));
                }
                Err(problem) => report
                    .warnings
                    .push(format!("skipped {}: {problem}", self.relative(&path))),
            }
        }
        self.rewrite(&stale, true)?;
        self.rewrite(&unknown, false)?;
        let store = &self.store;
        let mut results = futures::stream::iter(imports)
            .map(|(stream, path, expected, payload)| async move {
                let updated = matches!(
                    payload,
                    Payload::TicketUpdatedFromFile(_) | Payload::KnowledgeUpdatedFromFile(_)
                );
                let article = stream.starts_with("kb-");
                let appended = store.append(&stream, expected, vec![payload]).await;
                (path, (article, updated), appended)
            })
            .buffer_unordered(IMPORT_CONCURRENCY);
        let mut last = 0;
        let mut lost_races = Vec::new();
        while let Some((path, updated, appended)) = results.next().await {
            match appended {
                Ok(events) => {
                    last = last.max(events.last().map_or(0, |e| e.sequence));
                    match updated {
                        (false, false) => report.imported += 1,
                        (false, true) => report.updated += 1,
                        (true, false) => report.articles_imported += 1,
                        (true, true) => report.articles_updated += 1,
                    }
                }
                Err(StoreError::Conflict { .. }) => lost_races.push(path),
                Err(e) => return Err(e.into()),
            }
        }
        drop(results);
        for path in lost_races {
            // The item changed after the file was written: keep the edit
            // aside, put the current content back.
            let kind = Kind::of_path(&path);
            let id = file_stem(&path);
            report.warnings.push(format!(
                "not imported {}: it was edited by hand while the daemon changed it",
                self.relative(&path),
            ));
            self.rewrite(&[(kind, id)], false)?;
        }
        self.tickets.wait_for(last).await?;
        self.kb.wait_for(last).await?;
        Ok(())
    }

    /// What one file means against the log (`Err`: a reason to skip it).
    fn read_back(
        &self,
        kind: Kind,
        path: &Path,
        meta: Option<std::fs::Metadata>,
    ) -> Result<Finding, String> {
        let id = sanitize_id(&file_stem(path)).map_err(|e| format!("bad file name: {e}"))?;
        let Some(meta) = meta.or_else(|| std::fs::metadata(path).ok()) else {
            return Ok(Finding::Stale); // vanished: write it again
        };
        let record = self.record(path).map_err(|e| e.to_string())?;
        if record.is_some_and(|r| r.stamp == Some(Stamp::of(&meta))) {
            // Untouched since the mirror recorded it: what it wrote. If the
            // log moved on since, the mirror's catch-up writes it again.
            return Ok(Finding::InSync);
        }
        let limit = match kind {
            Kind::Ticket => limits::MAX_TICKET_FILE,
            Kind::Article => limits::MAX_ARTICLE_FILE,
        };
        if meta.len() > limit {
            return Err(format!(
                "it is {} bytes; a {} file may be at most {limit} bytes ({} KiB), so that what is stored stays small",
                meta.len(),
                match kind {
                    Kind::Ticket => "ticket",
                    Kind::Article => "knowledge",
                },
                limit / 1024
            ));
        }
        let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read: {e}"))?;
        let desired = self.desired(kind, &id).map_err(|e| e.to_string())?;
        let hash = content_hash(&text);
        if let (Some(record), Some(desired)) = (&record, &desired)
            && record.hash == hash
        {
            return Ok(if record.version < desired.version {
                Finding::Stale
            } else {
                Finding::InSync
            });
        }
        let file = self.relative(path);
        match kind {
            Kind::Ticket => {
                let ticket = parse_ticket_file(&text).map_err(|e| e.to_string())?;
                within_limits(&ticket)?;
                if ticket.id != id {
                    return Err(format!(
                        "field `id` is {:?} but the file is named {id}.json",
                        ticket.id
                    ));
                }
                let Some(desired) = desired else {
                    return Ok(Finding::Import {
                        expected: ExpectedVersion::NoStream,
                        payload: Box::new(Payload::TicketImported(TicketImported {
                            ticket: Some(ticket),
                            file,
                        })),
                    });
                };
                if Self::same_as_model(&text, &desired) {
                    return Ok(Finding::Stale); // re-recorded, not re-written
                }
                let Some(record) = record else {
                    // No record of writing it: which version it was edited
                    // from is unknown, so it is not imported.
                    return Ok(Finding::Unknown);
                };
                if self.was_ticket_version(&id, &ticket, record.version)? {
                    return Ok(Finding::Stale);
                }
                Ok(Finding::Import {
                    expected: ExpectedVersion::Exact(record.version),
                    payload: Box::new(Payload::TicketUpdatedFromFile(TicketUpdatedFromFile {
                        ticket: Some(ticket),
                        file,
                    })),
                })
            }
            Kind::Article => {
                parse_article(&id, &text).map_err(|e| e.to_string())?;
                let read = KnowledgeFileRead {
                    article_id: id.clone(),
                    content: text.clone(),
                    file,
                };
                let Some(desired) = desired else {
                    // Never imported; an article edited before imports
                    // existed has a stream already.
                    let version = self
                        .store
                        .stream_version(&article_stream(&id))
                        .map_err(|e| e.to_string())?;
                    return Ok(Finding::Import {
                        expected: if version == 0 {
                            ExpectedVersion::NoStream
                        } else {
                            ExpectedVersion::Exact(version)
                        },
                        payload: Box::new(Payload::KnowledgeImported(read)),
                    });
                };
                if text == desired.text {
                    return Ok(Finding::Stale); // re-recorded, not re-written
                }
                let Some(record) = record else {
                    return Ok(Finding::Unknown);
                };
                if self.was_article_version(&id, &text, record.version)? {
                    return Ok(Finding::Stale);
                }
                Ok(Finding::Import {
                    expected: ExpectedVersion::Exact(record.version),
                    payload: Box::new(Payload::KnowledgeUpdatedFromFile(read)),
                })
            }
        }
    }

    /// Was `ticket` the ticket's content at a version after `after` (the
    /// version the mirror's record names)? Only a write whose record a
    /// crash lost can leave such a file; a hand edit that puts back an
    /// older state is older than the record, and is a hand edit.
    fn was_ticket_version(
        &self,
        id: &str,
        ticket: &tinycode_shared::proto::Ticket,
        after: u64,
    ) -> Result<bool, String> {
        let events = self
            .store
            .read_stream(&ticket_stream(id), 1, usize::MAX)
            .map_err(|e| e.to_string())?;
        let mut state = tinycode_shared::proto::Ticket::default();
        for event in &events {
            crate::domain::ticket::apply(&mut state, event);
            if event.stream_version > after && same_content(&state, ticket) {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// The same for an article file.
    fn was_article_version(&self, id: &str, text: &str, after: u64) -> Result<bool, String> {
        let events = self
            .store
            .read_stream(&article_stream(id), 1, usize::MAX)
            .map_err(|e| e.to_string())?;
        Ok(events
            .iter()
            .any(|e| e.stream_version > after && article_content(e) == Some(text)))
    }
}

/// A file's name without its extension (the item's id, unchecked).
fn file_stem(path: &Path) -> String {
    path.file_stem()
        .map(|s| s.to_string_lossy().to_string())
        .unwrap_or_default()
}

pub(super) fn list_dir(dir: &Path, ext: &str) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            p.extension().is_some_and(|e| e == ext)
                && p.file_name()
                    .is_some_and(|n| !n.to_string_lossy().starts_with('.'))
        })
        .collect();
    files.sort();
    files
}

/// Say where each hand edit that could not be imported was kept.
fn warn_rejected(rejected: &[String]) {
    for file in rejected {
        tracing::warn!(
            file,
            "a hand edit could not be imported (the item changed after its file was written, or the daemon has no record of writing that file); it is kept in this file: re-apply what it changes"
        );
    }
}

/// fsync a directory, so renames in it are durable.
fn sync_dir(dir: &Path) {
    if let Ok(d) = std::fs::File::open(dir)
        && let Err(e) = d.sync_all()
    {
        tracing::warn!(dir = %dir.display(), error = %e, "cannot fsync the directory");
    }
}

/// A ticket read from a file must fit what a request could carry.
fn within_limits(t: &tinycode_shared::proto::Ticket) -> Result<(), String> {
    let over = |field: &str, len: usize, max: usize| {
        (len > max).then(|| {
            format!("field `{field}` is {len} bytes; at most {max} are allowed (as for a request)")
        })
    };
    let problem = over("subject", t.subject.len(), limits::MAX_SUBJECT)
        .or_else(|| over("customer", t.customer.len(), limits::MAX_NAME))
        .or_else(|| {
            t.messages.iter().enumerate().find_map(|(i, m)| {
                over(
                    &format!("messages[{i}].text"),
                    m.text.len(),
                    limits::MAX_TEXT,
                )
            })
        })
        .or_else(|| {
            t.notes.iter().enumerate().find_map(|(i, n)| {
                over(&format!("notes[{i}].text"), n.text.len(), limits::MAX_TEXT)
            })
        });
    problem.map_or(Ok(()), Err)
}

/// Open the mirror's state: the tree and its checkpoint.
pub(super) fn open_state(
    store: &crate::store::EventStore,
) -> Result<(sled::Tree, u64), ProjectionError> {
    let (tree, checkpoint, _) = projection::open_state(store, "mirror", VERSION)?;
    Ok((tree, checkpoint))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_hash_is_stable() {
        let r = Record {
            version: 3,
            sequence: 99,
            hash: content_hash("abc"),
            stamp: None,
        };
        assert_eq!(Record::decode(&r.encode()), Some(r));
        let stamped = Record {
            stamp: Some(Stamp {
                mtime_ns: 1,
                len: 2,
                ino: 3,
            }),
            ..r
        };
        assert_eq!(Record::decode(&stamped.encode()), Some(stamped));
        // FNV-1a 64 of "abc", a published test vector.
        assert_eq!(content_hash("abc"), 0xe71f_a219_0541_574b);
        assert_eq!(Record::decode(b"short"), None);
    }
}
