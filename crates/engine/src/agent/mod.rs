//! The turn loop: stream the model → collect tool calls → permission gate →
//! execute → truncate → next step, until the model stops. Max steps, an
//! empty response, cancel and timeout each end the turn with a structured
//! [`TurnOutcome`]; a failing tool never ends it (its error goes back to the
//! model), a failing provider does (`Failed`).

pub mod prompt;

use std::future::Future;
use std::time::Duration;

use futures::StreamExt;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::context::{self, KEEP_RESULTS, context_estimate, elide_old_results};
use crate::model::{Message, ModelEvent, ModelProvider, ModelRequest, StopReason, ToolCall, Usage};
use crate::permissions::{Decision, Rule, RunPolicy, rule_for};
use crate::tools::{ToolContext, ToolOutput, ToolRegistry};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TurnOutcome {
    Completed,
    /// The model produced no text and no tool call (thinking only, or nothing).
    EmptyResponse,
    MaxSteps,
    Cancelled,
    TimedOut,
    Failed(String),
    /// This daemon's lease lapsed while the turn was paused and another
    /// daemon took the turn over: it stops here and records nothing more.
    HandedOver(String),
    /// The daemon stopped while a call waited for a person: the turn stops
    /// before that call and records nothing more; the next start resumes it.
    Paused(String),
}

impl TurnOutcome {
    /// Why the daemon stopped the turn before its end (see `Paused`).
    pub fn paused(&self) -> Option<&str> {
        match self {
            Self::Paused(why) => Some(why),
            _ => None,
        }
    }
}

#[derive(Debug, Clone)]
pub struct TurnConfig {
    pub max_steps: u32,
    /// Wall-clock limit of the whole turn.
    pub timeout: Option<Duration>,
    pub max_tool_result_chars: usize,
    pub policy: RunPolicy,
    /// Where full results of truncated tool calls are saved.
    pub artifact_dir: Option<std::path::PathBuf>,
    /// Before every model request, a context estimated above this many
    /// tokens is compacted (0: never).
    pub compact_above_tokens: u64,
    /// Config `permissions.allow`: tools that run without asking.
    pub allow: Vec<String>,
}

/// Shrinks the history a turn carries (the session's compaction: earlier
/// turns summarised and recorded). `None` when there was nothing to do.
pub trait Compactor: Send + Sync {
    fn compact(&self) -> futures::future::BoxFuture<'_, Option<Vec<Message>>>;
}

impl Default for TurnConfig {
    fn default() -> Self {
        Self {
            max_steps: crate::config::DEFAULT_MAX_STEPS,
            timeout: None,
            max_tool_result_chars: crate::config::DEFAULT_MAX_TOOL_RESULT_CHARS,
            policy: RunPolicy::default(),
            artifact_dir: None,
            compact_above_tokens: 0,
            allow: Vec::new(),
        }
    }
}

/// What a turn reports while it runs (streamed to attached clients).
#[derive(Debug, Clone, PartialEq)]
pub enum TurnEvent {
    StepStarted {
        step: u32,
    },
    TextDelta(String),
    ThinkingDelta(String),
    /// The complete assistant message of one step, with the usage the
    /// provider reported for that step.
    AssistantMessage(Message, Usage),
    ToolStarted(ToolCall),
    ToolFinished {
        call: ToolCall,
        output: ToolOutput,
        /// Characters of the full result when it was truncated.
        full_chars: Option<usize>,
        /// Where the full result was saved.
        artifact: Option<std::path::PathBuf>,
    },
}

#[derive(Debug, Clone)]
pub struct TurnResult {
    pub outcome: TurnOutcome,
    pub steps: u32,
    pub tool_calls: u32,
    /// Calls the permission gate or a person denied.
    pub denied: u32,
    pub usage: Usage,
    /// The messages this turn added (the user message first).
    pub messages: Vec<Message>,
}

/// What a turn carries from one step to the next.
struct Running {
    deadline: Option<Instant>,
    cancel: watch::Receiver<bool>,
    /// The history before this turn (shorter once compacted).
    history: std::sync::Arc<[Message]>,
    /// Tokens the provider counted for the last request and what it
    /// answered; `None` until a provider reports usage.
    counted: Option<(u64, usize)>,
    /// What the model may call.
    tools: std::sync::Arc<[crate::model::ToolSpec]>,
}

/// What the model said in one step.
#[derive(Default)]
struct Said {
    text: String,
    thinking: Vec<crate::model::Thinking>,
    calls: Vec<ToolCall>,
    stop: Option<StopReason>,
    /// The usage the provider reported for this step.
    usage: Usage,
}

impl TurnResult {
    /// A turn going on from `so_far`: the steps it took count.
    fn resumed(so_far: Vec<Message>) -> Self {
        Self {
            outcome: TurnOutcome::Completed,
            steps: so_far
                .iter()
                .filter(|m| matches!(m, Message::Assistant { .. }))
                .count() as u32,
            tool_calls: 0,
            denied: 0,
            usage: Usage::default(),
            messages: so_far,
        }
    }
}

enum Interrupt {
    Cancelled,
    TimedOut,
}

async fn interruptible<F: Future>(
    fut: F,
    cancel: &mut watch::Receiver<bool>,
    deadline: Option<Instant>,
) -> Result<F::Output, Interrupt> {
    let expire = async {
        match deadline {
            Some(d) => tokio::time::sleep_until(d).await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        biased;
        _ = cancel.wait_for(|c| *c) => Err(Interrupt::Cancelled),
        () = expire => Err(Interrupt::TimedOut),
        out = fut => Ok(out),
    }
}

/// Settles a call whose rule says `ask` (allow and deny rules never reach
/// it): a human through the approval broker, remembered rules, or the mode.
pub trait Approver: Send + Sync {
    fn settle<'a>(
        &'a self,
        call: &'a ToolCall,
        reason: &'a str,
    ) -> futures::future::BoxFuture<'a, Decision>;
}

/// Whether this daemon may act now. A turn asks before each step and each
/// tool call: while its daemon's lease on a shared log is not renewed it
/// waits; `Err(why)` when the turn was taken over meanwhile.
pub trait Fence: Send + Sync {
    fn hold(&self) -> futures::future::BoxFuture<'_, Result<(), String>>;
}

/// Everything a turn runs against.
pub struct Turn<'a> {
    pub provider: &'a dyn ModelProvider,
    pub tools: &'a ToolRegistry,
    pub ctx: &'a ToolContext,
    pub config: &'a TurnConfig,
    /// Who settles `ask`; without one, `config.policy` does.
    pub approver: Option<&'a dyn Approver>,
    /// Who compacts the history when the context outgrows
    /// `config.compact_above_tokens` mid-turn.
    pub compactor: Option<&'a dyn Compactor>,
    /// Who says whether this daemon may act (`None`: always).
    pub fence: Option<&'a dyn Fence>,
}

impl Turn<'_> {
    /// Run one turn for `user_text` after `history`. `observe` sees every
    /// [`TurnEvent`] as it happens.
    pub async fn run(
        &self,
        system: &str,
        history: impl Into<std::sync::Arc<[Message]>>,
        user_text: &str,
        observe: &mut (dyn FnMut(TurnEvent) + Send),
    ) -> TurnResult {
        let user = vec![Message::User {
            text: user_text.to_string(),
        }];
        self.resume(system, history, user, observe).await
    }

    /// Continue a turn from the messages it already has (its user message
    /// first): calls of the last assistant message that have no result yet
    /// run first — a turn interrupted while an approval was pending resumes
    /// at that call — then the loop goes on. `TurnResult::messages` holds
    /// `so_far` followed by what this run added.
    pub async fn resume(
        &self,
        system: &str,
        history: impl Into<std::sync::Arc<[Message]>>,
        so_far: Vec<Message>,
        observe: &mut (dyn FnMut(TurnEvent) + Send),
    ) -> TurnResult {
        let mut run = Running {
            deadline: self.config.timeout.map(|t| Instant::now() + t),
            cancel: self.ctx.cancel.clone(),
            history: history.into(),
            counted: None,
            tools: self.tools.specs().into(),
        };
        let pending = unanswered_calls(&so_far);
        let mut result = TurnResult::resumed(so_far);
        let end = |mut r: TurnResult, outcome| {
            r.outcome = outcome;
            r
        };
        if !pending.is_empty()
            && let Err(outcome) = self
                .run_calls(&pending, &mut result, &mut run, observe)
                .await
        {
            return end(result, outcome);
        }
        loop {
            if result.steps >= self.config.max_steps {
                return end(result, TurnOutcome::MaxSteps);
            }
            if let Err(outcome) = self.hold(&mut run).await {
                return end(result, outcome);
            }
            result.steps += 1;
            observe(TurnEvent::StepStarted { step: result.steps });
            let request = self.request(system, &mut run, &result).await;
            let said = match self.hear(request, &mut run, &mut result, observe).await {
                Ok(said) => said,
                Err(outcome) => return end(result, outcome),
            };
            if said.text.trim().is_empty() && said.calls.is_empty() {
                return end(result, TurnOutcome::EmptyResponse);
            }
            let assistant = Message::Assistant {
                text: said.text,
                thinking: said.thinking,
                tool_calls: said.calls.clone(),
            };
            observe(TurnEvent::AssistantMessage(assistant.clone(), said.usage));
            result.messages.push(assistant);
            if said.calls.is_empty() {
                if let Some(reason) = said.stop.filter(|s| *s != StopReason::EndTurn) {
                    tracing::debug!(?reason, "model stopped without tool calls");
                }
                return end(result, TurnOutcome::Completed);
            }
            if let Err(outcome) = self
                .run_calls(&said.calls, &mut result, &mut run, observe)
                .await
            {
                return end(result, outcome);
            }
        }
    }

    /// Wait while the daemon is fenced (interruptible like a step); the
    /// outcome that ends the turn when it may not go on.
    async fn hold(&self, run: &mut Running) -> Result<(), TurnOutcome> {
        let Some(fence) = self.fence else {
            return Ok(());
        };
        match interruptible(fence.hold(), &mut run.cancel, run.deadline).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(why)) => Err(TurnOutcome::HandedOver(why)),
            Err(i) => Err(interrupted(i)),
        }
    }

    /// The next model request: when the context outgrows
    /// `compact_above_tokens`, the history is compacted first, and if this
    /// turn alone is still over, its older tool results are elided.
    async fn request(&self, system: &str, run: &mut Running, result: &TurnResult) -> ModelRequest {
        let mut messages = result.messages.clone();
        let limit = self.config.compact_above_tokens;
        if limit > 0 {
            let estimate = || context_estimate(system, &run.history, &result.messages, run.counted);
            if estimate() > limit
                && let Some(compactor) = self.compactor
                && let Some(shorter) = compactor.compact().await
            {
                run.history = shorter.into();
                run.counted = None;
            }
            if context_estimate(system, &run.history, &messages, run.counted) > limit {
                // This turn alone is over the limit: the model sees its
                // older tool results elided (they stay in the log).
                elide_old_results(&mut messages, KEEP_RESULTS);
            }
        }
        ModelRequest {
            system: system.to_string(),
            history: std::sync::Arc::clone(&run.history),
            messages,
            tools: std::sync::Arc::clone(&run.tools),
            ..ModelRequest::default()
        }
    }

    /// Stream one model request to its end, passing the deltas to
    /// `observe` and adding the usage to `result`. `Err`: the outcome
    /// that ends the turn (the provider failed, or the turn was
    /// interrupted — what was said before then is kept in `result`).
    async fn hear(
        &self,
        request: ModelRequest,
        run: &mut Running,
        result: &mut TurnResult,
        observe: &mut (dyn FnMut(TurnEvent) + Send),
    ) -> Result<Said, TurnOutcome> {
        let mut stream = self.provider.stream(request);
        let mut said = Said::default();
        loop {
            let next = match interruptible(stream.next(), &mut run.cancel, run.deadline).await {
                Ok(next) => next,
                Err(i) => {
                    if !said.text.is_empty() {
                        // Keep what was said before the interruption.
                        result.messages.push(Message::Assistant {
                            text: said.text,
                            thinking: said.thinking,
                            tool_calls: Vec::new(),
                        });
                    }
                    return Err(interrupted(i));
                }
            };
            match next {
                None => return Ok(said),
                Some(Err(e)) => return Err(TurnOutcome::Failed(e.to_string())),
                Some(Ok(event)) => match event {
                    ModelEvent::TextDelta(t) => {
                        said.text.push_str(&t);
                        observe(TurnEvent::TextDelta(t));
                    }
                    ModelEvent::ThinkingDelta(t) => observe(TurnEvent::ThinkingDelta(t)),
                    ModelEvent::Thinking(block) => said.thinking.push(block),
                    ModelEvent::ToolCall(call) => said.calls.push(call),
                    ModelEvent::Usage(u) => {
                        result.usage.add(&u);
                        said.usage.add(&u);
                        if u.input_tokens > 0 {
                            run.counted =
                                Some((u.input_tokens + u.output_tokens, result.messages.len()));
                        }
                    }
                    ModelEvent::Stop(s) => said.stop = Some(s),
                },
            }
        }
    }

    /// Run the calls of one assistant message in order. On an interruption
    /// every call left gets a result, so the transcript stays valid.
    async fn run_calls(
        &self,
        calls: &[ToolCall],
        result: &mut TurnResult,
        run: &mut Running,
        observe: &mut (dyn FnMut(TurnEvent) + Send),
    ) -> Result<(), TurnOutcome> {
        for (i, call) in calls.iter().enumerate() {
            // Handed over: nothing more is recorded, the taker answers.
            self.hold(run).await?;
            observe(TurnEvent::ToolStarted(call.clone()));
            result.tool_calls += 1;
            let output =
                match interruptible(self.execute(call), &mut run.cancel, run.deadline).await {
                    Ok(Ok((output, denied))) => {
                        result.denied += u32::from(denied);
                        output
                    }
                    // Nothing more runs: not this call, nor the next.
                    Ok(Err(why)) => return Err(TurnOutcome::Paused(why)),
                    Err(interrupt) => {
                        for c in &calls[i..] {
                            result.messages.push(tool_result(
                                c,
                                &ToolOutput::error("not run: the turn was interrupted"),
                            ));
                        }
                        return Err(interrupted(interrupt));
                    }
                };
            let (output, full_chars, artifact) = self.truncate(result.steps, call, output);
            result.messages.push(tool_result(call, &output));
            observe(TurnEvent::ToolFinished {
                call: call.clone(),
                output,
                full_chars,
                artifact,
            });
        }
        Ok(())
    }

    /// Keep head and tail of a long result for the model; the full text
    /// goes to an artifact file whose path the model is told.
    fn truncate(
        &self,
        step: u32,
        call: &ToolCall,
        output: ToolOutput,
    ) -> (ToolOutput, Option<usize>, Option<std::path::PathBuf>) {
        let Some(cut) = context::truncate(&output.content, self.config.max_tool_result_chars)
        else {
            return (output, None, None);
        };
        let full = output.content.chars().count();
        let artifact = self.config.artifact_dir.as_ref().and_then(|dir| {
            context::save_artifact(dir, &format!("step{step}-{}", call.id), &output.content)
                .inspect_err(
                    |e| tracing::warn!(error = %e, "could not save a tool-result artifact"),
                )
                .ok()
        });
        let content = match &artifact {
            Some(path) => format!("{cut}\n[full output saved to {}]", path.display()),
            None => cut,
        };
        (ToolOutput { content, ..output }, Some(full), artifact)
    }

    /// Arguments check, permission gate, then the tool; `true` when the
    /// gate or a person denied the call; `Err` when it stays unsettled.
    async fn execute(&self, call: &ToolCall) -> Result<(ToolOutput, bool), String> {
        if let Some(problem) = &call.parse_error {
            return Ok((
                ToolOutput::error(format!(
                    "the arguments of {} are not valid JSON ({problem}); call it again with one complete JSON object",
                    call.name
                )),
                false,
            ));
        }
        let rule = self
            .tools
            .rule(&call.name)
            .unwrap_or_else(|| rule_for(&call.name, &call.arguments));
        let decision = match rule {
            Rule::Allow => Decision::Allow,
            Rule::Ask(_)
                if crate::permissions::allowed_by_config(&self.config.allow, &call.name)
                    && !self.tools.review_required(&call.name) =>
            {
                Decision::Allow
            }
            Rule::Deny(reason) => Decision::Deny(reason),
            Rule::Ask(reason) => {
                // A call that would fail its own checks fails now: nobody
                // is asked to approve what cannot succeed.
                let ctx = self.ctx.for_model_call(call);
                if let Err(refused) = self.tools.check(&call.name, &call.arguments, &ctx).await {
                    return Ok((refused, false));
                }
                match self.approver {
                    Some(approver) => approver.settle(call, &reason).await,
                    // Nobody to ask a question: the tool says so.
                    None if call.name == crate::tools::ask::ASK_USER => {
                        return Ok((crate::tools::ask::nobody(), false));
                    }
                    None => self.config.policy.settle(&reason),
                }
            }
        };
        Ok(match decision {
            Decision::Unsettled(why) => return Err(why),
            Decision::Allow => {
                let ctx = self.ctx.for_model_call(call);
                (
                    self.tools.call(&call.name, &call.arguments, &ctx).await,
                    false,
                )
            }
            Decision::Deny(reason) => (
                ToolOutput::error(format!("{} was not run: {reason}", call.name)),
                true,
            ),
            Decision::Answered(text) => (
                ToolOutput::ok(text.clone(), serde_json::json!({ "answer": text })),
                false,
            ),
        })
    }
}

/// Calls of the last assistant message that have no result after it.
fn unanswered_calls(messages: &[Message]) -> Vec<ToolCall> {
    let Some(last) = messages
        .iter()
        .rposition(|m| matches!(m, Message::Assistant { .. }))
    else {
        return Vec::new();
    };
    let Message::Assistant { tool_calls, .. } = &messages[last] else {
        return Vec::new();
    };
    tool_calls
        .iter()
        .filter(|c| {
            !messages[last..]
                .iter()
                .any(|m| matches!(m, Message::ToolResult { call_id, .. } if *call_id == c.id))
        })
        .cloned()
        .collect()
}

fn interrupted(i: Interrupt) -> TurnOutcome {
    match i {
        Interrupt::Cancelled => TurnOutcome::Cancelled,
        Interrupt::TimedOut => TurnOutcome::TimedOut,
    }
}

fn tool_result(call: &ToolCall, output: &ToolOutput) -> Message {
    Message::ToolResult {
        call_id: call.id.clone(),
        name: call.name.clone(),
        content: output.content.clone(),
        is_error: output.is_error,
    }
}

#[cfg(test)]
mod tests;
