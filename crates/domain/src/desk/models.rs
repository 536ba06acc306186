//! The desk's two read models, each a [`Projection`] of the log and the
//! only code that applies events to it:
//!
//! - tickets (tree `proj-tickets`): `t/<id>` → the folded `Ticket`, and the
//!   tickets' search index beside them (`ticket_index.rs`);
//! - knowledge (tree `proj-kb`): `c/<id>` → the article file's content,
//!   `v/<id>` → the `kb-<id>` version; articles are few, and their search
//!   index is in memory, kept in step after each committed batch.

use std::sync::{Arc, Mutex};

use prost::Message;
use tinycode_shared::proto::event::Payload;
use tinycode_shared::proto::{Event, KnowledgeArticle, Ticket};

use super::lock;
use crate::knowledge::parse_article;
use crate::projection::{Projection, ProjectionError, Writes, decode_u64};
use crate::search::{Document, Kind, SearchIndex};

const TICKET_PREFIX: &[u8] = b"t/";
const CONTENT_PREFIX: &[u8] = b"c/";
const VERSION_PREFIX: &[u8] = b"v/";

pub(super) fn ticket_key(id: &str) -> Vec<u8> {
    [TICKET_PREFIX, id.as_bytes()].concat()
}

fn content_key(id: &str) -> Vec<u8> {
    [CONTENT_PREFIX, id.as_bytes()].concat()
}

fn version_key(id: &str) -> Vec<u8> {
    [VERSION_PREFIX, id.as_bytes()].concat()
}

pub(super) fn decode_ticket(bytes: &[u8]) -> Result<Ticket, ProjectionError> {
    Ticket::decode(bytes).map_err(|e| ProjectionError::Corrupt(format!("a stored ticket: {e}")))
}

/// Tickets folded from `ticket-<id>` streams.
pub struct TicketsModel;

impl Projection for TicketsModel {
    fn name(&self) -> &'static str {
        "tickets"
    }

    fn version(&self) -> u32 {
        3
    }

    fn apply(&self, writes: &mut Writes<'_>, event: &Event) -> Result<(), ProjectionError> {
        let Some(id) = event.stream_id.strip_prefix("ticket-") else {
            return Ok(());
        };
        let key = ticket_key(id);
        let mut ticket = match writes.get(&key)? {
            Some(bytes) => decode_ticket(&bytes)?,
            None => Ticket::default(),
        };
        if event.stream_version <= ticket.version {
            return Ok(()); // folded before (cannot happen past a checkpoint)
        }
        crate::ticket::apply(&mut ticket, event);
        if ticket.version == event.stream_version {
            writes.put(key, ticket.encode_to_vec());
        }
        Ok(())
    }

    /// Index the tickets this batch changed, once each.
    fn finish(&self, writes: &mut Writes<'_>) -> Result<(), ProjectionError> {
        let changed: Vec<Ticket> = writes
            .changed()
            .filter(|(key, _)| key.starts_with(TICKET_PREFIX))
            .filter_map(|(_, value)| value.map(decode_ticket))
            .collect::<Result<_, _>>()?;
        for ticket in &changed {
            super::ticket_index::index(writes, ticket)?;
        }
        Ok(())
    }
}

/// Knowledge articles: the file content as the log has it.
pub struct KnowledgeModel {
    index: Arc<Mutex<SearchIndex>>,
}

impl KnowledgeModel {
    pub(super) fn new(index: Arc<Mutex<SearchIndex>>) -> Self {
        Self { index }
    }

    fn indexed(&self, id: &str, content: &str) {
        if let Some(a) = parse_stored(id, content) {
            lock(&self.index).upsert(Document {
                kind: Kind::Article,
                id: &a.id,
                title: &a.title,
                keywords: &a.tags,
                body: &a.body,
            });
        }
    }
}

/// An article's stored content, parsed; `None` (logged) when it no longer
/// parses.
pub(super) fn parse_stored(id: &str, content: &str) -> Option<KnowledgeArticle> {
    match parse_article(id, content) {
        Ok(mut article) => {
            article.id = id.to_string();
            Some(article)
        }
        Err(e) => {
            tracing::warn!(article = id, error = %e, "a stored article does not parse");
            None
        }
    }
}

/// Content and version of an article, read from the knowledge tree.
pub(super) fn stored_article(
    tree: &sled::Tree,
    id: &str,
) -> Result<Option<(String, u64)>, ProjectionError> {
    let Some(content) = tree.get(content_key(id))? else {
        return Ok(None);
    };
    let version = tree
        .get(version_key(id))?
        .map(|v| decode_u64(&v))
        .unwrap_or(0);
    Ok(Some((
        String::from_utf8_lossy(&content).to_string(),
        version,
    )))
}

/// Ids and contents of every article, ordered by id.
pub(super) fn all_articles(
    tree: &sled::Tree,
) -> impl Iterator<Item = Result<(String, String), ProjectionError>> {
    tree.scan_prefix(CONTENT_PREFIX).map(|row| {
        let (key, value) = row?;
        Ok((
            String::from_utf8_lossy(&key[CONTENT_PREFIX.len()..]).to_string(),
            String::from_utf8_lossy(&value).to_string(),
        ))
    })
}

/// The content of an article after `event`, when it sets it.
pub(super) fn article_content(event: &Event) -> Option<&str> {
    match event.payload.as_ref()? {
        Payload::KnowledgeImported(e) | Payload::KnowledgeUpdatedFromFile(e) => Some(&e.content),
        Payload::KnowledgeEdited(e) => Some(&e.content_after),
        _ => None,
    }
}

impl Projection for KnowledgeModel {
    fn name(&self) -> &'static str {
        "kb"
    }

    fn version(&self) -> u32 {
        1
    }

    /// Index every stored article.
    fn opened(&self, tree: &sled::Tree) -> Result<(), ProjectionError> {
        for row in all_articles(tree) {
            let (id, content) = row?;
            self.indexed(&id, &content);
        }
        Ok(())
    }

    fn apply(&self, writes: &mut Writes<'_>, event: &Event) -> Result<(), ProjectionError> {
        let (Some(id), Some(content)) =
            (event.stream_id.strip_prefix("kb-"), article_content(event))
        else {
            return Ok(());
        };
        writes.put(content_key(id), content.as_bytes().to_vec());
        writes.put(version_key(id), event.stream_version.to_be_bytes().to_vec());
        Ok(())
    }

    fn committed(&self, writes: &Writes<'_>) {
        for (key, value) in writes.changed() {
            if let (Some(id), Some(value)) = (key.strip_prefix(CONTENT_PREFIX), value) {
                self.indexed(
                    &String::from_utf8_lossy(id),
                    &String::from_utf8_lossy(value),
                );
            }
        }
    }
}
