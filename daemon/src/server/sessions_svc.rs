use std::sync::Arc;

use tinycode_shared::proto::sessions_server::Sessions as SessionsApi;
use tinycode_shared::proto::{
    AttachRequest, CancelTurnRequest, CancelTurnResponse, ClientRef, CompactSessionRequest,
    CompactSessionResponse, CreateSessionRequest, DeleteSessionRequest, DeleteSessionResponse,
    ForkSessionRequest, GetSessionRequest, ListSessionsRequest, ListSessionsResponse,
    RenameSessionRequest, SendMessageRequest, SendMessageResponse, SessionInfo, SessionUpdate,
    session_update::Update,
};
use tokio::sync::broadcast::error::RecvError;
use tonic::{Request, Response, Status};

use super::validate::{self, MAX_TEXT};
use super::{IntoStatus, Peer, ResponseStream, Shared, stream_from};
use crate::sessions::{LiveUpdate, SessionError, SessionState, Sessions};
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
            approve: s.approve.clone(),
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
        }
    }
}

impl IntoStatus for SessionError {
    fn into_status(self) -> Status {
        let message = self.to_string();
        match self {
            SessionError::NotFound(_) | SessionError::Deleted(_) => Status::not_found(message),
            SessionError::BadId(_) | SessionError::Invalid { .. } => {
                Status::invalid_argument(message)
            }
            SessionError::Model { .. } => Status::failed_precondition(message),
            SessionError::Approval(e) => e.into_status(),
            SessionError::Store(e) => e.into_status(),
            SessionError::Projection(e) => e.into_status(),
        }
    }
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
        validate::max_len("title", &req.title, 200)?;
        validate::max_len("model", &req.model, 200)?;
        let s = self
            .sessions()
            .create(&req.title, &req.model, &req.approve, by)
            .await
            .map_err(IntoStatus::into_status)?;
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
        let sessions = self
            .sessions()
            .list(limit)
            .map_err(IntoStatus::into_status)?
            .iter()
            .map(|s| self.info(s))
            .collect();
        Ok(Response::new(ListSessionsResponse { sessions }))
    }

    async fn get(
        &self,
        request: Request<GetSessionRequest>,
    ) -> Result<Response<SessionInfo>, Status> {
        let req = request.into_inner();
        let model = self.sessions().projector();
        self.shared.read_at(model, req.min_sequence).await?;
        let s = self
            .sessions()
            .get(&req.id)
            .map_err(IntoStatus::into_status)?;
        Ok(Response::new(self.info(&s)))
    }

    async fn send_message(
        &self,
        request: Request<SendMessageRequest>,
    ) -> Result<Response<SendMessageResponse>, Status> {
        let from = client_ref(&request);
        let req = request.into_inner();
        validate::max_len("text", &req.text, MAX_TEXT)?;
        let (sequence, turn, queued) = self
            .sessions()
            .send(&req.session_id, &req.text, from)
            .await
            .map_err(IntoStatus::into_status)?;
        Ok(Response::new(SendMessageResponse {
            sequence,
            turn,
            queued,
        }))
    }

    async fn cancel_turn(
        &self,
        request: Request<CancelTurnRequest>,
    ) -> Result<Response<CancelTurnResponse>, Status> {
        let cancelled = self
            .sessions()
            .cancel(&request.into_inner().session_id)
            .map_err(IntoStatus::into_status)?;
        Ok(Response::new(CancelTurnResponse { cancelled }))
    }

    async fn rename(
        &self,
        request: Request<RenameSessionRequest>,
    ) -> Result<Response<SessionInfo>, Status> {
        let by = client_ref(&request);
        let req = request.into_inner();
        validate::max_len("title", &req.title, 200)?;
        let s = self
            .sessions()
            .rename(&req.session_id, &req.title, by)
            .await
            .map_err(IntoStatus::into_status)?;
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
            .map_err(IntoStatus::into_status)?;
        Ok(Response::new(DeleteSessionResponse { cancelled_turn }))
    }

    async fn fork(
        &self,
        request: Request<ForkSessionRequest>,
    ) -> Result<Response<SessionInfo>, Status> {
        let by = client_ref(&request);
        let req = request.into_inner();
        validate::max_len("title", &req.title, 200)?;
        let s = self
            .sessions()
            .fork(&req.session_id, req.up_to_sequence, &req.title, by)
            .await
            .map_err(IntoStatus::into_status)?;
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
            .map_err(IntoStatus::into_status)?;
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

    /// Stored events from `from_sequence` up to the head (replayed first),
    /// then the text of the running step so far, then every live update in
    /// the one order the session produced them. Events go out in stream
    /// order with no gap and no duplicate: two writers of one session (the
    /// turn and a decision copied in) may publish out of order, so an event
    /// ahead of the next version is preceded by what it skipped, read from
    /// the store, and the late one is dropped as a repeat.
    async fn attach(
        &self,
        request: Request<AttachRequest>,
    ) -> Result<Response<Self::AttachStream>, Status> {
        let req = request.into_inner();
        let sessions = Arc::clone(self.sessions());
        let session = sessions
            .get(&req.session_id)
            .map_err(IntoStatus::into_status)?;
        let (mut live, so_far, head) = sessions
            .attach(&session.id)
            .map_err(IntoStatus::into_status)?;
        let replayed = sessions
            .stored(&session.id, 1, head)
            .await
            .map_err(IntoStatus::into_status)?;
        let mut stopping = self.shared.stopping.clone();
        let from = req.from_sequence.max(1);
        Ok(Response::new(stream_from(move |tx| async move {
            let send_event = |e: tinycode_shared::proto::Event| SessionUpdate {
                update: Some(Update::Event(e)),
            };
            // The last stream version sent (or skipped as older than asked).
            let mut sent = 0u64;
            for e in replayed {
                sent = e.stream_version;
                if e.sequence >= from && tx.send(Ok(send_event(e))).await.is_err() {
                    return;
                }
            }
            let text_so_far = so_far.map(|d| SessionUpdate {
                update: Some(Update::Delta(d)),
            });
            if let Some(update) = text_so_far
                && tx.send(Ok(update)).await.is_err()
            {
                return;
            }
            // Stored events after `sent` and before version `to` (exclusive).
            let catch_up = async |sent: u64, to: u64| {
                sessions
                    .stored_versions(&session.id, sent + 1, (to - sent - 1) as usize)
                    .await
            };
            loop {
                let received = tokio::select! {
                    u = live.recv() => u,
                    () = async { let _ = stopping.wait_for(|s| *s).await; } => return,
                    // A client that left is let go at once: it no longer
                    // counts as attached, and the actor may retire.
                    () = tx.closed() => return,
                };
                let missed = match &received {
                    Ok(LiveUpdate::Event(e)) if e.stream_version <= sent => continue,
                    Ok(LiveUpdate::Event(e)) if e.stream_version == sent + 1 => Ok(Vec::new()),
                    Ok(LiveUpdate::Event(e)) => catch_up(sent, e.stream_version).await,
                    // A slow client: what it missed comes from the store.
                    Err(RecvError::Lagged(_)) => catch_up(sent, u64::MAX).await,
                    _ => Ok(Vec::new()),
                };
                let missed = match missed {
                    Ok(events) => events,
                    Err(e) => {
                        let _ = tx.send(Err(e.into_status())).await;
                        return;
                    }
                };
                for e in missed {
                    sent = e.stream_version;
                    if tx.send(Ok(send_event(e))).await.is_err() {
                        return;
                    }
                }
                let update = match received {
                    Ok(LiveUpdate::Event(e)) => {
                        sent = e.stream_version;
                        send_event(Event::clone(&e))
                    }
                    Ok(LiveUpdate::Delta(d)) => SessionUpdate {
                        update: Some(Update::Delta(d)),
                    },
                    Err(RecvError::Lagged(_)) => continue,
                    Err(RecvError::Closed) => return,
                };
                if tx.send(Ok(update)).await.is_err() {
                    return; // the client left; the turn goes on
                }
            }
        })))
    }
}
