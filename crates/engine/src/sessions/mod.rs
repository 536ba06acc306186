//! Sessions: stream `session-<id>`. One actor task per session runs its
//! turns one at a time (a message sent while a turn runs is queued); every
//! message, tool result and turn outcome is stored; text and thinking
//! deltas are live-only, broadcast to attached clients, and a client that
//! attaches mid-message first gets the text so far. A client disconnecting
//! never cancels a turn; `cancel` does.

mod actor;
mod agents;
mod approver;
mod attach;
mod compaction;
mod decisions;
mod fence;
mod jobs;
mod live;
mod manage;
pub mod model;
mod orphans;
mod recall;
mod send;
pub mod state;
mod turn;
mod write;
mod writer;

pub(crate) use approver::approval_request;
pub(crate) use live::Live;
pub use live::LiveUpdate;

pub use jobs::Compacted;
use jobs::Job;

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tinycode_shared::proto::TurnOutcome;
use tinycode_shared::proto::event::Payload;
use tokio::sync::broadcast;

use crate::approvals::Approvals;
use crate::cluster::Cluster;
use crate::domain::desk::Desk;
use crate::domain::ids::sanitize_id;
use crate::domain::limits::MAX_NAME;
use crate::permissions::ApprovalMode;
use crate::projection::{ProjectionError, Projector, ProjectorHandle};
use crate::skills::{SkillRegistry, Skills};
use crate::store::{EventStore, ExpectedVersion, StoreError};
use crate::sync::lock;
use crate::tools::ToolRegistry;
pub use state::{History, SessionState};

pub fn session_stream(id: &str) -> String {
    format!("session-{id}")
}

#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error("session {0} does not exist; `tinycode session list` shows the sessions")]
    NotFound(String),
    #[error("session {0} was deleted")]
    Deleted(String),
    #[error("invalid session id: {0}")]
    BadId(String),
    #[error("`{field}` {problem}")]
    Invalid {
        field: &'static str,
        problem: String,
    },
    #[error("cannot use model {model:?}: {message}")]
    Model { model: String, message: String },
    /// A sub-agent request that cannot be done as asked (the limit, an
    /// unknown worker, a worker spawning).
    #[error("{0}")]
    Agent(String),
    /// The daemon drains before a restart: no new turn starts.
    #[error("tinycoded is restarting and starts no new turn now; send it again in a moment")]
    Draining,
    #[error(transparent)]
    Approval(#[from] crate::approvals::ApprovalError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Projection(#[from] ProjectionError),
}

/// Turn settings shared by every session.
#[derive(Debug, Clone)]
pub struct TurnDefaults {
    /// `$TINYCODE_MODEL`, else config `model`, else `offline`.
    pub model: String,
    pub max_steps: u32,
    pub max_tool_result_chars: usize,
    pub timeout: Option<Duration>,
    /// `<state>/artifacts`: full results of truncated tool calls, per session.
    pub artifact_root: Option<PathBuf>,
    /// Config `providers`.
    pub providers: Vec<crate::model::catalog::ProviderSpec>,
    pub compaction: crate::config::Compaction,
    /// `approvalTimeoutSeconds` (None: wait forever).
    pub approval_timeout: Option<Duration>,
    /// How sessions created without a mode settle `ask`: config
    /// `permissionMode` (`ask`, or `auto`).
    pub approve: ApprovalMode,
    /// Config `subAgents`: workers per session and their limits.
    pub sub_agents: crate::config::SubAgents,
    /// Config `permissions.allow`: tools that run without asking.
    pub allow: Vec<String>,
    /// Config `triage.reviewBelow`: a model's decision below it is held.
    pub review_below: crate::domain::ticket::review::ReviewBelow,
}

/// What a sent message became.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sent {
    /// The stored user message's sequence.
    pub sequence: u64,
    /// The turn that answers it.
    pub turn: u64,
    /// It waits behind a running or queued turn (or runs on another daemon).
    pub queued: bool,
}

/// What the sessions registry works with.
pub struct Parts {
    pub store: EventStore,
    pub desk: Arc<Desk>,
    pub skills: Arc<Skills>,
    pub approvals: Arc<Approvals>,
    pub workspace: PathBuf,
    /// The daemons sharing the log.
    pub cluster: Arc<Cluster>,
    /// The offline model (with the desk's learner): what model `offline`
    /// resolves to.
    pub offline: Arc<dyn crate::model::ModelProvider>,
    /// Provider keys, asked on every model request.
    pub keys: Arc<dyn crate::model::keys::Keys>,
}

impl TurnDefaults {
    /// What new turns get from `config` (and `$TINYCODE_MODEL`, which
    /// overrides its `model`); full tool results go under `artifact_root`.
    pub fn from_config(config: &crate::config::Config, artifact_root: Option<PathBuf>) -> Self {
        let model = std::env::var("TINYCODE_MODEL")
            .ok()
            .filter(|m| !m.trim().is_empty())
            .or_else(|| (!config.model.is_empty()).then(|| config.model.clone()))
            .unwrap_or_else(|| "offline".into());
        Self {
            model,
            max_steps: config.max_steps_per_turn,
            max_tool_result_chars: config.max_tool_result_chars,
            timeout: config.turn_timeout,
            artifact_root,
            providers: config.providers.clone(),
            compaction: config.compaction,
            approval_timeout: config.approval_timeout,
            approve: config.permission_mode,
            sub_agents: config.sub_agents.clone(),
            allow: config.allow.clone(),
            review_below: config.review_below.clone(),
        }
    }
}

/// A session's live side right now (all zero when it has none).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Activity {
    /// Running turn (0: none).
    pub running: u64,
    /// Turns waiting behind it.
    pub queued: u64,
    /// Clients attached (open Attach streams).
    pub attached: usize,
}

pub struct Sessions {
    pub(crate) store: EventStore,
    pub(crate) desk: Arc<Desk>,
    pub(crate) skills: Arc<Skills>,
    pub(crate) tools: ToolRegistry,
    /// What a worker's turns get: the read tools only.
    pub(crate) worker_tools: ToolRegistry,
    pub(crate) approvals: Arc<Approvals>,
    pub(crate) workspace: PathBuf,
    /// What new turns get; replaced whole by a reload
    /// (`tinycode daemon reload`): a turn takes a snapshot when it starts.
    defaults: std::sync::RwLock<Arc<TurnDefaults>>,
    /// A restart drains: no new turn starts.
    draining: std::sync::atomic::AtomicBool,
    /// What model `offline` resolves to: the daemon's offline model, with
    /// the desk's learner.
    pub(crate) offline: Arc<dyn crate::model::ModelProvider>,
    /// Provider keys, asked on every model request.
    pub(crate) keys: Arc<dyn crate::model::keys::Keys>,
    /// The daemons sharing the log: whose turns are whose.
    pub(crate) cluster: Arc<Cluster>,
    /// The sessions read model (`model.rs`).
    projector: ProjectorHandle,
    /// New turns of one session are numbered one at a time.
    send_locks: crate::sync::Striped<16>,
    live: Mutex<std::collections::HashMap<String, Arc<Live>>>,
    counter: AtomicU64,
    /// Workers told to stop (their turn may not have started yet).
    closing: Mutex<std::collections::HashSet<String>>,
    /// The desk's reports, for `render_report` (made after the sessions:
    /// the daemon hands them over with [`Sessions::serve_reports`]).
    reports: std::sync::OnceLock<Arc<dyn crate::tools::report::ReportSource>>,
    /// Woken when a worker's end is recorded (`wait_agent`).
    agent_news: tokio::sync::Notify,
    /// Each recent session's history, kept between its turns.
    recall: recall::Recall,
}

impl Sessions {
    /// Whether `model` can be used with `providers` (a known provider, its
    /// key in the environment); why not.
    pub fn usable_model(
        &self,
        model: &str,
        providers: &[crate::model::catalog::ProviderSpec],
    ) -> Result<(), String> {
        crate::model::catalog::resolve_with(
            model,
            providers,
            &|k| std::env::var(k).ok(),
            Arc::clone(&self.keys),
            crate::model::RetryPolicy::default(),
        )
        .map(|_| ())
        .map_err(|e| format!("cannot use model {model:?}: {e}"))
    }

    /// From now on no new turn starts (a restart drains first).
    pub fn begin_drain(&self) {
        self.draining.store(true, Ordering::Release);
    }

    /// Whether session `id` has a turn running or queued on this daemon.
    pub fn working(&self, id: &str) -> bool {
        lock(&self.live).get(id).is_some_and(|l| {
            l.running.load(Ordering::Acquire) != 0 || l.queued.load(Ordering::Acquire) != 0
        })
    }

    /// Turns running and not at a safe point (waiting for a person is
    /// one): `session S-3 turn 2`.
    pub fn busy_turns(&self) -> Vec<String> {
        let running: Vec<(String, u64)> = lock(&self.live)
            .iter()
            .filter_map(|(id, l)| {
                let turn = l.running.load(Ordering::Acquire);
                let queued = l.queued.load(Ordering::Acquire);
                (turn != 0 || queued != 0).then(|| (id.clone(), turn))
            })
            .collect();
        running
            .into_iter()
            .filter(|(id, _)| {
                self.get(id)
                    .map_or(true, |s| s.pending_approvals().is_empty())
            })
            .map(|(id, turn)| format!("session {id} turn {turn}"))
            .collect()
    }

    /// The tools a session's turn may call (a direct call too).
    pub fn tools(&self) -> &ToolRegistry {
        &self.tools
    }

    /// What new turns get now.
    pub fn defaults(&self) -> Arc<TurnDefaults> {
        Arc::clone(&self.defaults.read().unwrap_or_else(|p| p.into_inner()))
    }

    /// Replace what new turns get (a reload); running turns keep theirs.
    pub fn set_defaults(&self, defaults: TurnDefaults) {
        self.keys.set_providers(&defaults.providers);
        *self.defaults.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(defaults);
    }

    /// Follow the log into the sessions model; turns left unfinished by a
    /// previous run are marked interrupted, except those waiting for an
    /// approval, which resume.
    pub async fn open(parts: Parts, defaults: TurnDefaults) -> Result<Arc<Self>, SessionError> {
        let Parts {
            store,
            desk,
            skills,
            approvals,
            workspace,
            cluster,
            offline,
            keys,
        } = parts;
        // What other daemons append from here on is followed (a message
        // for a turn to run here included); what came before is settled
        // below from the caught-up model.
        let head = store.last_sequence();
        let projector = Projector::spawn(&store, Arc::new(model::SessionsModel))?;
        let mut tools = ToolRegistry::standard();
        for tool in crate::tools::agents::agent_tools() {
            tools.register(tool);
        }
        tools.register(Arc::new(crate::tools::ask::AskUser));
        let sessions = Arc::new(Self {
            store,
            desk,
            skills,
            tools,
            worker_tools: ToolRegistry::read_only(
                "a worker only reads: report what you found, and the agent that spawned you decides what to change",
            ),
            approvals,
            workspace,
            defaults: std::sync::RwLock::new(Arc::new(defaults)),
            draining: std::sync::atomic::AtomicBool::new(false),
            offline,
            keys,
            cluster,
            projector,
            send_locks: crate::sync::Striped::default(),
            live: Mutex::new(std::collections::HashMap::new()),
            counter: AtomicU64::new(0),
            closing: Mutex::new(std::collections::HashSet::new()),
            agent_news: tokio::sync::Notify::new(),
            recall: recall::Recall::default(),
            reports: std::sync::OnceLock::new(),
        });
        sessions.caught_up().await?;
        // Approval events a crash kept from reaching the session's copy.
        sessions.reconcile_approvals().await?;
        sessions.caught_up().await?;
        sessions.settle_orphans(true).await?;
        tokio::spawn(Arc::clone(&sessions).watch_orphans());
        tokio::spawn(Arc::clone(&sessions).follow_remote(head + 1));
        Ok(sessions)
    }

    /// Let `render_report` read the desk's reports (once).
    pub fn serve_reports(&self, reports: Arc<dyn crate::tools::report::ReportSource>) {
        let _ = self.reports.set(reports);
    }

    /// The tools' view of the desk's reports, once served.
    pub(crate) fn reports(&self) -> Option<Arc<dyn crate::tools::report::ReportSource>> {
        self.reports.get().cloned()
    }

    /// The sessions model's projector (status, rebuild).
    pub fn projector(&self) -> &ProjectorHandle {
        &self.projector
    }

    /// Wait until the sessions model has every event stored so far.
    pub(crate) async fn caught_up(&self) -> Result<(), SessionError> {
        Ok(self.projector.wait_for(self.store.last_sequence()).await?)
    }

    /// Wait until the sessions model has every event up to `sequence`.
    pub(crate) async fn read_at(&self, sequence: u64) -> Result<(), SessionError> {
        Ok(self.projector.wait_for(sequence).await?)
    }

    pub fn approvals(&self) -> &Arc<Approvals> {
        &self.approvals
    }

    fn new_id(&self) -> String {
        let millis = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis())
            .unwrap_or(0);
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        format!("s{millis:x}{n:x}")
    }

    fn checked_id(raw: &str) -> Result<String, SessionError> {
        sanitize_id(raw).map_err(|e| SessionError::BadId(e.to_string()))
    }

    pub fn get(&self, raw: &str) -> Result<SessionState, SessionError> {
        let id = Self::checked_id(raw)?;
        match self.stored_state(&id)? {
            Some(s) if s.deleted => Err(SessionError::Deleted(id)),
            Some(s) => Ok(s),
            None => Err(SessionError::NotFound(id)),
        }
    }

    /// A session's state as the model has it, deleted or not.
    fn stored_state(&self, id: &str) -> Result<Option<SessionState>, SessionError> {
        Ok(model::read(self.projector.tree(), id)?)
    }

    /// The session's history after its compaction boundary: what the
    /// recall kept of its stream, and the events stored since.
    pub(crate) async fn history(&self, state: &SessionState) -> Result<History, SessionError> {
        let from = state.history_from.max(1);
        let cut = state.compacted_before;
        let (mut turns, next) = self.recall.take(&state.id, from, cut);
        let events = self
            .store
            .read_stream(&session_stream(&state.id), next, usize::MAX)
            .await?;
        let next = events.last().map_or(next, |e| e.stream_version + 1);
        if !events.is_empty() || turns.first_key_value().is_some_and(|(t, _)| *t < cut) {
            let held = Arc::make_mut(&mut turns);
            if held.first_key_value().is_some_and(|(t, _)| *t < cut) {
                *held = held.split_off(&cut);
            }
            History::fold(held, cut, &events);
        }
        self.recall
            .keep(&state.id, (from, cut), next, turns.clone());
        Ok(History {
            summary: state.summary.clone(),
            turns,
        })
    }

    async fn record(
        self: &Arc<Self>,
        id: &str,
        payloads: Vec<Payload>,
    ) -> Result<(), SessionError> {
        let events = self
            .store
            .append(&session_stream(id), ExpectedVersion::Any, payloads)
            .await?;
        self.publish(id, &events);
        self.read_at(last(&events)).await
    }

    /// Root sessions (workers are listed under their parent), newest
    /// first, deleted sessions left out.
    pub fn list(&self, limit: usize) -> Result<Vec<SessionState>, SessionError> {
        Ok(model::newest(self.projector.tree())
            .filter(|s| s.as_ref().map_or(true, |s| s.parent.is_none()))
            .take(limit)
            .collect::<Result<_, _>>()?)
    }

    /// What a session's live side is doing now.
    pub fn activity(&self, id: &str) -> Activity {
        lock(&self.live)
            .get(id)
            .map(|l| Activity {
                running: l.running.load(Ordering::Acquire),
                queued: l.queued.load(Ordering::Acquire),
                attached: l.updates.receiver_count(),
            })
            .unwrap_or_default()
    }

    /// The workspace's skills as they are now.
    pub fn skills(&self) -> Arc<SkillRegistry> {
        self.skills.current()
    }

    /// The newest turn whose user message came after `sequence`, and its
    /// outcome (None while it runs or waits).
    pub fn last_turn_after(&self, id: &str, sequence: u64) -> Option<(u64, Option<TurnOutcome>)> {
        self.stored_state(id).ok()??.last_turn_after(sequence)
    }

    /// The daemon running a turn (empty: unknown, or before daemons
    /// shared a log).
    pub fn turn_runner(&self, id: &str, turn: u64) -> String {
        self.stored_turn(id, turn)
            .map(|t| t.runner)
            .unwrap_or_default()
    }

    /// A turn's outcome, once it has one.
    pub fn turn_outcome(&self, id: &str, turn: u64) -> Option<TurnOutcome> {
        self.stored_turn(id, turn)?.outcome
    }

    /// One turn as the model has it (`None` also when it cannot be read).
    fn stored_turn(&self, id: &str, turn: u64) -> Option<state::TurnBrief> {
        model::read_turn(self.projector.tree(), id, turn).ok()?
    }

    /// Stored events of a session from stream version `from` on, at most
    /// `max`.
    pub async fn stored_versions(
        &self,
        id: &str,
        from: u64,
        max: usize,
    ) -> Result<Vec<tinycode_shared::proto::Event>, SessionError> {
        Ok(self
            .store
            .read_stream(&session_stream(id), from, max)
            .await?)
    }

    /// Stored events of a session with `from <= sequence <= to`.
    pub async fn stored(
        &self,
        raw: &str,
        from: u64,
        to: u64,
    ) -> Result<Vec<tinycode_shared::proto::Event>, SessionError> {
        let id = Self::checked_id(raw)?;
        let events = self
            .store
            .read_stream(&session_stream(&id), 1, usize::MAX)
            .await?;
        Ok(events
            .into_iter()
            .filter(|e| e.sequence >= from && e.sequence <= to)
            .collect())
    }
}

/// Sequence of the last of `events` (0: none).
fn last(events: &[Arc<tinycode_shared::proto::Event>]) -> u64 {
    events.last().map_or(0, |e| e.sequence)
}

#[cfg(test)]
mod approval_tests;
#[cfg(test)]
pub(crate) mod tests;
