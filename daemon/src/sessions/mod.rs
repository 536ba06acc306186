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
mod decisions;
mod jobs;
mod live;
pub mod model;
pub mod state;

pub(crate) use approver::approval_request;
pub(crate) use live::Live;
pub use live::LiveUpdate;

pub use jobs::Compacted;
use jobs::Job;

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tinycode_shared::proto::event::Payload;
use tinycode_shared::proto::{
    ClientRef, Delta, SessionCreated, TurnCompleted, TurnOutcome, TurnStarted, UserMessageAdded,
};
use tokio::sync::broadcast;

use crate::approvals::Approvals;
use crate::cluster::Cluster;
use crate::domain::desk::Desk;
use crate::domain::ids::sanitize_id;
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
    /// Woken when a worker's end is recorded (`wait_agent`).
    agent_news: tokio::sync::Notify,
}

/// `TurnCompleted` of a turn that will not go on, and why, with the steps
/// and tool calls it stored before it stopped.
fn interrupted_turn(turn: u64, brief: Option<&state::TurnBrief>, error: String) -> Payload {
    Payload::TurnCompleted(TurnCompleted {
        turn,
        outcome: TurnOutcome::Interrupted as i32,
        error,
        steps: brief.map_or(0, |b| b.steps),
        tool_calls: brief.map_or(0, |b| b.tool_calls),
        ..TurnCompleted::default()
    })
}

impl Sessions {
    /// Whether `model` can be used with `providers` (a known provider, its
    /// key in the environment); why not.
    pub fn usable_model(
        &self,
        model: &str,
        providers: &[crate::model::catalog::ProviderSpec],
    ) -> Result<(), String> {
        crate::model::catalog::resolve(
            model,
            providers,
            &|k| std::env::var(k).ok(),
            crate::model::RetryPolicy::default(),
        )
        .map(|_| ())
        .map_err(|e| format!("cannot use model {model:?}: {e}"))
    }

    /// From now on no new turn starts (a restart drains first).
    pub fn begin_drain(&self) {
        self.draining.store(true, Ordering::Release);
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

    /// What new turns get now.
    pub fn defaults(&self) -> Arc<TurnDefaults> {
        Arc::clone(&self.defaults.read().unwrap_or_else(|p| p.into_inner()))
    }

    /// Replace what new turns get (a reload); running turns keep theirs.
    pub fn set_defaults(&self, defaults: TurnDefaults) {
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
            cluster,
            projector,
            send_locks: crate::sync::Striped::default(),
            live: Mutex::new(std::collections::HashMap::new()),
            counter: AtomicU64::new(0),
            closing: Mutex::new(std::collections::HashSet::new()),
            agent_news: tokio::sync::Notify::new(),
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

    /// Unfinished turns nobody runs: this daemon's from a previous run
    /// (`at_start`), or those of a daemon sharing the log that stopped being
    /// heard from. Each is marked interrupted, or — waiting for an
    /// approval — resumed here; on another daemon's turn the first append
    /// is at the session's version, so one daemon takes it.
    async fn settle_orphans(self: &Arc<Self>, at_start: bool) -> Result<(), SessionError> {
        let me = self.cluster.id().to_string();
        // Asked of the store at the first other daemon's turn; not knowing
        // is not dead (look again next round).
        let mut live: Option<Option<std::collections::HashSet<String>>> = None;
        let mut resume = Vec::new();
        for state in model::with_unfinished_turns(self.projector.tree())? {
            let id = state.id.clone();
            let mut interrupted = Vec::new();
            let mut foreign = false;
            for turn in state.unfinished() {
                let runner = state
                    .turns
                    .get(&turn)
                    .map(|t| t.runner.clone())
                    .unwrap_or_default();
                let mine = runner.is_empty() || runner == me;
                if mine && !at_start {
                    continue; // running here
                }
                if !mine {
                    if live.is_none() {
                        live = Some(self.cluster.live_ids().await.ok());
                    }
                    let is_dead = matches!(&live, Some(Some(l)) if !l.contains(&runner));
                    if !is_dead {
                        continue;
                    }
                    foreign = true;
                }
                if self.approvals.pending_of_turn(&id, turn)?.is_empty() {
                    interrupted.push(interrupted_turn(
                        turn,
                        state.turns.get(&turn),
                        if mine {
                            "the daemon stopped while this turn was running or queued".into()
                        } else {
                            format!("daemon {runner} stopped being heard from while this turn was running or queued")
                        },
                    ));
                    tracing::warn!(session = %id, turn, runner = %runner, "marked an interrupted turn");
                } else {
                    resume.push((id.clone(), turn, foreign, state.last_version));
                }
            }
            if interrupted.is_empty() {
                continue;
            }
            let end = agents::WorkerEnd {
                outcome: TurnOutcome::Interrupted,
                text: String::new(),
                steps: 0,
                tool_calls: 0,
                usage: Default::default(),
                error: "the daemon stopped while this worker ran".into(),
            };
            if foreign {
                // Another daemon's turns: the append (at the version judged)
                // decides who settles them; then a worker's parent learns.
                let appended = self
                    .store
                    .append(
                        &session_stream(&id),
                        ExpectedVersion::Exact(state.last_version),
                        interrupted,
                    )
                    .await;
                match appended {
                    Ok(_) => {}
                    Err(StoreError::Conflict { .. }) => continue,
                    Err(e) => return Err(e.into()),
                }
                if state.parent.is_some() {
                    self.worker_finished(&state, end).await?;
                }
            } else {
                // A worker's parent learns first (its wait returns).
                if state.parent.is_some() {
                    self.worker_finished(&state, end).await?;
                }
                self.store
                    .append(&session_stream(&id), ExpectedVersion::Any, interrupted)
                    .await?;
            }
        }
        self.caught_up().await?;
        for (id, turn, foreign, version) in resume {
            if foreign {
                // Take the turn over: one daemon's `TurnStarted` lands.
                let claim = Payload::TurnStarted(TurnStarted {
                    turn,
                    daemon_id: me.clone(),
                });
                let claimed = self
                    .store
                    .append(
                        &session_stream(&id),
                        ExpectedVersion::Exact(version),
                        vec![claim],
                    )
                    .await;
                match claimed {
                    Ok(events) => self.read_at(last(&events)).await?,
                    Err(StoreError::Conflict { .. }) => continue,
                    Err(e) => return Err(e.into()),
                }
            }
            tracing::info!(session = %id, turn, "resuming a turn that waits for an approval");
            self.submit(&id, Job::Resume(turn))?;
        }
        Ok(())
    }

    /// Every half lease: settle the turns of daemons not heard from.
    async fn watch_orphans(self: Arc<Self>) {
        let mut closing = self.store.closing();
        while self.cluster.half_lease(&mut closing).await {
            if let Err(e) = self.settle_orphans(false).await {
                tracing::warn!(error = %e, "cannot settle the turns of dead daemons");
            }
        }
    }

    /// Record `turn` of `session` as interrupted: the daemon that ran it
    /// died, and this one took its work over. At the session's version, so
    /// a turn another daemon settled meanwhile is left as it ended.
    pub(crate) async fn interrupt(
        &self,
        session: &str,
        turn: u64,
        why: &str,
    ) -> Result<(), SessionError> {
        for _ in 0..20 {
            self.caught_up().await?;
            let state = self.get(session)?;
            if state.turns.get(&turn).is_none_or(|t| t.outcome.is_some()) {
                return Ok(());
            }
            let ended = interrupted_turn(turn, state.turns.get(&turn), why.to_string());
            match self
                .store
                .append(
                    &session_stream(session),
                    ExpectedVersion::Exact(state.last_version),
                    vec![ended],
                )
                .await
            {
                Ok(events) => {
                    tracing::warn!(session, turn, "marked a turn of a dead daemon interrupted");
                    return self.read_at(last(&events)).await;
                }
                // Someone wrote first: look again once it is here.
                Err(StoreError::Conflict { .. }) => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => return Err(e.into()),
            }
        }
        Err(SessionError::Invalid {
            field: "session_id",
            problem: format!(
                "names a session whose turn {turn} keeps changing; it is not abandoned"
            ),
        })
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

    pub async fn create(
        &self,
        title: &str,
        model: &str,
        approve: &str,
        by: ClientRef,
    ) -> Result<SessionState, SessionError> {
        let approve = ApprovalMode::parse(approve)
            .map_err(|problem| SessionError::Invalid {
                field: "approve",
                problem,
            })?
            .unwrap_or(self.defaults().approve);
        let model = if model.trim().is_empty() {
            self.defaults().model.clone()
        } else {
            model.trim().to_string()
        };
        // Fail now, not at the first turn, when the model cannot be used.
        self.usable_model(&model, &self.defaults().providers)
            .map_err(|message| SessionError::Model {
                model: model.clone(),
                message,
            })?;
        let id = self.new_id();
        let title = if title.trim().is_empty() {
            format!("session {id}")
        } else {
            title.trim().chars().take(200).collect()
        };
        let events = self
            .store
            .append(
                &session_stream(&id),
                ExpectedVersion::NoStream,
                vec![Payload::SessionCreated(SessionCreated {
                    title,
                    model,
                    created_by: Some(by),
                    approve: approve.as_str().into(),
                    ..SessionCreated::default()
                })],
            )
            .await?;
        self.read_at(last(&events)).await?;
        self.get(&id)
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

    /// The session's history after its compaction boundary, read from its
    /// stream.
    pub(crate) async fn history(&self, state: &SessionState) -> Result<History, SessionError> {
        let events = self
            .store
            .read_stream(
                &session_stream(&state.id),
                state.history_from.max(1),
                usize::MAX,
            )
            .await?;
        Ok(History::of(state, &events))
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

    pub async fn rename(
        self: &Arc<Self>,
        raw: &str,
        title: &str,
        by: ClientRef,
    ) -> Result<SessionState, SessionError> {
        let id = self.get(raw)?.id;
        let title: String = title.trim().chars().take(200).collect();
        if title.is_empty() {
            return Err(SessionError::Invalid {
                field: "title",
                problem: "is empty".into(),
            });
        }
        let renamed = tinycode_shared::proto::SessionRenamed {
            title,
            by: Some(by),
        };
        self.record(&id, vec![Payload::SessionRenamed(renamed)])
            .await?;
        self.get(&id)
    }

    /// Cancel the running turn, then mark the session deleted (its events
    /// stay in the log). Returns whether a turn was cancelled.
    pub async fn delete(self: &Arc<Self>, raw: &str, by: ClientRef) -> Result<bool, SessionError> {
        let id = self.get(raw)?.id;
        let cancelled = self.cancel(&id)?;
        // Its workers go with it.
        for child in self.children(&id)? {
            self.stop_worker(&child.id);
            let deleted = tinycode_shared::proto::SessionDeleted {
                by: Some(by.clone()),
            };
            self.record(&child.id, vec![Payload::SessionDeleted(deleted)])
                .await?;
        }
        let deleted = tinycode_shared::proto::SessionDeleted { by: Some(by) };
        self.record(&id, vec![Payload::SessionDeleted(deleted)])
            .await?;
        // Its artifacts (full tool results) go with it; the events stay.
        if let Some(root) = &self.defaults().artifact_root {
            let dir = root.join(&id);
            if let Err(e) = tokio::fs::remove_dir_all(&dir).await
                && e.kind() != std::io::ErrorKind::NotFound
            {
                tracing::warn!(session = %id, error = %e, "could not remove the session's artifacts");
            }
        }
        Ok(cancelled)
    }

    /// Delete every session idle (no running or queued turn) whose last
    /// event is older than `older_than`; with `dry_run`, only name them.
    pub async fn prune(
        self: &Arc<Self>,
        older_than: Duration,
        dry_run: bool,
        by: ClientRef,
    ) -> Result<Vec<String>, SessionError> {
        let cutoff = crate::clock::now_unix() - older_than.as_secs() as i64;
        let old: Vec<String> = model::newest(self.projector.tree())
            .filter_map(Result::ok)
            .filter(|s| !s.deleted && s.last_at < cutoff)
            .filter(|s| {
                let a = self.activity(&s.id);
                a.running == 0 && a.queued == 0
            })
            .map(|s| s.id)
            .collect();
        if !dry_run {
            for id in &old {
                self.delete(id, by.clone()).await?;
            }
        }
        Ok(old)
    }

    /// A new session with this one's history up to `up_to` (0: all). A turn
    /// the cut leaves unfinished is recorded as interrupted in the fork.
    pub async fn fork(
        self: &Arc<Self>,
        raw: &str,
        up_to: u64,
        title: &str,
        by: ClientRef,
    ) -> Result<SessionState, SessionError> {
        let source = self.get(raw)?;
        let to = if up_to == 0 { u64::MAX } else { up_to };
        let copied = self
            .stored(&source.id, source.created_sequence + 1, to)
            .await?;
        let forked_at = copied
            .last()
            .map_or(source.created_sequence, |e| e.sequence);
        let title = if title.trim().is_empty() {
            format!("fork of {}", source.title)
        } else {
            title.trim().chars().take(200).collect()
        };
        let mut payloads = vec![Payload::SessionCreated(SessionCreated {
            title,
            model: source.model.clone(),
            created_by: Some(by),
            approve: source.approve.as_str().into(),
            forked_from: source.id.clone(),
            forked_at,
            // A fork is a session of its own, even a worker's.
            parent: None,
        })];
        payloads.extend(copied.into_iter().filter_map(|e| match e.payload {
            Some(
                p @ (Payload::UserMessageAdded(_)
                | Payload::TurnStarted(_)
                | Payload::AssistantMessageAdded(_)
                | Payload::ToolCallFinished(_)
                | Payload::TurnCompleted(_)),
            ) => Some(p),
            _ => None,
        }));
        let mut probe = SessionState::default();
        for p in &payloads {
            let event = tinycode_shared::proto::Event {
                payload: Some(p.clone()),
                ..Default::default()
            };
            probe.apply(&event);
        }
        for turn in probe.unfinished() {
            payloads.push(interrupted_turn(
                turn,
                probe.turns.get(&turn),
                format!("the fork was cut at sequence {forked_at}, inside this turn"),
            ));
        }
        let id = self.new_id();
        let events = self
            .store
            .append(&session_stream(&id), ExpectedVersion::NoStream, payloads)
            .await?;
        self.read_at(last(&events)).await?;
        self.get(&id)
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
        self.stored_state(id)
            .ok()
            .flatten()
            .and_then(|s| s.turns.get(&turn).map(|t| t.runner.clone()))
            .unwrap_or_default()
    }

    /// A turn's outcome, once it has one.
    pub fn turn_outcome(&self, id: &str, turn: u64) -> Option<TurnOutcome> {
        self.stored_state(id).ok()??.turns.get(&turn)?.outcome
    }

    /// Store the user message and queue its turn. Returns (sequence, turn, queued).
    pub async fn send(
        self: &Arc<Self>,
        raw: &str,
        text: &str,
        from: ClientRef,
    ) -> Result<(u64, u64, bool), SessionError> {
        self.send_timed(raw, text, from, 0).await
    }

    /// [`Self::send`], with the turn's own time limit in seconds (0: the
    /// daemon's `turnTimeoutSeconds`).
    pub async fn send_timed(
        self: &Arc<Self>,
        raw: &str,
        text: &str,
        from: ClientRef,
        timeout_seconds: u32,
    ) -> Result<(u64, u64, bool), SessionError> {
        let id = Self::checked_id(raw)?;
        if self.draining.load(Ordering::Acquire) {
            return Err(SessionError::Draining);
        }
        let skills = self.skills.current();
        let (skill, skill_body) = match skills.command(text) {
            Ok(Some((skill, _))) => (skill.name.clone(), skill.body.clone()),
            Ok(None) => (String::new(), String::new()),
            Err(problem) => {
                return Err(SessionError::Invalid {
                    field: "text",
                    problem,
                });
            }
        };
        if timeout_seconds > 86_400 {
            return Err(SessionError::Invalid {
                field: "timeout_seconds",
                problem: format!("must be at most 86400 (a day), got {timeout_seconds}"),
            });
        }
        if text.trim().is_empty() {
            return Err(SessionError::Invalid {
                field: "text",
                problem: "is empty".into(),
            });
        }
        // Turns are numbered one at a time: each send waits for the model
        // to have its message before the next reads the next number.
        let numbering = self.send_locks.lock(&id).await;
        // Several daemons on one log: the message is appended at the
        // session's version (so two daemons never number one turn twice),
        // and a session with a turn on another live daemon gets its next
        // turn there, behind that one (that daemon sees the message in the
        // log and runs it).
        let me = self.cluster.id().to_string();
        let shared = self.store.shared();
        let mut conflicts = 0;
        let (events, turn, runner) = loop {
            if shared {
                self.caught_up().await?;
            }
            let state = self.get(&id)?;
            let turn = state.next_turn();
            let busy_on = state
                .turns
                .values()
                .rev()
                .find(|t| t.outcome.is_none())
                .map(|t| t.runner.clone())
                .filter(|r| shared && !r.is_empty() && *r != me);
            let runner = match busy_on {
                Some(r) if self.cluster.alive(&r).await.unwrap_or(true) => r,
                _ => me.clone(),
            };
            let expected = if shared {
                ExpectedVersion::Exact(state.last_version)
            } else {
                ExpectedVersion::Any
            };
            let message = Payload::UserMessageAdded(UserMessageAdded {
                text: text.into(),
                from: Some(from.clone()),
                turn,
                timeout_seconds,
                skill: skill.clone(),
                skill_body: skill_body.clone(),
                daemon_id: runner.clone(),
            });
            match self
                .store
                .append(&session_stream(&id), expected, vec![message])
                .await
            {
                Ok(events) => break (events, turn, runner),
                Err(StoreError::Conflict { .. }) if conflicts < 100 => {
                    conflicts += 1;
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                Err(e) => return Err(e.into()),
            }
        };
        self.publish(&id, &events);
        self.read_at(last(&events)).await?;
        drop(numbering);
        let queued = if runner == me {
            self.submit(&id, Job::Turn(turn))?
        } else {
            tracing::info!(session = %id, turn, runner = %runner, "the turn runs on the daemon running this session");
            true
        };
        Ok((
            events.first().map(|e| e.sequence).unwrap_or(0),
            turn,
            queued,
        ))
    }

    /// Summarise the older turns now, behind a running turn if there is one.
    pub async fn compact(
        self: &Arc<Self>,
        raw: &str,
        by: ClientRef,
    ) -> Result<Compacted, SessionError> {
        let id = self.get(raw)?.id;
        let (reply, done) = tokio::sync::oneshot::channel();
        self.submit(&id, Job::Compact { by, reply })?;
        done.await.map_err(|_| SessionError::Invalid {
            field: "session_id",
            problem: "names a session whose worker stopped".into(),
        })?
    }

    /// Cancel the running turn; `false` when none runs.
    pub fn cancel(&self, raw: &str) -> Result<bool, SessionError> {
        let id = Self::checked_id(raw)?;
        self.get(&id)?;
        let live = lock(&self.live).get(&id).cloned();
        Ok(match live {
            Some(l) if l.running.load(Ordering::Acquire) != 0 => {
                l.cancel.send_replace(true);
                true
            }
            _ => false,
        })
    }

    /// For attaching: a receiver of every later update, the text of the
    /// running step so far, and the last durable sequence, taken under one
    /// lock. Replaying the store up to that sequence, then the text so far,
    /// then the receiver (deduplicating events by sequence) has no gap and
    /// no duplicate.
    pub fn attach(
        self: &Arc<Self>,
        raw: &str,
    ) -> Result<(broadcast::Receiver<LiveUpdate>, Option<Delta>, u64), SessionError> {
        let id = Self::checked_id(raw)?;
        self.with_live(&id, |live| {
            let partial = lock(&live.partial);
            let rx = live.updates.subscribe();
            let head = self.store.last_sequence();
            let running = live.running.load(Ordering::Acquire);
            let so_far =
                (running != 0 && partial.0 == running && !partial.1.is_empty()).then(|| Delta {
                    turn: partial.0,
                    kind: live::DeltaKind::Text.as_str().into(),
                    text: partial.1.clone(),
                });
            (rx, so_far, head)
        })
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
