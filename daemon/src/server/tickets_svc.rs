use tinycode_shared::proto::tickets_server::Tickets;
use tinycode_shared::proto::{
    AddCustomerMessageRequest, ClassifyTicketRequest, CreateTicketRequest, GetTicketRequest,
    ListTicketsRequest, ListTicketsResponse, RouteTicketRequest, SearchRequest, SearchResponse,
    SetTicketStatusRequest, Ticket, TicketChange, TicketTextRequest, WatchTicketsRequest,
};
use tonic::{Request, Response, Status};

use super::validate::{
    self, MAX_LIST, MAX_NAME, MAX_QUERY, MAX_SLA_MINUTES, MAX_SUBJECT, MAX_TEXT,
};
use super::{IntoStatus, OrStatus, ResponseStream, Shared, stream_from};
use crate::domain::desk::{NewTicket, TicketFilter};
use crate::domain::search::Kind;
use crate::domain::ticket::{Channel, Priority, Status as TicketStatus};

pub struct TicketsService {
    shared: Shared,
}

impl TicketsService {
    pub fn new(shared: Shared) -> Self {
        Self { shared }
    }
}

pub(crate) fn search_response(hits: Vec<crate::domain::search::Hit>) -> SearchResponse {
    SearchResponse {
        hits: hits
            .into_iter()
            .map(|h| tinycode_shared::proto::SearchHit {
                kind: h.kind.as_str().into(),
                id: h.id,
                title: h.title,
                score: h.score,
                snippet: h.snippet,
            })
            .collect(),
    }
}

/// `Tickets.Search` and `Knowledge.Search`: validate, search one kind.
pub(crate) fn search_kind(
    shared: &Shared,
    req: &SearchRequest,
    kind: Kind,
) -> Result<Response<SearchResponse>, Status> {
    let limit = checked_query(req)?;
    let hits = shared
        .desk
        .search(&req.query, limit, Some(kind))
        .or_status()?;
    Ok(Response::new(search_response(hits)))
}

pub(crate) fn checked_query(req: &SearchRequest) -> Result<usize, Status> {
    validate::max_len("query", &req.query, MAX_QUERY)?;
    if req.query.trim().is_empty() {
        return Err(Status::invalid_argument(
            "`query` is empty; give words to search for",
        ));
    }
    validate::limit("limit", req.limit, 10, 100)
}

#[tonic::async_trait]
impl Tickets for TicketsService {
    async fn list(
        &self,
        request: Request<ListTicketsRequest>,
    ) -> Result<Response<ListTicketsResponse>, Status> {
        let req = request.into_inner();
        validate::one_of_or_empty("status", &req.status, &TicketStatus::NAMES)?;
        validate::one_of_or_empty("priority", &req.priority, &Priority::NAMES)?;
        validate::max_len("queue", &req.queue, MAX_NAME)?;
        validate::max_len("category", &req.category, MAX_NAME)?;
        let limit = validate::limit("limit", req.limit, 100, MAX_LIST)?;
        validate::one_of_or_empty("order", &req.order, &["id", "urgent"])?;
        let urgent = req.order == "urgent";
        let after = if urgent {
            String::new()
        } else {
            validate::optional_id("page_token", &req.page_token)?
        };
        let offset = if urgent && !req.page_token.is_empty() {
            req.page_token.parse::<usize>().map_err(|_| {
                Status::invalid_argument("page_token: not a page token of an \"urgent\" listing")
            })?
        } else {
            0
        };
        self.shared
            .read_at(self.shared.desk.tickets_model(), req.min_sequence)
            .await?;
        let filter = TicketFilter {
            status: req.status,
            queue: req.queue,
            priority: req.priority,
            category: req.category,
        };
        let desk = &self.shared.desk;
        let page = if urgent {
            desk.list_urgent(&filter, limit, offset, req.brief, super::MAX_PAGE_BYTES)
        } else {
            desk.list_page(&filter, limit, &after, req.brief, super::MAX_PAGE_BYTES)
        };
        Ok(Response::new(ListTicketsResponse {
            tickets: page.tickets,
            total: page.total as u32,
            next_page_token: page.next.unwrap_or_default(),
        }))
    }

    async fn get(&self, request: Request<GetTicketRequest>) -> Result<Response<Ticket>, Status> {
        let req = request.into_inner();
        self.shared
            .read_at(self.shared.desk.tickets_model(), req.min_sequence)
            .await?;
        self.shared
            .desk
            .get_ticket(&req.id)
            .map(Response::new)
            .or_status()
    }

    async fn search(
        &self,
        request: Request<SearchRequest>,
    ) -> Result<Response<SearchResponse>, Status> {
        search_kind(&self.shared, &request.into_inner(), Kind::Ticket)
    }

    async fn create(
        &self,
        request: Request<CreateTicketRequest>,
    ) -> Result<Response<Ticket>, Status> {
        let req = request.into_inner();
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
        self.shared
            .desk
            .create_ticket(NewTicket {
                subject: req.subject,
                customer: req.customer,
                channel: req.channel,
                body: req.body,
                sla_minutes: req.sla_minutes,
            })
            .await
            .map(Response::new)
            .or_status()
    }

    async fn add_customer_message(
        &self,
        request: Request<AddCustomerMessageRequest>,
    ) -> Result<Response<Ticket>, Status> {
        let req = request.into_inner();
        validate::max_len("text", &req.text, MAX_TEXT)?;
        self.shared
            .desk
            .add_customer_message(&req.id, &req.text)
            .await
            .map(Response::new)
            .or_status()
    }

    async fn reply(&self, request: Request<TicketTextRequest>) -> Result<Response<Ticket>, Status> {
        let (by, req) = person(request)?;
        let desk = &self.shared.desk;
        desk.reply_as(&req.ticket_id, &req.text, by)
            .await
            .map(Response::new)
            .or_status()
    }

    async fn add_note(
        &self,
        request: Request<TicketTextRequest>,
    ) -> Result<Response<Ticket>, Status> {
        let (by, req) = person(request)?;
        let desk = &self.shared.desk;
        desk.note_as(&req.ticket_id, &req.text, by)
            .await
            .map(Response::new)
            .or_status()
    }

    async fn classify(
        &self,
        request: Request<ClassifyTicketRequest>,
    ) -> Result<Response<Ticket>, Status> {
        let by = super::sessions_svc::client_ref(&request);
        let r = request.into_inner();
        validate::max_len("category", &r.category, MAX_NAME)?;
        validate::max_len("priority", &r.priority, MAX_NAME)?;
        validate::max_len("intent", &r.intent, MAX_NAME)?;
        let desk = &self.shared.desk;
        desk.classify_as(&r.ticket_id, &r.category, &r.priority, &r.intent, by)
            .await
            .map(Response::new)
            .or_status()
    }

    async fn route(
        &self,
        request: Request<RouteTicketRequest>,
    ) -> Result<Response<Ticket>, Status> {
        let by = super::sessions_svc::client_ref(&request);
        let r = request.into_inner();
        validate::max_len("queue", &r.queue, MAX_NAME)?;
        validate::max_len("reason", &r.reason, MAX_TEXT)?;
        let desk = &self.shared.desk;
        desk.route_as(&r.ticket_id, &r.queue, &r.reason, by)
            .await
            .map(Response::new)
            .or_status()
    }

    async fn set_status(
        &self,
        request: Request<SetTicketStatusRequest>,
    ) -> Result<Response<Ticket>, Status> {
        let by = super::sessions_svc::client_ref(&request);
        let r = request.into_inner();
        validate::max_len("status", &r.status, MAX_NAME)?;
        validate::max_len("reason", &r.reason, MAX_TEXT)?;
        let desk = &self.shared.desk;
        desk.set_status_as(&r.ticket_id, &r.status, &r.reason, by)
            .await
            .map(Response::new)
            .or_status()
    }

    type WatchStream = ResponseStream<TicketChange>;

    async fn watch(
        &self,
        request: Request<WatchTicketsRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        let req = request.into_inner();
        let id = (!req.id.is_empty()).then_some(req.id.as_str());
        let mut watch = self.shared.desk.watch(id, req.from_sequence).or_status()?;
        let mut stopping = self.shared.stopping.clone();
        Ok(Response::new(stream_from(move |tx| async move {
            loop {
                let next = tokio::select! {
                    next = watch.next() => next,
                    _ = stopping.wait_for(|s| *s) => None,
                };
                let change = match next {
                    None => return,
                    Some(Ok((event, ticket))) => Ok(TicketChange {
                        event: Some((*event).clone()),
                        ticket: Some(ticket),
                    }),
                    Some(Err(e)) => Err(e.into_status()),
                };
                let ended = change.is_err();
                if tx.send(change).await.is_err() || ended {
                    return;
                }
            }
        })))
    }
}

/// Who acts (the calling client) and the request, its text within the
/// limit.
fn person(
    request: Request<TicketTextRequest>,
) -> Result<(tinycode_shared::proto::ClientRef, TicketTextRequest), Status> {
    let by = super::sessions_svc::client_ref(&request);
    let req = request.into_inner();
    validate::max_len("text", &req.text, MAX_TEXT)?;
    Ok((by, req))
}
