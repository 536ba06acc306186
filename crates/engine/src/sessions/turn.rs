//! One turn of a session, by concern: begin it (once, also on a shared
//! log), prepare what it runs with (history, model, prompt, limits, tools),
//! run the agent loop while one writer stores what it produces in order,
//! then settle it (what an interruption left unreported, approvals it no
//! longer waits for, a worker's end, `TurnCompleted`).

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use tinycode_shared::proto::event::Payload;
use tinycode_shared::proto::{
    AssistantMessageAdded, ModelUsage, ToolCallFinished, ToolCallRef, TurnCompleted,
    TurnOutcome as Outcome, TurnStarted,
};
use tokio::sync::mpsc;

use super::approver::SessionApprover;
use super::compaction::{MidTurn, compact};
use super::jobs::{DeltaKind, Write};
use super::write::{append_end, failed, outcome_of, provider_for};
use super::writer::{acknowledged, spawn_writer};
use super::{Live, SessionError, SessionState, Sessions};
use crate::agent::{Turn, TurnConfig, TurnEvent, TurnOutcome, TurnResult, prompt};
use crate::model::{Message, ModelProvider, ToolCall, Usage};
use crate::permissions::ApprovalMode;
use crate::tools::ToolContext;

/// Run turn `turn` of session `id` (`resume`: carry on one a restart
/// interrupted while it waited for an approval).
pub(super) async fn run_turn(
    sessions: &Arc<Sessions>,
    id: &str,
    live: &Arc<Live>,
    turn: u64,
    resume: bool,
) {
    // Every event of the turn goes through one writer: in the order
    // produced, what queues behind an append stored by the next one. A
    // fenced daemon starts no turn; `begin` finds one taken over.
    sessions.cluster.hold().await;
    let fence = Arc::new(super::fence::TurnFence::new(sessions, id, turn));
    let (tx, writer) = spawn_writer(sessions, live, id, turn, Arc::clone(&fence));
    let begun = resume || begin(sessions, id, &tx, turn).await;
    let prepared = if begun {
        Prepared::new(sessions, id, live, &tx, turn, resume).await
    } else {
        None
    };
    let Some(mut run) = prepared else {
        drop(tx);
        // Its failed end, lost with the database, is stored once it is back.
        if let (Some(e), true, None) = (writer.await.ok().flatten(), begun, fence.handed_over()) {
            let why = format!("the turn could not start: {e}");
            append_end(sessions, live, id, turn, failed(turn, why), true).await;
        }
        return;
    };
    let result = run.drive(&tx, &fence).await;
    // Taken over (its taker records the end), or the daemon stopped while it
    // waited for a person (the next start resumes it): nothing more stored.
    let left = match (fence.handed_over(), result.outcome.paused()) {
        (Some(why), _) => Some((
            why,
            "a turn was handed over while this daemon's lease had lapsed",
        )),
        (None, Some(why)) => Some((
            why,
            "the daemon stops while the turn waits; its next start resumes it",
        )),
        (None, None) => None,
    };
    if let Some((why, what)) = left {
        tracing::warn!(session = %id, turn, why = %why, "{what}");
        drop(tx);
        let _ = writer.await;
        return;
    }
    run.cancel_pending_approvals(&tx, &result.outcome).await;
    run.complete(&result, tx, writer, &fence).await;
}

/// Queue `TurnStarted`; `false` when the turn already began (on a shared
/// log a turn can be asked for twice: sent here, then seen in the log).
async fn begin(
    sessions: &Sessions,
    id: &str,
    tx: &mpsc::UnboundedSender<Write>,
    turn: u64,
) -> bool {
    if sessions.store.shared() {
        // Not caught up: the check below reads what is there.
        if let Err(e) = sessions.caught_up().await {
            tracing::warn!(session = %id, error = %e, "the sessions model did not catch up before a turn");
        }
        let begun = sessions
            .stored_turn(id, turn)
            .map(|t| t.started || t.outcome.is_some());
        if begun == Some(true) {
            return false;
        }
    }
    // A failure is logged by the writer; the turn still runs, and a start
    // that finds it unfinished marks it interrupted (stored or not: a
    // start marks every unfinished turn of its own). Alone on its log it
    // goes with the turn's first answer when that comes at once; on a
    // shared log it is the claim other daemons look for, stored now.
    let started = Box::new(Payload::TurnStarted(TurnStarted {
        turn,
        daemon_id: sessions.cluster.id().to_string(),
    }));
    let _ = tx.send(if sessions.store.shared() {
        Write::Store(started)
    } else {
        Write::StoreWithNext(started)
    });
    true
}

/// What a turn reads from its session before it runs.
struct TurnSetup {
    model: String,
    approve: ApprovalMode,
    context_tokens: u64,
    /// This turn's user message and (resumed) what it added so far.
    record: super::state::TurnMessages,
    history: Vec<Message>,
    /// The session as it was read (a worker's parent link, …).
    state: SessionState,
}

impl TurnSetup {
    /// Read once the sessions model has every event stored so far.
    async fn read(sessions: &Sessions, id: &str, turn: u64) -> Result<Self, SessionError> {
        sessions.caught_up().await?;
        let state = sessions.get(id)?;
        let history = sessions.history(&state).await?;
        Ok(Self {
            model: state.model.clone(),
            approve: state.approve,
            context_tokens: state.context_tokens(),
            record: history.turn(turn),
            history: history.before(turn),
            state,
        })
    }
}

/// Everything a turn runs with, read and decided before it starts.
struct Prepared<'a> {
    sessions: &'a Arc<Sessions>,
    id: &'a str,
    live: &'a Arc<Live>,
    turn: u64,
    state: SessionState,
    approve: ApprovalMode,
    /// A worker: read tools only, its own prompt and limits, no workers.
    worker: bool,
    history: Vec<Message>,
    /// The user message, and what a resumed turn already added.
    so_far: Vec<Message>,
    provider: Arc<dyn ModelProvider>,
    system: String,
    config: TurnConfig,
}

impl<'a> Prepared<'a> {
    /// `None` when the turn cannot run; its `TurnCompleted{FAILED}` is then
    /// recorded here.
    async fn new(
        sessions: &'a Arc<Sessions>,
        id: &'a str,
        live: &'a Arc<Live>,
        tx: &mpsc::UnboundedSender<Write>,
        turn: u64,
        resume: bool,
    ) -> Option<Self> {
        let fail = |error: String| async move {
            // A failure to record it is logged by the writer; the next
            // start marks the turn interrupted.
            let _ = tx.send(Write::Store(Box::new(failed(turn, error))));
        };
        let mut setup = match TurnSetup::read(sessions, id, turn).await {
            Ok(setup) => setup,
            Err(e) => {
                tracing::error!(session = %id, turn, error = %e, "cannot read the session to run a turn");
                fail(format!("the session could not be read: {e}")).await;
                return None;
            }
        };
        let defaults = sessions.defaults();
        if !resume && setup.context_tokens > defaults.compaction.above_tokens {
            // The compaction stores its own event: after the turn's start.
            if let Err(e) = acknowledged(tx, Write::Flush).await {
                fail(format!("the turn's start could not be stored: {e}")).await;
                return None;
            }
            match compact(sessions, id, live, Some(turn), None).await {
                Ok(_) => setup = TurnSetup::read(sessions, id, turn).await.unwrap_or(setup),
                Err(e) => {
                    tracing::warn!(session = %id, error = %e, "automatic compaction failed; the turn runs on the full history");
                }
            }
        }
        let provider = match provider_for(sessions, &setup.model) {
            Ok(p) => p,
            Err(e) => {
                fail(e.to_string()).await;
                return None;
            }
        };
        let worker = setup.state.parent.is_some();
        let record = std::mem::take(&mut setup.record);
        let config = turn_config(sessions, id, turn, worker, record.timeout, setup.approve);
        let so_far = std::iter::once(Message::User {
            text: record.user.clone(),
        })
        .chain(if resume { record.messages } else { Vec::new() })
        .collect();
        let system = if worker {
            prompt::worker_prompt(&sessions.workspace, &sessions.skills.current())
        } else {
            prompt::system_prompt(
                &sessions.workspace,
                &sessions.skills.current(),
                sessions.desk.queues(),
            )
        };
        Some(Self {
            sessions,
            id,
            live,
            turn,
            approve: setup.approve,
            history: setup.history,
            state: setup.state,
            worker,
            so_far,
            provider,
            system,
            config,
        })
    }

    /// The tools' context: the desk, the skills, the turn's cancel signal,
    /// where a change comes from, and (a root turn) its workers.
    fn tool_context(&self) -> ToolContext {
        let sessions = self.sessions;
        ToolContext {
            desk: Arc::clone(&sessions.desk),
            skills: sessions.skills.current(),
            cancel: self.live.cancel.subscribe(),
            origin: Some(tinycode_shared::proto::ToolOrigin {
                session_id: self.id.to_string(),
                turn: self.turn,
                call_id: String::new(),
            }),
            agents: (!self.worker).then(|| {
                Arc::new(super::agents::Scope {
                    sessions: Arc::clone(sessions),
                    session: self.id.to_string(),
                    turn: self.turn,
                }) as Arc<dyn crate::tools::agents::SubAgents>
            }),
            reports: sessions.reports(),
            confidence: Vec::new(),
            review_below: sessions.defaults().review_below.clone(),
        }
    }

    /// Run the agent loop, handing what it produces to the writer in the
    /// order produced; then what an interruption left unreported.
    async fn drive(
        &mut self,
        tx: &mpsc::UnboundedSender<Write>,
        fence: &super::fence::TurnFence,
    ) -> TurnResult {
        let sessions = self.sessions;
        let ctx = self.tool_context();
        // A worker closed before its turn ran stops at once.
        if self.worker && sessions.worker_closed(self.id) {
            self.live.cancel.send_replace(true);
        }
        let approver = SessionApprover {
            sessions: Arc::clone(sessions),
            session: self.id.to_string(),
            turn: self.turn,
            mode: self.approve,
            writer: tx.clone(),
            timeout: sessions.defaults().approval_timeout,
        };
        let mid_turn = MidTurn {
            sessions,
            id: self.id,
            live: self.live,
            turn: self.turn,
            writer: tx,
            failed: AtomicBool::new(false),
        };
        let runner = Turn {
            provider: self.provider.as_ref(),
            tools: if self.worker {
                &sessions.worker_tools
            } else {
                &sessions.tools
            },
            ctx: &ctx,
            config: &self.config,
            approver: Some(&approver),
            compactor: Some(&mid_turn),
            fence: Some(fence),
        };
        let prior = self.so_far.len();
        let mut recorder = Recorder {
            tx,
            model: &self.state.model,
            turn: self.turn,
            step: 0,
            stored: 0,
        };
        let result = runner
            .resume(
                &self.system,
                std::mem::take(&mut self.history),
                std::mem::take(&mut self.so_far),
                &mut |event| recorder.on(event),
            )
            .await;
        if matches!(
            result.outcome,
            TurnOutcome::HandedOver(_) | TurnOutcome::Paused(_)
        ) {
            return result;
        }
        // The partial answer and the results of calls that never ran, so
        // the transcript stays whole.
        for message in result.messages.iter().skip(prior + recorder.stored) {
            if let Some(p) = payload(self.turn, recorder.step, message) {
                // The writer outlives this sender; a closed one has failed
                // and reports it.
                let _ = tx.send(Write::Store(Box::new(p)));
            }
        }
        result
    }

    /// Approvals the turn no longer waits for are recorded as cancelled.
    async fn cancel_pending_approvals(
        &self,
        tx: &mpsc::UnboundedSender<Write>,
        outcome: &TurnOutcome,
    ) {
        let why = match outcome {
            TurnOutcome::Cancelled => "the turn was cancelled".to_string(),
            TurnOutcome::TimedOut => "the turn timed out".to_string(),
            TurnOutcome::Failed(e) => format!("the turn failed: {e}"),
            _ => "the turn ended".to_string(),
        };
        let approvals = &self.sessions.approvals;
        let pending = approvals.pending_of_turn(self.id, self.turn);
        for approval in pending.into_iter().flatten() {
            match approvals.cancel(&approval, &why).await {
                Ok(Some(e)) => {
                    if let Some(p) = e.payload.clone() {
                        let _ = tx.send(Write::Store(Box::new(p)));
                    }
                }
                Ok(None) => {} // decided meanwhile
                Err(e) => {
                    tracing::warn!(session = %self.id, approval = %approval, error = %e, "an approval the turn left could not be cancelled; it stays pending");
                }
            }
        }
    }

    /// Record the turn's end (and a worker's end in its parent), after
    /// everything the turn queued.
    async fn complete(
        &self,
        result: &TurnResult,
        tx: mpsc::UnboundedSender<Write>,
        writer: tokio::task::JoinHandle<Option<String>>,
        fence: &super::fence::TurnFence,
    ) {
        let sessions = self.sessions;
        let (mut outcome, mut error) = outcome_of(&result.outcome);
        let completed = |outcome: Outcome, error: String| {
            Payload::TurnCompleted(TurnCompleted {
                turn: self.turn,
                outcome: outcome as i32,
                steps: result.steps,
                tool_calls: result.tool_calls,
                usage: Some(model_usage(&result.usage)),
                error,
                denied: result.denied,
            })
        };
        // The common end — a root turn that completed — is stored with the
        // turn's last events; any other after the writer is done.
        let with_writer = !self.worker && outcome == Outcome::Completed;
        if with_writer {
            let _ = tx.send(Write::Store(Box::new(completed(outcome, error.clone()))));
        }
        drop(tx);
        let written = writer.await.ok().flatten();
        match &written {
            // Taken over meanwhile: the taker records the end.
            Some(_) if fence.handed_over().is_some() => return,
            Some(e) => {
                outcome = Outcome::Failed;
                error = format!("the turn stopped: an event could not be stored ({e})");
            }
            None if with_writer => return,
            None => {}
        }
        if self.worker {
            let end = super::agents::WorkerEnd {
                outcome,
                text: super::agents::final_text(&result.messages),
                steps: result.steps,
                tool_calls: result.tool_calls,
                usage: model_usage(&result.usage),
                error: error.clone(),
            };
            if let Err(e) = sessions.worker_finished(&self.state, end).await {
                tracing::error!(session = %self.id, error = %e, "could not record a worker's end in its parent; the next start does");
            }
        } else {
            // Its workers end with it.
            sessions.stop_workers_of_turn(self.id, self.turn);
        }
        append_end(
            sessions,
            self.live,
            self.id,
            self.turn,
            completed(outcome, error),
            written.is_some(),
        )
        .await;
    }
}

/// The limits and policy of one turn (a worker's are its own).
fn turn_config(
    sessions: &Sessions,
    id: &str,
    turn: u64,
    worker: bool,
    own_timeout: Option<std::time::Duration>,
    approve: ApprovalMode,
) -> TurnConfig {
    let defaults = sessions.defaults();
    let limits = &defaults.sub_agents;
    let timeout = match (own_timeout.or(defaults.timeout), worker) {
        (Some(t), true) => Some(t.min(limits.timeout)),
        (None, true) => Some(limits.timeout),
        (t, false) => t,
    };
    TurnConfig {
        max_steps: if worker {
            limits.max_steps
        } else {
            defaults.max_steps
        },
        timeout,
        max_tool_result_chars: defaults.max_tool_result_chars,
        // Per session and turn: call ids repeat across turns (the offline
        // model's, some providers'), so a later turn never overwrites an
        // earlier turn's artifact.
        artifact_dir: defaults
            .artifact_root
            .as_ref()
            .map(|root| root.join(id).join(format!("turn-{turn}"))),
        policy: approve.run_policy(),
        compact_above_tokens: defaults.compaction.above_tokens,
        allow: defaults.allow.clone(),
    }
}

/// Turns the loop's events into writes, counting what it stored.
struct Recorder<'a> {
    tx: &'a mpsc::UnboundedSender<Write>,
    /// The session's model, stored with each step it makes.
    model: &'a str,
    turn: u64,
    step: u32,
    /// Messages handed to the writer (the rest are stored after the loop).
    stored: usize,
}

impl Recorder<'_> {
    fn on(&mut self, event: TurnEvent) {
        // A closed writer has failed and reports it when the turn ends.
        let send = |w: Write| {
            let _ = self.tx.send(w);
        };
        match event {
            TurnEvent::StepStarted { step } => self.step = step,
            TurnEvent::TextDelta(t) => send(Write::Delta(DeltaKind::Text, t)),
            TurnEvent::ThinkingDelta(t) => send(Write::Delta(DeltaKind::Thinking, t)),
            TurnEvent::AssistantMessage(m, usage) => {
                self.stored += 1;
                if let Some(mut p) = payload(self.turn, self.step, &m) {
                    if let Payload::AssistantMessageAdded(a) = &mut p {
                        a.usage = Some(model_usage(&usage));
                        a.model = self.model.to_string();
                    }
                    send(Write::StoreWithNext(Box::new(p)));
                }
            }
            // The call is stored while its tool runs (what the tool changes
            // elsewhere is not left waiting behind a call never stored).
            TurnEvent::ToolStarted(_) => send(Write::Boundary),
            TurnEvent::ToolFinished {
                call,
                output,
                full_chars,
                artifact,
            } => {
                self.stored += 1;
                send(Write::StoreWithNext(Box::new(Payload::ToolCallFinished(
                    ToolCallFinished {
                        call: Some(call_ref(&call)),
                        details_json: output.details_json(),
                        content: output.content,
                        is_error: output.is_error,
                        full_chars: full_chars.unwrap_or(0) as u64,
                        turn: self.turn,
                        artifact: artifact
                            .map(|p| p.display().to_string())
                            .unwrap_or_default(),
                    },
                ))));
            }
        }
    }
}

pub(super) fn call_ref(c: &ToolCall) -> ToolCallRef {
    ToolCallRef {
        id: c.id.clone(),
        name: c.name.clone(),
        arguments_json: c.raw_arguments.clone(),
        confidence: c
            .confidence
            .iter()
            .map(|(field, value)| tinycode_shared::proto::FieldConfidence {
                field: field.clone(),
                value: *value,
            })
            .collect(),
    }
}

/// The stored form of a message the turn added.
fn payload(turn: u64, step: u32, message: &Message) -> Option<Payload> {
    match message {
        Message::Assistant {
            text,
            thinking,
            tool_calls,
        } => Some(Payload::AssistantMessageAdded(AssistantMessageAdded {
            text: text.clone(),
            thinking: thinking.iter().map(|t| t.text.clone()).collect(),
            thinking_signatures: thinking.iter().map(|t| t.signature.clone()).collect(),
            tool_calls: tool_calls.iter().map(call_ref).collect(),
            step,
            turn,
            usage: None,
            model: String::new(),
        })),
        Message::ToolResult {
            call_id,
            name,
            content,
            is_error,
        } => Some(Payload::ToolCallFinished(ToolCallFinished {
            call: Some(ToolCallRef {
                id: call_id.clone(),
                name: name.clone(),
                arguments_json: String::new(),
                ..Default::default()
            }),
            content: content.clone(),
            is_error: *is_error,
            turn,
            ..ToolCallFinished::default()
        })),
        Message::User { .. } => None,
    }
}

pub(super) fn model_usage(u: &Usage) -> ModelUsage {
    ModelUsage {
        input_tokens: u.input_tokens,
        output_tokens: u.output_tokens,
        cache_read_tokens: u.cache_read_tokens,
        cache_write_tokens: u.cache_write_tokens,
    }
}
