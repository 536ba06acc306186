//! The session actor: takes queued turns one at a time, runs each through
//! the agent loop, and stores what it produced, in order.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tinycode_shared::proto::event::Payload;
use tinycode_shared::proto::{
    AssistantMessageAdded, ClientRef, ModelUsage, SessionCompacted, ToolCallFinished, ToolCallRef,
    TurnCompleted, TurnOutcome as Outcome, TurnStarted,
};
use tokio::sync::{broadcast, mpsc, watch};

use super::approver::SessionApprover;
use super::jobs::{Compacted, DeltaKind, Job, Write};
use super::{Live, SessionError, Sessions, session_stream};
use crate::agent::{Turn, TurnConfig, TurnEvent, TurnOutcome, prompt};
use crate::context::compact;
use crate::model::catalog::resolve;
use crate::model::{Message, ModelProvider, RetryPolicy, ToolCall, Usage};
use crate::permissions::ApprovalMode;
use crate::store::ExpectedVersion;
use crate::sync::lock;
use crate::tools::ToolContext;

pub(super) async fn run(
    sessions: Arc<Sessions>,
    id: String,
    live: Arc<Live>,
    mut jobs: mpsc::UnboundedReceiver<Job>,
) {
    loop {
        let job = match tokio::time::timeout(IDLE_CHECK, jobs.recv()).await {
            Ok(Some(job)) => job,
            Ok(None) => return,
            Err(_) if sessions.retire(&id, &live, &jobs) => return,
            Err(_) => continue,
        };
        match job {
            Job::Turn(turn) | Job::Resume(turn) => {
                let resume = matches!(job, Job::Resume(_));
                live.queued.fetch_sub(1, Ordering::AcqRel);
                live.cancel.send_replace(false);
                live.running.store(turn, Ordering::Release);
                run_turn(&sessions, &id, &live, turn, resume).await;
                live.running.store(0, Ordering::Release);
            }
            Job::Compact { by, reply } => {
                let done = compact(&sessions, &id, &live, None, Some(by)).await;
                let _ = reply.send(done);
            }
        }
        if sessions.retire(&id, &live, &jobs) {
            return;
        }
    }
}

/// How often an idle actor checks whether it can retire (an attached
/// client keeps it; the check after a job catches the common case).
const IDLE_CHECK: Duration = Duration::from_secs(1);

fn provider_for(sessions: &Sessions, model: &str) -> Result<Arc<dyn ModelProvider>, SessionError> {
    resolve(
        model,
        &sessions.defaults().providers,
        &|k| std::env::var(k).ok(),
        RetryPolicy::default(),
    )
    .map(|c| c.provider(&sessions.offline))
    .map_err(|e| SessionError::Model {
        model: model.to_string(),
        message: e.to_string(),
    })
}

/// Replace the turns before a user-message boundary with a summary. `turn`
/// is the turn about to run (automatic compaction), `None` for a manual one
/// between turns. Returns what was done (`compacted: false` when no turn
/// is old enough).
async fn compact(
    sessions: &Sessions,
    id: &str,
    live: &Live,
    turn: Option<u64>,
    by: Option<ClientRef>,
) -> Result<Compacted, SessionError> {
    sessions.caught_up().await?;
    let state = sessions.get(id)?;
    let limit = turn.unwrap_or_else(|| state.next_turn());
    let keep = sessions.defaults().compaction.keep_recent_messages;
    let Some(first_kept) = compact::cut_point(&state.turn_sizes(limit), limit, keep) else {
        return Ok(Compacted::default());
    };
    let replaced = sessions.history(&state).await?.before(first_kept);
    let provider = provider_for(sessions, &state.model)?;
    let summary = compact::summarize(provider.as_ref(), &replaced)
        .await
        .map_err(|e| SessionError::Model {
            model: state.model.clone(),
            message: format!("compaction failed, the history was kept: {e}"),
        })?;
    let tokens_before = state.context_tokens();
    let mut probe = state.clone();
    let compacted = SessionCompacted {
        summary,
        first_kept_turn: first_kept,
        summarized_messages: replaced.len() as u32,
        tokens_before,
        tokens_after: 0,
        manual: by.is_some(),
        by,
    };
    probe.apply(&tinycode_shared::proto::Event {
        payload: Some(Payload::SessionCompacted(compacted.clone())),
        ..Default::default()
    });
    let compacted = SessionCompacted {
        tokens_after: probe.context_tokens(),
        ..compacted
    };
    let report = Compacted {
        compacted: true,
        summarized_messages: compacted.summarized_messages,
        tokens_before,
        tokens_after: compacted.tokens_after,
        first_kept_turn: first_kept,
        sequence: 0,
    };
    let sequence = append(sessions, live, id, Payload::SessionCompacted(compacted)).await?;
    tracing::info!(session = %id, first_kept, tokens_before, tokens_after = report.tokens_after, "compacted");
    Ok(Compacted { sequence, ..report })
}

/// The session's compaction, asked for by a turn whose context outgrew
/// `compactAboveTokens` between two model requests: earlier turns are
/// summarised and recorded as before a turn; the turn goes on with the
/// shorter history.
struct MidTurn<'a> {
    sessions: &'a Sessions,
    id: &'a str,
    live: &'a Live,
    turn: u64,
    /// A failed compaction is not retried at every step.
    failed: std::sync::atomic::AtomicBool,
}

impl crate::agent::Compactor for MidTurn<'_> {
    fn compact(&self) -> futures::future::BoxFuture<'_, Option<Vec<Message>>> {
        Box::pin(async move {
            if self.failed.load(Ordering::Relaxed) {
                return None;
            }
            match compact(self.sessions, self.id, self.live, Some(self.turn), None).await {
                Ok(done) if done.compacted => {
                    let state = self.sessions.get(self.id).ok()?;
                    let history = self.sessions.history(&state).await.ok()?;
                    Some(history.before(self.turn))
                }
                Ok(_) => None,
                Err(e) => {
                    self.failed.store(true, Ordering::Relaxed);
                    tracing::warn!(session = %self.id, error = %e, "compaction during a turn failed; the turn goes on with the full history");
                    None
                }
            }
        })
    }
}

fn call_ref(c: &ToolCall) -> ToolCallRef {
    ToolCallRef {
        id: c.id.clone(),
        name: c.name.clone(),
        arguments_json: c.raw_arguments.clone(),
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
            }),
            content: content.clone(),
            is_error: *is_error,
            turn,
            ..ToolCallFinished::default()
        })),
        Message::User { .. } => None,
    }
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
    state: super::SessionState,
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

/// Store one event of the session and publish it; returns its sequence.
async fn append(
    sessions: &Sessions,
    live: &Live,
    id: &str,
    p: Payload,
) -> Result<u64, SessionError> {
    let events = sessions
        .store
        .append(&session_stream(id), ExpectedVersion::Any, vec![p])
        .await
        .inspect_err(
            |e| tracing::error!(session = %id, error = %e, "could not store a session event"),
        )?;
    live.publish(&events);
    Ok(events.last().map_or(0, |e| e.sequence))
}

async fn run_turn(sessions: &Arc<Sessions>, id: &str, live: &Arc<Live>, turn: u64, resume: bool) {
    if !resume {
        // On a shared log a turn can be asked for twice (sent here, then
        // seen in the log): it runs once.
        if sessions.store.shared() {
            let _ = sessions.caught_up().await;
            let begun = sessions
                .stored_state(id)
                .ok()
                .flatten()
                .and_then(|s| s.turns.get(&turn).map(|t| t.started || t.outcome.is_some()));
            if begun == Some(true) {
                return;
            }
        }
        let _ = append(
            sessions,
            live,
            id,
            Payload::TurnStarted(TurnStarted {
                turn,
                daemon_id: sessions.cluster.id().to_string(),
            }),
        )
        .await;
    }
    let mut state = match TurnSetup::read(sessions, id, turn).await {
        Ok(state) => state,
        Err(e) => {
            tracing::error!(session = %id, turn, error = %e, "cannot read the session to run a turn");
            let failed = TurnCompleted {
                turn,
                outcome: Outcome::Failed as i32,
                error: format!("the session could not be read: {e}"),
                ..TurnCompleted::default()
            };
            let _ = append(sessions, live, id, Payload::TurnCompleted(failed)).await;
            return;
        }
    };
    if !resume && state.context_tokens > sessions.defaults().compaction.above_tokens {
        match compact(sessions, id, live, Some(turn), None).await {
            Ok(_) => state = TurnSetup::read(sessions, id, turn).await.unwrap_or(state),
            Err(e) => {
                tracing::warn!(session = %id, error = %e, "automatic compaction failed; the turn runs on the full history");
            }
        }
    }
    let record = std::mem::take(&mut state.record);
    // A worker: read tools only, its own prompt and limits, no workers.
    let worker = state.state.parent.is_some();
    let limits = &sessions.defaults().sub_agents;
    let timeout = match (record.timeout.or(sessions.defaults().timeout), worker) {
        (Some(t), true) => Some(t.min(limits.timeout)),
        (None, true) => Some(limits.timeout),
        (t, false) => t,
    };
    let so_far: Vec<Message> = std::iter::once(Message::User {
        text: record.user.clone(),
    })
    .chain(if resume { record.messages } else { Vec::new() })
    .collect();
    let prior = so_far.len();
    let history = std::mem::take(&mut state.history);
    let complete = |outcome: Outcome, error: String| {
        Payload::TurnCompleted(TurnCompleted {
            turn,
            outcome: outcome as i32,
            error,
            ..TurnCompleted::default()
        })
    };
    let provider = match provider_for(sessions, &state.model) {
        Ok(p) => p,
        Err(e) => {
            let _ = append(sessions, live, id, complete(Outcome::Failed, e.to_string())).await;
            return;
        }
    };
    let system = if worker {
        prompt::worker_prompt(&sessions.workspace, &sessions.skills.current())
    } else {
        prompt::system_prompt(
            &sessions.workspace,
            &sessions.skills.current(),
            sessions.desk.queues(),
        )
    };
    let config = TurnConfig {
        max_steps: if worker {
            limits.max_steps
        } else {
            sessions.defaults().max_steps
        },
        timeout,
        max_tool_result_chars: sessions.defaults().max_tool_result_chars,
        // Per session and turn: call ids repeat across turns (the offline
        // model's, some providers'), so a later turn never overwrites an
        // earlier turn's artifact.
        artifact_dir: sessions
            .defaults()
            .artifact_root
            .as_ref()
            .map(|root| root.join(id).join(format!("turn-{turn}"))),
        policy: state.approve.run_policy(),
        compact_above_tokens: sessions.defaults().compaction.above_tokens,
        allow: sessions.defaults().allow.clone(),
    };
    let ctx = ToolContext {
        desk: Arc::clone(&sessions.desk),
        skills: sessions.skills.current(),
        cancel: live.cancel.subscribe(),
        origin: Some(tinycode_shared::proto::ToolOrigin {
            session_id: id.to_string(),
            turn,
            call_id: String::new(),
        }),
        agents: (!worker).then(|| {
            Arc::new(super::agents::Scope {
                sessions: Arc::clone(sessions),
                session: id.to_string(),
                turn,
            }) as Arc<dyn crate::tools::agents::SubAgents>
        }),
    };
    // A worker closed before its turn ran stops at once.
    if worker && sessions.worker_closed(id) {
        live.cancel.send_replace(true);
    }

    // One writer stores events and emits deltas in the order the turn
    // produced them, so every attached client sees one order. The first
    // failed append stops the turn (as a cancel does) and fails it: nothing
    // after an event that was never stored is stored or acknowledged.
    let (tx, mut rx) = mpsc::unbounded_channel::<Write>();
    let writer = {
        let (sessions, live, id) = (Arc::clone(sessions), Arc::clone(live), id.to_string());
        tokio::spawn(async move {
            let mut failed: Option<String> = None;
            while let Some(w) = rx.recv().await {
                let (p, ack) = match w {
                    Write::Store(p) => (p, None),
                    Write::StoreAck(p, ack) => (p, Some(ack)),
                    Write::Delta(kind, text) => {
                        if failed.is_none() {
                            live.emit(turn, kind, &text);
                        }
                        continue;
                    }
                };
                let stored = match &failed {
                    Some(e) => Err(e.clone()),
                    None => append(&sessions, &live, &id, *p)
                        .await
                        .map(drop)
                        .map_err(|e| e.to_string()),
                };
                if let (Err(e), None) = (&stored, &failed) {
                    failed = Some(e.clone());
                    live.cancel.send_replace(true);
                }
                if let Some(ack) = ack {
                    let _ = ack.send(stored);
                }
            }
            failed
        })
    };
    let approver = SessionApprover {
        sessions: Arc::clone(sessions),
        session: id.to_string(),
        turn,
        mode: state.approve,
        writer: tx.clone(),
        timeout: sessions.defaults().approval_timeout,
    };
    let mid_turn = MidTurn {
        sessions,
        id,
        live,
        turn,
        failed: std::sync::atomic::AtomicBool::new(false),
    };
    let runner = Turn {
        provider: provider.as_ref(),
        tools: if worker {
            &sessions.worker_tools
        } else {
            &sessions.tools
        },
        ctx: &ctx,
        config: &config,
        approver: Some(&approver),
        compactor: Some(&mid_turn),
    };
    let mut step = 0u32;
    let mut stored = 0usize;
    let result = runner
        .resume(&system, history, so_far, &mut |event| match event {
            TurnEvent::StepStarted { step: s } => step = s,
            TurnEvent::TextDelta(t) => {
                let _ = tx.send(Write::Delta(DeltaKind::Text, t));
            }
            TurnEvent::ThinkingDelta(t) => {
                let _ = tx.send(Write::Delta(DeltaKind::Thinking, t));
            }
            TurnEvent::AssistantMessage(m, usage) => {
                stored += 1;
                if let Some(mut p) = payload(turn, step, &m) {
                    if let Payload::AssistantMessageAdded(a) = &mut p {
                        a.usage = Some(model_usage(&usage));
                    }
                    let _ = tx.send(Write::Store(Box::new(p)));
                }
            }
            TurnEvent::ToolStarted(_) => {}
            TurnEvent::ToolFinished {
                call,
                output,
                full_chars,
                artifact,
            } => {
                stored += 1;
                let _ = tx.send(Write::Store(Box::new(Payload::ToolCallFinished(
                    ToolCallFinished {
                        call: Some(call_ref(&call)),
                        content: output.content,
                        is_error: output.is_error,
                        details_json: if output.details.is_null() {
                            String::new()
                        } else {
                            output.details.to_string()
                        },
                        full_chars: full_chars.unwrap_or(0) as u64,
                        turn,
                        artifact: artifact
                            .map(|p| p.display().to_string())
                            .unwrap_or_default(),
                    },
                ))));
            }
        })
        .await;
    // What an interruption left unreported: the partial answer and the
    // results of calls that never ran, so the transcript stays whole.
    for message in result.messages.iter().skip(prior + stored) {
        if let Some(p) = payload(turn, step, message) {
            let _ = tx.send(Write::Store(Box::new(p)));
        }
    }
    // Approvals the turn no longer waits for are recorded as cancelled.
    let why = match &result.outcome {
        TurnOutcome::Cancelled => "the turn was cancelled".to_string(),
        TurnOutcome::TimedOut => "the turn timed out".to_string(),
        TurnOutcome::Failed(e) => format!("the turn failed: {e}"),
        _ => "the turn ended".to_string(),
    };
    let pending = sessions.approvals.pending_of_turn(id, turn);
    for approval in pending.into_iter().flatten() {
        if let Ok(Some(e)) = sessions.approvals.cancel(&approval, &why).await
            && let Some(p) = e.payload.clone()
        {
            let _ = tx.send(Write::Store(Box::new(p)));
        }
    }
    drop(approver);
    drop(tx);
    let write_failed = writer.await.ok().flatten();
    let (outcome, error) = match &result.outcome {
        _ if write_failed.is_some() => (
            Outcome::Failed,
            format!(
                "the turn stopped: an event could not be stored ({})",
                write_failed.unwrap_or_default()
            ),
        ),
        TurnOutcome::Completed => (Outcome::Completed, String::new()),
        TurnOutcome::EmptyResponse => (Outcome::EmptyResponse, String::new()),
        TurnOutcome::MaxSteps => (Outcome::MaxSteps, String::new()),
        TurnOutcome::Cancelled => (Outcome::Cancelled, String::new()),
        TurnOutcome::TimedOut => (Outcome::TimedOut, String::new()),
        // Whatever a provider said, no credential is stored.
        TurnOutcome::Failed(e) => (Outcome::Failed, crate::model::redact::redact(e, &[])),
    };
    if worker {
        let end = super::agents::WorkerEnd {
            outcome,
            text: final_text(&result.messages),
            steps: result.steps,
            tool_calls: result.tool_calls,
            usage: model_usage(&result.usage),
            error: error.clone(),
        };
        if let Err(e) = sessions.worker_finished(&state.state, end).await {
            tracing::error!(session = %id, error = %e, "could not record a worker's end in its parent; the next start does");
        }
    } else if outcome != Outcome::Completed {
        // Its workers end with it.
        sessions.stop_workers_of_turn(id, turn);
    }
    let _ = append(
        sessions,
        live,
        id,
        Payload::TurnCompleted(TurnCompleted {
            turn,
            outcome: outcome as i32,
            steps: result.steps,
            tool_calls: result.tool_calls,
            usage: Some(model_usage(&result.usage)),
            error,
            denied: result.denied,
        }),
    )
    .await;
}

/// The last answer text the turn produced (a worker's result).
fn final_text(messages: &[Message]) -> String {
    messages
        .iter()
        .rev()
        .find_map(|m| match m {
            Message::Assistant { text, .. } if !text.trim().is_empty() => Some(text.clone()),
            _ => None,
        })
        .unwrap_or_default()
}

fn model_usage(u: &Usage) -> ModelUsage {
    ModelUsage {
        input_tokens: u.input_tokens,
        output_tokens: u.output_tokens,
        cache_read_tokens: u.cache_read_tokens,
        cache_write_tokens: u.cache_write_tokens,
    }
}

impl Sessions {
    /// Run `f` on the session's live side (started if needed) under the
    /// map's lock.
    pub(super) fn with_live<T>(
        self: &Arc<Self>,
        id: &str,
        f: impl FnOnce(&Live) -> T,
    ) -> Result<T, SessionError> {
        if !super::model::exists(self.projector.tree(), id)? {
            return Err(SessionError::NotFound(id.to_string()));
        }
        let mut map = lock(&self.live);
        if let Some(l) = map.get(id) {
            return Ok(f(l));
        }
        let (jobs, rx) = mpsc::unbounded_channel();
        let (cancel, _) = watch::channel(false);
        let (updates, _) = broadcast::channel(256);
        let l = Arc::new(Live {
            jobs,
            cancel,
            running: AtomicU64::new(0),
            queued: AtomicU64::new(0),
            partial: Mutex::new((0, String::new())),
            updates,
        });
        map.insert(id.to_string(), Arc::clone(&l));
        tokio::spawn(run(Arc::clone(self), id.to_string(), Arc::clone(&l), rx));
        Ok(f(&l))
    }

    /// Queue a job for the session's actor. Returns whether it waits behind
    /// a running or queued turn.
    pub(super) fn submit(self: &Arc<Self>, id: &str, job: Job) -> Result<bool, SessionError> {
        self.with_live(id, |live| {
            let busy = live.running.load(Ordering::Acquire) != 0
                || live.queued.load(Ordering::Acquire) > 0;
            if matches!(job, Job::Turn(_) | Job::Resume(_)) {
                live.queued.fetch_add(1, Ordering::AcqRel);
            }
            // The receiver lives while the entry is in the map.
            let _ = live.jobs.send(job);
            busy
        })
    }
}
