//! Sub-agents as child sessions. A worker is a session of its own (stream
//! `session-<id>`, `SessionCreated.parent` naming the session, turn and
//! call that spawned it), created with its task as turn 1 in one append and
//! run by its own actor, concurrently with its parent. The parent's stream
//! records `SubAgentSpawned` and `SubAgentFinished`; its state (the sessions
//! model) is the one place the workers' states are read from.
//!
//! A worker only reads: its turns get the read-only tools, its own system
//! prompt and the `subAgents` step and time limits, and no [`SubAgents`]
//! scope, so it cannot spawn. `SubAgentFinished` is stored before the
//! worker's `TurnCompleted`: a crash between the two leaves the worker's
//! turn unfinished, the next start marks it interrupted and records the
//! finish again, and the fold keeps the first.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use tinycode_shared::proto::event::Payload;
use tinycode_shared::proto::{
    ClientRef, ModelUsage, ParentLink, SessionCreated, SubAgentFinished, SubAgentSpawned,
    TurnOutcome, UserMessageAdded,
};

use super::jobs::Job;
use super::state::AgentBrief;
use super::{SessionError, SessionState, Sessions, session_stream};
use crate::store::ExpectedVersion;
use crate::sync::lock;
use crate::tools::agents::{AgentState, AgentView, SubAgents};

/// Longest worker answer kept on `SubAgentFinished` (characters).
const MAX_ANSWER_CHARS: usize = 8_000;

/// How a worker's turn ended, for its parent.
pub(crate) struct WorkerEnd {
    pub outcome: TurnOutcome,
    pub text: String,
    pub steps: u32,
    pub tool_calls: u32,
    pub usage: ModelUsage,
    pub error: String,
}

/// The workers of one running turn: what its tools reach.
pub(crate) struct Scope {
    pub sessions: Arc<Sessions>,
    pub session: String,
    pub turn: u64,
}

fn view(agent_id: &str, a: &AgentBrief) -> AgentView {
    AgentView {
        agent_id: agent_id.to_string(),
        session_id: a.session_id.clone(),
        task: a.task.clone(),
        state: match &a.end {
            None => AgentState::Running,
            Some(end) => AgentState::Finished {
                outcome: tinycode_shared::render::outcome_name(end.outcome).to_string(),
                steps: end.steps,
                tool_calls: end.tool_calls,
                text: end.text.clone(),
                error: end.error.clone(),
            },
        },
    }
}

/// A worker's first message and the skill it names (empty: none).
struct WorkerPrompt {
    text: String,
    skill_name: String,
    skill_body: String,
}

/// Before a spawn: the worker this call already started (`Some`), an
/// error when the session may not spawn one now (it is a worker, or
/// runs `max` workers, `subAgents.max`), else `None`.
fn started_or_refused(
    state: &SessionState,
    max: usize,
    turn: u64,
    call_id: &str,
    task: &str,
) -> Result<Option<AgentView>, SessionError> {
    if state.parent.is_some() {
        return Err(agent_error(
            "a worker cannot spawn workers; answer with what you found",
        ));
    }
    // Call ids may repeat within a turn (some providers number them
    // per step): the task tells the calls apart.
    if let Some((id, a)) = state.agents.iter().find(|(_, a)| {
        !call_id.is_empty() && a.turn == turn && a.call_id == call_id && a.task == task.trim()
    }) {
        return Ok(Some(view(id, a)));
    }
    let running: Vec<&str> = state
        .agents
        .iter()
        .filter(|(_, a)| a.end.is_none())
        .map(|(id, _)| id.as_str())
        .collect();
    if running.len() >= max {
        return Err(agent_error(format!(
            "{} workers are already running ({}), the most a session may have (config subAgents.max); wait for one with wait_agent or stop one with close_agent, then spawn again",
            running.len(),
            running.join(", ")
        )));
    }
    Ok(None)
}

fn agent_error(problem: impl Into<String>) -> SessionError {
    SessionError::Agent(problem.into())
}

impl Sessions {
    /// Start a worker for `parent`'s turn `turn`, call `call_id`. The same
    /// call with the same task again (a resumed turn) gets the worker it
    /// started.
    pub(crate) async fn spawn_worker(
        self: &Arc<Self>,
        parent: &str,
        turn: u64,
        call_id: &str,
        task: &str,
        skill: Option<&str>,
    ) -> Result<AgentView, SessionError> {
        // One spawn of a session at a time: the count below stays true.
        let _one = self.send_locks.lock(&format!("agents/{parent}")).await;
        self.caught_up().await?;
        let state = self.get(parent)?;
        let limits = &self.defaults().sub_agents;
        if let Some(started) = started_or_refused(&state, limits.max, turn, call_id, task)? {
            return Ok(started);
        }
        let task = task.trim();
        let prompt = self.worker_prompt(task, skill)?;
        let agent_id = format!("a{}", state.agents.len() + 1);
        let child = self.new_id();
        let model = if limits.model.is_empty() {
            state.model.clone()
        } else {
            limits.model.clone()
        };
        let link = ParentLink {
            session_id: parent.to_string(),
            turn,
            call_id: call_id.to_string(),
            agent_id: agent_id.clone(),
        };
        self.create_worker(&child, link, &model, task, prompt, limits.timeout)
            .await?;
        let spawned = SubAgentSpawned {
            agent_id: agent_id.clone(),
            session_id: child.clone(),
            task: task.to_string(),
            skill: skill.unwrap_or_default().to_string(),
            turn,
            call_id: call_id.to_string(),
            model,
        };
        self.record(parent, vec![Payload::SubAgentSpawned(spawned)])
            .await?;
        self.submit(&child, Job::Turn(1))?;
        tracing::info!(session = %parent, agent = %agent_id, worker = %child, "spawned a worker");
        let state = self.get(parent)?;
        let brief = state
            .agents
            .get(&agent_id)
            .ok_or_else(|| agent_error(format!("worker {agent_id} was not recorded")))?;
        Ok(view(&agent_id, brief))
    }

    /// The worker's first message (`/<skill> <task>` with a skill), and
    /// the skill it names.
    fn worker_prompt(&self, task: &str, skill: Option<&str>) -> Result<WorkerPrompt, SessionError> {
        let text = match skill {
            Some(skill) => format!("/{skill} {task}"),
            None => task.to_string(),
        };
        let (skill_name, skill_body) = match self.skills.current().command(&text) {
            Ok(Some((s, _))) => (s.name.clone(), s.body.clone()),
            Ok(None) if skill.is_none() => (String::new(), String::new()),
            Ok(None) | Err(_) => {
                return Err(agent_error(format!(
                    "there is no skill named {:?}; the system prompt lists the skills",
                    skill.unwrap_or_default()
                )));
            }
        };
        Ok(WorkerPrompt {
            text,
            skill_name,
            skill_body,
        })
    }

    /// Create the worker's session `child` and its task as turn 1, then
    /// wait until the model has them.
    async fn create_worker(
        &self,
        child: &str,
        link: ParentLink,
        model: &str,
        task: &str,
        prompt: WorkerPrompt,
        timeout: Duration,
    ) -> Result<(), SessionError> {
        let by = ClientRef {
            name: format!("agent {}", link.session_id),
            ..ClientRef::default()
        };
        let task_title: String = task.chars().take(80).collect();
        let title = format!("{}: {task_title}", link.agent_id);
        // The worker and its task in one append: it never exists without
        // the turn that answers it.
        let created = self
            .store
            .append(
                &session_stream(child),
                ExpectedVersion::NoStream,
                vec![
                    Payload::SessionCreated(SessionCreated {
                        title,
                        model: model.to_string(),
                        created_by: Some(by.clone()),
                        approve: crate::permissions::ApprovalMode::Deny.as_str().into(),
                        parent: Some(link),
                        ..SessionCreated::default()
                    }),
                    Payload::UserMessageAdded(UserMessageAdded {
                        text: prompt.text,
                        from: Some(by),
                        turn: 1,
                        timeout_seconds: timeout.as_secs() as u32,
                        skill: prompt.skill_name,
                        skill_body: prompt.skill_body,
                        daemon_id: self.cluster.id().to_string(),
                    }),
                ],
            )
            .await?;
        self.read_at(super::last(&created)).await?;
        Ok(())
    }

    fn agent<'a>(state: &'a SessionState, agent_id: &str) -> Result<&'a AgentBrief, SessionError> {
        state.agents.get(agent_id).ok_or_else(|| {
            let known: Vec<&str> = state.agents.keys().map(String::as_str).collect();
            agent_error(if known.is_empty() {
                format!("there is no worker {agent_id:?}: this session has none; start one with spawn_agent")
            } else {
                format!(
                    "there is no worker {agent_id:?}; this session's workers are {}",
                    known.join(", ")
                )
            })
        })
    }

    /// The worker once it finished, or as it is after `timeout`.
    pub(crate) async fn wait_worker(
        &self,
        parent: &str,
        agent_id: &str,
        timeout: Duration,
    ) -> Result<AgentView, SessionError> {
        let deadline = Instant::now() + timeout;
        loop {
            let news = self.agent_news.notified();
            tokio::pin!(news);
            news.as_mut().enable();
            self.caught_up().await?;
            let state = self.get(parent)?;
            let brief = Self::agent(&state, agent_id)?;
            if brief.end.is_some() || Instant::now() >= deadline {
                return Ok(view(agent_id, brief));
            }
            // A finish recorded by another daemon has no local news: look
            // again now and then.
            let poll = Duration::from_millis(500).min(deadline - Instant::now());
            tokio::select! {
                () = &mut news => {}
                () = tokio::time::sleep(poll) => {}
            }
        }
    }

    /// `parent`'s workers, in the order they were spawned.
    pub(crate) fn workers(&self, parent: &str) -> Result<Vec<AgentView>, SessionError> {
        let state = self.get(parent)?;
        let mut all: Vec<(&String, &AgentBrief)> = state.agents.iter().collect();
        all.sort_by_key(|(_, a)| a.number);
        Ok(all.into_iter().map(|(id, a)| view(id, a)).collect())
    }

    /// Stop a worker; returns it as it ended (or as it is, if it does not
    /// stop within a few seconds).
    pub(crate) async fn close_worker(
        self: &Arc<Self>,
        parent: &str,
        agent_id: &str,
    ) -> Result<AgentView, SessionError> {
        self.caught_up().await?;
        let state = self.get(parent)?;
        let brief = Self::agent(&state, agent_id)?;
        if brief.end.is_none() {
            self.stop_worker(&brief.session_id);
        }
        self.wait_worker(parent, agent_id, Duration::from_secs(10))
            .await
    }

    /// Cancel a worker's turn, queued or running.
    pub(crate) fn stop_worker(&self, child: &str) {
        lock(&self.closing).insert(child.to_string());
        let _ = self.cancel(child);
    }

    /// Whether the worker was told to stop before its turn ran.
    pub(crate) fn worker_closed(&self, child: &str) -> bool {
        lock(&self.closing).contains(child)
    }

    /// Cancel the workers `turn` of `parent` spawned that still run (the
    /// parent's turn was cancelled, timed out or failed).
    pub(crate) fn stop_workers_of_turn(&self, parent: &str, turn: u64) {
        let Ok(state) = self.get(parent) else {
            return;
        };
        for (id, a) in state.agents.iter().filter(|(_, a)| a.end.is_none()) {
            if a.turn == turn {
                tracing::info!(session = %parent, agent = %id, "stopping a worker with its parent's turn");
                self.stop_worker(&a.session_id);
            }
        }
    }

    /// Record a worker's end in its parent (before the worker's own
    /// `TurnCompleted`), and wake whoever waits for it.
    pub(crate) async fn worker_finished(
        self: &Arc<Self>,
        worker: &SessionState,
        end: WorkerEnd,
    ) -> Result<(), SessionError> {
        let Some(link) = &worker.parent else {
            return Ok(());
        };
        let finished = SubAgentFinished {
            agent_id: link.agent_id.clone(),
            session_id: worker.id.clone(),
            outcome: end.outcome as i32,
            summary: end.text.chars().take(MAX_ANSWER_CHARS).collect(),
            steps: end.steps,
            tool_calls: end.tool_calls,
            usage: Some(end.usage),
            error: end.error,
        };
        let recorded = self
            .record(&link.session_id, vec![Payload::SubAgentFinished(finished)])
            .await;
        lock(&self.closing).remove(&worker.id);
        self.agent_news.notify_waiters();
        recorded
    }

    /// `parent`'s child sessions (deleted ones left out), oldest first.
    pub fn children(&self, parent: &str) -> Result<Vec<SessionState>, SessionError> {
        let id = Self::checked_id(parent)?;
        let mut found = Vec::new();
        for child in super::model::children(self.projector.tree(), &id)? {
            if let Some(state) = self.stored_state(&child)?
                && !state.deleted
            {
                found.push(state);
            }
        }
        found.sort_by_key(|s| s.created_sequence);
        Ok(found)
    }
}

impl SubAgents for Scope {
    fn spawn<'a>(
        &'a self,
        call_id: &'a str,
        task: &'a str,
        skill: Option<&'a str>,
    ) -> BoxFuture<'a, Result<AgentView, String>> {
        Box::pin(async move {
            self.sessions
                .spawn_worker(&self.session, self.turn, call_id, task, skill)
                .await
                .map_err(|e| e.to_string())
        })
    }

    fn wait<'a>(
        &'a self,
        agent_id: &'a str,
        timeout: Duration,
    ) -> BoxFuture<'a, Result<AgentView, String>> {
        Box::pin(async move {
            self.sessions
                .wait_worker(&self.session, agent_id, timeout)
                .await
                .map_err(|e| e.to_string())
        })
    }

    fn list(&self) -> BoxFuture<'_, Result<Vec<AgentView>, String>> {
        Box::pin(async move {
            self.sessions.caught_up().await.map_err(|e| e.to_string())?;
            self.sessions
                .workers(&self.session)
                .map_err(|e| e.to_string())
        })
    }

    fn close<'a>(&'a self, agent_id: &'a str) -> BoxFuture<'a, Result<AgentView, String>> {
        Box::pin(async move {
            self.sessions
                .close_worker(&self.session, agent_id)
                .await
                .map_err(|e| e.to_string())
        })
    }
}

/// The last answer text the turn produced (a worker's result).
pub(super) fn final_text(messages: &[crate::model::Message]) -> String {
    messages
        .iter()
        .rev()
        .find_map(|m| match m {
            crate::model::Message::Assistant { text, .. } if !text.trim().is_empty() => {
                Some(text.clone())
            }
            _ => None,
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use tinycode_shared::proto::Event;

    fn event(sequence: u64, payload: Payload) -> Event {
        Event {
            sequence,
            stream_id: "session-p".into(),
            payload: Some(payload),
            ..Event::default()
        }
    }

    fn finished(outcome: TurnOutcome, text: &str) -> Payload {
        Payload::SubAgentFinished(SubAgentFinished {
            agent_id: "a1".into(),
            session_id: "w1".into(),
            outcome: outcome as i32,
            summary: text.into(),
            steps: 2,
            ..SubAgentFinished::default()
        })
    }

    #[test]
    fn the_first_finish_of_a_worker_counts_and_unknown_ones_are_ignored() {
        let mut parent = SessionState::default();
        parent.apply(&event(
            1,
            Payload::SessionCreated(SessionCreated::default()),
        ));
        parent.apply(&event(
            2,
            Payload::SubAgentSpawned(SubAgentSpawned {
                agent_id: "a1".into(),
                session_id: "w1".into(),
                task: "read the policy".into(),
                turn: 1,
                ..SubAgentSpawned::default()
            }),
        ));
        assert_eq!(view("a1", &parent.agents["a1"]).state, AgentState::Running);
        parent.apply(&event(3, finished(TurnOutcome::Completed, "it says X")));
        // Recorded again after a crash: changes nothing.
        parent.apply(&event(4, finished(TurnOutcome::Interrupted, "")));
        // A worker the parent never recorded (crash before its spawn was).
        parent.apply(&event(
            5,
            Payload::SubAgentFinished(SubAgentFinished {
                agent_id: "a2".into(),
                session_id: "w2".into(),
                ..SubAgentFinished::default()
            }),
        ));
        assert_eq!(parent.agents.len(), 1);
        match view("a1", &parent.agents["a1"]).state {
            AgentState::Finished { outcome, text, .. } => {
                assert_eq!(
                    (outcome.as_str(), text.as_str()),
                    ("completed", "it says X")
                );
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_worker_session_knows_its_parent() {
        let mut worker = SessionState::default();
        worker.apply(&event(
            9,
            Payload::SessionCreated(SessionCreated {
                parent: Some(ParentLink {
                    session_id: "p".into(),
                    turn: 3,
                    call_id: "c1".into(),
                    agent_id: "a2".into(),
                }),
                ..SessionCreated::default()
            }),
        ));
        let parent = worker.parent.expect("a parent link");
        assert_eq!(
            (
                parent.session_id.as_str(),
                parent.turn,
                parent.agent_id.as_str()
            ),
            ("p", 3, "a2")
        );
    }
}
