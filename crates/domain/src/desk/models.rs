//! The desk's two read models, each a [`Projection`] of the log and the
//! only code that applies events to it:
//!
//! - tickets (tree `proj-tickets`): `t/<id>` → the folded `Ticket`, and the
//!   tickets' search index beside them (`ticket_index.rs`); `a/<id>` → the
//!   ticket's SLA facts (also folded from `sla-<id>`, its alerts) and
//!   `w/<id>` → the moment of its next SLA alert (the schedule the SLA
//!   watch follows, made with the settings whose fingerprint is `k/sla`);
//!   `x/<session>` → the ticket a triage session works on (from
//!   `TriageStarted`), so the session's steps add their model use to the
//!   ticket's facts; `e/…` → the connectors' conversations and deliveries
//!   (`intake.rs`);
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
use crate::sla::{self, AlertKind, Before, Facts, Schedule, SlaSettings, StepUse};

const TICKET_PREFIX: &[u8] = b"t/";
const FACTS_PREFIX: &[u8] = b"a/";
const DUE_PREFIX: &[u8] = b"w/";
const TRIAGE_SESSION_PREFIX: &[u8] = b"x/";
const SLA_FINGERPRINT_KEY: &[u8] = b"k/sla";
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

pub(super) fn facts_key(id: &str) -> Vec<u8> {
    [FACTS_PREFIX, id.as_bytes()].concat()
}

/// A triage session → its ticket (from `TriageStarted`): the session's
/// model use counts on the ticket.
fn triage_session_key(session: &str) -> Vec<u8> {
    [TRIAGE_SESSION_PREFIX, session.as_bytes()].concat()
}

fn due_key(id: &str) -> Vec<u8> {
    [DUE_PREFIX, id.as_bytes()].concat()
}

fn decode_facts(bytes: &[u8]) -> Result<Facts, ProjectionError> {
    Facts::decode(bytes).map_err(|e| ProjectionError::Corrupt(format!("a ticket's facts: {e}")))
}

/// The stored facts, or none yet.
pub(super) fn facts_or_default(bytes: Option<impl AsRef<[u8]>>) -> Result<Facts, ProjectionError> {
    bytes.map_or_else(|| Ok(Facts::default()), |b| decode_facts(b.as_ref()))
}

/// A schedule entry: the moment (8 bytes, big-endian) and the kind.
fn encode_next((at, kind): (i64, AlertKind)) -> Vec<u8> {
    let mut out = at.to_be_bytes().to_vec();
    out.push(u8::from(kind == AlertKind::Breached));
    out
}

fn decode_next(bytes: &[u8]) -> Option<(i64, AlertKind)> {
    let (at, kind) = bytes.split_first_chunk::<8>()?;
    let kind = match kind {
        [1] => AlertKind::Breached,
        _ => AlertKind::AtRisk,
    };
    Some((i64::from_be_bytes(*at), kind))
}

pub(super) fn decode_ticket(bytes: &[u8]) -> Result<Ticket, ProjectionError> {
    Ticket::decode(bytes).map_err(|e| ProjectionError::Corrupt(format!("a stored ticket: {e}")))
}

/// A stored ticket without its texts (`ticket_head.rs`).
pub(super) fn decode_ticket_head(bytes: &[u8]) -> Result<Ticket, ProjectionError> {
    super::ticket_head::TicketHead::decode(bytes)
        .map(Ticket::from)
        .map_err(|e| ProjectionError::Corrupt(format!("a stored ticket: {e}")))
}

/// Tickets folded from `ticket-<id>` streams, with their SLA facts (also
/// from `sla-<id>`) and the moment each owes its next SLA alert.
pub struct TicketsModel {
    pub(super) sla: Arc<SlaSettings>,
    pub(super) schedule: Arc<Schedule>,
    /// The settings' fingerprint is in the tree (a rebuild clears it; the
    /// first batch after writes it again).
    pub(super) stamped: std::sync::atomic::AtomicBool,
}

impl TicketsModel {
    /// The next alert of ticket `id`, from what `read` says of it (the
    /// ticket itself when the caller has it decoded already).
    fn next_alert(
        &self,
        read: impl Fn(&[u8]) -> Result<Option<Vec<u8>>, ProjectionError>,
        id: &str,
        decoded: Option<&Ticket>,
    ) -> Result<Option<(i64, AlertKind)>, ProjectionError> {
        let Some(facts) = read(&facts_key(id))? else {
            return Ok(None);
        };
        let facts = decode_facts(&facts)?;
        let ticket = match decoded {
            Some(t) => std::borrow::Cow::Borrowed(t),
            None => match read(&ticket_key(id))? {
                Some(bytes) => std::borrow::Cow::Owned(decode_ticket(&bytes)?),
                None => return Ok(None),
            },
        };
        Ok(sla::next_alert(&self.sla, &ticket, &facts))
    }

    /// Make the stored schedule again with these settings (they changed
    /// since it was made).
    fn reschedule(&self, tree: &sled::Tree) -> Result<(), ProjectionError> {
        let read = |key: &[u8]| Ok(tree.get(key)?.map(|v| v.to_vec()));
        let mut batch = sled::Batch::default();
        for row in tree.scan_prefix(DUE_PREFIX) {
            batch.remove(row?.0);
        }
        for row in tree.scan_prefix(FACTS_PREFIX) {
            let (key, _) = row?;
            let id = String::from_utf8_lossy(&key[FACTS_PREFIX.len()..]).to_string();
            if let Some(next) = self.next_alert(read, &id, None)? {
                batch.insert(due_key(&id), encode_next(next));
            }
        }
        batch.insert(
            SLA_FINGERPRINT_KEY,
            self.sla.fingerprint().to_be_bytes().to_vec(),
        );
        tree.apply_batch(batch)?;
        Ok(())
    }
}

/// A step of a triage session: its model use on the ticket (a step that
/// reported no usage is not looked up).
fn triage_step(writes: &mut Writes<'_>, event: &Event) -> Result<(), ProjectionError> {
    let Some(step) = StepUse::of(event) else {
        return Ok(());
    };
    let Some(session) = event.stream_id.strip_prefix("session-") else {
        return Ok(());
    };
    let Some(ticket) = writes.get(&triage_session_key(session))? else {
        return Ok(());
    };
    let key = facts_key(&String::from_utf8_lossy(&ticket));
    let mut facts = facts_or_default(writes.get(&key)?)?;
    facts.used(step);
    writes.put(key, facts.encode_to_vec());
    Ok(())
}

impl Projection for TicketsModel {
    fn name(&self) -> &'static str {
        "tickets"
    }

    fn version(&self) -> u32 {
        7
    }

    /// The SLA schedule: made again when the settings changed, then loaded.
    fn opened(&self, tree: &sled::Tree) -> Result<(), ProjectionError> {
        let stored = tree.get(SLA_FINGERPRINT_KEY)?.map(|v| decode_u64(&v));
        if stored != Some(self.sla.fingerprint()) {
            self.reschedule(tree)?;
        }
        self.stamped
            .store(true, std::sync::atomic::Ordering::Relaxed);
        self.schedule.clear();
        for row in tree.scan_prefix(DUE_PREFIX) {
            let (key, value) = row?;
            let id = String::from_utf8_lossy(&key[DUE_PREFIX.len()..]).to_string();
            self.schedule.set(&id, decode_next(&value));
        }
        Ok(())
    }

    fn reset(&self) {
        self.schedule.clear();
        self.stamped
            .store(false, std::sync::atomic::Ordering::Relaxed);
    }

    fn apply(&self, writes: &mut Writes<'_>, event: &Event) -> Result<(), ProjectionError> {
        match event.payload.as_ref() {
            Some(Payload::TriageStarted(t)) if !t.session_id.is_empty() => {
                let key = triage_session_key(&t.session_id);
                if writes.get(&key)?.is_none() {
                    writes.put(key, t.ticket_id.clone().into_bytes());
                }
                return Ok(());
            }
            Some(Payload::AssistantMessageAdded(_)) => return triage_step(writes, event),
            _ => {}
        }
        if let Some(id) = event.stream_id.strip_prefix("sla-") {
            let key = facts_key(id);
            let mut facts = facts_or_default(writes.get(&key)?)?;
            if event.stream_version > facts.alerts_version {
                let ticket = match writes.get(&ticket_key(id))? {
                    Some(bytes) => decode_ticket(&bytes)?,
                    None => Ticket::default(),
                };
                facts.apply(event, &Before::of(&ticket), &ticket);
                writes.put(key, facts.encode_to_vec());
            }
            return Ok(());
        }
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
        let before = Before::of(&ticket);
        crate::ticket::apply(&mut ticket, event);
        if ticket.version == event.stream_version {
            let key_facts = facts_key(id);
            let mut facts = facts_or_default(writes.get(&key_facts)?)?;
            let unchanged = facts.clone();
            facts.apply(event, &before, &ticket);
            if facts != unchanged {
                writes.put(key_facts, facts.encode_to_vec());
            }
            super::external::index(writes, &ticket, event);
            writes.put(key, ticket.encode_to_vec());
        }
        Ok(())
    }

    /// Index the tickets this batch changed, once each, and write when
    /// each owes its next SLA alert.
    fn finish(&self, writes: &mut Writes<'_>) -> Result<(), ProjectionError> {
        if !self
            .stamped
            .swap(true, std::sync::atomic::Ordering::Relaxed)
        {
            writes.put(
                SLA_FINGERPRINT_KEY.to_vec(),
                self.sla.fingerprint().to_be_bytes().to_vec(),
            );
        }
        let changed: Vec<Ticket> = writes
            .changed()
            .filter(|(key, _)| key.starts_with(TICKET_PREFIX))
            .filter_map(|(_, value)| value.map(decode_ticket))
            .collect::<Result<_, _>>()?;
        super::ticket_index::index(writes, &changed)?;
        let touched: std::collections::BTreeSet<String> = writes
            .changed()
            .filter_map(|(key, _)| {
                key.strip_prefix(TICKET_PREFIX)
                    .or_else(|| key.strip_prefix(FACTS_PREFIX))
            })
            .map(|id| String::from_utf8_lossy(id).to_string())
            .collect();
        let decoded: std::collections::HashMap<&str, &Ticket> =
            changed.iter().map(|t| (t.id.as_str(), t)).collect();
        for id in touched {
            let ticket = decoded.get(id.as_str()).copied();
            let next = self.next_alert(|key| writes.get(key), &id, ticket)?;
            let stored = writes.get(&due_key(&id))?.and_then(|v| decode_next(&v));
            match next {
                Some(next) if stored != Some(next) => writes.put(due_key(&id), encode_next(next)),
                None if stored.is_some() => writes.remove(due_key(&id)),
                _ => {}
            }
        }
        Ok(())
    }

    /// The in-memory schedule follows the stored one.
    fn committed(&self, writes: &Writes<'_>) {
        let mut woke = false;
        for (key, value) in writes.changed() {
            if let Some(id) = key.strip_prefix(DUE_PREFIX) {
                let next = value.and_then(decode_next);
                self.schedule.set(&String::from_utf8_lossy(id), next);
                woke = true;
            }
        }
        if woke {
            self.schedule.wake();
        }
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
