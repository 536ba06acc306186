//! The session actor: takes queued turns one at a time, runs each through
//! the agent loop, and stores what it produced, in order.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use tinycode_shared::proto::event::Payload;
use tinycode_shared::proto::{
    AssistantMessageAdded, ModelUsage, ToolCallFinished, ToolCallRef, TurnCompleted,
    TurnOutcome as Outcome, TurnStarted,
};
use tokio::sync::mpsc;

use super::{Live, Sessions, session_stream};
use crate::agent::{Turn, TurnConfig, TurnEvent, TurnOutcome, prompt};
use crate::model::catalog::resolve;
use crate::model::{Message, RetryPolicy, ToolCall};
use crate::permissions::RunPolicy;
use crate::store::ExpectedVersion;
use crate::tools::ToolContext;

pub(super) async fn run(
    sessions: Arc<Sessions>,
    id: String,
    live: Arc<Live>,
    mut jobs: mpsc::UnboundedReceiver<u64>,
) {
    while let Some(turn) = jobs.recv().await {
        live.queued.fetch_sub(1, Ordering::AcqRel);
        live.cancel.send_replace(false);
        live.running.store(turn, Ordering::Release);
        run_turn(&sessions, &id, &live, turn).await;
        live.running.store(0, Ordering::Release);
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

/// What the turn's writer handles, in order.
enum Write {
    Store(Box<Payload>),
    Delta(&'static str, String),
}

async fn append(sessions: &Sessions, live: &Live, id: &str, p: Payload) {
    let appended = sessions
        .store
        .append(&session_stream(id), ExpectedVersion::Any, vec![p])
        .await;
    match appended {
        Ok(events) => {
            sessions.fold(id, &events);
            live.publish(&events);
        }
        Err(e) => tracing::error!(session = %id, error = %e, "could not store a session event"),
    }
}

async fn run_turn(sessions: &Arc<Sessions>, id: &str, live: &Arc<Live>, turn: u64) {
    append(
        sessions,
        live,
        id,
        Payload::TurnStarted(TurnStarted { turn }),
    )
    .await;
    let Ok(state) = sessions.get(id) else { return };
    let user = state
        .turns
        .get(&turn)
        .map(|t| t.user.clone())
        .unwrap_or_default();
    let history = state.history_before(turn);
    let complete = |outcome: Outcome, error: String| {
        Payload::TurnCompleted(TurnCompleted {
            turn,
            outcome: outcome as i32,
            error,
            ..TurnCompleted::default()
        })
    };
    let choice = match resolve(
        &state.model,
        &|k| std::env::var(k).ok(),
        RetryPolicy::default(),
    ) {
        Ok(c) => c,
        Err(e) => {
            append(sessions, live, id, complete(Outcome::Failed, e.to_string())).await;
            return;
        }
    };
    let provider = choice.provider();
    let system = prompt::system_prompt(
        &sessions.workspace,
        &sessions.skills,
        sessions.desk.queues(),
    );
    let config = TurnConfig {
        max_steps: sessions.defaults.max_steps,
        timeout: sessions.defaults.timeout,
        max_tool_result_chars: sessions.defaults.max_tool_result_chars,
        artifact_dir: sessions
            .defaults
            .artifact_root
            .as_ref()
            .map(|root| root.join(id)),
        policy: if state.approve == "auto" {
            RunPolicy::Auto
        } else {
            RunPolicy::Deny
        },
    };
    let ctx = ToolContext {
        desk: Arc::clone(&sessions.desk),
        skills: Arc::clone(&sessions.skills),
        cancel: live.cancel.subscribe(),
    };

    // One writer stores events and emits deltas in the order the turn
    // produced them, so every attached client sees one order.
    let (tx, mut rx) = mpsc::unbounded_channel::<Write>();
    let writer = {
        let (sessions, live, id) = (Arc::clone(sessions), Arc::clone(live), id.to_string());
        tokio::spawn(async move {
            while let Some(w) = rx.recv().await {
                match w {
                    Write::Store(p) => append(&sessions, &live, &id, *p).await,
                    Write::Delta(kind, text) => live.emit(turn, kind, &text),
                }
            }
        })
    };
    let runner = Turn {
        provider: provider.as_ref(),
        tools: &sessions.tools,
        ctx: &ctx,
        config: &config,
    };
    let mut step = 0u32;
    let mut stored = 0usize;
    let result = runner
        .run(&system, &history, &user, &mut |event| match event {
            TurnEvent::StepStarted { step: s } => step = s,
            TurnEvent::TextDelta(t) => {
                let _ = tx.send(Write::Delta("text", t));
            }
            TurnEvent::ThinkingDelta(t) => {
                let _ = tx.send(Write::Delta("thinking", t));
            }
            TurnEvent::AssistantMessage(m) => {
                stored += 1;
                if let Some(p) = payload(turn, step, &m) {
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
    for message in result.messages.iter().skip(1 + stored) {
        if let Some(p) = payload(turn, step, message) {
            let _ = tx.send(Write::Store(Box::new(p)));
        }
    }
    drop(tx);
    let _ = writer.await;
    let (outcome, error) = match &result.outcome {
        TurnOutcome::Completed => (Outcome::Completed, String::new()),
        TurnOutcome::EmptyResponse => (Outcome::EmptyResponse, String::new()),
        TurnOutcome::MaxSteps => (Outcome::MaxSteps, String::new()),
        TurnOutcome::Cancelled => (Outcome::Cancelled, String::new()),
        TurnOutcome::TimedOut => (Outcome::TimedOut, String::new()),
        TurnOutcome::Failed(e) => (Outcome::Failed, e.clone()),
    };
    let u = result.usage;
    append(
        sessions,
        live,
        id,
        Payload::TurnCompleted(TurnCompleted {
            turn,
            outcome: outcome as i32,
            steps: result.steps,
            tool_calls: result.tool_calls,
            usage: Some(ModelUsage {
                input_tokens: u.input_tokens,
                output_tokens: u.output_tokens,
                cache_read_tokens: u.cache_read_tokens,
                cache_write_tokens: u.cache_write_tokens,
            }),
            error,
        }),
    )
    .await;
}
