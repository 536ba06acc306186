//! A person's actions on a ticket (the `Tickets` RPCs a person's client
//! calls: the CLI's `ticket reply|note|classify|route|close|reopen`, the
//! web page). Each is recorded with who acted and no tool origin — the
//! history model counts it as a person's decision, as it counts a hand
//! edit of the file — and leaves a note saying what was done, as the
//! agent's decisions do.

use tinycode_shared::proto::event::Payload;
use tinycode_shared::proto::{
    AgentReplyAdded, ClientRef, Ticket, TicketClassified, TicketMessage, TicketNote,
    TicketNoteAdded, TicketRouted, TicketStatusChanged,
};

use super::{Desk, DomainError, now};
use crate::limits::MAX_TEXT;
use crate::ticket::{Priority, Status};

/// A person's answer to a held decision: empty fields accept the
/// suggestion's.
#[derive(Debug, Clone, Default)]
pub struct Review {
    pub category: String,
    pub priority: String,
    pub queue: String,
}

/// `text`, trimmed, when it is a message a person may add.
fn text_of(field: &'static str, text: &str) -> Result<String, DomainError> {
    let text = text.trim();
    if text.is_empty() {
        return Err(DomainError::Invalid {
            field,
            problem: "is empty".into(),
        });
    }
    if text.len() > MAX_TEXT {
        return Err(DomainError::Invalid {
            field,
            problem: format!("is {} bytes; at most {MAX_TEXT}", text.len()),
        });
    }
    Ok(text.to_string())
}

/// A note by `by` saying what was done.
fn note(text: String, by: &ClientRef) -> Payload {
    Payload::TicketNoteAdded(TicketNoteAdded {
        note: Some(TicketNote { text, at: now() }),
        by: Some(by.clone()),
    })
}

/// Who acted, for a note: the client's name.
fn who(by: &ClientRef) -> &str {
    if by.name.is_empty() {
        "someone"
    } else {
        &by.name
    }
}

impl Desk {
    /// A person's reply to the customer.
    pub async fn reply_as(
        &self,
        id: &str,
        text: &str,
        by: ClientRef,
    ) -> Result<Ticket, DomainError> {
        let text = text_of("text", text)?;
        let reply = Payload::AgentReplyAdded(AgentReplyAdded {
            message: Some(TicketMessage {
                from: "agent".into(),
                text,
                at: now(),
                delivery: String::new(),
            }),
            origin: None,
            by: Some(by),
        });
        self.change_ticket(id, |_| Ok(vec![reply.clone()])).await
    }

    /// An internal note by a person.
    pub async fn note_as(
        &self,
        id: &str,
        text: &str,
        by: ClientRef,
    ) -> Result<Ticket, DomainError> {
        let added = note(text_of("text", text)?, &by);
        self.change_ticket(id, |_| Ok(vec![added.clone()])).await
    }

    /// A person's classification; an empty field keeps the ticket's.
    pub async fn classify_as(
        &self,
        id: &str,
        category: &str,
        priority: &str,
        intent: &str,
        by: ClientRef,
    ) -> Result<Ticket, DomainError> {
        let category = match category.trim() {
            "" => None,
            c => Some(
                self.taxonomy()
                    .category(c)
                    .map_err(|problem| DomainError::Invalid {
                        field: "category",
                        problem,
                    })?,
            ),
        };
        let priority = match priority.trim() {
            "" => None,
            p => Some(
                Priority::parse(p)
                    .ok_or_else(|| DomainError::Invalid {
                        field: "priority",
                        problem: format!("is {p:?}; one of {}", Priority::NAMES.join(", ")),
                    })?
                    .as_str(),
            ),
        };
        let intent = intent.trim();
        if category.is_none() && priority.is_none() && intent.is_empty() {
            return Err(DomainError::Invalid {
                field: "category",
                problem: "nothing to change: give a category, a priority or an intent".into(),
            });
        }
        self.change_ticket(id, |t| {
            let category = category.clone().unwrap_or_else(|| t.category.clone());
            let priority = priority.map_or_else(|| t.priority.clone(), String::from);
            let intent = if intent.is_empty() {
                t.intent.clone()
            } else {
                intent.to_string()
            };
            let said = format!("{} classified it {category} · {priority}", who(&by));
            Ok(vec![
                Payload::TicketClassified(TicketClassified {
                    category,
                    priority,
                    intent,
                    summary: String::new(),
                    origin: None,
                    by: Some(by.clone()),
                    confidence: Vec::new(),
                }),
                note(said, &by),
            ])
        })
        .await
    }

    /// A person routes (or reassigns) the ticket to a queue of the desk.
    pub async fn route_as(
        &self,
        id: &str,
        queue: &str,
        reason: &str,
        by: ClientRef,
    ) -> Result<Ticket, DomainError> {
        let queue = self
            .taxonomy()
            .queue(queue)
            .map_err(|problem| DomainError::Invalid {
                field: "queue",
                problem,
            })?;
        let reason = reason.trim().to_string();
        self.change_ticket(id, |_| {
            let said = match reason.as_str() {
                "" => format!("{} routed it to {queue}", who(&by)),
                r => format!("{} routed it to {queue}: {r}", who(&by)),
            };
            Ok(vec![
                Payload::TicketRouted(TicketRouted {
                    queue: queue.clone(),
                    reason: reason.clone(),
                    origin: None,
                    by: Some(by.clone()),
                    confidence: Vec::new(),
                }),
                note(said, &by),
            ])
        })
        .await
    }

    /// A person decides a model's decision held for review: the suggested
    /// category, priority and queue, each replaced by a correction when one
    /// is given. Recorded as the person's classification and routing (the
    /// learner learns from them), which settles the suggestion.
    pub async fn review_as(
        &self,
        id: &str,
        correction: &Review,
        by: ClientRef,
    ) -> Result<Ticket, DomainError> {
        let taxonomy = self.taxonomy();
        let invalid = |field, problem| DomainError::Invalid { field, problem };
        let category = match correction.category.trim() {
            "" => None,
            c => Some(taxonomy.category(c).map_err(|p| invalid("category", p))?),
        };
        let queue = match correction.queue.trim() {
            "" => None,
            q => Some(taxonomy.queue(q).map_err(|p| invalid("queue", p))?),
        };
        let priority = match correction.priority.trim() {
            "" => None,
            p => Some(Priority::parse(p).ok_or_else(|| {
                invalid(
                    "priority",
                    format!("is {p:?}; one of {}", Priority::NAMES.join(", ")),
                )
            })?),
        };
        self.change_ticket(id, |t| {
            let Some(s) = &t.suggestion else {
                return Err(invalid(
                    "ticket_id",
                    format!("{} has no decision waiting for review", t.id),
                ));
            };
            let corrected = category.is_some() || priority.is_some() || queue.is_some();
            let verb = if corrected { "corrected" } else { "accepted" };
            let mut out = Vec::new();
            let category = category.clone().unwrap_or_else(|| s.category.clone());
            if !category.is_empty() {
                let priority = priority.map_or_else(|| s.priority.clone(), |p| p.as_str().into());
                out.push(Payload::TicketClassified(TicketClassified {
                    category: category.clone(),
                    priority: priority.clone(),
                    intent: s.intent.clone(),
                    by: Some(by.clone()),
                    ..Default::default()
                }));
                out.push(note(
                    format!(
                        "{} {verb} the suggested classification: {category} · {priority}",
                        who(&by)
                    ),
                    &by,
                ));
            }
            let queue = queue.clone().unwrap_or_else(|| s.queue.clone());
            if !queue.is_empty() {
                out.push(Payload::TicketRouted(TicketRouted {
                    queue: queue.clone(),
                    reason: format!("review: {verb}"),
                    by: Some(by.clone()),
                    ..Default::default()
                }));
                out.push(note(
                    format!("{} {verb} the suggested queue: {queue}", who(&by)),
                    &by,
                ));
            }
            Ok(out)
        })
        .await
    }

    /// A person sets the ticket's status (`resolved` closes it, `open`
    /// reopens it).
    pub async fn set_status_as(
        &self,
        id: &str,
        status: &str,
        reason: &str,
        by: ClientRef,
    ) -> Result<Ticket, DomainError> {
        let status = Status::parse(status.trim()).ok_or_else(|| DomainError::Invalid {
            field: "status",
            problem: format!("is {status:?}; one of {}", Status::NAMES.join(", ")),
        })?;
        let reason = reason.trim().to_string();
        self.change_ticket(id, |t| {
            if Status::of(t) == Some(status) {
                return Ok(Vec::new()); // already so: nothing to record
            }
            let said = match reason.as_str() {
                "" => format!("{} set it {}", who(&by), status.as_str()),
                r => format!("{} set it {}: {r}", who(&by), status.as_str()),
            };
            Ok(vec![
                Payload::TicketStatusChanged(TicketStatusChanged {
                    status: status.as_str().into(),
                    reason: reason.clone(),
                    by: Some(by.clone()),
                }),
                note(said, &by),
            ])
        })
        .await
    }
}
