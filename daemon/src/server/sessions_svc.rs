use std::sync::Arc;

use tinycode_shared::proto::sessions_server::Sessions as SessionsApi;
use tinycode_shared::proto::{
    AgentInfo, AttachRequest, CancelTurnRequest, CancelTurnResponse, ClientRef,
    CompactSessionRequest, CompactSessionResponse, CreateSessionRequest, DeleteSessionRequest,
    DeleteSessionResponse, ForkSessionRequest, GetSessionRequest, ListSessionsRequest,
    ListSessionsResponse, PruneSessionsRequest, PruneSessionsResponse, RenameSessionRequest,
    SendMessageRequest, SendMessageResponse, SessionInfo, SessionUpdate, session_update::Update,
};
use tonic::{Request, Response, Status};

use super::validate::{self, MAX_TEXT};
use super::{OrStatus, Peer, ResponseStream, Shared, stream_from};
use crate::domain::limits::MAX_NAME;
use crate::sessions::{LiveUpdate, SessionState, Sessions};
use tinycode_shared::proto::Event;

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

    fn info(&self, s: &SessionState) -> SessionInfo {
        let now = self.sessions().activity(&s.id);
        SessionInfo {
            id: s.id.clone(),
            title: s.title.clone(),
            model: s.model.clone(),
            approve: s.approve.as_str().into(),
            created_sequence: s.created_sequence,
            last_sequence: s.last_sequence,
            messages: s.message_count(),
            turns: s.next_turn() - 1,
            running: now.running != 0,
            queued: now.queued as u32,
            context_tokens: s.context_tokens(),
            compacted_before_turn: s.compacted_before,
            pending_approvals: s.pending_approvals(),
            attached_clients: now.attached as u32,
            parent_session_id: s
                .parent
                .as_ref()
                .map(|p| p.session_id.clone())
                .unwrap_or_default(),
            agent_id: s
                .parent
                .as_ref()
                .map(|p| p.agent_id.clone())
                .unwrap_or_default(),
            agents: agents(s),
        }
    }
}

/// A session's workers, in spawn order.
fn agents(s: &SessionState) -> Vec<AgentInfo> {
    let mut all: Vec<_> = s.agents.iter().collect();
    all.sort_by_key(|(_, a)| a.number);
    all.into_iter()
        .map(|(id, a)| AgentInfo {
            agent_id: id.clone(),
            session_id: a.session_id.clone(),
            task: a.task.clone(),
            state: a.end.as_ref().map_or("running".into(), |e| {
                tinycode_shared::render::outcome_name(e.outcome).into()
            }),
            steps: a.end.as_ref().map_or(0, |e| e.steps),
            turn: a.turn,
        })
        .collect()
}

pub(super) fn client_ref<T>(request: &Request<T>) -> ClientRef {
    let peer = Peer::of(request);
    ClientRef {
        name: peer.client_name,
        uid: peer.uid.unwrap_or(0),
        pid: peer.pid.unwrap_or(0),
    }
}

#[tonic::async_trait]
impl SessionsApi for SessionsService {
    async fn create(
        &self,
        request: Request<CreateSessionRequest>,
    ) -> Result<Response<SessionInfo>, Status> {
        let by = client_ref(&request);
        let req = request.into_inner();
        validate::max_len("title", &req.title, MAX_NAME)?;
        validate::max_len("model", &req.model, MAX_NAME)?;
        let s = self
            .sessions()
            .create(&req.title, &req.model, &req.approve, by)
            .await
            .or_status()?;
        Ok(Response::new(self.info(&s)))
    }

    async fn list(
        &self,
        request: Request<ListSessionsRequest>,
    ) -> Result<Response<ListSessionsResponse>, Status> {
        let req = request.into_inner();
        let limit = validate::limit("limit", req.limit, 50, 1000)?;
        let model = self.sessions().projector();
        self.shared.read_at(model, req.min_sequence).await?;
        validate::max_len("parent_id", &req.parent_id, MAX_NAME)?;
        let listed = if req.parent_id.is_empty() {
            self.sessions().list(limit + 1)
        } else {
            self.sessions().children(&req.parent_id)
        }
        .or_status()?;
        let more = listed.len() > limit;
        let sessions = listed.iter().take(limit).map(|s| self.info(s)).collect();
        Ok(Response::new(ListSessionsResponse { sessions, more }))
    }

    async fn get(
        &self,
        request: Request<GetSessionRequest>,
    ) -> Result<Response<SessionInfo>, Status> {
        let req = request.into_inner();
        let model = self.sessions().projector();
        self.shared.read_at(model, req.min_sequence).await?;
        let s = self.sessions().get(&req.id).or_status()?;
        Ok(Response::new(self.info(&s)))
    }

    async fn send_message(
        &self,
        request: Request<SendMessageRequest>,
    ) -> Result<Response<SendMessageResponse>, Status> {
        let from = client_ref(&request);
        let req = request.into_inner();
        validate::max_len("text", &req.text, MAX_TEXT)?;
        let sent = self
            .sessions()
            .send_timed(&req.session_id, &req.text, from, req.timeout_seconds)
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
        let cancelled = self
            .sessions()
            .cancel(&request.into_inner().session_id)
            .or_status()?;
        Ok(Response::new(CancelTurnResponse { cancelled }))
    }

    async fn rename(
        &self,
        request: Request<RenameSessionRequest>,
    ) -> Result<Response<SessionInfo>, Status> {
        let by = client_ref(&request);
        let req = request.into_inner();
        validate::max_len("title", &req.title, MAX_NAME)?;
        let s = self
            .sessions()
            .rename(&req.session_id, &req.title, by)
            .await
            .or_status()?;
        Ok(Response::new(self.info(&s)))
    }

    async fn delete(
        &self,
        request: Request<DeleteSessionRequest>,
    ) -> Result<Response<DeleteSessionResponse>, Status> {
        let by = client_ref(&request);
        let cancelled_turn = self
            .sessions()
            .delete(&request.into_inner().session_id, by)
            .await
            .or_status()?;
        Ok(Response::new(DeleteSessionResponse { cancelled_turn }))
    }

    async fn prune(
        &self,
        request: Request<PruneSessionsRequest>,
    ) -> Result<Response<PruneSessionsResponse>, Status> {
        let by = client_ref(&request);
        let req = request.into_inner();
        if req.older_than_seconds < 60 {
            return Err(Status::invalid_argument(
                "`older_than_seconds` must be at least 60",
            ));
        }
        let older_than = std::time::Duration::from_secs(req.older_than_seconds);
        let session_ids = self
            .sessions()
            .prune(older_than, req.dry_run, by)
            .await
            .or_status()?;
        Ok(Response::new(PruneSessionsResponse { session_ids }))
    }

    async fn fork(
        &self,
        request: Request<ForkSessionRequest>,
    ) -> Result<Response<SessionInfo>, Status> {
        let by = client_ref(&request);
        let req = request.into_inner();
        validate::max_len("title", &req.title, MAX_NAME)?;
        let s = self
            .sessions()
            .fork(&req.session_id, req.up_to_sequence, &req.title, by)
            .await
            .or_status()?;
        Ok(Response::new(self.info(&s)))
    }

    async fn compact(
        &self,
        request: Request<CompactSessionRequest>,
    ) -> Result<Response<CompactSessionResponse>, Status> {
        let by = client_ref(&request);
        let req = request.into_inner();
        let c = self
            .sessions()
            .compact(&req.session_id, by)
            .await
            .or_status()?;
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
        let mut updates = Arc::clone(self.sessions())
            .follow(
                &req.session_id,
                req.from_sequence,
                self.shared.stopping.clone(),
            )
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
