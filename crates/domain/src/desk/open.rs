//! Start-up, rebuilds and settling of the desk's projections.
//!
//! Start: the tickets and knowledge projectors resume from their
//! checkpoints and catch up with the log; the mirror reads the workspace
//! files back (hand edits made while the daemon was down are imported, stale
//! files re-written, missing ones written), then follows the log from its
//! own checkpoint.

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::models::{KnowledgeModel, TicketsModel};
use super::{Desk, DomainError, mirror};
use crate::projection::{self, Projector};
use crate::search::SearchIndex;
use crate::store::EventStore;

/// What start-up found.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct LoadReport {
    pub tickets: usize,
    /// Ticket files new to the log.
    pub imported: usize,
    /// Ticket files edited by hand.
    pub updated: usize,
    pub articles: usize,
    pub articles_imported: usize,
    pub articles_updated: usize,
    /// Files looked at again: their stamp differed from the mirror's record
    /// of them (new, edited, copied, touched), or they have none (a file
    /// refused, such as a FIFO, is looked at by every start).
    pub read: usize,
    /// One line per skipped file: `path: problem`.
    pub warnings: Vec<String>,
}

/// The desk's read models, by name (`tinycode admin rebuild MODEL`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Model {
    Tickets,
    Knowledge,
    Mirror,
}

impl Model {
    pub const ALL: [Model; 3] = [Model::Tickets, Model::Knowledge, Model::Mirror];

    pub fn name(self) -> &'static str {
        match self {
            Model::Tickets => "tickets",
            Model::Knowledge => "kb",
            Model::Mirror => "mirror",
        }
    }

    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|m| m.name() == name)
    }
}

/// What a desk is opened with: where its files are, its taxonomy, and how
/// often the workspace is read back. The daemon makes it from its config;
/// the desk never reads the config itself.
#[derive(Debug, Clone)]
pub struct DeskSettings {
    /// Workspace-relative folder of `<id>.json` tickets.
    pub tickets_dir: PathBuf,
    /// Workspace-relative folder of `<id>.md` articles.
    pub knowledge_dir: PathBuf,
    /// Categories a classification may name (empty: the business rules').
    pub categories: Vec<String>,
    pub queues: Vec<String>,
    /// How often the workspace files are read back for hand edits.
    pub poll_interval: Duration,
    /// Where a long start reports how far it is (files read, events
    /// indexed).
    pub progress: Arc<tinycode_base::progress::Progress>,
    /// SLA policies and business hours (`sla`).
    pub sla: crate::sla::SlaSettings,
}

impl Default for DeskSettings {
    fn default() -> Self {
        Self {
            tickets_dir: "tickets".into(),
            knowledge_dir: "knowledge".into(),
            categories: Vec::new(),
            queues: Vec::new(),
            poll_interval: Duration::from_millis(500),
            progress: Arc::default(),
            sla: crate::sla::SlaSettings::default(),
        }
    }
}

impl Desk {
    /// Open the projections, catch up, read the workspace files back.
    pub async fn open(
        store: EventStore,
        workspace: &Path,
        config: &DeskSettings,
    ) -> Result<(Arc<Desk>, LoadReport), DomainError> {
        let look = mirror::FilesLook::start(workspace, config);
        Self::open_looked(store, workspace, config, look).await
    }

    /// [`Desk::open`] with the look at the workspace's files already
    /// started (the daemon starts it before it opens the log).
    pub async fn open_looked(
        store: EventStore,
        workspace: &Path,
        config: &DeskSettings,
        look: mirror::FilesLook,
    ) -> Result<(Arc<Desk>, LoadReport), DomainError> {
        let (desk, checkpoint, reporter) = Self::assemble(store, workspace, config)?;
        let progress = Arc::clone(&config.progress);
        let started = std::time::Instant::now();
        desk.catch_up(&progress).await?;
        let caught_up = started.elapsed();
        let mut report = LoadReport::default();
        let stamps = desk.scan_all(look, &mut report, &progress).await?;
        let scanned = started.elapsed();
        let poll = config.poll_interval.max(Duration::from_millis(10));
        tokio::spawn(Arc::clone(&desk).run_mirror(checkpoint, reporter, poll, stamps));
        desk.index_and_write(&progress).await?;
        desk.watch_sla();
        tracing::info!(
            caught_up_ms = caught_up.as_millis(),
            scanned_ms = (scanned - caught_up).as_millis(),
            settled_ms = (started.elapsed() - scanned).as_millis(),
            "desk start-up"
        );
        report.tickets = desk.ticket_count()?;
        report.articles = desk.article_count()?;
        for warning in &report.warnings {
            tracing::warn!("{warning}");
        }
        tracing::info!(?report, "desk loaded");
        Ok((desk, report))
    }

    /// The desk with its projectors started; the mirror's checkpoint and
    /// the reporter its task (not started yet) answers through.
    fn assemble(
        store: EventStore,
        workspace: &Path,
        config: &DeskSettings,
    ) -> Result<(Arc<Desk>, u64, projection::Reporter), DomainError> {
        let index = Arc::new(Mutex::new(SearchIndex::default()));
        let sla = Arc::new(config.sla.clone());
        let schedule = Arc::new(crate::sla::Schedule::default());
        let tickets = Projector::spawn(
            &store,
            Arc::new(TicketsModel {
                sla: Arc::clone(&sla),
                schedule: Arc::clone(&schedule),
                stamped: Default::default(),
            }),
        )?;
        let kb = Projector::spawn(&store, Arc::new(KnowledgeModel::new(Arc::clone(&index))))?;
        let (mirror_tree, checkpoint) = mirror::open_state(&store)?;
        let (mirror, reporter) = projection::channel("mirror", mirror_tree, checkpoint);
        let tickets_dir = workspace.join(&config.tickets_dir);
        let knowledge_dir = workspace.join(&config.knowledge_dir);
        let read_roots = [&tickets_dir, &knowledge_dir].map(|dir| read_root(workspace, dir));
        let desk = Arc::new(Desk {
            workspace: workspace.to_path_buf(),
            tickets_dir,
            knowledge_dir,
            read_roots,
            refused: Mutex::default(),
            taxonomy: {
                let rules: String = crate::rules::read(workspace)
                    .into_iter()
                    .map(|(_, text)| text)
                    .collect::<Vec<_>>()
                    .join("\n");
                crate::taxonomy::Taxonomy::new(&config.categories, &rules, &config.queues)
            },
            tickets,
            sla,
            schedule,
            kb,
            mirror,
            mirror_persisted: AtomicU64::new(checkpoint),
            imported: Mutex::default(),
            index,
            issued: AtomicU64::new(0),
            edit_lock: tokio::sync::Mutex::new(()),
            intake_locks: Default::default(),
            ticket_locks: crate::sync::Striped::default(),
            urgent: Mutex::default(),
            store,
        });
        Ok((desk, checkpoint, reporter))
    }

    /// Wait until the tickets and knowledge models have the log as it is
    /// now.
    async fn catch_up(
        &self,
        progress: &tinycode_base::progress::Progress,
    ) -> Result<(), DomainError> {
        let head = self.store.last_sequence();
        let tickets = self.tickets.clone();
        progress.following(
            "catching up the desk's read models",
            "events",
            head,
            move || tickets.applied(),
        );
        self.tickets.wait_for(head).await?;
        self.kb.wait_for(head).await?;
        Ok(())
    }

    /// Wait until the search index and the workspace files have the log as
    /// it is now. Each wait a stage of its own: a large desk's search index
    /// and files take a while, and whoever asks sees them move.
    async fn index_and_write(
        &self,
        progress: &tinycode_base::progress::Progress,
    ) -> Result<(), DomainError> {
        let head = self.store.last_sequence();
        let tickets = self.tickets.clone();
        progress.following(
            "indexing the tickets for search",
            "events",
            head,
            move || tickets.indexed(),
        );
        self.tickets.wait_indexed(head).await?;
        let mirror = self.mirror.clone();
        progress.following("writing the workspace files", "events", head, move || {
            mirror.applied()
        });
        self.settled().await
    }

    /// Wait until every model and every workspace file has caught up with
    /// the log as it is now.
    pub async fn settled(&self) -> Result<(), DomainError> {
        let head = self.store.last_sequence();
        self.tickets.wait_indexed(head).await?;
        self.kb.wait_indexed(head).await?;
        self.mirror.wait_for(head).await?;
        Ok(())
    }

    /// Fold the log again into `model` from scratch; returns the sequence
    /// it caught up to.
    pub async fn rebuild(&self, model: Model) -> Result<u64, DomainError> {
        let handle = match model {
            Model::Tickets => &self.tickets,
            Model::Knowledge => &self.kb,
            Model::Mirror => &self.mirror,
        };
        Ok(handle.rebuild().await?)
    }

    /// The desk's projectors: tickets, knowledge, the workspace mirror.
    pub fn projectors(&self) -> [&crate::projection::ProjectorHandle; 3] {
        [&self.tickets, &self.kb, &self.mirror]
    }

    /// The last sequence `model` has applied.
    pub fn applied(&self, model: Model) -> u64 {
        match model {
            Model::Tickets => self.tickets.applied(),
            Model::Knowledge => self.kb.applied(),
            Model::Mirror => self.mirror.applied(),
        }
    }
}

/// Where a link in `dir` may lead: the workspace when `dir` lies inside
/// it, else `dir` itself (canonical; as given when it cannot be resolved).
pub fn read_root(workspace: &Path, dir: &Path) -> PathBuf {
    let canonical = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    let (root, dir) = (canonical(workspace), canonical(dir));
    if dir.starts_with(&root) { root } else { dir }
}
