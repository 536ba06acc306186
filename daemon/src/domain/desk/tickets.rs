//! Ticket operations: read, list, create (intake), and every change through
//! the log with the stream's expected version — a concurrent change makes
//! the append conflict, the projection catches up and the change is
//! re-applied to the fresh state, so no update is lost.

use std::time::SystemTime;

use tinycode_shared::proto::event::Payload;
use tinycode_shared::proto::{CustomerMessageAdded, Ticket, TicketCreated, TicketMessage};
use tinycode_shared::render::rfc3339;

use super::{Desk, DomainError, lock, ticket_id, ticket_stream};
use crate::domain::search::{Document, Kind};
use crate::domain::ticket::CHANNELS;
use crate::store::{ExpectedVersion, StoreError};

/// Attempts before a contended change gives up with `Busy`.
const MAX_ATTEMPTS: usize = 32;
/// Default first-response SLA of created tickets, minutes.
pub const DEFAULT_SLA_MINUTES: u32 = 480;

/// Intake of a new ticket (`Tickets.Create`).
#[derive(Debug, Clone, Default)]
pub struct NewTicket {
    pub subject: String,
    pub customer: String,
    pub channel: String,
    pub body: String,
    pub sla_minutes: u32,
}

/// Filters of `list_tickets`; empty strings match anything.
#[derive(Debug, Clone, Default)]
pub struct TicketFilter {
    pub status: String,
    pub queue: String,
    pub priority: String,
    pub category: String,
}

pub fn now() -> String {
    let now = prost_types::Timestamp::from(SystemTime::now());
    rfc3339(now.seconds, now.nanos)
}

impl Desk {
    pub fn get_ticket(&self, raw_id: &str) -> Result<Ticket, DomainError> {
        let id = ticket_id(raw_id)?;
        lock(&self.tickets)
            .get(&id)
            .filter(|t| t.version > 0)
            .cloned()
            .ok_or(DomainError::TicketNotFound(id))
    }

    /// Look at a ticket without copying it.
    pub fn with_ticket<R>(&self, id: &str, f: impl FnOnce(&Ticket) -> R) -> Option<R> {
        lock(&self.tickets).get(id).filter(|t| t.version > 0).map(f)
    }

    /// Matching tickets, ordered by id, and how many matched in all.
    pub fn list_tickets(&self, filter: &TicketFilter, limit: usize) -> (Vec<Ticket>, usize) {
        let matches = |want: &str, have: &str| want.is_empty() || want == have;
        let tickets = lock(&self.tickets);
        let all: Vec<&Ticket> = tickets
            .values()
            .filter(|t| {
                t.version > 0
                    && matches(&filter.status, &t.status)
                    && matches(&filter.queue, &t.queue)
                    && matches(&filter.priority, &t.priority)
                    && matches(&filter.category, &t.category)
            })
            .collect();
        let total = all.len();
        (all.into_iter().take(limit).cloned().collect(), total)
    }

    /// Create a ticket with the next free id `T-<n>`.
    pub async fn create_ticket(&self, new: NewTicket) -> Result<Ticket, DomainError> {
        let invalid = |field, problem: &str| DomainError::Invalid {
            field,
            problem: problem.into(),
        };
        if new.subject.trim().is_empty() {
            return Err(invalid("subject", "is empty"));
        }
        if new.customer.trim().is_empty() {
            return Err(invalid("customer", "is empty"));
        }
        if new.body.trim().is_empty() {
            return Err(invalid(
                "body",
                "is empty; give the customer's first message",
            ));
        }
        if !CHANNELS.contains(&new.channel.as_str()) {
            return Err(DomainError::Invalid {
                field: "channel",
                problem: format!(
                    "must be one of {}, got {:?}",
                    CHANNELS.join(", "),
                    new.channel
                ),
            });
        }
        let at = now();
        for _ in 0..MAX_ATTEMPTS {
            let id = self.next_ticket_id();
            let ticket = Ticket {
                id: id.clone(),
                subject: new.subject.trim().to_string(),
                customer: new.customer.trim().to_string(),
                channel: new.channel.clone(),
                created_at: at.clone(),
                sla_minutes: if new.sla_minutes == 0 {
                    DEFAULT_SLA_MINUTES
                } else {
                    new.sla_minutes
                },
                status: "open".into(),
                messages: vec![TicketMessage {
                    from: "customer".into(),
                    text: new.body.clone(),
                    at: at.clone(),
                }],
                ..Ticket::default()
            };
            let payload = Payload::TicketCreated(TicketCreated {
                ticket: Some(ticket),
            });
            match self
                .store
                .append(
                    &ticket_stream(&id),
                    ExpectedVersion::NoStream,
                    vec![payload],
                )
                .await
            {
                Ok(events) => {
                    self.fold(&events, true);
                    return self.get_ticket(&id);
                }
                // Someone took this id first: take the next one.
                Err(StoreError::Conflict { .. }) => continue,
                Err(e) => return Err(e.into()),
            }
        }
        Err(DomainError::Busy("ticket intake".into()))
    }

    /// `T-<max+1>` over existing ids and files (at least T-1001).
    fn next_ticket_id(&self) -> String {
        let number = |id: &str| id.strip_prefix("T-").and_then(|n| n.parse::<u64>().ok());
        let max = lock(&self.tickets)
            .keys()
            .filter_map(|id| number(id))
            .max()
            .unwrap_or(1000);
        let mut n = max + 1;
        // A malformed file may hold a number the log does not know.
        while self.tickets_dir.join(format!("T-{n}.json")).exists() {
            n += 1;
        }
        format!("T-{n}")
    }

    pub async fn add_customer_message(&self, id: &str, text: &str) -> Result<Ticket, DomainError> {
        if text.trim().is_empty() {
            return Err(DomainError::Invalid {
                field: "text",
                problem: "is empty".into(),
            });
        }
        let message = TicketMessage {
            from: "customer".into(),
            text: text.to_string(),
            at: now(),
        };
        self.change_ticket(id, |_| {
            Ok(vec![Payload::CustomerMessageAdded(CustomerMessageAdded {
                message: Some(message.clone()),
            })])
        })
        .await
    }

    /// Apply a change computed from the ticket's current state, through the
    /// log with its expected version; retried on a concurrent change.
    pub async fn change_ticket(
        &self,
        raw_id: &str,
        change: impl Fn(&Ticket) -> Result<Vec<Payload>, DomainError>,
    ) -> Result<Ticket, DomainError> {
        let id = ticket_id(raw_id)?;
        let stream = ticket_stream(&id);
        for _ in 0..MAX_ATTEMPTS {
            let current = self.get_ticket(&id)?;
            let payloads = change(&current)?;
            if payloads.is_empty() {
                return Ok(current);
            }
            match self
                .store
                .append(&stream, ExpectedVersion::Exact(current.version), payloads)
                .await
            {
                Ok(events) => {
                    self.fold(&events, true);
                    return self.get_ticket(&id);
                }
                Err(StoreError::Conflict { .. }) => {
                    // Fold what the other writer appended, then retry.
                    let missing =
                        self.store
                            .read_stream(&stream, current.version + 1, usize::MAX)?;
                    let missing: Vec<_> = missing.into_iter().map(std::sync::Arc::new).collect();
                    self.fold(&missing, false);
                }
                Err(e) => return Err(e.into()),
            }
        }
        Err(DomainError::Busy(format!("ticket {id}")))
    }

    pub(crate) fn index_ticket(&self, t: &Ticket) {
        let body: Vec<&str> = t
            .messages
            .iter()
            .map(|m| m.text.as_str())
            .chain(t.notes.iter().map(|n| n.text.as_str()))
            .collect();
        lock(&self.index).upsert(Document {
            kind: Kind::Ticket,
            id: &t.id,
            title: &t.subject,
            keywords: &[],
            body: &body.join("\n"),
        });
    }
}
