//! What one workspace file means against the log (ours, stale, a hand edit
//! to import, unknown), and the limits a file must keep to be imported.

use std::path::Path;

use tinycode_shared::proto::event::Payload;
use tinycode_shared::proto::{KnowledgeFileRead, TicketImported, TicketUpdatedFromFile};

use super::{Desired, Finding, Kind, Record, Seen, content_hash, file_stem};
use crate::desk::{Desk, Stamp};
use crate::ids::sanitize_id;
use crate::knowledge::parse_article;
use crate::limits;
use crate::store::ExpectedVersion;
use crate::ticket::parse_ticket_file;

impl Desk {
    /// What one file means against the log (`Err`: a reason to skip it).
    pub(super) fn read_back(&self, kind: Kind, path: &Path) -> Result<Finding, String> {
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
            let stamp = Stamp::of(&meta);
            return Ok(if record.version < desired.version {
                Finding::Stale
            } else if stamp.settled() {
                Finding::Restamp {
                    was: *record,
                    stamp,
                }
            } else {
                // Just written: looked at again by the next scan.
                Finding::InSync
            });
        }
        let read = FileRead {
            id,
            text,
            file: self.relative(path),
            record,
            desired,
        };
        match kind {
            Kind::Ticket => {
                let mut found = read.ticket_finding();
                if let Ok(Finding::Import { seen, .. }) = &mut found {
                    let stamp = Stamp::of(&meta);
                    *seen = Some(Seen { hash, stamp });
                }
                found
            }
            Kind::Article => read.article_finding(),
        }
    }
}

/// A file whose content differs from what the mirror recorded writing.
struct FileRead {
    /// The item's id (the file's stem, checked).
    id: String,
    text: String,
    /// The file, relative to the workspace.
    file: String,
    record: Option<Record>,
    /// The item as the model has it (`None`: no stream yet).
    desired: Option<Desired>,
}

impl FileRead {
    /// A ticket file: import it, or (when it is the model's or a version
    /// the log may have held) leave it to be written again.
    fn ticket_finding(self) -> Result<Finding, String> {
        let Self {
            id,
            text,
            file,
            record,
            desired,
        } = self;
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
                seen: None,
            });
        };
        if Desk::same_as_model(&text, &desired) {
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

    /// An article file: import it, or leave it to be written again.
    fn article_finding(self) -> Result<Finding, String> {
        let Self {
            id,
            text,
            file,
            record,
            desired,
        } = self;
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
