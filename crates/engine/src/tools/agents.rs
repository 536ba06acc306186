//! The sub-agent tools: `spawn_agent`, `wait_agent`, `list_agents`,
//! `close_agent`. They only format; the workers themselves are child
//! sessions, run by the sessions module behind the [`SubAgents`] a turn's
//! [`ToolContext`] carries (none outside a root session's turn, so a worker
//! — or a direct call over MCP — cannot spawn).

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use serde_json::{Value, json};

use super::{Tool, ToolContext, ToolError, ToolOutput};

/// Longest `wait_agent` wait one call may ask for.
pub const MAX_WAIT: Duration = Duration::from_secs(600);
/// `wait_agent` without `timeout_seconds`.
pub const DEFAULT_WAIT: Duration = Duration::from_secs(120);

/// Where a worker is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AgentState {
    Running,
    /// Its turn ended: `completed`, `cancelled`, `interrupted`, …
    Finished {
        outcome: String,
        steps: u32,
        tool_calls: u32,
        /// Its final answer (or what it had when it stopped).
        text: String,
        error: String,
    },
}

/// One worker as its parent sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentView {
    pub agent_id: String,
    pub session_id: String,
    pub task: String,
    pub state: AgentState,
}

/// The workers of the session whose turn is running.
pub trait SubAgents: Send + Sync {
    fn spawn<'a>(
        &'a self,
        call_id: &'a str,
        task: &'a str,
        skill: Option<&'a str>,
    ) -> BoxFuture<'a, Result<AgentView, String>>;
    /// The worker once it finished, or as it is when `timeout` passed.
    fn wait<'a>(
        &'a self,
        agent_id: &'a str,
        timeout: Duration,
    ) -> BoxFuture<'a, Result<AgentView, String>>;
    fn list(&self) -> BoxFuture<'_, Result<Vec<AgentView>, String>>;
    fn close<'a>(&'a self, agent_id: &'a str) -> BoxFuture<'a, Result<AgentView, String>>;
}

/// The four tools.
pub fn agent_tools() -> Vec<Arc<dyn Tool>> {
    vec![
        Arc::new(AgentTool::Spawn),
        Arc::new(AgentTool::Wait),
        Arc::new(AgentTool::List),
        Arc::new(AgentTool::Close),
    ]
}

/// Whether `name` is one of them.
pub fn is_agent_tool(name: &str) -> bool {
    crate::permissions::SUB_AGENT_TOOLS.contains(&name)
}

enum AgentTool {
    Spawn,
    Wait,
    List,
    Close,
}

fn agent_id_schema() -> Value {
    json!({ "type": "string", "minLength": 1, "maxLength": 16, "description": "The worker's id from spawn_agent (a1, a2, …)." })
}

fn details(view: &AgentView) -> Value {
    let mut out = json!({
        "agentId": view.agent_id,
        "sessionId": view.session_id,
        "task": view.task,
    });
    match &view.state {
        AgentState::Running => out["state"] = "running".into(),
        AgentState::Finished {
            outcome,
            steps,
            tool_calls,
            error,
            ..
        } => {
            out["state"] = "finished".into();
            out["outcome"] = outcome.clone().into();
            out["steps"] = (*steps).into();
            out["toolCalls"] = (*tool_calls).into();
            if !error.is_empty() {
                out["error"] = error.clone().into();
            }
        }
    }
    out
}

/// One line per worker, for the model.
fn brief(view: &AgentView) -> String {
    match &view.state {
        AgentState::Running => format!("{} running: {}", view.agent_id, view.task),
        AgentState::Finished { outcome, steps, .. } => format!(
            "{} {outcome} after {steps} steps: {}",
            view.agent_id, view.task
        ),
    }
}

fn finished_content(view: &AgentView) -> String {
    match &view.state {
        AgentState::Running => format!(
            "{} is still running ({}). Wait again with wait_agent, or stop it with close_agent.",
            view.agent_id, view.task
        ),
        AgentState::Finished {
            outcome,
            steps,
            text,
            error,
            ..
        } => {
            let mut out = format!("{} {outcome} after {steps} steps.", view.agent_id);
            if !error.is_empty() {
                out.push_str(&format!(" {error}."));
            }
            if text.trim().is_empty() {
                out.push_str(" It gave no answer.");
            } else {
                out.push_str(&format!("\nIts answer:\n{}", text.trim()));
            }
            out
        }
    }
}

fn agents_of(ctx: &ToolContext) -> Result<&dyn SubAgents, ToolError> {
    ctx.agents.as_deref().ok_or_else(|| {
        ToolError::Invalid(
            "sub-agents are only available to a session's own agent: a worker cannot spawn or manage workers; answer with what you found".into(),
        )
    })
}

impl Tool for AgentTool {
    fn name(&self) -> &str {
        match self {
            Self::Spawn => "spawn_agent",
            Self::Wait => "wait_agent",
            Self::List => "list_agents",
            Self::Close => "close_agent",
        }
    }

    fn description(&self) -> &str {
        match self {
            Self::Spawn => {
                "Start a read-only worker on a research task (for instance: what does the escalation policy say about this case). It runs alongside you in its own context with only the read tools, and returns at once with its id; collect its answer with wait_agent. At most 3 run at a time."
            }
            Self::Wait => {
                "Wait for a worker to finish and read its answer (timeout_seconds: how long to wait, default 120)."
            }
            Self::List => "List this session's workers with their state.",
            Self::Close => "Stop a running worker; its answer so far is kept.",
        }
    }

    fn parameters(&self) -> Value {
        let object = |properties: Value, required: &[&str]| json!({ "type": "object", "properties": properties, "required": required, "additionalProperties": false });
        match self {
            Self::Spawn => object(
                json!({
                    "task": { "type": "string", "minLength": 1, "maxLength": 8192, "description": "What the worker should find out, in full: it sees nothing of your conversation." },
                    "skill": { "type": "string", "minLength": 1, "maxLength": 64, "description": "A skill the worker follows (its name)." }
                }),
                &["task"],
            ),
            Self::Wait => object(
                json!({
                    "agent_id": agent_id_schema(),
                    "timeout_seconds": { "type": "integer", "minimum": 1, "maximum": MAX_WAIT.as_secs() }
                }),
                &["agent_id"],
            ),
            Self::List => object(json!({}), &[]),
            Self::Close => object(json!({ "agent_id": agent_id_schema() }), &["agent_id"]),
        }
    }

    fn execute<'a>(
        &'a self,
        args: &'a Value,
        ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        Box::pin(async move {
            let agents = agents_of(ctx)?;
            let arg = |key: &str| args.get(key).and_then(Value::as_str).map(str::trim);
            let agent_id = arg("agent_id").unwrap_or_default();
            let view = match self {
                Self::Spawn => {
                    let call_id = ctx
                        .origin
                        .as_ref()
                        .map(|o| o.call_id.as_str())
                        .unwrap_or_default();
                    let task = arg("task").unwrap_or_default();
                    let view = agents
                        .spawn(call_id, task, arg("skill"))
                        .await
                        .map_err(ToolError::Invalid)?;
                    let content = format!(
                        "Started worker {} on: {}. Collect its answer with wait_agent(\"{}\").",
                        view.agent_id, view.task, view.agent_id
                    );
                    return Ok(ToolOutput::ok(content, details(&view)));
                }
                Self::Wait => {
                    let timeout = args
                        .get("timeout_seconds")
                        .and_then(Value::as_u64)
                        .map_or(DEFAULT_WAIT, Duration::from_secs)
                        .min(MAX_WAIT);
                    agents
                        .wait(agent_id, timeout)
                        .await
                        .map_err(ToolError::Invalid)?
                }
                Self::Close => agents.close(agent_id).await.map_err(ToolError::Invalid)?,
                Self::List => {
                    let all = agents.list().await.map_err(ToolError::Invalid)?;
                    let content = if all.is_empty() {
                        "No workers in this session.".to_string()
                    } else {
                        all.iter().map(brief).collect::<Vec<_>>().join("\n")
                    };
                    let details = Value::Array(all.iter().map(details).collect());
                    return Ok(ToolOutput::ok(content, json!({ "agents": details })));
                }
            };
            Ok(ToolOutput::ok(finished_content(&view), details(&view)))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn finished(outcome: &str, text: &str) -> AgentView {
        AgentView {
            agent_id: "a1".into(),
            session_id: "s1".into(),
            task: "check the refund policy".into(),
            state: AgentState::Finished {
                outcome: outcome.into(),
                steps: 3,
                tool_calls: 2,
                text: text.into(),
                error: String::new(),
            },
        }
    }

    #[test]
    fn a_finished_worker_reads_as_its_outcome_and_answer() {
        let view = finished("completed", "Refunds within 7 days (refund-policy).");
        let content = finished_content(&view);
        assert!(content.starts_with("a1 completed after 3 steps."));
        assert!(content.ends_with("Refunds within 7 days (refund-policy)."));
        let d = details(&view);
        assert_eq!(d["outcome"], "completed");
        assert_eq!(d["steps"], 3);
        assert_eq!(d["sessionId"], "s1");
    }

    #[test]
    fn a_running_worker_says_how_to_go_on() {
        let view = AgentView {
            state: AgentState::Running,
            ..finished("completed", "")
        };
        assert!(finished_content(&view).contains("wait_agent"));
        assert_eq!(details(&view)["state"], "running");
        assert_eq!(brief(&view), "a1 running: check the refund policy");
    }

    #[test]
    fn the_tools_are_named_and_known() {
        let names: Vec<String> = agent_tools().iter().map(|t| t.name().into()).collect();
        assert_eq!(
            names,
            ["spawn_agent", "wait_agent", "list_agents", "close_agent"]
        );
        assert!(names.iter().all(|n| is_agent_tool(n)));
        assert!(!is_agent_tool("classify_ticket"));
    }
}
