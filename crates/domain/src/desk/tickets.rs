//! Ticket operations: read and list (the tickets projection), create
//! (intake), and every change through the log with the stream's expected
//! version — a concurrent change makes the append conflict, the writer waits
//! for the projection to catch up and re-applies the change to the fresh
//! state, so no update is lost. Writers never fold: after an append they
//! wait for the projector to pass their event.

use prost::Message;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use tinycode_shared::proto::event::Payload;
use tinycode_shared::proto::{
    CustomerMessageAdded, Ticket, TicketCreated, TicketMessage, ToolOrigin,
};

use super::models::{decode_ticket, ticket_key};
use super::{Desk, DomainError, ticket_id, ticket_stream};
use crate::store::{ExpectedVersion, StoreError};
use crate::ticket::{Channel, Status};

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
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TicketFilter {
    pub status: String,
    pub queue: String,
    pub priority: String,
    pub category: String,
    /// Only tickets with a running SLA clock due within this many seconds
    /// (overdue ones included).
    pub due_within: Option<i64>,
    /// Only tickets with a breached SLA clock.
    pub breached: bool,
    /// Only tickets whose model decision waits for a person (`suggestion`).
    pub needs_review: bool,
}

/// One page of `list_page`.
#[derive(Debug, Clone, Default)]
pub struct Page {
    pub tickets: Vec<Ticket>,
    /// Matches on every page.
    pub total: usize,
    /// The last id of this page when more match.
    pub next: Option<String>,
}

/// A brief ticket's last message keeps this many characters.
pub const BRIEF_CHARS: usize = 200;

/// Sort key of `list_urgent`: unresolved before resolved, then P0..P3,
/// then no priority.
/// A ticket's place in the urgent order, and its key in the tree.
pub(super) type UrgentRow = (Row, sled::IVec);

/// What the urgent order and the board's filters read of a stored
/// ticket: `Ticket`'s fields by their tags, the rest skipped unread.
#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct Row {
    #[prost(string, tag = "1")]
    id: String,
    #[prost(string, tag = "5")]
    created_at: String,
    #[prost(string, tag = "7")]
    status: String,
    #[prost(string, tag = "8")]
    category: String,
    #[prost(string, tag = "9")]
    priority: String,
    #[prost(string, tag = "11")]
    queue: String,
    #[prost(uint64, tag = "15")]
    version: u64,
}

impl Row {
    /// Unresolved first, then P0…P3, no priority last.
    fn urgency(&self) -> (bool, u8) {
        let priority = match self.priority.as_str() {
            "P0" => 0,
            "P1" => 1,
            "P2" => 2,
            "P3" => 3,
            _ => 4,
        };
        (self.status == "resolved", priority)
    }
}

fn make_brief(t: &mut Ticket) {
    let last = t.messages.pop().map(|mut m| {
        if let Some((cut, _)) = m.text.char_indices().nth(BRIEF_CHARS) {
            m.text.truncate(cut);
            m.text.push('…');
        }
        m
    });
    t.messages = last.into_iter().collect();
    t.notes.clear();
    t.extra_json.clear();
}

pub fn now() -> String {
    crate::clock::now_rfc3339()
}

impl Desk {
    /// The ticket as the projection has it (`None`: no such ticket).
    pub(super) fn stored_ticket(&self, id: &str) -> Result<Option<Ticket>, DomainError> {
        match self.tickets.tree().get(ticket_key(id)) {
            Ok(Some(bytes)) => Ok(Some(decode_ticket(&bytes)?).filter(|t| t.version > 0)),
            Ok(None) => Ok(None),
            Err(e) => Err(crate::projection::ProjectionError::from(e).into()),
        }
    }

    pub fn get_ticket(&self, raw_id: &str) -> Result<Ticket, DomainError> {
        let id = ticket_id(raw_id)?;
        self.stored_ticket(&id)?
            .ok_or(DomainError::TicketNotFound(id))
    }

    /// Wait until the tickets projection has applied `sequence` (a client
    /// that saw that event never reads older state).
    pub async fn tickets_at(&self, sequence: u64) -> Result<(), DomainError> {
        Ok(self.tickets.wait_for(sequence).await?)
    }

    /// The tickets model's projector (read-your-writes, status).
    pub fn tickets_model(&self) -> &crate::projection::ProjectorHandle {
        &self.tickets
    }

    /// Look at a ticket (as the projection has it).
    pub fn with_ticket<R>(&self, id: &str, f: impl FnOnce(&Ticket) -> R) -> Option<R> {
        self.stored_ticket(id).ok().flatten().as_ref().map(f)
    }

    /// [`Self::with_ticket`] on the ticket without its texts (subject,
    /// customer, messages' and notes' texts are empty; `ticket_head.rs`):
    /// what a board of many tickets reads.
    pub fn with_ticket_head<R>(&self, id: &str, f: impl FnOnce(&Ticket) -> R) -> Option<R> {
        let bytes = self.tickets.tree().get(ticket_key(id)).ok().flatten()?;
        let head = super::models::decode_ticket_head(&bytes).ok()?;
        (head.version > 0).then(|| f(&head))
    }

    /// Every stored ticket, in id order (read one at a time).
    pub fn all_tickets(&self) -> impl Iterator<Item = Result<Ticket, DomainError>> + '_ {
        self.tickets.tree().scan_prefix(b"t/").map(|row| {
            let (_, value) = row.map_err(crate::projection::ProjectionError::from)?;
            Ok(decode_ticket(&value)?)
        })
    }

    /// Every stored ticket without its texts (subject, customer, messages'
    /// texts, notes): what figures read.
    pub(super) fn all_ticket_heads(
        &self,
    ) -> impl Iterator<Item = Result<Ticket, DomainError>> + '_ {
        self.tickets.tree().scan_prefix(b"t/").map(|row| {
            let (_, value) = row.map_err(crate::projection::ProjectionError::from)?;
            Ok(super::models::decode_ticket_head(&value)?)
        })
    }

    /// Ids of the open tickets, in id order (an index: no ticket is read).
    pub fn open_ticket_ids(&self) -> Result<Vec<String>, DomainError> {
        Ok(super::ticket_index::open_ids(self.tickets.tree())?)
    }

    pub(super) fn ticket_count(&self) -> Result<usize, DomainError> {
        Ok(super::ticket_index::count(self.tickets.tree())? as usize)
    }

    /// Matching tickets, ordered by id, and how many matched in all.
    pub fn list_tickets(&self, filter: &TicketFilter, limit: usize) -> (Vec<Ticket>, usize) {
        let page = self.list_page(filter, limit, "", false, usize::MAX);
        (page.tickets, page.total)
    }

    /// One page of matching tickets in id order: after the id `after`, at
    /// most `limit` of them and about `max_bytes` (at least one). Without a
    /// filter only the page is read (the total is the stored count); with
    /// one every ticket is read to count the matches.
    pub fn list_page(
        &self,
        filter: &TicketFilter,
        limit: usize,
        after: &str,
        brief: bool,
        max_bytes: usize,
    ) -> Page {
        let matches = |want: &str, have: &str| want.is_empty() || want == have;
        let unfiltered = filter == &TicketFilter::default();
        let now = crate::clock::now_unix();
        let mut page = Page::default();
        let tickets: Box<dyn Iterator<Item = Result<Ticket, DomainError>>> = if unfiltered {
            page.total = self.ticket_count().unwrap_or_else(|e| {
                tracing::error!(error = %e, "cannot read the ticket count");
                0
            });
            Box::new(self.stored_tickets_after(after))
        } else {
            Box::new(self.all_tickets())
        };
        let mut bytes = 0;
        let mut full = false;
        for ticket in tickets {
            let t = match ticket {
                Ok(t) => t,
                Err(e) => {
                    tracing::error!(error = %e, "cannot read a stored ticket");
                    continue;
                }
            };
            if t.version > 0
                && matches(&filter.status, &t.status)
                && matches(&filter.queue, &t.queue)
                && matches(&filter.priority, &t.priority)
                && matches(&filter.category, &t.category)
                && self.sla_matches(filter, &t, now)
                && (!filter.needs_review || t.suggestion.is_some())
            {
                if !unfiltered {
                    page.total += 1;
                }
                if full || t.id.as_str() <= after {
                    continue;
                }
                let mut t = self.with_sla(t);
                if brief {
                    make_brief(&mut t);
                }
                let size = t.encoded_len();
                if page.tickets.len() >= limit
                    || (!page.tickets.is_empty() && bytes + size > max_bytes)
                {
                    full = true;
                    page.next = page.tickets.last().map(|t| t.id.clone());
                    if unfiltered {
                        break;
                    }
                    continue;
                }
                bytes += size;
                page.tickets.push(t);
            }
        }
        page
    }

    /// One page of matching tickets, most urgent first: P0 before P3,
    /// unprioritised last, resolved tickets after every unresolved one, and
    /// newest first within a priority. The page starts `offset` matches
    /// in (its token is the offset). With `brief` each ticket keeps only
    /// its last message, clipped to [`BRIEF_CHARS`], and no notes: a
    /// board's rows, not whole conversations.
    pub fn list_urgent(
        &self,
        filter: &TicketFilter,
        limit: usize,
        offset: usize,
        brief: bool,
        max_bytes: usize,
    ) -> Page {
        let matches = |want: &str, have: &str| want.is_empty() || want == have;
        let now = crate::clock::now_unix();
        let sorted = self.urgent_rows();
        let rows: Vec<&UrgentRow> = sorted
            .iter()
            .filter(|(r, _)| {
                matches(&filter.status, &r.status)
                    && matches(&filter.queue, &r.queue)
                    && matches(&filter.priority, &r.priority)
                    && matches(&filter.category, &r.category)
            })
            .filter(|(r, _)| {
                (filter.due_within.is_none() && !filter.breached && !filter.needs_review)
                    || self.stored_ticket(&r.id).ok().flatten().is_some_and(|t| {
                        self.sla_matches(filter, &t, now)
                            && (!filter.needs_review || t.suggestion.is_some())
                    })
            })
            .collect::<Vec<_>>();
        let mut page = Page {
            total: rows.len(),
            ..Page::default()
        };
        let mut bytes = 0;
        for (i, (_, key)) in rows.into_iter().enumerate().skip(offset) {
            if page.tickets.len() >= limit {
                page.next = Some(i.to_string());
                break;
            }
            let value = match self.tickets.tree().get(key) {
                Ok(Some(v)) => v,
                Ok(None) => continue, // changed since: gone from this page
                Err(e) => {
                    tracing::error!(error = %e, "cannot read a stored ticket");
                    continue;
                }
            };
            let Ok(t) = decode_ticket(&value) else {
                continue;
            };
            let mut t = self.with_sla(t);
            if brief {
                make_brief(&mut t);
            }
            let size = t.encoded_len();
            if !page.tickets.is_empty() && bytes + size > max_bytes {
                page.next = Some(i.to_string());
                break;
            }
            bytes += size;
            page.tickets.push(t);
        }
        page
    }

    /// Every stored ticket's [`Row`] and key in the urgent order, sorted
    /// once per state of the tickets model. The rows hold only what the
    /// order and the board's filters read (prost skips the messages and
    /// notes unread); the page's tickets are then read whole by key.
    fn urgent_rows(&self) -> Arc<Vec<UrgentRow>> {
        let applied = self.tickets.applied();
        let mut cache = crate::sync::lock(&self.urgent);
        if let Some((at, rows)) = cache.as_ref()
            && *at == applied
        {
            return Arc::clone(rows);
        }
        let mut rows: Vec<UrgentRow> = self
            .tickets
            .tree()
            .scan_prefix(b"t/")
            .filter_map(|row| {
                let (key, value) = row
                    .map_err(|e| tracing::error!(error = %e, "cannot read a stored ticket"))
                    .ok()?;
                let r = Row::decode(value.as_ref())
                    .map_err(|e| tracing::error!(error = %e, "cannot read a stored ticket"))
                    .ok()?;
                (r.version > 0).then_some((r, key))
            })
            .collect();
        rows.sort_by(|(a, _), (b, _)| {
            a.urgency()
                .cmp(&b.urgency())
                .then_with(|| b.created_at.cmp(&a.created_at))
                .then_with(|| a.id.cmp(&b.id))
        });
        let rows = Arc::new(rows);
        // Read at `applied` or later: never older than it says.
        *cache = Some((applied, Arc::clone(&rows)));
        rows
    }

    /// Stored tickets with an id after `after`, in id order.
    fn stored_tickets_after(
        &self,
        after: &str,
    ) -> impl Iterator<Item = Result<Ticket, DomainError>> + '_ {
        let from = ticket_key(after);
        let prefix = ticket_key("");
        self.tickets
            .tree()
            .range((std::ops::Bound::Excluded(from), std::ops::Bound::Unbounded))
            .take_while(move |row| row.as_ref().map_or(true, |(k, _)| k.starts_with(&prefix)))
            .map(|row| {
                let (_, value) = row.map_err(crate::projection::ProjectionError::from)?;
                Ok(decode_ticket(&value)?)
            })
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
        if Channel::parse(&new.channel).is_none() {
            return Err(DomainError::Invalid {
                field: "channel",
                problem: format!(
                    "must be one of {}, got {:?}",
                    Channel::NAMES.join(", "),
                    new.channel
                ),
            });
        }
        let at = now();
        self.append_new(Ticket {
            subject: new.subject.trim().to_string(),
            customer: new.customer.trim().to_string(),
            channel: new.channel.clone(),
            created_at: at.clone(),
            sla_minutes: if new.sla_minutes == 0 {
                DEFAULT_SLA_MINUTES
            } else {
                new.sla_minutes
            },
            status: Status::Open.as_str().into(),
            messages: vec![TicketMessage {
                from: "customer".into(),
                text: new.body.clone(),
                at,
                delivery: String::new(),
            }],
            ..Ticket::default()
        })
        .await
    }

    /// Record `ticket` as created under the next free id.
    pub(super) async fn append_new(&self, ticket: Ticket) -> Result<Ticket, DomainError> {
        for _ in 0..MAX_ATTEMPTS {
            let id = self.next_ticket_id();
            let payload = Payload::TicketCreated(TicketCreated {
                ticket: Some(Ticket {
                    id: id.clone(),
                    ..ticket.clone()
                }),
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
                Ok(events) => return self.read_own(&id, &events).await,
                // Someone took this id first: take the next one.
                Err(StoreError::Conflict { .. }) => continue,
                Err(e) => return Err(e.into()),
            }
        }
        Err(DomainError::Busy("ticket intake".into()))
    }

    /// The event of `stream` made by the tool call `origin`, if any.
    pub(super) async fn made_by(
        &self,
        stream: &str,
        origin: &ToolOrigin,
    ) -> Result<Option<tinycode_shared::proto::Event>, DomainError> {
        Ok(self
            .store
            .read_stream(stream, 1, usize::MAX)
            .await?
            .into_iter()
            .find(|e| crate::ticket::origin_of(e) == Some(origin)))
    }

    /// `T-<max+1>` over existing ids, ids handed out and files (at least
    /// T-1001).
    fn next_ticket_id(&self) -> String {
        let known = super::ticket_index::max_number(self.tickets.tree())
            .unwrap_or_else(|e| {
                tracing::error!(error = %e, "cannot read the highest ticket number");
                0
            })
            .max(self.issued.load(Ordering::Acquire))
            .max(1000);
        let mut n = known + 1;
        // A malformed file may hold a number the log does not know.
        while self.tickets_dir.join(format!("T-{n}.json")).exists() {
            n += 1;
        }
        self.issued.fetch_max(n, Ordering::AcqRel);
        format!("T-{n}")
    }

    /// After an append: wait for the projection to have it, then read.
    async fn read_own(
        &self,
        id: &str,
        events: &[std::sync::Arc<tinycode_shared::proto::Event>],
    ) -> Result<Ticket, DomainError> {
        if let Some(last) = events.last() {
            self.tickets.wait_for(last.sequence).await?;
        }
        self.get_ticket(id)
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
            delivery: String::new(),
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
        self.change_ticket_once(raw_id, None, change).await
    }

    /// [`Desk::change_ticket`] at most once per tool call: when the
    /// ticket's stream already holds a change made by `origin` (a turn
    /// resumed after a crash between the change and its result), nothing is
    /// appended and the ticket is returned as it is.
    pub async fn change_ticket_once(
        &self,
        raw_id: &str,
        origin: Option<&ToolOrigin>,
        change: impl Fn(&Ticket) -> Result<Vec<Payload>, DomainError>,
    ) -> Result<Ticket, DomainError> {
        let id = ticket_id(raw_id)?;
        let stream = ticket_stream(&id);
        let _my_turn = self.ticket_locks.lock(&id).await;
        if let Some(origin) = origin
            && self.made_by(&stream, origin).await?.is_some()
        {
            tracing::info!(ticket = %id, call = %origin.call_id, "the call's change is already in the log; not applied again");
            return self.get_ticket(&id);
        }
        for _ in 0..MAX_ATTEMPTS {
            let current = self.get_ticket(&id)?;
            let payloads = change(&current)?;
            if payloads.is_empty() {
                return Ok(current);
            }
            let grown =
                current.encoded_len() + payloads.iter().map(|p| p.encoded_len()).sum::<usize>();
            if grown > crate::limits::MAX_TICKET_BYTES {
                return Err(DomainError::Invalid {
                    field: "ticket",
                    problem: format!(
                        "{id} would grow to {grown} bytes; a ticket holds at most {} bytes of messages and notes — close it and open a new ticket for the rest",
                        crate::limits::MAX_TICKET_BYTES
                    ),
                });
            }
            match self
                .store
                .append(&stream, ExpectedVersion::Exact(current.version), payloads)
                .await
            {
                Ok(events) => return self.read_own(&id, &events).await,
                Err(StoreError::Conflict { .. }) => {
                    // The other writer's event is durable: wait until the
                    // projection has it, then retry on the fresh state.
                    self.tickets.wait_for(self.store.last_sequence()).await?;
                }
                Err(e) => return Err(e.into()),
            }
        }
        Err(DomainError::Busy(format!("ticket {id}")))
    }
}
