//! The outbox: deliveries owed to customers, a read model of the log (tree
//! `proj-outbox`) and the only code that folds them.
//!
//! - `s/<ticket>` → the ticket's `TicketSource` (where it came from, the
//!   customer, the subject, the last delivery), for a ticket a connector
//!   brought (importers' sources, `import-…`, have no way out);
//! - `o/<sequence>` → the `OutboxItem` owed for the event at that sequence:
//!   a reply to such a ticket (`AgentReplyAdded`: a person's, or an approved
//!   `reply_customer`) or its resolution;
//! - `p/<sequence>` → nothing: the items not yet sent nor parked, in order;
//!   `f/<sequence>` → nothing: the parked ones;
//! - `n/<source>` → the source's `SourceStatus` figures: deliveries in
//!   (tickets opened and messages a delivery brought), sent, the last error.
//!
//! Its attempts are events of `outbox-<sequence>` (`sender.rs` appends them).

use prost::Message;
use tinycode_shared::proto::event::Payload;
use tinycode_shared::proto::{Event, OutboxItem, SourceStatus, TicketSource};
use tokio::sync::watch;

use crate::config::sources::IMPORT_PREFIX;
use crate::projection::{Projection, ProjectionError, Writes};

const SOURCE: &[u8] = b"s/";
const ITEM: &[u8] = b"o/";
const PENDING: &[u8] = b"p/";
const STATS: &[u8] = b"n/";
const FAILED: &[u8] = b"f/";
pub const STREAM_PREFIX: &str = "outbox-";

pub fn stream(sequence: u64) -> String {
    format!("{STREAM_PREFIX}{sequence}")
}

fn key(prefix: &[u8], sequence: u64) -> Vec<u8> {
    [prefix, &sequence.to_be_bytes()[..]].concat()
}

fn source_key(ticket: &str) -> Vec<u8> {
    [SOURCE, ticket.as_bytes()].concat()
}

/// The stored record of a connector's ticket.
fn source_of(writes: &Writes<'_>, ticket: &str) -> Result<Option<TicketSource>, ProjectionError> {
    writes
        .get(&source_key(ticket))?
        .map(|bytes| {
            TicketSource::decode(bytes.as_slice())
                .map_err(|e| ProjectionError::Corrupt(format!("a stored ticket source: {e}")))
        })
        .transpose()
}

fn stats_key(source: &str) -> Vec<u8> {
    [STATS, source.as_bytes()].concat()
}

/// Change the stored figures of `source`.
fn count(
    writes: &mut Writes<'_>,
    source: &str,
    change: impl FnOnce(&mut SourceStatus),
) -> Result<(), ProjectionError> {
    let key = stats_key(source);
    let mut stats = match writes.get(&key)? {
        Some(bytes) => SourceStatus::decode(bytes.as_slice())
            .map_err(|e| ProjectionError::Corrupt(format!("a stored source status: {e}")))?,
        None => SourceStatus {
            name: source.to_string(),
            ..SourceStatus::default()
        },
    };
    change(&mut stats);
    writes.put(key, stats.encode_to_vec());
    Ok(())
}

/// The states an item goes through.
pub mod state {
    pub const PENDING: &str = "pending";
    pub const SENDING: &str = "sending";
    pub const SENT: &str = "sent";
    pub const FAILED: &str = "failed";
    pub const ALL: [&str; 4] = [PENDING, SENDING, SENT, FAILED];
}

fn decode(bytes: &[u8]) -> Result<OutboxItem, ProjectionError> {
    OutboxItem::decode(bytes)
        .map_err(|e| ProjectionError::Corrupt(format!("a stored outbox item: {e}")))
}

/// The outbox's read model.
pub struct OutboxModel {
    /// Bumped after each committed batch that changed an item.
    pub changed: watch::Sender<u64>,
}

impl OutboxModel {
    /// The item a ticket event owes, if it owes one.
    fn owed(
        writes: &Writes<'_>,
        ticket: &str,
        event: &Event,
    ) -> Result<Option<OutboxItem>, ProjectionError> {
        let (kind, text, at) = match event.payload.as_ref() {
            Some(Payload::AgentReplyAdded(e)) => match &e.message {
                Some(m) => ("reply", m.text.clone(), m.at.clone()),
                None => return Ok(None),
            },
            // The reason a person gives is an internal note: never sent.
            Some(Payload::TicketStatusChanged(e)) if e.status == "resolved" => {
                ("resolved", String::new(), String::new())
            }
            _ => return Ok(None),
        };
        let Some(record) = source_of(writes, ticket)? else {
            return Ok(None);
        };
        let external = record.external.unwrap_or_default();
        let at = if at.is_empty() {
            event
                .recorded_at
                .as_ref()
                .map(|t| tinycode_shared::render::rfc3339(t.seconds, t.nanos))
                .unwrap_or_default()
        } else {
            at
        };
        Ok(Some(OutboxItem {
            sequence: event.sequence,
            ticket_id: ticket.to_string(),
            source: external.source,
            conversation: external.conversation,
            kind: kind.into(),
            text,
            state: state::PENDING.into(),
            decided_at: at,
            idempotency_key: format!("tinycode-{ticket}-{}", event.sequence),
            customer: record.customer,
            subject: record.subject,
            in_reply_to: record.last_delivery,
            ..OutboxItem::default()
        }))
    }

    fn ticket_event(
        writes: &mut Writes<'_>,
        ticket: &str,
        event: &Event,
    ) -> Result<(), ProjectionError> {
        let created = match event.payload.as_ref() {
            Some(Payload::TicketCreated(e)) => e.ticket.as_ref(),
            Some(Payload::TicketImported(e)) => e.ticket.as_ref(),
            _ => None,
        };
        if let Some(t) = created
            && let Some(external) = &t.external
            && !external.source.starts_with(IMPORT_PREFIX)
        {
            let record = TicketSource {
                external: Some(external.clone()),
                customer: t.customer.clone(),
                subject: t.subject.clone(),
                last_delivery: t
                    .messages
                    .iter()
                    .rev()
                    .map(|m| m.delivery.clone())
                    .find(|d| !d.is_empty())
                    .unwrap_or_default(),
            };
            writes.put(source_key(ticket), record.encode_to_vec());
            let at = t.created_at.clone();
            return count(writes, &external.source, |s| {
                s.received += 1;
                s.last_received_at = at;
            });
        }
        if let Some(Payload::CustomerMessageAdded(e)) = event.payload.as_ref()
            && let Some(m) = e.message.as_ref().filter(|m| !m.delivery.is_empty())
            && let Some(mut record) = source_of(writes, ticket)?
        {
            record.last_delivery = m.delivery.clone();
            writes.put(source_key(ticket), record.encode_to_vec());
            let source = record.external.unwrap_or_default().source;
            let at = m.at.clone();
            return count(writes, &source, |s| {
                s.received += 1;
                s.last_received_at = at;
            });
        }
        if let Some(item) = Self::owed(writes, ticket, event)? {
            writes.put(key(PENDING, item.sequence), Vec::new());
            writes.put(key(ITEM, item.sequence), item.encode_to_vec());
        }
        Ok(())
    }

    fn attempt_event(writes: &mut Writes<'_>, event: &Event) -> Result<(), ProjectionError> {
        let sequence = match event.payload.as_ref() {
            Some(Payload::DeliveryAttempted(e)) => e.sequence,
            Some(Payload::DeliveryFinished(e)) => e.sequence,
            Some(Payload::DeliveryRetried(e)) => e.sequence,
            _ => return Ok(()),
        };
        let Some(bytes) = writes.get(&key(ITEM, sequence))? else {
            return Ok(()); // an attempt of an item this model never owed
        };
        let mut item = decode(&bytes)?;
        item.version = event.stream_version;
        let mut pending = true;
        match event.payload.as_ref() {
            Some(Payload::DeliveryAttempted(e)) => {
                item.state = state::SENDING.into();
                item.attempts = e.attempt;
                item.attempt_at = e.at.clone();
                item.attempt_daemon = e.daemon.clone();
            }
            Some(Payload::DeliveryFinished(e)) if e.sent => {
                item.state = state::SENT.into();
                item.sent_at = e.at.clone();
                item.last_error.clear();
                item.next_at.clear();
                pending = false;
                count(writes, &item.source, |s| {
                    s.sent += 1;
                    s.last_sent_at = e.at.clone();
                })?;
            }
            Some(Payload::DeliveryFinished(e)) => {
                item.last_error = e.error.clone();
                item.next_at = e.next_at.clone();
                item.state = if e.parked {
                    state::FAILED
                } else {
                    state::PENDING
                }
                .into();
                pending = !e.parked;
                count(writes, &item.source, |s| {
                    s.last_error = e.error.clone();
                    s.last_error_at = e.at.clone();
                })?;
            }
            Some(Payload::DeliveryRetried(_)) => {
                item.state = state::PENDING.into();
                item.attempts = 0;
                item.next_at.clear();
            }
            _ => {}
        }
        if pending {
            writes.put(key(PENDING, sequence), Vec::new());
        } else {
            writes.remove(key(PENDING, sequence));
        }
        if item.state == state::FAILED {
            writes.put(key(FAILED, sequence), Vec::new());
        } else {
            writes.remove(key(FAILED, sequence));
        }
        writes.put(key(ITEM, sequence), item.encode_to_vec());
        Ok(())
    }
}

impl Projection for OutboxModel {
    fn name(&self) -> &'static str {
        "outbox"
    }

    fn version(&self) -> u32 {
        2
    }

    fn apply(&self, writes: &mut Writes<'_>, event: &Event) -> Result<(), ProjectionError> {
        if let Some(ticket) = event.stream_id.strip_prefix("ticket-") {
            return Self::ticket_event(writes, ticket, event);
        }
        if event.stream_id.starts_with(STREAM_PREFIX) {
            return Self::attempt_event(writes, event);
        }
        Ok(())
    }

    fn committed(&self, writes: &Writes<'_>) {
        if writes.changed().any(|(k, _)| k.starts_with(ITEM)) {
            self.changed.send_modify(|n| *n += 1);
        }
    }
}

/// Reads of the outbox.
pub struct Reader<'a>(pub &'a sled::Tree);

impl Reader<'_> {
    pub fn get(&self, sequence: u64) -> Result<Option<OutboxItem>, ProjectionError> {
        self.0
            .get(key(ITEM, sequence))?
            .map(|v| decode(&v))
            .transpose()
    }

    /// Items not sent nor parked, oldest first.
    pub fn pending(&self) -> Result<Vec<OutboxItem>, ProjectionError> {
        self.indexed(PENDING)
    }

    /// Items parked as failed, oldest first.
    pub fn parked(&self) -> Result<Vec<OutboxItem>, ProjectionError> {
        self.indexed(FAILED)
    }

    /// The items an index (`p/`, `f/`) names, oldest first.
    fn indexed(&self, index: &[u8]) -> Result<Vec<OutboxItem>, ProjectionError> {
        let mut out = Vec::new();
        for row in self.0.scan_prefix(index) {
            let (k, _) = row?;
            let mut sequence = [0u8; 8];
            if let Some(bytes) = k.get(index.len()..index.len() + 8) {
                sequence.copy_from_slice(bytes);
            }
            if let Some(item) = self.get(u64::from_be_bytes(sequence))? {
                out.push(item);
            }
        }
        Ok(out)
    }

    /// Every source's stored figures, with its pending and failed items
    /// counted now.
    pub fn sources(&self) -> Result<Vec<SourceStatus>, ProjectionError> {
        let mut out: Vec<SourceStatus> = Vec::new();
        for row in self.0.scan_prefix(STATS) {
            let (_, bytes) = row?;
            out.push(
                SourceStatus::decode(bytes.as_ref()).map_err(|e| {
                    ProjectionError::Corrupt(format!("a stored source status: {e}"))
                })?,
            );
        }
        for (index, failed) in [(PENDING, false), (FAILED, true)] {
            for item in self.indexed(index)? {
                if let Some(s) = out.iter_mut().find(|s| s.name == item.source) {
                    if failed {
                        s.failed += 1;
                    } else {
                        s.pending += 1;
                    }
                }
            }
        }
        Ok(out)
    }

    /// Items in `state` (empty: any), newest first, at most `limit`.
    pub fn list(&self, state: &str, limit: usize) -> Result<Vec<OutboxItem>, ProjectionError> {
        let mut out = Vec::new();
        for row in self.0.scan_prefix(ITEM).rev() {
            let item = decode(&row?.1)?;
            if state.is_empty() || item.state == state {
                out.push(item);
                if out.len() >= limit {
                    break;
                }
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tinycode_shared::proto::{
        AgentReplyAdded, DeliveryAttempted, DeliveryFinished, DeliveryRetried, ExternalRef, Ticket,
        TicketCreated, TicketMessage,
    };

    fn event(sequence: u64, stream: &str, version: u64, payload: Payload) -> Event {
        Event {
            sequence,
            stream_id: stream.into(),
            stream_version: version,
            payload: Some(payload),
            ..Event::default()
        }
    }

    fn created(id: &str, source: Option<&str>) -> Payload {
        Payload::TicketCreated(TicketCreated {
            ticket: Some(Ticket {
                id: id.into(),
                external: source.map(|s| ExternalRef {
                    source: s.into(),
                    conversation: "c-1".into(),
                }),
                ..Ticket::default()
            }),
        })
    }

    fn reply(text: &str) -> Payload {
        Payload::AgentReplyAdded(AgentReplyAdded {
            message: Some(TicketMessage {
                from: "agent".into(),
                text: text.into(),
                at: "2026-12-05T10:00:00Z".into(),
                delivery: String::new(),
            }),
            ..AgentReplyAdded::default()
        })
    }

    #[test]
    fn an_item_follows_its_attempts_and_only_connector_tickets_owe_one() {
        let db = sled::Config::new().temporary(true).open().unwrap();
        let tree = db.open_tree("outbox").unwrap();
        let (changed, _) = watch::channel(0);
        let model = OutboxModel { changed };
        let fold = |events: Vec<Event>| {
            let mut writes = Writes::new(&tree);
            for e in &events {
                model.apply(&mut writes, e).unwrap();
            }
            let last = events.last().map_or(0, |e| e.sequence);
            writes.commit(last).unwrap();
        };
        fold(vec![
            event(1, "ticket-T-1", 1, created("T-1", Some("acme"))),
            event(2, "ticket-T-2", 1, created("T-2", None)),
            event(3, "ticket-T-3", 1, created("T-3", Some("import-csv"))),
            event(4, "ticket-T-1", 2, reply("hello")),
            event(5, "ticket-T-2", 2, reply("no source")),
            event(6, "ticket-T-3", 2, reply("imported")),
        ]);
        let reader = Reader(&tree);
        let pending = reader.pending().unwrap();
        assert_eq!(pending.len(), 1, "{pending:?}");
        let item = &pending[0];
        assert_eq!(
            (
                item.sequence,
                item.ticket_id.as_str(),
                item.kind.as_str(),
                item.state.as_str()
            ),
            (4, "T-1", "reply", state::PENDING)
        );
        assert_eq!(item.idempotency_key, "tinycode-T-1-4");
        let attempt = |seq, version, n| {
            event(
                seq,
                "outbox-4",
                version,
                Payload::DeliveryAttempted(DeliveryAttempted {
                    sequence: 4,
                    attempt: n,
                    daemon: "d1".into(),
                    at: "2026-12-05T10:00:01Z".into(),
                }),
            )
        };
        let finished = |seq, version, n, sent, parked| {
            event(
                seq,
                "outbox-4",
                version,
                Payload::DeliveryFinished(DeliveryFinished {
                    sequence: 4,
                    attempt: n,
                    sent,
                    parked,
                    error: if sent { String::new() } else { "503".into() },
                    ..DeliveryFinished::default()
                }),
            )
        };
        fold(vec![attempt(7, 1, 1)]);
        let item = reader.get(4).unwrap().unwrap();
        assert_eq!(
            (item.state.as_str(), item.attempts, item.version),
            (state::SENDING, 1, 1)
        );
        assert_eq!(item.attempt_daemon, "d1");
        fold(vec![finished(8, 2, 1, false, false)]);
        assert_eq!(reader.get(4).unwrap().unwrap().state, state::PENDING);
        fold(vec![attempt(9, 3, 2), finished(10, 4, 2, false, true)]);
        let item = reader.get(4).unwrap().unwrap();
        assert_eq!(
            (item.state.as_str(), item.last_error.as_str()),
            (state::FAILED, "503")
        );
        assert!(reader.pending().unwrap().is_empty());
        assert_eq!(reader.list(state::FAILED, 10).unwrap().len(), 1);
        let retried = Payload::DeliveryRetried(DeliveryRetried {
            sequence: 4,
            ..DeliveryRetried::default()
        });
        fold(vec![event(11, "outbox-4", 5, retried)]);
        let item = reader.get(4).unwrap().unwrap();
        assert_eq!((item.state.as_str(), item.attempts), (state::PENDING, 0));
        fold(vec![attempt(12, 6, 1), finished(13, 7, 1, true, false)]);
        let item = reader.get(4).unwrap().unwrap();
        assert_eq!((item.state.as_str(), item.version), (state::SENT, 7));
        assert!(reader.pending().unwrap().is_empty());
    }
}
