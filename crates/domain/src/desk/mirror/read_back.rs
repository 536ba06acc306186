//! Reading the workspace files back: at start every file (one `stat`
//! each, read only when its stamp differs from the mirror's record), then
//! on every poll the files whose stamp changed; then acting on what each
//! file means against the log (`finding.rs`): importing hand edits,
//! writing stale files again.

use std::path::{Path, PathBuf};
use tinycode_base::progress::Progress;

use futures::StreamExt;
use tinycode_shared::proto::TicketUpdatedFromFile;
use tinycode_shared::proto::event::Payload;

use super::{
    BULK_FILES, FileStamps, FilesLook, Finding, IMPORT_CONCURRENCY, Kind, Record, Seen, file_stem,
    list_dir, on_both_cores,
};
use crate::desk::models::article_content;
use crate::desk::{Desk, DomainError, LoadReport, Stamp};
use crate::projection::ProjectionError;
use crate::store::{ExpectedVersion, StoreError};
use crate::ticket::same_content;

impl Desk {
    /// Read back the files that changed (or vanished) since the last scan.
    pub(super) async fn rescan(&self, stamps: &mut FileStamps) -> Result<(), DomainError> {
        let mut changed = Vec::new();
        let mut present = std::collections::HashSet::new();
        for kind in [Kind::Ticket, Kind::Article] {
            for path in list_dir(self.dir(kind), kind.ext()) {
                let now = Stamp::read(&path);
                if stamps.get(&path) != now.as_ref() {
                    if let Some(now) = now {
                        stamps.insert(&path, now);
                    }
                    changed.push((kind, path.clone()));
                }
                present.insert(path);
            }
        }
        let vanished: Vec<PathBuf> = stamps
            .names()
            .map(|name| self.dir(Kind::of_path(Path::new(name))).join(name))
            .filter(|path| !present.contains(path))
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
        let paths = changed.iter().map(|(k, p)| (*k, p.clone())).collect();
        // A poll reports no progress: nobody waits for it.
        let unseen = Progress::default();
        if let Err(e) = self.scan(paths, &mut report, &unseen).await {
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
    /// At start each file costs one `stat` (`look.rs`: taken while the log
    /// opens), compared with the mirror's
    /// record in one ordered pass over the records (no lookup per file);
    /// only files whose stamp differs from the record are read back. Every
    /// file is stamped: one changed from then on is read again by the
    /// mirror's first poll.
    pub(in crate::desk) async fn scan_all(
        &self,
        look: FilesLook,
        report: &mut LoadReport,
        progress: &Progress,
    ) -> Result<FileStamps, DomainError> {
        let mut changed = Vec::new();
        let mut missing = Vec::new();
        progress.stage("listing the workspace files");
        let dirs = [Kind::Ticket, Kind::Article].map(|kind| (kind, self.dir(kind)));
        let looked = look.wait(dirs).await;
        let found: usize = looked.iter().map(|(_, _, names, _)| names.len()).sum();
        progress.counted("checking the workspace files", "files", found as u64);
        let mut stamps = FileStamps::with_capacity(found);
        for (kind, dir, names, stamped) in looked {
            let prefix = {
                let mut key = self.record_key(&dir.join("x"));
                key.pop();
                key
            };
            let mut records = self
                .mirror
                .tree()
                .scan_prefix(&prefix)
                .filter_map(|r| r.ok())
                .filter(|(k, _)| k.ends_with(format!(".{}", kind.ext()).as_bytes()))
                .peekable();
            for (name, stamp) in names.into_iter().zip(stamped) {
                let mut record = None;
                while let Some((key, value)) = records.peek() {
                    match key[prefix.len()..].cmp(name.as_bytes()) {
                        std::cmp::Ordering::Less => {
                            missing.push((kind, stem_of(&key[prefix.len()..])));
                            records.next();
                        }
                        std::cmp::Ordering::Equal => {
                            record = Record::decode(value);
                            records.next();
                            break;
                        }
                        std::cmp::Ordering::Greater => break,
                    }
                }
                let ours = stamp.is_some() && record.is_some_and(|r| r.stamp == stamp);
                if !ours {
                    changed.push((kind, dir.join(&name)));
                } else {
                    progress.advance(1);
                }
                if let Some(stamp) = stamp {
                    stamps.insert_name(name, stamp);
                }
            }
            for (key, _) in records {
                missing.push((kind, stem_of(&key[prefix.len()..])));
            }
        }
        self.scan(changed, report, progress).await?;
        // Files the mirror wrote that are gone get written again (one the
        // mirror has not written yet, it writes when it catches up: its
        // record and its checkpoint are committed together). Not trusted:
        // a file put back since the look (a checkout, a restore) that is
        // not what the mirror wrote is kept aside, not overwritten.
        self.rewrite(&missing, false)?;
        Ok(stamps)
    }

    /// Read `paths` and act on what each means: import, re-write, nothing.
    /// A scan of [`BULK_FILES`] or more says in the daemon's log how long
    /// reading, appending and folding took.
    async fn scan(
        &self,
        paths: Vec<(Kind, PathBuf)>,
        report: &mut LoadReport,
        progress: &Progress,
    ) -> Result<(), DomainError> {
        let started = std::time::Instant::now();
        let files = paths.len();
        let findings = self.read_all(paths, progress);
        let read = started.elapsed();
        let mut sorted = Sorted::default();
        for (kind, path, found) in findings {
            self.note_refused(&path, &found);
            self.sort_finding(kind, path, found, &mut sorted, report)
                .await?;
        }
        report.read += files;
        self.restamp(&sorted.restamped)?;
        self.rewrite(&sorted.stale, true)?;
        self.rewrite(&sorted.unknown, false)?;
        let last = self.import_all(sorted.imports, report, progress).await?;
        let appended = started.elapsed();
        let tickets = self.tickets.clone();
        progress.following("indexing the imported files", "events", last, move || {
            tickets.applied()
        });
        self.tickets.wait_for(last).await?;
        self.kb.wait_for(last).await?;
        if files >= BULK_FILES {
            tracing::info!(
                files,
                read_ms = read.as_millis(),
                appended_ms = (appended - read).as_millis(),
                folded_ms = (started.elapsed() - appended).as_millis(),
                "workspace files read back"
            );
        }
        Ok(())
    }

    /// What each of `paths` means against the log, in their order.
    /// Reading back is mostly `stat`s and record lookups: on a large desk,
    /// both cores share it.
    fn read_all(&self, paths: Vec<(Kind, PathBuf)>, progress: &Progress) -> Vec<Read> {
        on_both_cores(paths, |part| {
            part.into_iter()
                .map(|(kind, path)| {
                    let found = self.read_back(kind, &path);
                    progress.advance(1);
                    (kind, path, found)
                })
                .collect()
        })
    }

    /// Give each record its file's new stamp — unless the mirror wrote the
    /// file again since it was read, and its record with it: that record
    /// stands (a swap that finds it is no failure).
    fn restamp(&self, items: &[(Vec<u8>, Record, Stamp)]) -> Result<(), DomainError> {
        let tree = self.mirror.tree();
        for (key, was, stamp) in items {
            let now = Record {
                stamp: Some(*stamp),
                ..*was
            };
            // An `Err` inside: the mirror wrote the file again since.
            let _ = tree
                .compare_and_swap(key, Some(was.encode()), Some(now.encode()))
                .map_err(|e| DomainError::from(ProjectionError::from(e)))?;
        }
        Ok(())
    }

    /// List the file as refused (with the reason) or take it off the list.
    fn note_refused(&self, path: &Path, found: &Result<Finding, String>) {
        let mut refused = crate::sync::lock(&self.refused);
        match found {
            Err(problem) => refused.insert(self.relative(path), problem.clone()),
            Ok(_) => refused.remove(&self.relative(path)),
        };
    }

    /// Put one file's finding on the list of what is done with it (a file
    /// skipped, or not imported, gets a warning in `report`).
    async fn sort_finding(
        &self,
        kind: Kind,
        path: PathBuf,
        found: Result<Finding, String>,
        sorted: &mut Sorted,
        report: &mut LoadReport,
    ) -> Result<(), DomainError> {
        let id = file_stem(&path);
        match found {
            Ok(Finding::InSync) => {}
            Ok(Finding::Stale) => sorted.stale.push((kind, id)),
            Ok(Finding::Restamp { was, stamp }) => {
                sorted.restamped.push((self.record_key(&path), was, stamp));
            }
            Ok(Finding::Unrecorded { payload }) => {
                if self.was_version(&kind.stream(&id), &payload, 0).await? {
                    sorted.stale.push((kind, id));
                } else {
                    report.warnings.push(format!(
                        "not imported {}: it differs from the log and this daemon has no record of writing it",
                        self.relative(&path)
                    ));
                    sorted.unknown.push((kind, id));
                }
            }
            Ok(Finding::Import {
                expected,
                payload,
                seen,
            }) => {
                sorted
                    .imports
                    .push((kind.stream(&id), path, expected, *payload, seen));
            }
            Ok(Finding::Changed { after, payload }) => {
                if self.was_version(&kind.stream(&id), &payload, after).await? {
                    sorted.stale.push((kind, id));
                } else {
                    let expected = ExpectedVersion::Exact(after);
                    sorted
                        .imports
                        .push((kind.stream(&id), path, expected, *payload, None));
                }
            }
            Ok(Finding::NewArticle { payload }) => {
                let stream = kind.stream(&id);
                let expected = match self.store.stream_version(&stream).await? {
                    0 => ExpectedVersion::NoStream,
                    version => ExpectedVersion::Exact(version),
                };
                sorted
                    .imports
                    .push((stream, path, expected, *payload, None));
            }
            Err(problem) => report
                .warnings
                .push(format!("skipped {}: {problem}", self.relative(&path))),
        }
        Ok(())
    }

    /// Append the imports, several at once, counting them in `report`; an
    /// import that lost a race with a newer change is kept aside. The
    /// sequence of the last event appended (0: none).
    async fn import_all(
        &self,
        imports: Vec<Import>,
        report: &mut LoadReport,
        progress: &Progress,
    ) -> Result<u64, DomainError> {
        let store = &self.store;
        progress.counted(
            "importing the workspace files",
            "files",
            imports.len() as u64,
        );
        let mut results = futures::stream::iter(imports)
            .map(|(stream, path, expected, payload, seen)| async move {
                let updated = matches!(
                    payload,
                    Payload::TicketUpdatedFromFile(_) | Payload::KnowledgeUpdatedFromFile(_)
                );
                let article = stream.starts_with("kb-");
                // What the log holds may differ from the file: the store
                // redacts secrets the daemon knows.
                let sent =
                    (seen.is_some() && tinycode_shared::secrets::any()).then(|| payload.clone());
                let appended = store.append(&stream, expected, vec![payload]).await;
                let stored_as_sent = match (&appended, sent) {
                    (Ok(events), Some(sent)) => events
                        .last()
                        .is_some_and(|e| e.payload.as_ref() == Some(&sent)),
                    _ => true,
                };
                let seen = seen.filter(|_| stored_as_sent);
                (path, (article, updated), appended, seen)
            })
            .buffer_unordered(IMPORT_CONCURRENCY);
        let mut last = 0;
        let mut lost_races = Vec::new();
        while let Some((path, updated, appended, seen)) = results.next().await {
            progress.advance(1);
            match appended {
                Ok(events) => {
                    last = last.max(events.last().map_or(0, |e| e.sequence));
                    if let (Some(seen), Some(event)) = (seen, events.last()) {
                        self.just_imported(path, seen, event.stream_version);
                    }
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
        Ok(last)
    }

    /// Was the content `payload` carries the item's content at a version
    /// after `after` (the version the mirror's record names)? Only a write
    /// whose record a crash lost can leave such a file; a hand edit that
    /// puts back an older state is older than the record, and is a hand
    /// edit.
    async fn was_version(
        &self,
        stream: &str,
        payload: &Payload,
        after: u64,
    ) -> Result<bool, DomainError> {
        Ok(match payload {
            Payload::TicketUpdatedFromFile(TicketUpdatedFromFile {
                ticket: Some(ticket),
                ..
            }) => {
                // Ticket events are deltas: fold from the start.
                let mut state = tinycode_shared::proto::Ticket::default();
                let mut found = false;
                for event in self.store.read_stream(stream, 1, usize::MAX).await? {
                    crate::ticket::apply(&mut state, &event);
                    if event.stream_version > after && same_content(&state, ticket) {
                        found = true;
                        break;
                    }
                }
                found
            }
            Payload::KnowledgeUpdatedFromFile(read) => self
                .store
                .read_stream(stream, after + 1, usize::MAX)
                .await?
                .iter()
                .any(|e| article_content(e) == Some(read.content.as_str())),
            _ => false,
        })
    }
}

/// One file read back: its kind, its path, and what it means.
type Read = (Kind, PathBuf, Result<Finding, String>);

/// A file to import: its stream, path, expected version, event, and the
/// ticket file as it was read.
type Import = (String, PathBuf, ExpectedVersion, Payload, Option<Seen>);

/// The findings of a scan, by what is done with them.
#[derive(Default)]
struct Sorted {
    imports: Vec<Import>,
    /// Ours: written again from the model.
    stale: Vec<(Kind, String)>,
    /// Not ours and not imported: kept aside, then written again.
    unknown: Vec<(Kind, String)>,
    /// Ours and current at a new stamp: each record's key, the record as
    /// read, the file's stamp.
    restamped: Vec<(Vec<u8>, Record, Stamp)>,
}

/// `T-1001.json` → `T-1001`.
fn stem_of(name: &[u8]) -> String {
    let name = String::from_utf8_lossy(name);
    match name.rsplit_once('.') {
        Some((stem, _)) => stem.to_string(),
        None => name.into_owned(),
    }
}
