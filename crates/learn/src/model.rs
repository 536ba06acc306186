//! The history read model (tree `proj-history`): for each ticket, its text
//! and the decisions a **person** made or corrected — the only fold of
//! ticket events for learning. A field counts when the last change to it
//! came from a ticket file (created, or edited by hand) or a call outside
//! any session; a change by an agent's turn takes it out, so the offline
//! model never learns from its own (or another model's) output, and the
//! same tickets get the same decisions whatever else the desk triaged.
//!
//! `t/<id>` → [`HistoryRow`] (JSON); `g` → the history's **generation**:
//! the sequence of the last event that changed what a training reads (a
//! labelled row, or a row becoming or ceasing to be labelled), big-endian.
//! A model trained at a generation is the model of every later moment
//! with the same generation (`saved.rs` keeps it across starts).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use tinycode_shared::proto::event::Payload;
use tinycode_shared::proto::{Event, Ticket};

use crate::projection::{Projection, ProjectionError, Writes};

const ROW: &[u8] = b"t/";
const GENERATION: &[u8] = b"g";

/// One ticket as the learner sees it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HistoryRow {
    pub subject: String,
    /// Customer messages, in order.
    pub messages: Vec<String>,
    /// Field (`category`, `priority`, `queue`, `intent`, `escalateLevel`)
    /// → the value a person gave it.
    pub labels: BTreeMap<String, String>,
}

impl HistoryRow {
    pub fn text(&self) -> String {
        ticket_text(&self.subject, self.messages.iter().map(String::as_str))
    }

    fn set(&mut self, field: &str, value: String, by_person: bool) {
        if by_person && !value.is_empty() && value != "0" {
            self.labels.insert(field.into(), value);
        } else {
            self.labels.remove(field);
        }
    }

    fn from_file(t: &Ticket) -> Self {
        let mut row = Self {
            subject: t.subject.clone(),
            messages: t
                .messages
                .iter()
                .filter(|m| m.from == "customer")
                .map(|m| m.text.clone())
                .collect(),
            labels: BTreeMap::new(),
        };
        row.set("category", t.category.clone(), true);
        row.set("priority", t.priority.clone(), true);
        row.set("queue", t.queue.clone(), true);
        row.set("intent", t.intent.clone(), true);
        row.set("escalateLevel", t.escalate_level.to_string(), true);
        row
    }
}

fn key(id: &str) -> Vec<u8> {
    [ROW, id.as_bytes()].concat()
}

/// The history's generation (0: nothing labelled changed since the
/// projection began keeping it).
pub fn generation(tree: &sled::Tree) -> Result<u64, ProjectionError> {
    Ok(tree
        .get(GENERATION)?
        .and_then(|v| <[u8; 8]>::try_from(v.as_ref()).ok())
        .map_or(0, u64::from_be_bytes))
}

/// Every ticket with at least one decision a person made.
pub fn labelled(
    tree: &sled::Tree,
) -> impl Iterator<Item = Result<HistoryRow, ProjectionError>> + '_ {
    tree.scan_prefix(ROW).filter_map(|row| {
        let decoded = row.map_err(ProjectionError::from).and_then(|(_, v)| {
            serde_json::from_slice::<HistoryRow>(&v)
                .map_err(|e| ProjectionError::Corrupt(format!("a history row: {e}")))
        });
        match decoded {
            Ok(r) if r.labels.is_empty() => None,
            other => Some(other),
        }
    })
}

pub struct HistoryModel;

impl Projection for HistoryModel {
    fn name(&self) -> &'static str {
        "history"
    }

    fn version(&self) -> u32 {
        1
    }

    fn apply(&self, writes: &mut Writes<'_>, event: &Event) -> Result<(), ProjectionError> {
        let Some(id) = event.stream_id.strip_prefix("ticket-") else {
            return Ok(());
        };
        let Some(payload) = &event.payload else {
            return Ok(());
        };
        let by_person =
            crate::domain::ticket::origin_of(event).is_none_or(|o| o.session_id.is_empty());
        let k = key(id);
        let stored = writes.get(&k)?;
        let before: HistoryRow = match &stored {
            Some(bytes) => serde_json::from_slice(bytes)
                .map_err(|e| ProjectionError::Corrupt(format!("a history row: {e}")))?,
            None => HistoryRow::default(),
        };
        let mut row = before.clone();
        match payload {
            Payload::TicketImported(e) => {
                if let Some(t) = e.ticket.as_ref() {
                    row = HistoryRow::from_file(t);
                }
            }
            Payload::TicketCreated(e) => {
                if let Some(t) = e.ticket.as_ref() {
                    row = HistoryRow::from_file(t);
                }
            }
            Payload::TicketUpdatedFromFile(e) => {
                if let Some(t) = e.ticket.as_ref() {
                    row = HistoryRow::from_file(t);
                }
            }
            Payload::CustomerMessageAdded(e) => {
                if let Some(m) = &e.message {
                    row.messages.push(m.text.clone());
                }
            }
            Payload::TicketClassified(e) => {
                row.set("category", e.category.clone(), by_person);
                row.set("priority", e.priority.clone(), by_person);
                row.set("intent", e.intent.clone(), by_person);
            }
            Payload::TicketRouted(e) => row.set("queue", e.queue.clone(), by_person),
            Payload::TicketEscalated(e) => {
                row.set("escalateLevel", e.level.to_string(), by_person);
            }
            _ => return Ok(()),
        }
        let teaches = !(before.labels.is_empty() && row.labels.is_empty());
        if teaches && row != before {
            writes.put(GENERATION.to_vec(), event.sequence.to_be_bytes().to_vec());
        }
        let bytes =
            serde_json::to_vec(&row).map_err(|e| ProjectionError::Storage(e.to_string()))?;
        writes.put(k, bytes);
        Ok(())
    }
}

/// The text a ticket is learned and predicted from.
pub fn ticket_text<'a>(subject: &str, customer_messages: impl Iterator<Item = &'a str>) -> String {
    let mut text = subject.to_string();
    for m in customer_messages {
        text.push('\n');
        text.push_str(m);
    }
    text
}
