//! Tickets: the TinyCode file format (`tickets/<id>.json`, camelCase) and
//! the fold of `ticket-<id>` events into a [`Ticket`].

use serde_json::{Map, Value};
use tinycode_shared::proto::event::Payload;
use tinycode_shared::proto::{Event, Ticket, TicketMessage, TicketNote, ToolOrigin};

mod kinds;
pub mod review;

pub use kinds::{Channel, Priority, Status};

const FROM: [&str; 2] = ["customer", "agent"];
const KEYS: [&str; 14] = [
    "id",
    "subject",
    "customer",
    "channel",
    "createdAt",
    "slaMinutes",
    "status",
    "category",
    "priority",
    "intent",
    "queue",
    "escalateLevel",
    "messages",
    "notes",
];

/// Why a ticket file cannot be read; names the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TicketFileError {
    #[error("not valid JSON: {0}")]
    Json(String),
    #[error("the top level must be a JSON object")]
    NotAnObject,
    #[error("field `{0}` is missing")]
    Missing(String),
    #[error("field `{field}`: {problem}")]
    Invalid { field: String, problem: String },
}

fn invalid(field: impl Into<String>, problem: impl Into<String>) -> TicketFileError {
    TicketFileError::Invalid {
        field: field.into(),
        problem: problem.into(),
    }
}

/// A ticket file without `slaMinutes` gets this first-response target
/// (one day).
pub const DEFAULT_SLA_MINUTES: u32 = 24 * 60;
/// … without `channel`, this one.
pub const DEFAULT_CHANNEL: &str = "email";

/// Parse a ticket file: every known field checked; fields tinycode does
/// not know are kept as they are (`extra_json`) and written back. Only
/// `id` and `subject` are required; a missing `customer` is empty,
/// `channel` is `email`, `status` is `open`, `slaMinutes` is a day,
/// `messages` is none, and `createdAt` is the first message's time
/// (required when there is no message).
pub fn parse_ticket_file(text: &str) -> Result<Ticket, TicketFileError> {
    let value: Value =
        serde_json::from_str(text).map_err(|e| TicketFileError::Json(e.to_string()))?;
    let obj = value.as_object().ok_or(TicketFileError::NotAnObject)?;
    let extra: Map<String, Value> = obj
        .iter()
        .filter(|(k, _)| !KEYS.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    // Checked in this order: the first bad field is the one reported.
    let messages = parse_messages(obj)?;
    let notes = parse_notes(obj)?;
    let escalate_level = parse_escalate_level(obj)?;
    Ok(Ticket {
        id: req_str(obj, "id", "")?,
        subject: req_str(obj, "subject", "")?,
        customer: opt_str(obj, "customer")?,
        channel: match one_of(obj, "channel", &Channel::NAMES, false)? {
            c if c.is_empty() => DEFAULT_CHANNEL.to_string(),
            c => c,
        },
        created_at: match opt_str(obj, "createdAt")? {
            // The first message's time is when the ticket began.
            c if c.is_empty() => messages
                .first()
                .map(|m: &TicketMessage| m.at.clone())
                .ok_or_else(|| TicketFileError::Missing("createdAt".into()))?,
            c => c,
        },
        sla_minutes: parse_sla_minutes(obj)?,
        status: match one_of(obj, "status", &Status::NAMES, false)? {
            s if s.is_empty() => "open".to_string(),
            s => s,
        },
        category: opt_str(obj, "category")?,
        priority: one_of(obj, "priority", &Priority::NAMES, false)?,
        intent: opt_str(obj, "intent")?,
        queue: opt_str(obj, "queue")?,
        escalate_level,
        messages,
        notes,
        version: 0,
        sla: Vec::new(),
        external: None,
        confidence: Vec::new(),
        suggestion: None,
        extra_json: if extra.is_empty() {
            String::new()
        } else {
            Value::Object(extra).to_string()
        },
    })
}

/// `messages`: a list (none when absent).
fn parse_messages(obj: &Map<String, Value>) -> Result<Vec<TicketMessage>, TicketFileError> {
    Ok(match obj.get("messages") {
        Some(Value::Array(items)) => items
            .iter()
            .enumerate()
            .map(|(i, m)| parse_message(&format!("messages[{i}]"), m))
            .collect::<Result<_, _>>()?,
        Some(_) => return Err(invalid("messages", "must be a list")),
        None => Vec::new(),
    })
}

/// `notes`: a list of `{text, at}` (none when absent or null).
fn parse_notes(obj: &Map<String, Value>) -> Result<Vec<TicketNote>, TicketFileError> {
    Ok(match obj.get("notes") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => items
            .iter()
            .enumerate()
            .map(|(i, n)| {
                let field = format!("notes[{i}]");
                let o = n
                    .as_object()
                    .ok_or_else(|| invalid(&field, "must be an object"))?;
                Ok(TicketNote {
                    text: req_str(o, "text", &field)?,
                    at: req_str(o, "at", &field)?,
                })
            })
            .collect::<Result<_, TicketFileError>>()?,
        Some(_) => return Err(invalid("notes", "must be a list")),
    })
}

/// `escalateLevel`: 1 or 2 (0, not escalated, when absent or null).
fn parse_escalate_level(obj: &Map<String, Value>) -> Result<u32, TicketFileError> {
    Ok(match obj.get("escalateLevel") {
        None | Some(Value::Null) => 0,
        Some(v) => match v.as_u64() {
            Some(l @ 1..=2) => l as u32,
            _ => return Err(invalid("escalateLevel", format!("must be 1 or 2, got {v}"))),
        },
    })
}

/// `slaMinutes`: whole minutes (a day when absent or null).
fn parse_sla_minutes(obj: &Map<String, Value>) -> Result<u32, TicketFileError> {
    Ok(match obj.get("slaMinutes") {
        None | Some(Value::Null) => DEFAULT_SLA_MINUTES,
        Some(v) => v
            .as_u64()
            .and_then(|n| u32::try_from(n).ok())
            .ok_or_else(|| {
                invalid(
                    "slaMinutes",
                    format!("must be a whole number of minutes, got {v}"),
                )
            })?,
    })
}

fn parse_message(field: &str, value: &Value) -> Result<TicketMessage, TicketFileError> {
    let o = value
        .as_object()
        .ok_or_else(|| invalid(field, "must be an object"))?;
    let from = req_str(o, "from", field)?;
    if !FROM.contains(&from.as_str()) {
        return Err(invalid(
            format!("{field}.from"),
            format!("must be customer or agent, got {from:?}"),
        ));
    }
    Ok(TicketMessage {
        from,
        text: req_str(o, "text", field)?,
        at: req_str(o, "at", field)?,
        delivery: String::new(),
    })
}

fn path(parent: &str, key: &str) -> String {
    if parent.is_empty() {
        key.to_string()
    } else {
        format!("{parent}.{key}")
    }
}

fn req_str(o: &Map<String, Value>, key: &str, parent: &str) -> Result<String, TicketFileError> {
    match o.get(key) {
        Some(Value::String(s)) => Ok(s.clone()),
        Some(other) => Err(invalid(
            path(parent, key),
            format!("must be a string, got {other}"),
        )),
        None => Err(TicketFileError::Missing(path(parent, key))),
    }
}

fn opt_str(o: &Map<String, Value>, key: &str) -> Result<String, TicketFileError> {
    match o.get(key) {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(other) => Err(invalid(key, format!("must be a string, got {other}"))),
    }
}

fn one_of(
    o: &Map<String, Value>,
    key: &str,
    allowed: &[&str],
    required: bool,
) -> Result<String, TicketFileError> {
    let value = if required {
        req_str(o, key, "")?
    } else {
        opt_str(o, key)?
    };
    if value.is_empty() && !required || allowed.contains(&value.as_str()) {
        Ok(value)
    } else {
        Err(invalid(
            key,
            format!("must be one of {}, got {value:?}", allowed.join(", ")),
        ))
    }
}

/// The ticket as TinyCode writes it: 2-space JSON, TinyCode's key order,
/// unset optional fields omitted, trailing newline.
pub fn render_ticket_file(t: &Ticket) -> String {
    let mut text = serde_json::to_string_pretty(&ticket_document(t)).unwrap_or_default();
    text.push('\n');
    text
}

/// The ticket's file document as a JSON object (TinyCode's keys and order,
/// unset optional fields omitted).
pub fn ticket_document(t: &Ticket) -> Map<String, Value> {
    let mut o = Map::new();
    o.insert("id".into(), t.id.clone().into());
    o.insert("subject".into(), t.subject.clone().into());
    o.insert("customer".into(), t.customer.clone().into());
    o.insert("channel".into(), t.channel.clone().into());
    o.insert("createdAt".into(), t.created_at.clone().into());
    o.insert("slaMinutes".into(), t.sla_minutes.into());
    o.insert("status".into(), t.status.clone().into());
    for (key, value) in [
        ("category", &t.category),
        ("priority", &t.priority),
        ("intent", &t.intent),
        ("queue", &t.queue),
    ] {
        if !value.is_empty() {
            o.insert(key.into(), value.clone().into());
        }
    }
    if t.escalate_level > 0 {
        o.insert("escalateLevel".into(), t.escalate_level.into());
    }
    let messages = t
        .messages
        .iter()
        .map(|m| serde_json::json!({ "from": m.from, "text": m.text, "at": m.at }))
        .collect();
    o.insert("messages".into(), Value::Array(messages));
    if !t.notes.is_empty() {
        let notes = t
            .notes
            .iter()
            .map(|n| serde_json::json!({ "text": n.text, "at": n.at }))
            .collect();
        o.insert("notes".into(), Value::Array(notes));
    }
    if let Ok(Value::Object(extra)) = serde_json::from_str::<Value>(&t.extra_json) {
        for (key, value) in extra {
            if !o.contains_key(&key) {
                o.insert(key, value);
            }
        }
    }
    o
}

/// Content equality, ignoring the stream version and what a ticket file
/// does not hold (where a connector's ticket came from, its deliveries).
pub fn same_content(a: &Ticket, b: &Ticket) -> bool {
    let file_view = |t: &Ticket| {
        let mut t = Ticket {
            version: 0,
            external: None,
            confidence: Vec::new(),
            suggestion: None,
            ..t.clone()
        };
        for m in &mut t.messages {
            m.delivery.clear();
        }
        t
    };
    file_view(a) == file_view(b)
}

/// The tool call that made a change, when a turn's tool made it.
pub fn origin_of(event: &Event) -> Option<&ToolOrigin> {
    match event.payload.as_ref()? {
        Payload::AgentReplyAdded(e) => e.origin.as_ref(),
        Payload::TicketClassified(e) => e.origin.as_ref(),
        Payload::TicketRouted(e) => e.origin.as_ref(),
        Payload::DecisionSuggested(e) => e.origin.as_ref(),
        Payload::TicketEscalated(e) => e.origin.as_ref(),
        Payload::KnowledgeEdited(e) => e.origin.as_ref(),
        _ => None,
    }
}

/// Fold one `ticket-<id>` event into `ticket`. Status rules: classifying an
/// open ticket makes it `triaged`; routing makes it `routed` unless it is
/// escalated; escalating makes it `escalated`; a customer message reopens a
/// resolved ticket.
pub fn apply(ticket: &mut Ticket, event: &Event) {
    let Some(payload) = &event.payload else {
        return;
    };
    match payload {
        Payload::TicketImported(e) => replace(ticket, e.ticket.as_ref()),
        Payload::TicketCreated(e) => replace(ticket, e.ticket.as_ref()),
        Payload::TicketUpdatedFromFile(e) => {
            // The file does not hold where the ticket came from, nor the
            // model's confidence and a held decision: kept.
            let external = ticket.external.take();
            let confidence = std::mem::take(&mut ticket.confidence);
            let suggestion = ticket.suggestion.take();
            replace(ticket, e.ticket.as_ref());
            if ticket.external.is_none() {
                ticket.external = external;
            }
            ticket.confidence = confidence;
            ticket.suggestion = suggestion;
        }
        Payload::CustomerMessageAdded(e) => {
            ticket.messages.extend(e.message.clone());
            if Status::of(ticket) == Some(Status::Resolved) {
                Status::Open.set(ticket);
            }
        }
        Payload::AgentReplyAdded(e) => ticket.messages.extend(e.message.clone()),
        Payload::TicketClassified(e) => {
            ticket.category = e.category.clone();
            ticket.priority = e.priority.clone();
            ticket.intent = e.intent.clone();
            review::decided(ticket, &["category", "priority", "intent"], &e.confidence);
            if Status::of(ticket) == Some(Status::Open) {
                Status::Triaged.set(ticket);
            }
        }
        Payload::DecisionSuggested(e) => review::suggested(ticket, e),
        Payload::TicketRouted(e) => {
            ticket.queue = e.queue.clone();
            review::decided(ticket, &["queue"], &e.confidence);
            if Status::of(ticket) != Some(Status::Escalated) {
                Status::Routed.set(ticket);
            }
        }
        Payload::TicketEscalated(e) => {
            ticket.escalate_level = e.level;
            Status::Escalated.set(ticket);
        }
        Payload::TicketNoteAdded(e) => ticket.notes.extend(e.note.clone()),
        Payload::TicketStatusChanged(e) => ticket.status = e.status.clone(),
        _ => return,
    }
    ticket.version = event.stream_version;
}

fn replace(ticket: &mut Ticket, with: Option<&Ticket>) {
    if let Some(new) = with {
        *ticket = new.clone();
    }
}

#[cfg(test)]
mod tests;
