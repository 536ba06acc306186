//! The desk: the workspace's tickets and articles as projections of the
//! event log (sled trees that follow the log from a checkpoint, see
//! [`crate::projection`]), mirrored to `tickets/*.json` and `knowledge/*.md`
//! by the one mirror projector, and searchable.
//!
//! Writers append to the log (with the stream's expected version) and wait
//! until the model's projector has passed their event; they never fold, and
//! never write a workspace file.

mod external;
mod intake;
mod knowledge;
mod mirror;
mod models;
mod open;
mod person;
mod sla;
mod ticket_head;
mod ticket_index;
mod tickets;
mod watch;

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

use super::ids::{IdError, sanitize_id};
use super::knowledge::EditError;
use super::search::SearchIndex;
use crate::projection::{ProjectionError, ProjectorHandle};
use crate::store::{EventStore, StoreError};
pub(crate) use crate::sync::lock;

pub use intake::{Inbound, MAX_EXTERNAL_ID, Received};
pub use knowledge::AppliedEdit;
pub use mirror::{FilesLook, MAX_FILE_BYTES, file_problem};
pub use open::{DeskSettings, LoadReport, Model, read_root};
pub use person::Review;
pub use tickets::{BRIEF_CHARS, NewTicket, TicketFilter, now};
pub use watch::TicketWatch;

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
    #[error(transparent)]
    Projection(#[from] ProjectionError),
    #[error("cannot {action} {}: {source}", path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

pub fn ticket_id(raw: &str) -> Result<String, DomainError> {
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
    /// Categories and queues a decision may name.
    taxonomy: crate::taxonomy::Taxonomy,
    /// The tickets projection (tree `proj-tickets`).
    tickets: ProjectorHandle,
    /// The SLA policies the clocks are computed with.
    sla: Arc<crate::sla::SlaSettings>,
    /// When each ticket owes its next SLA alert (kept by the tickets
    /// projection, followed by the SLA watch).
    schedule: Arc<crate::sla::Schedule>,
    /// The knowledge projection (tree `proj-kb`).
    kb: ProjectorHandle,
    /// The workspace mirror (tree `proj-mirror`).
    mirror: ProjectorHandle,
    /// The mirror's checkpoint last written to its tree.
    mirror_persisted: AtomicU64,
    /// Ticket files just imported, as read (`mirror::Seen`): the mirror
    /// records one it finds unchanged without reading it again.
    imported: Mutex<std::collections::HashMap<std::path::PathBuf, (mirror::Seen, u64)>>,
    /// The articles' search index, kept in step by the knowledge
    /// projection; lives in memory (the tickets' is in their tree).
    index: Arc<Mutex<SearchIndex>>,
    /// Highest `T-<n>` this desk handed out (ids of created tickets).
    issued: AtomicU64,
    /// Knowledge edits are rare: one at a time.
    edit_lock: tokio::sync::Mutex<()>,
    /// Deliveries of one conversation are stored one at a time, striped
    /// by source and conversation (`intake.rs`).
    intake_locks: crate::sync::Striped<64>,
    /// Changes to one ticket from this daemon take turns (striped by id),
    /// so concurrent writers queue instead of conflicting in a loop; the
    /// expected-version check still guards against other writers.
    ticket_locks: crate::sync::Striped<64>,
    /// The urgent order of every ticket, as of the tickets model's
    /// applied sequence it was read at: a board refreshed by many pages
    /// after one change sorts once (`tickets.rs`, `list_urgent`).
    urgent: Mutex<Option<(u64, Arc<Vec<tickets::UrgentRow>>)>>,
    /// Where a symbolic link in `tickets/` or `knowledge/` may lead
    /// (canonical): the workspace, or the folder itself when it lies
    /// outside.
    read_roots: [PathBuf; 2],
    /// Workspace files that are refused, by relative path, with why; kept
    /// until the file is fixed or removed (`daemon status` lists them).
    refused: Mutex<std::collections::BTreeMap<String, String>>,
}

impl Desk {
    pub fn store(&self) -> &EventStore {
        &self.store
    }

    pub fn workspace(&self) -> &Path {
        &self.workspace
    }

    pub fn queues(&self) -> &[String] {
        &self.taxonomy.queues
    }

    pub fn taxonomy(&self) -> &crate::taxonomy::Taxonomy {
        &self.taxonomy
    }

    /// The workspace files refused now (relative path, why), in path order.
    pub fn refused_files(&self) -> Vec<(String, String)> {
        lock(&self.refused)
            .iter()
            .map(|(f, why)| (f.clone(), why.clone()))
            .collect()
    }

    /// Workspace-relative form of `path`, for messages and events.
    fn relative(&self, path: &Path) -> String {
        path.strip_prefix(&self.workspace)
            .unwrap_or(path)
            .display()
            .to_string()
    }

    /// Full-text search over tickets and articles, best first (ties by
    /// id).
    pub fn search(
        &self,
        query: &str,
        limit: usize,
        kind: Option<super::search::Kind>,
    ) -> Result<Vec<super::search::Hit>, DomainError> {
        use super::search::{Hit, Kind};
        let mut hits = if kind == Some(Kind::Ticket) {
            Vec::new()
        } else {
            lock(&self.index).search(query, limit, Some(Kind::Article))
        };
        if kind != Some(Kind::Article) {
            let (ranked, idfs) = ticket_index::search(self.tickets.tree(), query, limit)?;
            let idfs: Vec<(f64, &str)> = idfs.iter().map(|(i, t)| (*i, t.as_str())).collect();
            for r in ranked {
                if let Some(t) = self.stored_ticket(&r.id)? {
                    hits.push(Hit {
                        kind: Kind::Ticket,
                        snippet: super::search::snippet(&ticket_index::body(&t), &idfs),
                        id: r.id,
                        title: t.subject,
                        score: r.score,
                    });
                }
            }
        }
        hits.sort_by(|a, b| b.score.total_cmp(&a.score).then_with(|| a.id.cmp(&b.id)));
        hits.truncate(limit);
        Ok(hits)
    }
}

/// The umask the process started with (for workspace files, which are the
/// person's and keep the usual mode).
static WORKSPACE_UMASK: std::sync::OnceLock<u32> = std::sync::OnceLock::new();

/// Make every file the process creates private (mode 0600, directories
/// 0700), remembering the previous umask for workspace files.
pub fn private_umask() {
    use rustix::fs::Mode;
    let previous = rustix::process::umask(Mode::from_bits_truncate(0o077));
    let _ = WORKSPACE_UMASK.set(previous.bits());
}

/// The mode for a workspace file: the existing file's, else the usual one.
fn workspace_mode(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).map_or_else(
        |_| 0o666 & !WORKSPACE_UMASK.get().copied().unwrap_or(0o022),
        |m| m.permissions().mode() & 0o7777,
    )
}

/// How old a file's modification must be for its stamp to be recorded on
/// reading it ([`Stamp::settled`]).
pub(crate) const STAMP_SETTLED: std::time::Duration = std::time::Duration::from_secs(2);

/// What tells a file changed without reading it: modification time (ns),
/// size and inode (an editor that saves by rename makes a new inode).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stamp {
    pub mtime_ns: u64,
    pub len: u64,
    pub ino: u64,
}

impl Stamp {
    pub fn of(meta: &std::fs::Metadata) -> Self {
        use std::os::unix::fs::MetadataExt;
        Self::from_stat(meta.mtime(), meta.mtime_nsec(), meta.len(), meta.ino())
    }

    /// From a `stat`'s fields: its modification time in seconds and
    /// nanoseconds, its size and inode.
    fn from_stat(mtime: i64, mtime_nsec: i64, len: u64, ino: u64) -> Self {
        Self {
            mtime_ns: (mtime as u64)
                .wrapping_mul(1_000_000_000)
                .wrapping_add(mtime_nsec as u64),
            len,
            ino,
        }
    }

    /// The stamp of the file at `path` now (of a link that leads nowhere,
    /// the link's own: it is read back once, and refused).
    pub fn read(path: &Path) -> Option<Self> {
        std::fs::metadata(path)
            .or_else(|_| std::fs::symlink_metadata(path))
            .ok()
            .map(|m| Self::of(&m))
    }

    /// Modified more than [`STAMP_SETTLED`] ago. Recording a younger stamp
    /// for content just read could miss a write of the same size made
    /// after the read within the file system's timestamp tick.
    pub fn settled(&self) -> bool {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        self.mtime_ns
            .saturating_add(STAMP_SETTLED.as_nanos() as u64)
            < now
    }

    /// [`Stamp::read`] of the file `name` in the open directory `dir`:
    /// only the name is looked up, not the directory's whole path again.
    pub fn read_at(dir: impl rustix::fd::AsFd, name: &str) -> Option<Self> {
        use rustix::fs::{AtFlags, statat};
        let stat = statat(&dir, name, AtFlags::empty())
            .or_else(|_| statat(&dir, name, AtFlags::SYMLINK_NOFOLLOW))
            .ok()?;
        Some(Self::from_stat(
            stat.st_mtime,
            stat.st_mtime_nsec as i64,
            stat.st_size as u64,
            stat.st_ino,
        ))
    }
}

/// Write `content` to `path` atomically and durably: a temp file beside it,
/// fsynced, then renamed (the caller fsyncs the directory). Returns the
/// written file's stamp, taken before the rename: a change made after it
/// shows as a different stamp.
pub(crate) fn write_atomic(path: &Path, content: &str) -> Result<Stamp, DomainError> {
    let io = |action| {
        move |source| DomainError::Io {
            action,
            path: path.to_path_buf(),
            source,
        }
    };
    let meta = crate::files::replace(path, content.as_bytes(), workspace_mode(path))
        .map_err(io("write"))?;
    Ok(Stamp::of(&meta))
}

#[cfg(test)]
pub(crate) mod tests;

#[cfg(test)]
mod stamp_tests {
    use super::Stamp;

    /// The start's `stat` relative to the directory reads the stamp the
    /// mirror records through the path: a file, and a link that leads
    /// nowhere (its own stamp).
    #[test]
    fn a_stamp_read_in_the_directory_is_the_stamp_read_by_path() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(tmp.path().join("T-1.json"), "{}").unwrap();
        std::os::unix::fs::symlink("nowhere.json", tmp.path().join("T-2.json")).unwrap();
        let dir = std::fs::File::open(tmp.path()).unwrap();
        for name in ["T-1.json", "T-2.json"] {
            let by_path = Stamp::read(&tmp.path().join(name));
            assert!(by_path.is_some(), "{name}");
            assert_eq!(Stamp::read_at(&dir, name), by_path, "{name}");
        }
        assert_eq!(Stamp::read_at(&dir, "T-3.json"), None);
    }

    #[test]
    fn a_stamp_is_settled_once_its_file_is_two_seconds_old() {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64;
        let at = |mtime_ns| Stamp {
            mtime_ns,
            len: 2,
            ino: 1,
        };
        assert!(!at(now).settled(), "just written");
        assert!(!at(now - 1_000_000_000).settled(), "a second ago");
        assert!(at(now - 3_000_000_000).settled(), "three seconds ago");
        assert!(!at(u64::MAX).settled(), "in the future");
    }
}
