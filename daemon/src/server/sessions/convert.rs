//! The Sessions service's boundary: requests checked and typed (`TryFrom`),
//! sessions turned into their wire form.

use std::time::Duration;

use tinycode_shared::proto::{
    AgentInfo, ClientRef, CreateSessionRequest, ForkSessionRequest, ListSessionsRequest,
    PruneSessionsRequest, RenameSessionRequest, SendMessageRequest, SessionInfo,
};
use tonic::{Request, Status};

use super::super::peer::caller_and;
use super::super::validate::{self, MAX_NAME, MAX_TEXT};
use crate::sessions::{Activity, SessionState};

/// `Sessions.Create`, checked.
pub struct Create {
    pub by: ClientRef,
    pub title: String,
    pub model: String,
    pub approve: String,
}

impl TryFrom<Request<CreateSessionRequest>> for Create {
    type Error = Status;

    fn try_from(request: Request<CreateSessionRequest>) -> Result<Self, Status> {
        let (by, req) = caller_and(request);
        validate::max_len("title", &req.title, MAX_NAME)?;
        validate::max_len("model", &req.model, MAX_NAME)?;
        Ok(Self {
            by,
            title: req.title,
            model: req.model,
            approve: req.approve,
        })
    }
}

/// `Sessions.List`: the newest top-level sessions, or one session's
/// workers.
pub struct List {
    pub limit: usize,
    pub parent: Option<String>,
    pub min_sequence: u64,
}

impl TryFrom<ListSessionsRequest> for List {
    type Error = Status;

    fn try_from(req: ListSessionsRequest) -> Result<Self, Status> {
        let limit = validate::limit("limit", req.limit, 50, 1000)?;
        validate::max_len("parent_id", &req.parent_id, MAX_NAME)?;
        Ok(Self {
            limit,
            parent: (!req.parent_id.is_empty()).then_some(req.parent_id),
            min_sequence: req.min_sequence,
        })
    }
}

/// `Sessions.SendMessage`, checked.
pub struct Send {
    pub from: ClientRef,
    pub session_id: String,
    pub text: String,
    pub timeout_seconds: u32,
    /// Set: the session's model from this turn on.
    pub model: String,
}

impl TryFrom<Request<SendMessageRequest>> for Send {
    type Error = Status;

    fn try_from(request: Request<SendMessageRequest>) -> Result<Self, Status> {
        let (from, req) = caller_and(request);
        validate::max_len("text", &req.text, MAX_TEXT)?;
        Ok(Self {
            from,
            session_id: req.session_id,
            text: req.text,
            timeout_seconds: req.timeout_seconds,
            model: req.model,
        })
    }
}

/// `Sessions.Rename`, checked.
pub struct Rename {
    pub by: ClientRef,
    pub session_id: String,
    pub title: String,
}

impl TryFrom<Request<RenameSessionRequest>> for Rename {
    type Error = Status;

    fn try_from(request: Request<RenameSessionRequest>) -> Result<Self, Status> {
        let (by, req) = caller_and(request);
        validate::max_len("title", &req.title, MAX_NAME)?;
        Ok(Self {
            by,
            session_id: req.session_id,
            title: req.title,
        })
    }
}

/// `Sessions.Prune`: sessions idle longer than a minute at least.
pub struct Prune {
    pub by: ClientRef,
    pub older_than: Duration,
    pub dry_run: bool,
}

impl TryFrom<Request<PruneSessionsRequest>> for Prune {
    type Error = Status;

    fn try_from(request: Request<PruneSessionsRequest>) -> Result<Self, Status> {
        let (by, req) = caller_and(request);
        if req.older_than_seconds < 60 {
            return Err(Status::invalid_argument(
                "`older_than_seconds` must be at least 60",
            ));
        }
        Ok(Self {
            by,
            older_than: Duration::from_secs(req.older_than_seconds),
            dry_run: req.dry_run,
        })
    }
}

/// `Sessions.Fork`, checked.
pub struct Fork {
    pub by: ClientRef,
    pub session_id: String,
    pub up_to_sequence: u64,
    pub title: String,
}

impl TryFrom<Request<ForkSessionRequest>> for Fork {
    type Error = Status;

    fn try_from(request: Request<ForkSessionRequest>) -> Result<Self, Status> {
        let (by, req) = caller_and(request);
        validate::max_len("title", &req.title, MAX_NAME)?;
        Ok(Self {
            by,
            session_id: req.session_id,
            up_to_sequence: req.up_to_sequence,
            title: req.title,
        })
    }
}

/// A session as it goes on the wire, with what it is doing now.
pub fn info(s: &SessionState, now: Activity) -> SessionInfo {
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
