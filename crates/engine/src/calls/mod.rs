//! Direct tool calls: a program other than a session's model (an agent
//! reaching the desk over MCP through `tinycode mcp serve`, a script) calls
//! one tool through the daemon's permission gate.
//!
//! Each caller, tool and argument set has its own stream
//! (`call-<caller>-<key>`): `DirectCallRequested`, then `DirectCallFinished`
//! with the result, then `DirectCallDelivered` once the caller got it. An
//! `ask` stores a durable approval before anything else; the call waits for
//! it up to a limit and then answers `pending`, naming the approval. The
//! same call made again — before or after a daemon restart — finds the open
//! call in its stream and carries on with it: it waits again, or runs the
//! tool once the approval is decided, or hands over the result it already
//! has. The tool's change carries the call as its origin, so a crash
//! between the change and `DirectCallFinished` never makes it twice.

#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tinycode_shared::proto::event::Payload;
use tinycode_shared::proto::{
    ClientRef, DirectCallDelivered, DirectCallFinished, DirectCallRequested, Event, ToolCallRef,
    ToolOrigin,
};
use tokio::sync::mpsc;

use crate::approvals::{ApprovalError, Verdict};
use crate::model::ToolCall;
use crate::permissions::{ApprovalMode, Rule};
use crate::sessions::Sessions;
use crate::store::{EventStore, ExpectedVersion, StoreError};
use crate::tools::{ToolContext, ToolOutput};

/// How long a call waits for a pending approval when the caller does not
/// say (below the usual 60 s timeout of MCP clients).
pub const DEFAULT_WAIT: Duration = Duration::from_secs(50);
/// The longest wait a caller may ask for.
pub const MAX_WAIT: Duration = Duration::from_secs(3_600);
/// How often a waiting call says it is still waiting.
const PROGRESS_EVERY: Duration = Duration::from_secs(5);
/// Largest arguments object, as JSON text.
pub const MAX_ARGUMENTS: usize = 64 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum CallError {
    #[error("{0}")]
    Invalid(String),
    #[error("there is no tool named {name:?}; available tools: {available}")]
    UnknownTool { name: String, available: String },
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Approval(#[from] ApprovalError),
}

/// What the call reports while it runs, then its answer.
#[derive(Debug, Clone, PartialEq)]
pub enum Update {
    Waiting {
        approval_id: String,
        reason: String,
        waited: Duration,
    },
    Result {
        call_id: String,
        output: ToolOutput,
        approval_id: String,
    },
    Pending {
        call_id: String,
        approval_id: String,
        reason: String,
        message: String,
    },
}

/// One call, as validated at the boundary.
#[derive(Debug, Clone)]
pub struct CallRequest {
    pub caller: String,
    pub tool: String,
    pub arguments: Value,
    pub wait: Duration,
    pub by: ClientRef,
}

impl CallRequest {
    /// Check what came in: a caller name, a tool name, one JSON object of
    /// at most [`MAX_ARGUMENTS`] bytes, a wait within bounds.
    pub fn new(
        caller: &str,
        tool: &str,
        arguments_json: &str,
        wait_seconds: u32,
        by: ClientRef,
    ) -> Result<Self, CallError> {
        let caller = caller.trim();
        if caller.chars().count() > 100 {
            return Err(CallError::Invalid(
                "the caller name is longer than 100 characters".into(),
            ));
        }
        if tool.trim().is_empty() {
            return Err(CallError::Invalid("name the tool to call".into()));
        }
        if arguments_json.len() > MAX_ARGUMENTS {
            return Err(CallError::Invalid(format!(
                "the arguments are {} bytes; at most {MAX_ARGUMENTS} bytes are accepted",
                arguments_json.len()
            )));
        }
        let text = if arguments_json.trim().is_empty() {
            "{}"
        } else {
            arguments_json
        };
        let arguments: Value = serde_json::from_str(text)
            .map_err(|e| CallError::Invalid(format!("the arguments are not valid JSON: {e}")))?;
        if !arguments.is_object() {
            return Err(CallError::Invalid(
                "the arguments must be one JSON object".into(),
            ));
        }
        let wait = match wait_seconds {
            0 => DEFAULT_WAIT,
            s => Duration::from_secs(u64::from(s)).min(MAX_WAIT),
        };
        Ok(Self {
            caller: if caller.is_empty() {
                "anonymous".into()
            } else {
                caller.to_string()
            },
            tool: tool.trim().to_string(),
            arguments,
            wait,
            by,
        })
    }

    /// The stream of this caller, tool and arguments (object keys sorted,
    /// so the same arguments in another order are the same call).
    pub fn stream(&self) -> String {
        let slug: String = self
            .caller
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() {
                    c.to_ascii_lowercase()
                } else {
                    '-'
                }
            })
            .take(40)
            .collect();
        let key = format!("{}\0{}", self.tool, canonical(&self.arguments));
        format!(
            "call-{slug}-{:016x}",
            crate::fnv::fnv1a(key.bytes().chain(self.caller.bytes()))
        )
    }
}

/// JSON text with every object's keys sorted.
fn canonical(value: &Value) -> String {
    fn sorted(value: &Value) -> Value {
        match value {
            Value::Object(map) => {
                let mut keys: Vec<&String> = map.keys().collect();
                keys.sort();
                Value::Object(
                    keys.into_iter()
                        .map(|k| (k.clone(), sorted(&map[k])))
                        .collect(),
                )
            }
            Value::Array(items) => Value::Array(items.iter().map(sorted).collect()),
            other => other.clone(),
        }
    }
    sorted(value).to_string()
}

/// The call of a stream that has not been delivered yet.
#[derive(Debug, Clone, Default)]
struct Open {
    call_id: String,
    approval_id: String,
    reason: String,
    finished: Option<DirectCallFinished>,
}

/// The stream's last version and its open call.
fn fold(events: &[Event]) -> (u64, Option<Open>) {
    let mut open = None;
    let mut version = 0;
    for e in events {
        version = e.stream_version;
        match &e.payload {
            Some(Payload::DirectCallRequested(r)) => {
                open = Some(Open {
                    call_id: r.call_id.clone(),
                    approval_id: r.approval_id.clone(),
                    reason: r.reason.clone(),
                    finished: None,
                });
            }
            Some(Payload::DirectCallFinished(f)) => {
                if let Some(o) = open.as_mut().filter(|o| o.call_id == f.call_id) {
                    o.finished = Some(f.clone());
                }
            }
            Some(Payload::DirectCallDelivered(d))
                if open.as_ref().is_some_and(|o| o.call_id == d.call_id) =>
            {
                open = None;
            }
            _ => {}
        }
    }
    (version, open)
}

fn expected(version: u64) -> ExpectedVersion {
    if version == 0 {
        ExpectedVersion::NoStream
    } else {
        ExpectedVersion::Exact(version)
    }
}

/// The direct calls of one daemon.
pub struct DirectCalls {
    store: EventStore,
    sessions: Arc<Sessions>,
    /// One state change of a call stream at a time.
    locks: crate::sync::Striped<64>,
}

impl DirectCalls {
    pub fn new(store: EventStore, sessions: Arc<Sessions>) -> Arc<Self> {
        Arc::new(Self {
            store,
            sessions,
            locks: crate::sync::Striped::default(),
        })
    }

    /// The tools a direct call may use: the daemon's own (an MCP server's
    /// tools are not passed on).
    pub fn tools(&self) -> Vec<crate::model::ToolSpec> {
        self.sessions
            .tools
            .specs()
            .into_iter()
            // Not offered to a direct caller: another server's tools, and
            // workers (a session's own).
            .filter(|t| {
                !t.name.starts_with("mcp__")
                    && !crate::tools::agents::is_agent_tool(&t.name)
                    && t.name != crate::tools::ask::ASK_USER
            })
            .collect()
    }

    /// The gate's rule for `tool` with `args`.
    pub fn rule(&self, tool: &str, args: &Value) -> Rule {
        self.sessions
            .tools
            .rule(tool)
            .unwrap_or_else(|| crate::permissions::rule_for(tool, args))
    }

    pub fn skills(&self) -> Arc<crate::skills::SkillRegistry> {
        self.sessions.skills()
    }

    /// Make (or carry on with) one call; `updates` gets what happens, the
    /// answer last.
    pub async fn call(
        self: &Arc<Self>,
        request: CallRequest,
        updates: mpsc::Sender<Update>,
    ) -> Result<(), CallError> {
        if !self.tools().iter().any(|t| t.name == request.tool) {
            return Err(CallError::UnknownTool {
                name: request.tool.clone(),
                available: self
                    .tools()
                    .iter()
                    .map(|t| t.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            });
        }
        let stream = request.stream();
        let deadline = tokio::time::Instant::now() + request.wait;
        loop {
            let (version, open) = self.read(&stream).await?;
            let Some(open) = open else {
                // Recorded, or someone else started the same call at the
                // same moment: either way, carry on with what is stored.
                self.start(&request, &stream, version).await?;
                continue;
            };
            if let Some(finished) = open.finished {
                if !self.deliver(&stream, version, &open.call_id).await? {
                    continue;
                }
                let _ = updates
                    .send(Update::Result {
                        call_id: open.call_id,
                        approval_id: open.approval_id,
                        output: ToolOutput {
                            content: finished.content,
                            is_error: finished.is_error,
                            details: serde_json::from_str(&finished.details_json)
                                .unwrap_or(Value::Null),
                        },
                    })
                    .await;
                return Ok(());
            }
            let verdict = if open.approval_id.is_empty() {
                // Allowed when it was made; a crash fell before its result.
                Some(Verdict::Allowed)
            } else {
                self.wait(&open, deadline, &updates).await?
            };
            let Some(verdict) = verdict else {
                let _ = updates
                    .send(Update::Pending {
                        message: format!(
                            "{} waits for a human's approval ({}): decide it with `tinycode approvals approve {id}` or `tinycode approvals deny {id}` (or in the TUI), then call {} again with the same arguments to get its result",
                            request.tool,
                            open.reason,
                            request.tool,
                            id = open.approval_id,
                        ),
                        call_id: open.call_id,
                        approval_id: open.approval_id,
                        reason: open.reason,
                    })
                    .await;
                return Ok(());
            };
            self.finish(&request, &stream, &open, verdict).await?;
        }
    }

    async fn read(&self, stream: &str) -> Result<(u64, Option<Open>), CallError> {
        let events = self.store.read_stream(stream, 1, usize::MAX).await?;
        Ok(fold(&events))
    }

    /// Record a new call: settle the gate, ask for an approval when it
    /// says so. Nothing is recorded when the stream moved meanwhile.
    async fn start(
        &self,
        request: &CallRequest,
        stream: &str,
        version: u64,
    ) -> Result<(), CallError> {
        let _lock = self.locks.lock(stream).await;
        let call_id = format!("dc-{version}");
        let call = ToolCallRef {
            id: call_id.clone(),
            name: request.tool.clone(),
            arguments_json: request.arguments.to_string(),
            ..Default::default()
        };
        let mut requested = DirectCallRequested {
            call_id: call_id.clone(),
            caller: request.caller.clone(),
            call: Some(call.clone()),
            by: Some(request.by.clone()),
            ..DirectCallRequested::default()
        };
        let mut refused = None;
        match self.settle(request) {
            GateDecision::Allow => {}
            GateDecision::Deny(reason) => refused = Some(reason),
            GateDecision::Ask(reason) => {
                let tool_call = ToolCall::new(
                    call.id.clone(),
                    call.name.clone(),
                    call.arguments_json.clone(),
                );
                let mut asked =
                    crate::sessions::approval_request(&self.sessions, &tool_call, &reason)
                        .map_err(CallError::Invalid)?;
                asked.caller = request.caller.clone();
                asked.call_stream = stream.to_string();
                let event = self.sessions.approvals().request(asked).await?;
                if let Some(Payload::ApprovalRequested(r)) = &event.payload {
                    requested.approval_id = r.approval_id.clone();
                }
                requested.reason = reason;
            }
        }
        let mut payloads = vec![Payload::DirectCallRequested(requested.clone())];
        if let Some(reason) = refused {
            payloads.push(Payload::DirectCallFinished(DirectCallFinished {
                call_id: call_id.clone(),
                content: format!("{} was not run: {reason}", request.tool),
                is_error: true,
                details_json: String::new(),
            }));
        }
        match self.store.append(stream, expected(version), payloads).await {
            Ok(_) => {
                tracing::info!(caller = %request.caller, tool = %request.tool, stream, approval = %requested.approval_id, "direct call");
                Ok(())
            }
            Err(StoreError::Conflict { .. }) => {
                if !requested.approval_id.is_empty() {
                    let _ = self
                        .sessions
                        .approvals()
                        .cancel(
                            &requested.approval_id,
                            "the same call was made twice at once; the other one goes on",
                        )
                        .await;
                }
                Ok(())
            }
            Err(e) => Err(e.into()),
        }
    }

    /// The gate: the rule, then remembered workspace-wide rules, then the
    /// mode.
    fn settle(&self, request: &CallRequest) -> GateDecision {
        match self.rule(&request.tool, &request.arguments) {
            Rule::Allow => GateDecision::Allow,
            Rule::Deny(reason) => GateDecision::Deny(reason),
            Rule::Ask(reason) => {
                let reviewed = self.sessions.tools.review_required(&request.tool);
                if !reviewed
                    && self
                        .sessions
                        .approvals()
                        .remembered("", &request.tool)
                        .unwrap_or(false)
                {
                    return GateDecision::Allow;
                }
                // The desk's permissionMode as in force (a reload changes it).
                match self.sessions.defaults().approve {
                    ApprovalMode::Auto => GateDecision::Allow,
                    ApprovalMode::Deny => {
                        GateDecision::Deny(format!("{reason}; this desk's permissionMode is deny"))
                    }
                    ApprovalMode::Ask => GateDecision::Ask(reason),
                }
            }
        }
    }

    /// Wait for the open call's approval until `deadline`, saying so every
    /// few seconds. `None`: nobody decided in time.
    async fn wait(
        &self,
        open: &Open,
        deadline: tokio::time::Instant,
        updates: &mpsc::Sender<Update>,
    ) -> Result<Option<Verdict>, CallError> {
        let started = tokio::time::Instant::now();
        let approvals = self.sessions.approvals();
        loop {
            let next = (tokio::time::Instant::now() + PROGRESS_EVERY).min(deadline);
            tokio::select! {
                verdict = approvals.wait(&open.approval_id) => return Ok(Some(verdict?)),
                () = tokio::time::sleep_until(next) => {
                    if next >= deadline {
                        return Ok(None);
                    }
                    if updates
                        .send(Update::Waiting {
                            approval_id: open.approval_id.clone(),
                            reason: open.reason.clone(),
                            waited: started.elapsed(),
                        })
                        .await
                        .is_err()
                    {
                        // The caller went away; the approval stays.
                        return Ok(None);
                    }
                }
            }
        }
    }

    /// Run the tool (allowed) or record the refusal, once: a call another
    /// request finished meanwhile is left as it is.
    async fn finish(
        &self,
        request: &CallRequest,
        stream: &str,
        open: &Open,
        verdict: Verdict,
    ) -> Result<(), CallError> {
        let _lock = self.locks.lock(stream).await;
        let (version, now) = self.read(stream).await?;
        if now.is_none_or(|n| n.call_id != open.call_id || n.finished.is_some()) {
            return Ok(());
        }
        let output = match verdict {
            // Direct callers are not offered `ask_user`: an answer is an
            // allow like any other.
            Verdict::Allowed | Verdict::Answered { .. } => {
                // Its own task: a caller that goes away does not stop a
                // tool halfway.
                let sessions = Arc::clone(&self.sessions);
                let (tool, args) = (request.tool.clone(), request.arguments.clone());
                let origin = ToolOrigin {
                    session_id: stream.to_string(),
                    turn: 0,
                    call_id: open.call_id.clone(),
                };
                tokio::spawn(async move {
                    let (_keep, cancel) = tokio::sync::watch::channel(false);
                    let ctx = ToolContext {
                        desk: Arc::clone(&sessions.desk),
                        skills: sessions.skills.current(),
                        cancel,
                        origin: Some(origin),
                        agents: None,
                        reports: sessions.reports(),
                        confidence: Vec::new(),
                        review_below: Default::default(),
                    };
                    sessions.tools.call(&tool, &args, &ctx).await
                })
                .await
                .unwrap_or_else(|e| ToolOutput::error(format!("{} stopped: {e}", request.tool)))
            }
            Verdict::Denied(why) => ToolOutput::error(format!(
                "{} was not run: not approved ({}): {why}",
                request.tool, open.approval_id
            )),
            Verdict::Cancelled(why) => ToolOutput::error(format!(
                "{} was not run: approval {} was cancelled: {why}",
                request.tool, open.approval_id
            )),
        };
        let finished = DirectCallFinished {
            call_id: open.call_id.clone(),
            details_json: output.details_json(),
            content: output.content,
            is_error: output.is_error,
        };
        match self
            .store
            .append(
                stream,
                expected(version),
                vec![Payload::DirectCallFinished(finished)],
            )
            .await
        {
            Ok(_) | Err(StoreError::Conflict { .. }) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Mark the open call delivered; false when the stream moved meanwhile.
    async fn deliver(&self, stream: &str, version: u64, call_id: &str) -> Result<bool, CallError> {
        let _lock = self.locks.lock(stream).await;
        let delivered = Payload::DirectCallDelivered(DirectCallDelivered {
            call_id: call_id.to_string(),
        });
        match self
            .store
            .append(stream, expected(version), vec![delivered])
            .await
        {
            Ok(_) => Ok(true),
            Err(StoreError::Conflict { .. }) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }
}

/// What the gate says for a direct call.
enum GateDecision {
    Allow,
    Deny(String),
    Ask(String),
}
