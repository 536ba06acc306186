//! The Tickets service: each handler converts its request (`convert.rs`),
//! calls the desk once and converts the answer back.

mod convert;

use tinycode_shared::proto::tickets_server::Tickets;
use tinycode_shared::proto::{
    AddCustomerMessageRequest, ClassifyTicketRequest, CreateTicketRequest, GetTicketRequest,
    ListTicketsRequest, ListTicketsResponse, ReviewTicketRequest, RouteTicketRequest,
    SearchRequest, SearchResponse, SetTicketStatusRequest, Ticket, TicketChange, TicketTextRequest,
    WatchTicketsRequest,
};
use tonic::{Request, Response, Status};

use super::{IntoStatus, OrStatus, ResponseStream, Shared, stream_from};
use crate::domain::search::Kind;
use convert::{
    Change, Classify, Create, CustomerMessage, ListTickets, PersonText, Review, Start, Watch,
};
pub(super) use convert::{Query, search_response};

pub struct TicketsService {
    shared: Shared,
}

impl TicketsService {
    pub fn new(shared: Shared) -> Self {
        Self { shared }
    }
}

/// `Tickets.Search` and `Knowledge.Search`: one kind of document.
pub(super) fn search_kind(
    shared: &Shared,
    request: SearchRequest,
    kind: Kind,
) -> Result<Response<SearchResponse>, Status> {
    let q = Query::try_from(request)?;
    let hits = shared
        .desk
        .search(&q.words, q.limit, Some(kind))
        .or_status()?;
    Ok(Response::new(search_response(hits)))
}

/// A changed ticket as the answer.
fn answer(
    changed: Result<Ticket, crate::domain::desk::DomainError>,
) -> Result<Response<Ticket>, Status> {
    changed.map(Response::new).or_status()
}

#[tonic::async_trait]
impl Tickets for TicketsService {
    async fn list(
        &self,
        request: Request<ListTicketsRequest>,
    ) -> Result<Response<ListTicketsResponse>, Status> {
        let q = ListTickets::try_from(request.into_inner())?;
        let desk = &self.shared.desk;
        self.shared
            .read_at(desk.tickets_model(), q.min_sequence)
            .await?;
        let max_bytes = super::MAX_PAGE_BYTES;
        let page = match &q.start {
            Start::Offset(n) => desk.list_urgent(&q.filter, q.limit, *n, q.brief, max_bytes),
            Start::AfterId(id) => desk.list_page(&q.filter, q.limit, id, q.brief, max_bytes),
        };
        Ok(Response::new(ListTicketsResponse {
            tickets: page.tickets,
            total: page.total as u32,
            next_page_token: page.next.unwrap_or_default(),
        }))
    }

    async fn get(&self, request: Request<GetTicketRequest>) -> Result<Response<Ticket>, Status> {
        let req = request.into_inner();
        let desk = &self.shared.desk;
        self.shared
            .read_at(desk.tickets_model(), req.min_sequence)
            .await?;
        answer(desk.get_ticket(&req.id).map(|t| desk.with_sla(t)))
    }

    async fn search(
        &self,
        request: Request<SearchRequest>,
    ) -> Result<Response<SearchResponse>, Status> {
        search_kind(&self.shared, request.into_inner(), Kind::Ticket)
    }

    async fn create(
        &self,
        request: Request<CreateTicketRequest>,
    ) -> Result<Response<Ticket>, Status> {
        let Create(new) = Create::try_from(request.into_inner())?;
        answer(self.shared.desk.create_ticket(new).await)
    }

    async fn add_customer_message(
        &self,
        request: Request<AddCustomerMessageRequest>,
    ) -> Result<Response<Ticket>, Status> {
        let m = CustomerMessage::try_from(request.into_inner())?;
        answer(self.shared.desk.add_customer_message(&m.id, &m.text).await)
    }

    async fn reply(&self, request: Request<TicketTextRequest>) -> Result<Response<Ticket>, Status> {
        let r = PersonText::try_from(request)?;
        answer(self.shared.desk.reply_as(&r.ticket_id, &r.text, r.by).await)
    }

    async fn add_note(
        &self,
        request: Request<TicketTextRequest>,
    ) -> Result<Response<Ticket>, Status> {
        let r = PersonText::try_from(request)?;
        answer(self.shared.desk.note_as(&r.ticket_id, &r.text, r.by).await)
    }

    async fn classify(
        &self,
        request: Request<ClassifyTicketRequest>,
    ) -> Result<Response<Ticket>, Status> {
        let r = Classify::try_from(request)?;
        let desk = &self.shared.desk;
        answer(
            desk.classify_as(&r.ticket_id, &r.category, &r.priority, &r.intent, r.by)
                .await,
        )
    }

    async fn route(
        &self,
        request: Request<RouteTicketRequest>,
    ) -> Result<Response<Ticket>, Status> {
        let r = Change::try_from(request)?;
        answer(
            self.shared
                .desk
                .route_as(&r.ticket_id, &r.value, &r.reason, r.by)
                .await,
        )
    }

    async fn review(
        &self,
        request: Request<ReviewTicketRequest>,
    ) -> Result<Response<Ticket>, Status> {
        let r = Review::try_from(request)?;
        answer(
            self.shared
                .desk
                .review_as(&r.ticket_id, &r.correction, r.by)
                .await,
        )
    }

    async fn set_status(
        &self,
        request: Request<SetTicketStatusRequest>,
    ) -> Result<Response<Ticket>, Status> {
        let r = Change::try_from(request)?;
        let desk = &self.shared.desk;
        answer(
            desk.set_status_as(&r.ticket_id, &r.value, &r.reason, r.by)
                .await,
        )
    }

    type WatchStream = ResponseStream<TicketChange>;

    /// The desk's changes as they are appended; a store error ends the
    /// stream with its status (never swallowed).
    async fn watch(
        &self,
        request: Request<WatchTicketsRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        let w = Watch::from(request.into_inner());
        let mut watch = self
            .shared
            .desk
            .watch(w.id.as_deref(), w.from_sequence)
            .or_status()?;
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
