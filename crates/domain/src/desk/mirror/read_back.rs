//! Reading the workspace files back: at start every file (one `stat`
//! each, read only when its stamp differs from the mirror's record), then
//! on every poll the files whose stamp changed; what each file means
//! against the log (ours, stale, a hand edit to import, unknown), and the
//! limits a file must keep to be imported.

use std::path::{Path, PathBuf};
use tinycode_base::progress::Progress;

use futures::StreamExt;
use tinycode_shared::proto::event::Payload;
use tinycode_shared::proto::{KnowledgeFileRead, TicketImported, TicketUpdatedFromFile};

use super::{
    FileStamps, Finding, IMPORT_CONCURRENCY, Kind, Record, content_hash, file_stem, list_dir,
};
use crate::desk::models::article_content;
use crate::desk::{Desk, DomainError, LoadReport, Stamp};
use crate::ids::sanitize_id;
use crate::knowledge::parse_article;
use crate::limits;
use crate::store::{ExpectedVersion, StoreError};
use crate::ticket::{parse_ticket_file, same_content};

impl Desk {
    /// Read back the files that changed (or vanished) since the last scan.
    pub(super) async fn rescan(&self, stamps: &mut FileStamps) -> Result<(), DomainError> {
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
    /// At start each file costs one `stat`, compared with the mirror's
    /// record in one ordered pass over the records (no lookup per file);
    /// only files whose stamp differs from the record are read back. Every
    /// file is stamped: one changed from then on is read again by the
    /// mirror's first poll.
    pub(in crate::desk) async fn scan_all(
        &self,
        report: &mut LoadReport,
        stamps: &mut FileStamps,
        progress: &Progress,
    ) -> Result<(), DomainError> {
        let mut changed = Vec::new();
        let mut missing = Vec::new();
        progress.stage("listing the workspace files");
        let listed = [Kind::Ticket, Kind::Article].map(|kind| {
            let dir = self.dir(kind);
            (kind, list_names(dir, kind.ext()))
        });
        let found: usize = listed.iter().map(|(_, names)| names.len()).sum();
        progress.counted("checking the workspace files", "files", found as u64);
        for (kind, names) in listed {
            let dir = self.dir(kind);
            let stamped = stat_all(dir, &names);
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
            for (name, stamp) in names.iter().zip(stamped) {
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
                let path = dir.join(name);
                let ours = stamp.is_some() && record.is_some_and(|r| r.stamp == stamp);
                if let Some(stamp) = stamp {
                    stamps.insert(path.clone(), stamp);
                }
                if !ours {
                    changed.push((kind, path));
                } else {
                    progress.advance(1);
                }
            }
            for (key, _) in records {
                missing.push((kind, stem_of(&key[prefix.len()..])));
            }
        }
        self.scan(changed, report, progress).await?;
        // Files the mirror wrote that are gone get written again (one the
        // mirror has not written yet, it writes when it catches up: its
        // record and its checkpoint are committed together).
        self.rewrite(&missing, true)
    }

    /// Read `paths` and act on what each means: import, re-write, nothing.
    async fn scan(
        &self,
        paths: Vec<(Kind, PathBuf)>,
        report: &mut LoadReport,
        progress: &Progress,
    ) -> Result<(), DomainError> {
        let mut imports = Vec::new();
        let mut stale = Vec::new();
        let mut unknown = Vec::new();
        // Reading back is mostly `stat`s and record lookups: on a large
        // desk, both cores share it.
        let findings: Vec<(Kind, PathBuf, Result<Finding, String>)> = if paths.len() < 2048 {
            paths
                .into_iter()
                .map(|(kind, path)| {
                    let found = self.read_back(kind, &path);
                    progress.advance(1);
                    (kind, path, found)
                })
                .collect()
        } else {
            let half = paths.len() / 2;
            let mut paths = paths;
            let second = paths.split_off(half);
            let read = |part: Vec<(Kind, PathBuf)>| {
                part.into_iter()
                    .map(|(kind, path)| {
                        let found = self.read_back(kind, &path);
                        progress.advance(1);
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
            {
                let mut refused = crate::sync::lock(&self.refused);
                match &found {
                    Err(problem) => refused.insert(self.relative(&path), problem.clone()),
                    Ok(_) => refused.remove(&self.relative(&path)),
                };
            }
            match found {
                Ok(Finding::InSync) => {}
                Ok(Finding::Stale) => stale.push((kind, id)),
                Ok(Finding::Unrecorded { payload }) => {
                    if self.was_version(&kind.stream(&id), &payload, 0).await? {
                        stale.push((kind, id));
                    } else {
                        report.warnings.push(format!(
                            "not imported {}: it differs from the log and this daemon has no record of writing it",
                            self.relative(&path)
                        ));
                        unknown.push((kind, id));
                    }
                }
                Ok(Finding::Import { expected, payload }) => {
                    imports.push((kind.stream(&id), path, expected, *payload));
                }
                Ok(Finding::Changed { after, payload }) => {
                    if self.was_version(&kind.stream(&id), &payload, after).await? {
                        stale.push((kind, id));
                    } else {
                        let expected = ExpectedVersion::Exact(after);
                        imports.push((kind.stream(&id), path, expected, *payload));
                    }
                }
                Ok(Finding::NewArticle { payload }) => {
                    let stream = kind.stream(&id);
                    let expected = match self.store.stream_version(&stream).await? {
                        0 => ExpectedVersion::NoStream,
                        version => ExpectedVersion::Exact(version),
                    };
                    imports.push((stream, path, expected, *payload));
                }
                Err(problem) => report
                    .warnings
                    .push(format!("skipped {}: {problem}", self.relative(&path))),
            }
        }
        self.rewrite(&stale, true)?;
        self.rewrite(&unknown, false)?;
        let store = &self.store;
        progress.counted(
            "importing the workspace files",
            "files",
            imports.len() as u64,
        );
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
            progress.advance(1);
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
        let tickets = self.tickets.clone();
        progress.following("indexing the imported files", "events", last, move || {
            tickets.applied()
        });
        self.tickets.wait_for(last).await?;
        self.kb.wait_for(last).await?;
        Ok(())
    }

    /// What one file means against the log (`Err`: a reason to skip it).
    fn read_back(&self, kind: Kind, path: &Path) -> Result<Finding, String> {
        let id = sanitize_id(&file_stem(path)).map_err(|e| format!("bad file name: {e}"))?;
        // Only regular files inside the workspace are read: a FIFO, a
        // device or a link leading out is refused without being opened.
        let root = &self.read_roots[usize::from(kind == Kind::Article)];
        let (target, meta) = match crate::files::regular_inside(path, root) {
            Ok(Some(found)) => found,
            Ok(None) => return Ok(Finding::Stale), // vanished: write it again
            Err(refused) => return Err(refused.to_string()),
        };
        let record = self.record(path).map_err(|e| e.to_string())?;
        if record.is_some_and(|r| r.stamp == Some(Stamp::of(&meta))) {
            // Untouched since the mirror recorded it: what it wrote. If the
            // log moved on since, the mirror's catch-up writes it again.
            return Ok(Finding::InSync);
        }
        let (limit, what) = match kind {
            Kind::Ticket => (limits::MAX_TICKET_FILE, "ticket"),
            Kind::Article => (limits::MAX_ARTICLE_FILE, "knowledge"),
        };
        let text = crate::files::read_text(&target, limit, what).map_err(|e| e.to_string())?;
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
                let payload = Box::new(Payload::TicketUpdatedFromFile(TicketUpdatedFromFile {
                    ticket: Some(ticket),
                    file,
                }));
                let Some(record) = record else {
                    // No record of writing it: which version it was edited
                    // from is unknown, so it is not imported — but it may
                    // be a version the log held.
                    return Ok(Finding::Unrecorded { payload });
                };
                Ok(Finding::Changed {
                    after: record.version,
                    payload,
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
                    return Ok(Finding::NewArticle {
                        payload: Box::new(Payload::KnowledgeImported(read)),
                    });
                };
                if text == desired.text {
                    return Ok(Finding::Stale); // re-recorded, not re-written
                }
                let payload = Box::new(Payload::KnowledgeUpdatedFromFile(read));
                let Some(record) = record else {
                    return Ok(Finding::Unrecorded { payload });
                };
                Ok(Finding::Changed {
                    after: record.version,
                    payload,
                })
            }
        }
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

/// The names of `dir`'s visible `*.ext` files, sorted bytewise (the order
/// of the mirror's record keys).
fn list_names(dir: &Path, ext: &str) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let dot_ext = format!(".{ext}");
    let mut names: Vec<String> = entries
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| n.ends_with(&dot_ext) && n.len() > dot_ext.len() && !n.starts_with('.'))
        .collect();
    names.sort_unstable();
    names
}

/// One `stat` per file, on both cores for a large directory.
fn stat_all(dir: &Path, names: &[String]) -> Vec<Option<Stamp>> {
    let stat = |part: &[String]| -> Vec<Option<Stamp>> {
        part.iter().map(|n| Stamp::read(&dir.join(n))).collect()
    };
    if names.len() < 2048 {
        return stat(names);
    }
    let (first, second) = names.split_at(names.len() / 2);
    std::thread::scope(|scope| {
        let other = scope.spawn(|| stat(second));
        let mut all = stat(first);
        all.extend(
            other
                .join()
                .unwrap_or_else(|p| std::panic::resume_unwind(p)),
        );
        all
    })
}

/// `T-1001.json` → `T-1001`.
fn stem_of(name: &[u8]) -> String {
    let name = String::from_utf8_lossy(name);
    match name.rsplit_once('.') {
        Some((stem, _)) => stem.to_string(),
        None => name.into_owned(),
    }
}

/// Why the start-up read-back would refuse the workspace file at `path`
/// (`None`: it would read it). For `tinycode doctor`, which checks a
/// workspace without a running daemon; `root` is where links may lead.
pub fn file_problem(path: &Path, root: &Path) -> Option<String> {
    let article = path.extension().is_some_and(|e| e == "md");
    let check = || -> Result<(), String> {
        let id = sanitize_id(&super::file_stem(path)).map_err(|e| format!("bad file name: {e}"))?;
        let Some((target, _)) =
            crate::files::regular_inside(path, root).map_err(|e| e.to_string())?
        else {
            return Ok(());
        };
        let (limit, what) = if article {
            (limits::MAX_ARTICLE_FILE, "knowledge")
        } else {
            (limits::MAX_TICKET_FILE, "ticket")
        };
        let text = crate::files::read_text(&target, limit, what).map_err(|e| e.to_string())?;
        if article {
            parse_article(&id, &text).map_err(|e| e.to_string())?;
            return Ok(());
        }
        let ticket = parse_ticket_file(&text).map_err(|e| e.to_string())?;
        within_limits(&ticket)?;
        if ticket.id != id {
            return Err(format!(
                "field `id` is {:?} but the file is named {id}.json",
                ticket.id
            ));
        }
        Ok(())
    };
    check().err()
}
