use std::collections::HashMap;

use tinycode_shared::proto::tickets_server::Tickets;
use tinycode_shared::proto::{
    AddCustomerMessageRequest, CreateTicketRequest, GetTicketRequest, ListTicketsRequest,
    ListTicketsResponse, SearchRequest, SearchResponse, Ticket, TicketChange, WatchTicketsRequest,
};
use tonic::{Request, Response, Status};

use super::validate::{
    self, MAX_LIST, MAX_NAME, MAX_QUERY, MAX_SLA_MINUTES, MAX_SUBJECT, MAX_TEXT,
};
use super::{IntoStatus, ResponseStream, Shared, stream_from};
use crate::domain::desk::{NewTicket, TicketFilter, ticket_id, ticket_stream};
use crate::domain::search::Kind;
use crate::domain::ticket::{Channel, Priority, Status as TicketStatus, apply};
use crate::store::SubscriptionOptions;

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
        .map_err(IntoStatus::into_status)?;
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
        let after = validate::optional_id("page_token", &req.page_token)?;
        self.shared
            .read_at(self.shared.desk.tickets_model(), req.min_sequence)
            .await?;
        let page = self.shared.desk.list_page(
            &TicketFilter {
                status: req.status,
                queue: req.queue,
                priority: req.priority,
                category: req.category,
            },
            limit,
            &after,
            super::MAX_PAGE_BYTES,
        );
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
            .map_err(IntoStatus::into_status)
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
            .map_err(IntoStatus::into_status)
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
            .map_err(IntoStatus::into_status)
    }

    type WatchStream = ResponseStream<TicketChange>;

    async fn watch(
        &self,
        request: Request<WatchTicketsRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        let req = request.into_inner();
        let only = if req.id.is_empty() {
            None
        } else {
            Some(ticket_stream(
                &ticket_id(&req.id).map_err(IntoStatus::into_status)?,
            ))
        };
        let store = self.shared.store.clone();
        let mut subscription = store.subscribe(SubscriptionOptions {
            from_sequence: req.from_sequence,
            stream_prefix: only.clone().unwrap_or_else(|| "ticket-".into()),
            follow: true,
        });
        let mut stopping = self.shared.stopping.clone();
        Ok(Response::new(stream_from(move |tx| async move {
            // The ticket as of each event, folded incrementally per watcher.
            let mut states: HashMap<String, Ticket> = HashMap::new();
            loop {
                let next = tokio::select! {
                    next = subscription.recv() => next,
                    _ = stopping.wait_for(|s| *s) => None,
                };
                let Some(item) = next else { return };
                let event = match item {
                    Ok(event) => event,
                    Err(e) => {
                        let _ = tx.send(Err(e.into_status())).await;
                        return;
                    }
                };
                if only.as_ref().is_some_and(|s| *s != event.stream_id) {
                    continue; // `ticket-T-1` also prefixes `ticket-T-10`
                }
                let state = states.entry(event.stream_id.clone()).or_default();
                if state.version + 1 != event.stream_version {
                    // Joined mid-stream: fold the ticket's history first.
                    *state = Ticket::default();
                    let history = store
                        .read_stream(&event.stream_id, 1, (event.stream_version - 1) as usize)
                        .await
                        .unwrap_or_default();
                    for e in &history {
                        apply(state, e);
                    }
                }
                apply(state, &event);
                let change = TicketChange {
                    event: Some((*event).clone()),
                    ticket: Some(state.clone()),
                };
                if tx.send(Ok(change)).await.is_err() {
                    return;
                }
            }
        })))
    }
}
