//! The desk: the workspace's tickets and articles held in memory as
//! projections of the event log, mirrored to `tickets/*.json` and
//! `knowledge/*.md`, and searchable.
//!
//! Every change is appended to the log first (with the stream's expected
//! version), then folded into the projection, then written back to the
//! workspace file atomically (temp file + rename), then re-indexed.
//! Nothing here is cached outside memory: the projections are rebuilt from
//! the log at every start.

mod import;
mod knowledge;
mod tickets;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use tinycode_shared::proto::{KnowledgeArticle, Ticket};

use super::ids::{IdError, sanitize_id};
use super::knowledge::EditError;
use super::search::SearchIndex;
use crate::config::Config;
use crate::store::{EventStore, StoreError};
pub(crate) use crate::sync::lock;

pub use import::{FileStamps, LoadReport};
pub use knowledge::AppliedEdit;
pub use tickets::{NewTicket, TicketFilter, now};

/// Stream of one ticket.
pub fn ticket_stream(id: &str) -> String {
    format!("ticket-{id}")
}

/// Stream of one knowledge article.
pub fn article_stream(id: &str) -> String {
    format!("kb-{id}")
}

#[derive(Debug, thiserror::Error)]
pub enum DomainError {
    #[error(
        "ticket {0} does not exist; use list_tickets (or `tinycode ticket list`) to find ticket ids"
    )]
    TicketNotFound(String),
    #[error(
        "knowledge article {0} does not exist; use search_knowledge (or `tinycode kb list`) to find article ids"
    )]
    ArticleNotFound(String),
    #[error("invalid {what}: {source}")]
    BadId {
        what: &'static str,
        #[source]
        source: IdError,
    },
    #[error("`{field}` {problem}")]
    Invalid {
        field: &'static str,
        problem: String,
    },
    #[error(transparent)]
    Edit(#[from] EditError),
    #[error("{0} is being changed by others right now; try again")]
    Busy(String),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("cannot {action} {}: {source}", path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

pub(crate) fn ticket_id(raw: &str) -> Result<String, DomainError> {
    sanitize_id(raw).map_err(|source| DomainError::BadId {
        what: "ticket id",
        source,
    })
}

pub(crate) fn article_id(raw: &str) -> Result<String, DomainError> {
    sanitize_id(raw).map_err(|source| DomainError::BadId {
        what: "article id",
        source,
    })
}

pub struct Desk {
    store: EventStore,
    workspace: PathBuf,
    tickets_dir: PathBuf,
    knowledge_dir: PathBuf,
    queues: Vec<String>,
    tickets: Mutex<BTreeMap<String, Ticket>>,
    articles: Mutex<BTreeMap<String, KnowledgeArticle>>,
    index: Mutex<SearchIndex>,
    /// Knowledge edits are rare and read-modify-write a file: one at a time.
    edit_lock: tokio::sync::Mutex<()>,
}

impl Desk {
    fn new(store: EventStore, workspace: &Path, config: &Config) -> Self {
        Self {
            store,
            workspace: workspace.to_path_buf(),
            tickets_dir: workspace.join(&config.tickets_dir),
            knowledge_dir: workspace.join(&config.knowledge_dir),
            queues: config.queues.clone(),
            tickets: Mutex::new(BTreeMap::new()),
            articles: Mutex::new(BTreeMap::new()),
            index: Mutex::new(SearchIndex::default()),
            edit_lock: tokio::sync::Mutex::new(()),
        }
    }

    pub fn store(&self) -> &EventStore {
        &self.store
    }

    pub fn workspace(&self) -> &Path {
        &self.workspace
    }

    pub fn queues(&self) -> &[String] {
        &self.queues
    }

    /// Workspace-relative form of `path`, for messages and events.
    fn relative(&self, path: &Path) -> String {
        path.strip_prefix(&self.workspace)
            .unwrap_or(path)
            .display()
            .to_string()
    }

    /// Full-text search over tickets and articles.
    pub fn search(
        &self,
        query: &str,
        limit: usize,
        kind: Option<super::search::Kind>,
    ) -> Vec<super::search::Hit> {
        lock(&self.index).search(query, limit, kind)
    }
}

/// Write `content` to `path` atomically: a temp file beside it, then rename.
pub(crate) fn write_atomic(path: &Path, content: &str) -> Result<(), DomainError> {
    let io = |action| {
        move |source| DomainError::Io {
            action,
            path: path.to_path_buf(),
            source,
        }
    };
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(io("create the directory of"))?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    std::fs::write(&tmp, content).map_err(io("write"))?;
    std::fs::rename(&tmp, path).map_err(io("replace"))
}

#[cfg(test)]
pub(crate) mod tests;
