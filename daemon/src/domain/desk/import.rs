//! Start-up: fold the log into projections, import the workspace's ticket
//! files (new → imported, edited by hand → updated, unchanged → nothing),
//! load the articles and build the search index. A malformed file is
//! skipped with a warning naming the file and the field; it never stops the
//! daemon or touches other tickets.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use futures::StreamExt;
use tinycode_shared::proto::event::Payload;
use tinycode_shared::proto::{Event, Ticket, TicketImported, TicketUpdatedFromFile};

use super::{Desk, DomainError, lock, ticket_stream};
use crate::config::Config;
use crate::domain::ids::sanitize_id;
use crate::domain::knowledge::parse_article;
use crate::domain::ticket::{parse_ticket_file, same_content};
use crate::store::{EventStore, ExpectedVersion, SubscriptionOptions};

/// Ticket files appended concurrently during import (shares flushes).
const IMPORT_CONCURRENCY: usize = 64;

/// Modification time and size of each ticket file at the last scan.
pub type FileStamps = std::collections::HashMap<PathBuf, (Option<std::time::SystemTime>, u64)>;

/// What start-up found.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct LoadReport {
    pub tickets: usize,
    pub imported: usize,
    pub updated: usize,
    pub articles: usize,
    /// One line per skipped file: `path: problem`.
    pub warnings: Vec<String>,
}

impl Desk {
    /// Rebuild projections from the log, import files, index everything.
    pub async fn open(
        store: EventStore,
        workspace: &Path,
        config: &Config,
    ) -> Result<(Arc<Desk>, LoadReport), DomainError> {
        let desk = Arc::new(Desk::new(store, workspace, config));
        desk.fold_log().await?;
        let mut report = LoadReport::default();
        desk.import_ticket_files(&mut report).await?;
        desk.load_articles(&mut report)?;
        desk.reindex_all();
        report.tickets = lock(&desk.tickets).len();
        for warning in &report.warnings {
            tracing::warn!("{warning}");
        }
        tracing::info!(?report, "desk loaded");
        Ok((desk, report))
    }

    pub(crate) async fn fold_log(&self) -> Result<(), DomainError> {
        let mut sub = self.store.subscribe(SubscriptionOptions {
            from_sequence: 1,
            stream_prefix: "ticket-".into(),
            follow: false,
        });
        let mut tickets: std::collections::BTreeMap<String, Ticket> = Default::default();
        while let Some(event) = sub.recv().await {
            let event = event?;
            if let Some(id) = event.stream_id.strip_prefix("ticket-") {
                let ticket = tickets.entry(id.to_string()).or_default();
                crate::domain::ticket::apply(ticket, &event);
            }
        }
        *lock(&self.tickets) = tickets;
        Ok(())
    }

    fn list_dir(dir: &Path, ext: &str) -> Vec<PathBuf> {
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

    /// Parse one ticket file and decide what it means against the log.
    fn plan_import(
        &self,
        path: &Path,
    ) -> Result<Option<(String, ExpectedVersion, Payload)>, String> {
        let stem = path
            .file_stem()
            .map(|s| s.to_string_lossy().to_string())
            .unwrap_or_default();
        let id = sanitize_id(&stem).map_err(|e| format!("bad file name: {e}"))?;
        // The file is read under the projection's lock, which write-back
        // also holds: the file and the projection are compared at one
        // moment, so the daemon's own write-back never reads as a change.
        let tickets = lock(&self.tickets);
        let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read: {e}"))?;
        let known = tickets.get(&id).filter(|t| t.version > 0).cloned();
        drop(tickets);
        let ticket = parse_ticket_file(&text).map_err(|e| e.to_string())?;
        if ticket.id != id {
            return Err(format!(
                "field `id` is {:?} but the file is named {id}.json",
                ticket.id
            ));
        }
        let file = self.relative(path);
        Ok(match known {
            None => Some((
                id,
                ExpectedVersion::NoStream,
                Payload::TicketImported(TicketImported {
                    ticket: Some(ticket),
                    file,
                }),
            )),
            Some(current) if !same_content(&current, &ticket) => Some((
                id,
                ExpectedVersion::Exact(current.version),
                Payload::TicketUpdatedFromFile(TicketUpdatedFromFile {
                    ticket: Some(ticket),
                    file,
                }),
            )),
            Some(_) => None,
        })
    }

    /// Import every ticket file.
    pub async fn import_ticket_files(&self, report: &mut LoadReport) -> Result<(), DomainError> {
        self.import_files(Self::list_dir(&self.tickets_dir, "json"), report)
            .await
    }

    /// Import the ticket files that appeared or changed since the last scan
    /// (by modification time and size), while the daemon runs. A file that
    /// stays malformed is reported once, not at every scan.
    pub async fn rescan_ticket_files(
        &self,
        seen: &mut FileStamps,
    ) -> Result<LoadReport, DomainError> {
        let mut changed = Vec::new();
        let mut present = std::collections::HashSet::new();
        for path in Self::list_dir(&self.tickets_dir, "json") {
            let stamp = std::fs::metadata(&path)
                .ok()
                .map(|m| (m.modified().ok(), m.len()));
            present.insert(path.clone());
            if seen.get(&path) != stamp.as_ref() {
                if let Some(stamp) = stamp {
                    seen.insert(path.clone(), stamp);
                }
                changed.push(path);
            }
        }
        seen.retain(|p, _| present.contains(p));
        let mut report = LoadReport::default();
        if !changed.is_empty() {
            self.import_files(changed, &mut report).await?;
            for warning in &report.warnings {
                tracing::warn!("{warning}");
            }
        }
        Ok(report)
    }

    async fn import_files(
        &self,
        paths: Vec<PathBuf>,
        report: &mut LoadReport,
    ) -> Result<(), DomainError> {
        let mut plans = Vec::new();
        for path in paths {
            match self.plan_import(&path) {
                Ok(Some(plan)) => plans.push(plan),
                Ok(None) => {}
                Err(problem) => report
                    .warnings
                    .push(format!("skipped {}: {problem}", self.relative(&path))),
            }
        }
        let store = &self.store;
        let mut results = futures::stream::iter(plans)
            .map(|(id, expected, payload)| async move {
                let updated = matches!(payload, Payload::TicketUpdatedFromFile(_));
                let appended = store
                    .append(&ticket_stream(&id), expected, vec![payload])
                    .await;
                (id, updated, appended)
            })
            .buffer_unordered(IMPORT_CONCURRENCY);
        while let Some((id, updated, appended)) = results.next().await {
            match appended {
                Ok(events) => {
                    self.fold(&events, false);
                    if updated {
                        report.updated += 1;
                    } else {
                        report.imported += 1;
                    }
                }
                Err(crate::store::StoreError::Conflict { .. }) => report
                    .warnings
                    .push(format!("skipped tickets/{id}.json: it changed while being imported; it is picked up next time")),
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    fn load_articles(&self, report: &mut LoadReport) -> Result<(), DomainError> {
        let mut articles = lock(&self.articles);
        for path in Self::list_dir(&self.knowledge_dir, "md") {
            let stem = path
                .file_stem()
                .map(|s| s.to_string_lossy().to_string())
                .unwrap_or_default();
            let loaded = sanitize_id(&stem)
                .map_err(|e| format!("bad file name: {e}"))
                .and_then(|id| {
                    let text =
                        std::fs::read_to_string(&path).map_err(|e| format!("cannot read: {e}"))?;
                    let mut article = parse_article(&id, &text).map_err(|e| e.to_string())?;
                    if article.id != id {
                        report.warnings.push(format!(
                            "{}: frontmatter id {:?} differs from the file name; using {id}",
                            self.relative(&path),
                            article.id
                        ));
                        article.id = id.clone();
                    }
                    Ok((id, article))
                });
            match loaded {
                Ok((id, article)) => {
                    articles.insert(id, article);
                }
                Err(problem) => report
                    .warnings
                    .push(format!("skipped {}: {problem}", self.relative(&path))),
            }
        }
        report.articles = articles.len();
        Ok(())
    }

    fn reindex_all(&self) {
        let tickets: Vec<Ticket> = lock(&self.tickets).values().cloned().collect();
        for t in &tickets {
            self.index_ticket(t);
        }
        let articles: Vec<_> = lock(&self.articles).values().cloned().collect();
        for a in &articles {
            self.index_article(a);
        }
    }

    /// Fold freshly appended ticket events into the projection (in order,
    /// idempotently, catching up from the log on a gap); with `write`, the
    /// changed tickets are written back to their files. Returns them.
    pub(crate) fn fold(&self, events: &[Arc<Event>], write: bool) -> Vec<Ticket> {
        let mut changed: Vec<Ticket> = Vec::new();
        let mut tickets = lock(&self.tickets);
        for event in events {
            let Some(id) = event.stream_id.strip_prefix("ticket-") else {
                continue;
            };
            let ticket = tickets.entry(id.to_string()).or_default();
            if event.stream_version <= ticket.version {
                continue; // already folded
            }
            if event.stream_version > ticket.version + 1 {
                // Another writer's events landed in between: read them.
                if let Ok(missing) =
                    self.store
                        .read_stream(&event.stream_id, ticket.version + 1, usize::MAX)
                {
                    for e in missing
                        .iter()
                        .filter(|e| e.stream_version < event.stream_version)
                    {
                        crate::domain::ticket::apply(ticket, e);
                    }
                }
            }
            crate::domain::ticket::apply(ticket, event);
            match changed.iter_mut().find(|t| t.id == ticket.id) {
                Some(slot) => *slot = ticket.clone(),
                None => changed.push(ticket.clone()),
            }
        }
        if write {
            // Under the lock, so files are written in version order.
            for t in &changed {
                let path = self.tickets_dir.join(format!("{}.json", t.id));
                if let Err(e) =
                    super::write_atomic(&path, &crate::domain::ticket::render_ticket_file(t))
                {
                    tracing::error!(error = %e, "ticket write-back failed; the log has the change");
                }
            }
        }
        drop(tickets);
        for t in &changed {
            self.index_ticket(t);
        }
        changed
    }
}
