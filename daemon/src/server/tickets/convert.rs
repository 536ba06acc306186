//! The Tickets service's boundary: every request is checked and typed here
//! (`TryFrom`), once; the handlers in `mod.rs` only call the desk.

use tinycode_shared::proto::{
    AddCustomerMessageRequest, ClassifyTicketRequest, ClientRef, CreateTicketRequest,
    ListTicketsRequest, ReviewTicketRequest, RouteTicketRequest, SearchHit, SearchRequest,
    SearchResponse, SetTicketStatusRequest, TicketTextRequest, WatchTicketsRequest,
};
use tonic::{Request, Status};

use super::super::peer::caller_and;
use super::super::validate::{
    self, MAX_LIST, MAX_NAME, MAX_QUERY, MAX_SLA_MINUTES, MAX_SUBJECT, MAX_TEXT,
};
use crate::domain::desk::{NewTicket, TicketFilter};
use crate::domain::search::Hit;
use crate::domain::ticket::{Channel, Priority, Status as TicketStatus};

/// Where a listing starts.
pub enum Start {
    /// Ordered by id: after this id (empty: from the first).
    AfterId(String),
    /// Most urgent first: skip this many.
    Offset(usize),
}

/// `Tickets.List`, checked.
pub struct ListTickets {
    pub filter: TicketFilter,
    pub limit: usize,
    pub start: Start,
    pub brief: bool,
    pub min_sequence: u64,
}

impl TryFrom<ListTicketsRequest> for ListTickets {
    type Error = Status;

    fn try_from(req: ListTicketsRequest) -> Result<Self, Status> {
        validate::one_of_or_empty("status", &req.status, &TicketStatus::NAMES)?;
        validate::one_of_or_empty("priority", &req.priority, &Priority::NAMES)?;
        validate::max_len("queue", &req.queue, MAX_NAME)?;
        validate::max_len("category", &req.category, MAX_NAME)?;
        let limit = validate::limit("limit", req.limit, 100, MAX_LIST)?;
        validate::one_of_or_empty("order", &req.order, &["id", "urgent"])?;
        let start = match (req.order == "urgent", req.page_token.is_empty()) {
            (true, true) => Start::Offset(0),
            (true, false) => Start::Offset(req.page_token.parse::<usize>().map_err(|_| {
                Status::invalid_argument("page_token: not a page token of an \"urgent\" listing")
            })?),
            (false, _) => Start::AfterId(validate::optional_id("page_token", &req.page_token)?),
        };
        Ok(Self {
            filter: TicketFilter {
                status: req.status,
                queue: req.queue,
                priority: req.priority,
                category: req.category,
                due_within: match req.due_within_seconds {
                    0 => None,
                    n if n > 366 * 86_400 => {
                        return Err(Status::invalid_argument(
                            "due_within_seconds: at most a year (31,622,400 seconds)",
                        ));
                    }
                    n => Some(n as i64),
                },
                breached: req.breached,
                needs_review: req.needs_review,
            },
            limit,
            start,
            brief: req.brief,
            min_sequence: req.min_sequence,
        })
    }
}

/// `Tickets.Search` and `Knowledge.Search`, checked: the words and how many
/// hits.
pub struct Query {
    pub words: String,
    pub limit: usize,
}

impl TryFrom<SearchRequest> for Query {
    type Error = Status;

    fn try_from(req: SearchRequest) -> Result<Self, Status> {
        validate::max_len("query", &req.query, MAX_QUERY)?;
        if req.query.trim().is_empty() {
            return Err(Status::invalid_argument(
                "`query` is empty; give words to search for",
            ));
        }
        let limit = validate::limit("limit", req.limit, 10, 100)?;
        Ok(Self {
            words: req.query,
            limit,
        })
    }
}

/// Search hits as they go on the wire.
pub fn search_response(hits: Vec<Hit>) -> SearchResponse {
    SearchResponse {
        hits: hits
            .into_iter()
            .map(|h| SearchHit {
                kind: h.kind.as_str().into(),
                id: h.id,
                title: h.title,
                score: h.score,
                snippet: h.snippet,
            })
            .collect(),
    }
}

/// `Tickets.Create`, checked: the desk's [`NewTicket`]. (The newtype is
/// the orphan rule's price: both types are other crates'.)
pub struct Create(pub NewTicket);

impl TryFrom<CreateTicketRequest> for Create {
    type Error = Status;

    fn try_from(req: CreateTicketRequest) -> Result<Self, Status> {
        validate::max_len("subject", &req.subject, MAX_SUBJECT)?;
        validate::max_len("customer", &req.customer, MAX_NAME)?;
        validate::max_len("body", &req.body, MAX_TEXT)?;
        if req.channel.is_empty() {
            return Err(Status::invalid_argument(format!(
                "`channel` is required: one of {}",
                Channel::NAMES.join(", ")
            )));
        }
        if req.sla_minutes > MAX_SLA_MINUTES {
            return Err(Status::invalid_argument(format!(
                "`sla_minutes` is {}; at most {MAX_SLA_MINUTES} (30 days)",
                req.sla_minutes
            )));
        }
        Ok(Self(NewTicket {
            subject: req.subject,
            customer: req.customer,
            channel: req.channel,
            body: req.body,
            sla_minutes: req.sla_minutes,
        }))
    }
}

/// `Tickets.AddCustomerMessage`, checked.
pub struct CustomerMessage {
    pub id: String,
    pub text: String,
}

impl TryFrom<AddCustomerMessageRequest> for CustomerMessage {
    type Error = Status;

    fn try_from(req: AddCustomerMessageRequest) -> Result<Self, Status> {
        validate::max_len("text", &req.text, MAX_TEXT)?;
        Ok(Self {
            id: req.id,
            text: req.text,
        })
    }
}

/// `Tickets.Reply` and `Tickets.AddNote`: a person's text on a ticket.
pub struct PersonText {
    pub by: ClientRef,
    pub ticket_id: String,
    pub text: String,
}

impl TryFrom<Request<TicketTextRequest>> for PersonText {
    type Error = Status;

    fn try_from(request: Request<TicketTextRequest>) -> Result<Self, Status> {
        let (by, req) = caller_and(request);
        validate::max_len("text", &req.text, MAX_TEXT)?;
        Ok(Self {
            by,
            ticket_id: req.ticket_id,
            text: req.text,
        })
    }
}

/// `Tickets.Classify`: a person's category, priority and intent (empty:
/// unchanged; the desk checks them against the taxonomy).
pub struct Classify {
    pub by: ClientRef,
    pub ticket_id: String,
    pub category: String,
    pub priority: String,
    pub intent: String,
}

impl TryFrom<Request<ClassifyTicketRequest>> for Classify {
    type Error = Status;

    fn try_from(request: Request<ClassifyTicketRequest>) -> Result<Self, Status> {
        let (by, r) = caller_and(request);
        validate::max_len("category", &r.category, MAX_NAME)?;
        validate::max_len("priority", &r.priority, MAX_NAME)?;
        validate::max_len("intent", &r.intent, MAX_NAME)?;
        Ok(Self {
            by,
            ticket_id: r.ticket_id,
            category: r.category,
            priority: r.priority,
            intent: r.intent,
        })
    }
}

/// `Tickets.Review`: a person's answer to a held decision.
pub struct Review {
    pub by: ClientRef,
    pub ticket_id: String,
    pub correction: crate::domain::desk::Review,
}

impl TryFrom<Request<ReviewTicketRequest>> for Review {
    type Error = Status;

    fn try_from(request: Request<ReviewTicketRequest>) -> Result<Self, Status> {
        let (by, r) = caller_and(request);
        validate::max_len("category", &r.category, MAX_NAME)?;
        validate::max_len("priority", &r.priority, MAX_NAME)?;
        validate::max_len("queue", &r.queue, MAX_NAME)?;
        let correction = crate::domain::desk::Review {
            category: r.category,
            priority: r.priority,
            queue: r.queue,
        };
        Ok(Self {
            by,
            ticket_id: r.ticket_id,
            correction,
        })
    }
}

/// `Tickets.Route` (`value`: the queue) and `Tickets.SetStatus` (`value`:
/// the status): a person's change with a reason.
pub struct Change {
    pub by: ClientRef,
    pub ticket_id: String,
    pub value: String,
    pub reason: String,
}

impl Change {
    fn checked(
        by: ClientRef,
        ticket_id: String,
        field: &str,
        value: String,
        reason: String,
    ) -> Result<Self, Status> {
        validate::max_len(field, &value, MAX_NAME)?;
        validate::max_len("reason", &reason, MAX_TEXT)?;
        Ok(Self {
            by,
            ticket_id,
            value,
            reason,
        })
    }
}

impl TryFrom<Request<RouteTicketRequest>> for Change {
    type Error = Status;

    fn try_from(request: Request<RouteTicketRequest>) -> Result<Self, Status> {
        let (by, r) = caller_and(request);
        Self::checked(by, r.ticket_id, "queue", r.queue, r.reason)
    }
}

impl TryFrom<Request<SetTicketStatusRequest>> for Change {
    type Error = Status;

    fn try_from(request: Request<SetTicketStatusRequest>) -> Result<Self, Status> {
        let (by, r) = caller_and(request);
        Self::checked(by, r.ticket_id, "status", r.status, r.reason)
    }
}

/// `Tickets.Watch`: one ticket or all, from a sequence.
pub struct Watch {
    pub id: Option<String>,
    pub from_sequence: u64,
}

impl From<WatchTicketsRequest> for Watch {
    fn from(req: WatchTicketsRequest) -> Self {
        Self {
            id: (!req.id.is_empty()).then_some(req.id),
            from_sequence: req.from_sequence,
        }
    }
}
