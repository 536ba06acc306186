//! Tickets from a connector: a customer message delivered by a source (a
//! helpdesk's webhook, a row of an imported file) becomes a new ticket, or
//! a message of the ticket its conversation already has — once per
//! delivery id.
//!
//! The tickets model keeps two indexes for it (`external.rs`, folded with
//! the ticket events): `e/c/<source>\0<conversation>` → the ticket, and
//! `e/d/<source>\0<delivery>` → the ticket the delivery went to. A
//! delivery is looked up with the model caught up to the log; a message is
//! appended at the ticket's expected version by a change that finds the
//! delivery already there and adds nothing, so the same delivery twice —
//! retried by a helpdesk while the first is being stored, or after a crash —
//! stores one message. Within one daemon, deliveries of one conversation
//! take turns (a new conversation's two first messages make one ticket);
//! other conversations are stored meanwhile; two daemons that
//! receive the first messages of one new conversation in the same moment
//! can make two tickets (docs/CONNECTORS.md says so).

use std::sync::atomic::{AtomicBool, Ordering};

use tinycode_shared::proto::event::Payload;
use tinycode_shared::proto::{CustomerMessageAdded, ExternalRef, Ticket, TicketMessage};

use super::{Desk, DomainError, now};
use crate::limits::MAX_TEXT;
use crate::projection::ProjectionError;
use crate::ticket::{Channel, Status};

use super::external::{conversation_key, delivery_key};
/// Longest source name, conversation or delivery id (bytes).
pub const MAX_EXTERNAL_ID: usize = 256;
/// Longest subject or customer (bytes).
const MAX_LINE: usize = 1024;

/// What a customer wrote, without the control characters a terminal
/// would act on (escape sequences): line breaks and tabs are kept.
fn clean(text: &str) -> String {
    text.chars()
        .filter(|&c| c == '\n' || c == '\t' || !(c.is_control()))
        .collect()
}

/// One customer message from a source, as its adapter read it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Inbound {
    pub source: String,
    /// The source's id of this delivery (the same id twice is one message).
    pub delivery: String,
    /// The source's id of the conversation (one ticket per conversation).
    pub conversation: String,
    /// For a new ticket; a message on a known conversation ignores it.
    pub subject: String,
    pub body: String,
    pub customer: String,
    /// `email`, `chat`, `phone`, `web`; empty: `web`.
    pub channel: String,
    /// When the customer wrote it (RFC 3339); empty: now.
    pub at: String,
    pub sla_minutes: u32,
}

/// What became of a delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Received {
    pub ticket: String,
    pub created: bool,
    pub duplicate: bool,
}

impl Inbound {
    /// The first problem a person can act on, naming the field.
    fn check(&self) -> Result<(), DomainError> {
        let invalid = |field, problem: String| Err(DomainError::Invalid { field, problem });
        for (field, value) in [
            ("source", &self.source),
            ("delivery id", &self.delivery),
            ("conversation id", &self.conversation),
        ] {
            if value.trim().is_empty() {
                return invalid(field, "is empty".into());
            }
            if value.len() > MAX_EXTERNAL_ID || value.contains('\0') {
                return invalid(
                    field,
                    format!("must be at most {MAX_EXTERNAL_ID} bytes with no NUL"),
                );
            }
        }
        if self.body.trim().is_empty() {
            return invalid(
                "body",
                "is empty; a delivery carries the customer's message".into(),
            );
        }
        for (field, value, limit) in [
            ("body", &self.body, MAX_TEXT),
            ("subject", &self.subject, MAX_LINE),
            ("customer", &self.customer, MAX_LINE),
            ("time", &self.at, 64),
        ] {
            if value.len() > limit {
                return invalid(field, format!("is over {limit} bytes"));
            }
        }
        if !self.channel.is_empty() && Channel::parse(&self.channel).is_none() {
            return invalid(
                "channel",
                format!(
                    "must be one of {}, got {:?}",
                    Channel::NAMES.join(", "),
                    self.channel
                ),
            );
        }
        Ok(())
    }

    fn message(&self) -> TicketMessage {
        TicketMessage {
            from: "customer".into(),
            text: clean(self.body.trim()),
            at: if self.at.is_empty() {
                now()
            } else {
                self.at.clone()
            },
            delivery: self.delivery.clone(),
        }
    }

    /// The ticket this delivery opens.
    fn ticket(&self) -> Ticket {
        let subject = match self.subject.trim() {
            "" => first_line(&clean(&self.body)),
            s => clean(s).replace(['\n', '\t'], " "),
        };
        let message = self.message();
        Ticket {
            subject,
            customer: match self.customer.trim() {
                "" => format!("{} customer", self.source),
                c => clean(c).replace(['\n', '\t'], " "),
            },
            channel: if self.channel.is_empty() {
                Channel::Web.as_str().into()
            } else {
                self.channel.clone()
            },
            created_at: message.at.clone(),
            sla_minutes: if self.sla_minutes == 0 {
                super::tickets::DEFAULT_SLA_MINUTES
            } else {
                self.sla_minutes
            },
            status: Status::Open.as_str().into(),
            messages: vec![message],
            external: Some(ExternalRef {
                source: self.source.clone(),
                conversation: self.conversation.clone(),
            }),
            ..Ticket::default()
        }
    }
}

/// A subject from a message that came without one: its first line, cut.
fn first_line(body: &str) -> String {
    let line = body.trim().lines().next().unwrap_or_default().trim();
    match line.char_indices().nth(80) {
        Some((at, _)) => format!("{}…", &line[..at]),
        None => line.to_string(),
    }
}

impl Desk {
    /// Store one delivery: a new ticket, a message of its conversation's
    /// ticket, or nothing when it was stored before.
    pub async fn receive(&self, inbound: Inbound) -> Result<Received, DomainError> {
        inbound.check()?;
        let _one_at_a_time = self
            .intake_locks
            .lock(&format!("{}\0{}", inbound.source, inbound.conversation))
            .await;
        self.tickets.wait_for(self.store.last_sequence()).await?;
        if let Some(ticket) = self.delivered_to(&inbound.source, &inbound.delivery)? {
            return Ok(Received {
                ticket,
                created: false,
                duplicate: true,
            });
        }
        let Some(id) = self.conversation_ticket(&inbound.source, &inbound.conversation)? else {
            let ticket = self.append_new(inbound.ticket()).await?;
            return Ok(Received {
                ticket: ticket.id,
                created: true,
                duplicate: false,
            });
        };
        let added = AtomicBool::new(false);
        let message = inbound.message();
        let ticket = self
            .change_ticket(&id, |current| {
                let known = current
                    .messages
                    .iter()
                    .any(|m| m.delivery == inbound.delivery)
                    || self
                        .delivered_to(&inbound.source, &inbound.delivery)?
                        .is_some();
                added.store(!known, Ordering::Relaxed);
                Ok(if known {
                    Vec::new()
                } else {
                    vec![Payload::CustomerMessageAdded(CustomerMessageAdded {
                        message: Some(message.clone()),
                    })]
                })
            })
            .await?;
        let added = added.load(Ordering::Relaxed);
        Ok(Received {
            ticket: ticket.id,
            created: false,
            duplicate: !added,
        })
    }

    /// The ticket a source's conversation has, if any.
    pub fn conversation_ticket(
        &self,
        source: &str,
        conversation: &str,
    ) -> Result<Option<String>, DomainError> {
        self.ticket_at(conversation_key(source, conversation))
    }

    /// The ticket a delivery was stored in, if it was.
    fn delivered_to(&self, source: &str, delivery: &str) -> Result<Option<String>, DomainError> {
        self.ticket_at(delivery_key(source, delivery))
    }

    /// The ticket id an index of `external.rs` holds at `key`.
    fn ticket_at(&self, key: Vec<u8>) -> Result<Option<String>, DomainError> {
        Ok(self
            .tickets
            .tree()
            .get(key)
            .map_err(ProjectionError::from)?
            .map(|v| String::from_utf8_lossy(&v).to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inbound() -> Inbound {
        Inbound {
            source: "acme".into(),
            delivery: "d-1".into(),
            conversation: "c-1".into(),
            body: "My order never came".into(),
            ..Inbound::default()
        }
    }

    #[test]
    fn a_delivery_without_what_the_desk_needs_is_refused_naming_the_field() {
        let cases = [
            (
                Inbound {
                    delivery: " ".into(),
                    ..inbound()
                },
                "delivery id",
            ),
            (
                Inbound {
                    conversation: String::new(),
                    ..inbound()
                },
                "conversation id",
            ),
            (
                Inbound {
                    body: "\n".into(),
                    ..inbound()
                },
                "body",
            ),
            (
                Inbound {
                    channel: "fax".into(),
                    ..inbound()
                },
                "channel",
            ),
            (
                Inbound {
                    source: "a\0b".into(),
                    ..inbound()
                },
                "source",
            ),
        ];
        for (bad, field) in cases {
            match bad.check() {
                Err(DomainError::Invalid { field: f, .. }) => assert_eq!(f, field),
                other => panic!("{field}: {other:?}"),
            }
        }
        assert!(inbound().check().is_ok());
    }

    #[test]
    fn control_characters_a_terminal_would_act_on_are_dropped() {
        let t = Inbound {
            body: "hi\u{1b}]52;c;ZXZpbA==\u{7}\u{9b}31m there\r\n\tok".into(),
            subject: "a\u{1b}[2Jb\nc".into(),
            customer: "ana\u{0}@x".into(),
            ..inbound()
        }
        .ticket();
        assert_eq!(t.messages[0].text, "hi]52;c;ZXZpbA==31m there\n\tok");
        assert_eq!(
            (t.subject.as_str(), t.customer.as_str()),
            ("a[2Jb c", "ana@x")
        );
        let long = Inbound {
            customer: "x".repeat(2000),
            ..inbound()
        };
        match long.check() {
            Err(DomainError::Invalid { field, .. }) => assert_eq!(field, "customer"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_ticket_without_a_subject_takes_the_first_line_of_the_message() {
        let t = Inbound {
            body: format!("{}\nsecond line", "x".repeat(100)),
            ..inbound()
        }
        .ticket();
        assert_eq!(t.subject.chars().count(), 81);
        assert_eq!(t.channel, "web");
        assert_eq!(t.customer, "acme customer");
        assert_eq!(t.messages[0].delivery, "d-1");
        assert_eq!(
            t.external,
            Some(ExternalRef {
                source: "acme".into(),
                conversation: "c-1".into()
            })
        );
    }

    #[tokio::test]
    async fn a_delivery_is_stored_once_and_its_conversation_is_one_ticket() {
        let (tmp, ws) = crate::desk::tests::fixture_copy();
        let (desk, _, store) = crate::desk::tests::open(&ws, &tmp.path().join("db")).await;
        let first = desk.receive(inbound()).await.unwrap();
        assert_eq!((first.created, first.duplicate), (true, false));
        let again = desk.receive(inbound()).await.unwrap();
        assert_eq!(
            again,
            Received {
                ticket: first.ticket.clone(),
                created: false,
                duplicate: true
            }
        );
        let next = Inbound {
            delivery: "d-2".into(),
            body: "Any news?".into(),
            ..inbound()
        };
        let joined = desk.receive(next.clone()).await.unwrap();
        assert_eq!(
            (joined.ticket.as_str(), joined.created),
            (first.ticket.as_str(), false)
        );
        // Two copies of a new conversation's delivery at once: one ticket.
        let other = Inbound {
            delivery: "d-9".into(),
            conversation: "c-9".into(),
            ..inbound()
        };
        let (a, b) = tokio::join!(desk.receive(other.clone()), desk.receive(other));
        let (a, b) = (a.unwrap(), b.unwrap());
        assert_eq!(a.ticket, b.ticket);
        assert_ne!(a.duplicate, b.duplicate);
        // The same delivery id from another source is another delivery.
        let elsewhere = desk
            .receive(Inbound {
                source: "globex".into(),
                ..inbound()
            })
            .await
            .unwrap();
        assert!(elsewhere.created);
        desk.settled().await.unwrap();
        let t = desk.get_ticket(&first.ticket).unwrap();
        assert_eq!(t.messages.len(), 2);
        assert_eq!(t.external.unwrap().conversation, "c-1");
        // The mirror wrote the file and read it back without taking it for
        // a hand edit (the file holds no source nor delivery ids).
        assert!(ws.join(format!("tickets/{}.json", first.ticket)).exists());
        let events = store
            .read_stream(&super::super::ticket_stream(&first.ticket), 1, 100)
            .await
            .unwrap();
        assert_eq!(events.len(), 2, "{events:?}");
    }
}
