//! The workspace mirror: the one writer of `tickets/<id>.json` and
//! `knowledge/<id>.md`, a projector that follows the log from its
//! checkpoint (tree `proj-mirror`).
//!
//! For every ticket or article event it writes the file from the tickets or
//! knowledge projection (temp file + fsync + rename, then the directory is
//! fsynced), and records per file, in the same sled batch as its
//! checkpoint, the stream version, the sequence and the content hash it
//! wrote (`follow.rs`). Files are read back by `read_back.rs` (at start, and
//! every poll), and `finding.rs` says what each one means:
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

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::time::Duration;

use tinycode_shared::proto::event::Payload;

use super::models::{decode_ticket_head, stored_article, ticket_key};
use super::{Desk, DomainError, Stamp, article_stream, lock, ticket_stream};
use crate::projection::{self, ProjectionError, decode_u64};
use crate::store::ExpectedVersion;
use crate::ticket::{parse_ticket_file, render_ticket_file, same_content};

mod finding;
mod follow;
mod look;
mod read_back;
pub use finding::file_problem;
pub use look::FilesLook;

/// Version of the mirror's records.
const VERSION: u32 = 1;
const RECORD_PREFIX: &[u8] = b"f/";
/// Files appended concurrently during an import (shares flushes).
const IMPORT_CONCURRENCY: usize = 64;
/// A scan of this many files or more is logged with its stages.
const BULK_FILES: usize = 1000;
/// A ticket or article file larger than this is never read (the largest
/// limit of either kind).
pub const MAX_FILE_BYTES: u64 = crate::limits::MAX_TICKET_FILE;
/// Events handled per batch at most.
const MAX_BATCH: usize = 256;
/// A workspace file that cannot be written is tried again after this.
const MIRROR_RETRY: Duration = Duration::from_secs(1);
/// A batch smaller than [`MAX_BATCH`] that touches files waits this long
/// for more events before it writes them: a ticket being triaged is
/// changed by several appends a few milliseconds apart, and its file is
/// then written (temp file, fsync, rename) once for all of them.
const COALESCE: Duration = Duration::from_millis(25);

/// Each file's stamp at the last scan, by its name: ticket and article
/// files differ by extension, and a large desk keeps one entry per file
/// (a name is a fifth of a whole path's bytes).
#[derive(Debug, Default)]
pub struct FileStamps(HashMap<Box<OsStr>, Stamp>);

impl FileStamps {
    fn with_capacity(files: usize) -> Self {
        Self(HashMap::with_capacity(files))
    }

    fn name(path: &Path) -> &OsStr {
        path.file_name().unwrap_or(path.as_os_str())
    }

    fn get(&self, path: &Path) -> Option<&Stamp> {
        self.0.get(Self::name(path))
    }

    fn insert(&mut self, path: &Path, stamp: Stamp) {
        self.0.insert(Self::name(path).into(), stamp);
    }

    fn insert_name(&mut self, name: String, stamp: Stamp) {
        self.0
            .insert(OsString::from(name).into_boxed_os_str(), stamp);
    }

    fn remove(&mut self, path: &Path) {
        self.0.remove(Self::name(path));
    }

    /// The files' names.
    fn names(&self) -> impl Iterator<Item = &OsStr> {
        self.0.keys().map(|name| &**name)
    }
}

impl Extend<(PathBuf, Stamp)> for FileStamps {
    fn extend<I: IntoIterator<Item = (PathBuf, Stamp)>>(&mut self, files: I) {
        for (path, stamp) in files {
            self.insert(&path, stamp);
        }
    }
}

/// A file brought up to the model: its record, and its stamp when the
/// mirror wrote it.
struct Synced {
    key: Vec<u8>,
    record: Record,
    written: Option<Stamp>,
}

/// A file as the read-back found it: its content's hash and its stamp
/// before it was read.
#[derive(Debug, Clone, Copy)]
pub(in crate::desk) struct Seen {
    hash: u64,
    stamp: Stamp,
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
    crate::fnv::fnv1a(text.bytes())
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
    /// Ours and current, at a stamp the mirror has no record of (the
    /// workspace was copied, restored from a backup, or touched): the
    /// record `was` takes the file's `stamp`, so the next start knows the
    /// file by its stamp instead of reading it again. Only a settled stamp
    /// ([`Stamp::settled`]); a file just written is looked at again by the
    /// next scan.
    Restamp { was: Record, stamp: Stamp },
    /// Differs from the model, and the mirror has no record of writing it
    /// (its records were rebuilt, an older daemon wrote it, a copied
    /// workspace): ours and written again when its content is a version
    /// the log held; otherwise kept aside, then written from the model.
    Unrecorded { payload: Box<Payload> },
    /// New or edited by hand: append this (`seen`: the ticket file as it
    /// was read, set by `read_back`).
    Import {
        expected: ExpectedVersion,
        payload: Box<Payload>,
        seen: Option<Seen>,
    },
    /// Differs from what the mirror recorded writing at version `after`:
    /// a hand edit (import `payload`), unless it is a later version whose
    /// record a crash lost (stale). Decided against the log.
    Changed { after: u64, payload: Box<Payload> },
    /// An article never imported; an article edited before imports existed
    /// has a stream already, so the expected version comes from the log.
    NewArticle { payload: Box<Payload> },
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

    /// Remember a ticket file imported as `seen`, at stream `version`.
    pub(super) fn just_imported(&self, path: PathBuf, seen: Seen, version: u64) {
        lock(&self.imported).insert(path, (seen, version));
    }

    /// The record of a ticket file just imported and untouched since: the
    /// model holds the version imported from it and the file has the stamp
    /// it had when read, so it holds what was imported — neither read nor
    /// rendered again (`None`: `sync_file` decides).
    fn unchanged_import(&self, id: &str, sequence: u64) -> Result<Option<Synced>, DomainError> {
        let path = self.file_path(Kind::Ticket, id);
        let Some((seen, version)) = lock(&self.imported).remove(&path) else {
            return Ok(None);
        };
        let stored = self
            .tickets
            .tree()
            .get(ticket_key(id))
            .map_err(ProjectionError::from)?
            .map(|b| decode_ticket_head(&b))
            .transpose()?;
        if stored.is_none_or(|t| t.version != version) || Stamp::read(&path) != Some(seen.stamp) {
            return Ok(None);
        }
        let record = Record {
            version,
            sequence,
            hash: seen.hash,
            stamp: Some(seen.stamp),
        };
        Ok(Some(Synced {
            key: self.record_key(&path),
            record,
            written: None,
        }))
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
        // What is there now, if it is a file that may be read (a FIFO or
        // a link leading out is replaced, never read or followed).
        let current = crate::files::regular_inside(
            &path,
            &self.read_roots[usize::from(kind == Kind::Article)],
        )
        .ok()
        .flatten()
        .and_then(|(target, _)| crate::files::read_text(&target, MAX_FILE_BYTES, "workspace").ok());
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
}

/// A file's name without its extension (the item's id, unchecked).
fn file_stem(path: &Path) -> String {
    path.file_stem()
        .map(|s| s.to_string_lossy().to_string())
        .unwrap_or_default()
}

/// `work` over `items`, in their order: on a large desk (2,048 items or
/// more) the second half on a thread of its own, so both cores share it.
fn on_both_cores<T: Send, R: Send>(
    mut items: Vec<T>,
    work: impl Fn(Vec<T>) -> Vec<R> + Sync,
) -> Vec<R> {
    if items.len() < 2048 {
        return work(items);
    }
    let second = items.split_off(items.len() / 2);
    std::thread::scope(|scope| {
        let other = scope.spawn(|| work(second));
        let mut all = work(items);
        all.extend(
            other
                .join()
                .unwrap_or_else(|p| std::panic::resume_unwind(p)),
        );
        all
    })
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

    #[tokio::test]
    async fn a_ticket_file_just_imported_is_recorded_unread_only_while_untouched_and_current() {
        let (tmp, ws) = crate::desk::tests::fixture_copy();
        let (desk, _, store) = crate::desk::tests::open(&ws, &tmp.path().join("db")).await;
        let path = desk.file_path(Kind::Ticket, "T-1001");
        let text = std::fs::read_to_string(&path).unwrap();
        let version = desk.get_ticket("T-1001").unwrap().version;
        let seen = Seen {
            hash: content_hash(&text),
            stamp: Stamp::read(&path).unwrap(),
        };
        // Untouched, the model at the version imported: recorded as read.
        desk.just_imported(path.clone(), seen, version);
        let synced = desk.unchanged_import("T-1001", 42).unwrap().unwrap();
        assert_eq!(synced.key, desk.record_key(&path));
        assert_eq!(
            synced.record,
            Record {
                version,
                sequence: 42,
                hash: seen.hash,
                stamp: Some(seen.stamp),
            }
        );
        assert!(synced.written.is_none());
        // Once only: the entry is taken.
        assert!(desk.unchanged_import("T-1001", 43).unwrap().is_none());
        // The model moved on since the import: the mirror decides.
        desk.just_imported(path.clone(), seen, version - 1);
        assert!(desk.unchanged_import("T-1001", 44).unwrap().is_none());
        // The file changed after it was read: the mirror decides.
        std::fs::write(&path, format!("{text}\n")).unwrap();
        desk.just_imported(path.clone(), seen, version);
        assert!(desk.unchanged_import("T-1001", 45).unwrap().is_none());
        // Not imported by this read-back.
        assert!(desk.unchanged_import("T-1002", 46).unwrap().is_none());
        store.close().await.unwrap();
    }
}
