//! The Sessions service: each handler converts its request (`convert.rs`),
//! calls the sessions once and converts the answer back.

mod convert;

use std::sync::Arc;

use tinycode_shared::proto::sessions_server::Sessions as SessionsApi;
use tinycode_shared::proto::{
    AttachRequest, CancelTurnRequest, CancelTurnResponse, CompactSessionRequest,
    CompactSessionResponse, CreateSessionRequest, DeleteSessionRequest, DeleteSessionResponse,
    Event, ForkSessionRequest, GetSessionRequest, ListSessionsRequest, ListSessionsResponse,
    PruneSessionsRequest, PruneSessionsResponse, RenameSessionRequest, SendMessageRequest,
    SendMessageResponse, SessionInfo, SessionUpdate, SetSessionModelRequest,
    session_update::Update,
};
use tonic::{Request, Response, Status};

use super::peer::{caller_and, client_ref};
use super::{OrStatus, ResponseStream, Shared, stream_from};
use crate::sessions::{LiveUpdate, SessionError, SessionState, Sessions};
use convert::{Create, Fork, List, Prune, Rename, Send};

pub struct SessionsService {
    shared: Shared,
}

impl SessionsService {
    pub fn new(shared: Shared) -> Self {
        Self { shared }
    }

    fn sessions(&self) -> &Arc<Sessions> {
        &self.shared.sessions
    }

    /// A session (or the error) as the answer.
    fn answer(
        &self,
        s: Result<SessionState, SessionError>,
    ) -> Result<Response<SessionInfo>, Status> {
        let s = s.or_status()?;
        Ok(Response::new(convert::info(
            &s,
            self.sessions().activity(&s.id),
        )))
    }
}

#[tonic::async_trait]
impl SessionsApi for SessionsService {
    async fn create(
        &self,
        request: Request<CreateSessionRequest>,
    ) -> Result<Response<SessionInfo>, Status> {
        let c = Create::try_from(request)?;
        self.answer(
            self.sessions()
                .create(&c.title, &c.model, &c.approve, c.by)
                .await,
        )
    }

    async fn list(
        &self,
        request: Request<ListSessionsRequest>,
    ) -> Result<Response<ListSessionsResponse>, Status> {
        let q = List::try_from(request.into_inner())?;
        let sessions = self.sessions();
        self.shared
            .read_at(sessions.projector(), q.min_sequence)
            .await?;
        let listed = match &q.parent {
            None => sessions.list(q.limit + 1),
            Some(parent) => sessions.children(parent),
        }
        .or_status()?;
        Ok(Response::new(ListSessionsResponse {
            more: listed.len() > q.limit,
            sessions: listed
                .iter()
                .take(q.limit)
                .map(|s| convert::info(s, sessions.activity(&s.id)))
                .collect(),
        }))
    }

    async fn get(
        &self,
        request: Request<GetSessionRequest>,
    ) -> Result<Response<SessionInfo>, Status> {
        let req = request.into_inner();
        let model = self.sessions().projector();
        self.shared.read_at(model, req.min_sequence).await?;
        self.answer(self.sessions().get(&req.id))
    }

    async fn send_message(
        &self,
        request: Request<SendMessageRequest>,
    ) -> Result<Response<SendMessageResponse>, Status> {
        let m = Send::try_from(request)?;
        if !m.model.is_empty() {
            let sessions = self.sessions();
            let set = sessions.set_model(&m.session_id, &m.model, m.from.clone());
            set.await.or_status()?;
        }
        let sent = self
            .sessions()
            .send_timed(&m.session_id, &m.text, m.from, m.timeout_seconds)
            .await
            .or_status()?;
        Ok(Response::new(SendMessageResponse {
            sequence: sent.sequence,
            turn: sent.turn,
            queued: sent.queued,
        }))
    }

    async fn cancel_turn(
        &self,
        request: Request<CancelTurnRequest>,
    ) -> Result<Response<CancelTurnResponse>, Status> {
        let (by, req) = caller_and(request);
        let cancelling = self.sessions().cancel_anywhere(&req.session_id, by);
        let cancelled = cancelling.await.or_status()?;
        Ok(Response::new(CancelTurnResponse { cancelled }))
    }

    async fn rename(
        &self,
        request: Request<RenameSessionRequest>,
    ) -> Result<Response<SessionInfo>, Status> {
        let r = Rename::try_from(request)?;
        self.answer(self.sessions().rename(&r.session_id, &r.title, r.by).await)
    }

    async fn set_model(
        &self,
        request: Request<SetSessionModelRequest>,
    ) -> Result<Response<SessionInfo>, Status> {
        let (by, req) = caller_and(request);
        let set = self.sessions().set_model(&req.session_id, &req.model, by);
        self.answer(set.await)
    }

    async fn delete(
        &self,
        request: Request<DeleteSessionRequest>,
    ) -> Result<Response<DeleteSessionResponse>, Status> {
        let (by, req) = caller_and(request);
        let deleted = self.sessions().delete(&req.session_id, by).await;
        Ok(Response::new(DeleteSessionResponse {
            cancelled_turn: deleted.or_status()?,
        }))
    }

    async fn prune(
        &self,
        request: Request<PruneSessionsRequest>,
    ) -> Result<Response<PruneSessionsResponse>, Status> {
        let p = Prune::try_from(request)?;
        let pruned = self.sessions().prune(p.older_than, p.dry_run, p.by).await;
        Ok(Response::new(PruneSessionsResponse {
            session_ids: pruned.or_status()?,
        }))
    }

    async fn fork(
        &self,
        request: Request<ForkSessionRequest>,
    ) -> Result<Response<SessionInfo>, Status> {
        let f = Fork::try_from(request)?;
        let sessions = self.sessions();
        self.answer(
            sessions
                .fork(&f.session_id, f.up_to_sequence, &f.title, f.by)
                .await,
        )
    }

    async fn compact(
        &self,
        request: Request<CompactSessionRequest>,
    ) -> Result<Response<CompactSessionResponse>, Status> {
        let by = client_ref(&request);
        let id = request.into_inner().session_id;
        let c = self.sessions().compact(&id, by).await.or_status()?;
        Ok(Response::new(CompactSessionResponse {
            compacted: c.compacted,
            summarized_messages: c.summarized_messages,
            tokens_before: c.tokens_before,
            tokens_after: c.tokens_after,
            first_kept_turn: c.first_kept_turn,
            sequence: c.sequence,
        }))
    }

    type AttachStream = ResponseStream<SessionUpdate>;

    /// What `Sessions::follow` sends: stored events, the text so far, then
    /// live updates, in one order with no gap and no duplicate.
    async fn attach(
        &self,
        request: Request<AttachRequest>,
    ) -> Result<Response<Self::AttachStream>, Status> {
        let req = request.into_inner();
        let stopping = self.shared.stopping.clone();
        let mut updates = Arc::clone(self.sessions())
            .follow(&req.session_id, req.from_sequence, stopping)
            .await
            .or_status()?;
        Ok(Response::new(stream_from(move |tx| async move {
            loop {
                let update = tokio::select! {
                    u = updates.recv() => u,
                    // A client that left is let go at once: it no longer
                    // counts as attached, and the actor may retire.
                    () = tx.closed() => return,
                };
                let Some(update) = update else { return };
                let update = update
                    .map(|u| SessionUpdate {
                        update: Some(match u {
                            LiveUpdate::Event(e) => Update::Event(Event::clone(&e)),
                            LiveUpdate::Delta(d) => Update::Delta(d),
                        }),
                    })
                    .or_status();
                if tx.send(update).await.is_err() {
                    return;
                }
            }
        })))
    }
}
