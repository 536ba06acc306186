//! Tools the agent can call: the [`Tool`] trait, the [`ToolRegistry`] (one
//! namespace; MCP and sub-agent tools join it later), argument validation
//! against each tool's JSON schema, and the business tools.
//!
//! A tool never crashes a turn: unknown tools, invalid arguments, domain
//! errors and cancellation all become an error result holding one
//! actionable sentence for the model.

pub mod agents;
pub mod ask;
mod business;
pub mod report;
mod review;
pub mod schema;

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::future::BoxFuture;
use serde_json::Value;
use tinycode_shared::proto::ToolOrigin;
use tokio::sync::watch;

use crate::domain::desk::{Desk, DomainError};
use crate::model::ToolSpec;
use crate::skills::SkillRegistry;

pub use business::business_tools;

/// What a tool returns: `content` for the model, `details` for clients
/// (counts, diffs, the changed ticket…).
#[derive(Debug, Clone, PartialEq)]
pub struct ToolOutput {
    pub content: String,
    pub details: Value,
    pub is_error: bool,
}

impl ToolOutput {
    pub fn ok(content: impl Into<String>, details: Value) -> Self {
        Self {
            content: content.into(),
            details,
            is_error: false,
        }
    }

    /// `details` as the wire and the log carry them (`details_json`):
    /// JSON text, empty when there are none.
    pub fn details_json(&self) -> String {
        if self.details.is_null() {
            String::new()
        } else {
            self.details.to_string()
        }
    }

    pub fn error(content: impl Into<String>) -> Self {
        Self {
            content: content.into(),
            details: Value::Null,
            is_error: true,
        }
    }
}

/// Why a tool failed; its message is what the model reads.
#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    #[error(transparent)]
    Domain(#[from] DomainError),
    #[error("{0}")]
    Invalid(String),
}

/// What a running tool may use.
#[derive(Clone)]
pub struct ToolContext {
    pub desk: Arc<Desk>,
    pub skills: Arc<SkillRegistry>,
    /// Becomes true when the turn is cancelled or times out.
    pub cancel: watch::Receiver<bool>,
    /// The session and turn running the tools (`None` outside a session);
    /// [`ToolContext::for_call`] adds the call id. Stored on the change a
    /// tool makes, so a resumed turn never makes it twice.
    pub origin: Option<ToolOrigin>,
    /// The running session's workers (`None`: no sub-agents here — a
    /// worker's own turn, a direct call).
    pub agents: Option<Arc<dyn agents::SubAgents>>,
    /// The desk's reports (`None`: `render_report` says they are not
    /// available here).
    pub reports: Option<Arc<dyn report::ReportSource>>,
    /// How sure the model was of the fields this call decides (empty:
    /// unknown, or a person's call).
    pub confidence: Vec<tinycode_shared::proto::FieldConfidence>,
    /// `triage.reviewBelow`: a decision below it is held for a person.
    pub review_below: crate::domain::ticket::review::ReviewBelow,
}

impl ToolContext {
    /// The context of a model's call: its id, and its confidence.
    pub fn for_model_call(&self, call: &crate::model::ToolCall) -> Self {
        let confidence = call
            .confidence
            .iter()
            .map(|(field, value)| tinycode_shared::proto::FieldConfidence {
                field: field.clone(),
                value: *value,
            })
            .collect();
        Self {
            confidence,
            ..self.for_call(&call.id)
        }
    }

    /// The context of one call: the origin names the call.
    pub fn for_call(&self, call_id: &str) -> Self {
        Self {
            origin: self.origin.as_ref().map(|o| ToolOrigin {
                call_id: call_id.to_string(),
                ..o.clone()
            }),
            ..self.clone()
        }
    }
}

pub trait Tool: Send + Sync {
    fn name(&self) -> &str;
    fn description(&self) -> &str;
    /// JSON schema of the arguments.
    fn parameters(&self) -> Value;
    /// The tool's own permission rule, when the rule table does not know
    /// it (an MCP server's tools); `None`: the table decides.
    fn rule(&self) -> Option<crate::permissions::Rule> {
        None
    }
    /// Every call is reviewed: "always allow" is never remembered for it.
    fn review_required(&self) -> bool {
        false
    }
    /// What the tool would refuse anyway, found before a person is asked
    /// to approve the call (a ticket that does not exist, one not
    /// classified yet); `Ok` by default. The tool still checks again when
    /// it runs.
    fn check<'a>(
        &'a self,
        _args: &'a Value,
        _ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<(), ToolError>> {
        Box::pin(futures::future::ready(Ok(())))
    }
    /// Run with validated arguments.
    fn execute<'a>(
        &'a self,
        args: &'a Value,
        ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>>;
}

/// Tools that come and go while the daemon runs (an MCP server's, as it
/// connects, changes its list or fails); shared by every registry clone.
#[derive(Default)]
pub struct DynamicTools {
    tools: std::sync::RwLock<BTreeMap<String, Arc<dyn Tool>>>,
}

impl DynamicTools {
    /// Replace every tool whose name starts with `prefix` by `tools`.
    pub fn replace(&self, prefix: &str, tools: Vec<Arc<dyn Tool>>) {
        let mut all = self.tools.write().unwrap_or_else(|p| p.into_inner());
        all.retain(|name, _| !name.starts_with(prefix));
        for tool in tools {
            all.insert(tool.name().to_string(), tool);
        }
    }

    fn snapshot(&self) -> Vec<Arc<dyn Tool>> {
        self.tools
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .cloned()
            .collect()
    }

    fn get(&self, name: &str) -> Option<Arc<dyn Tool>> {
        self.tools
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(name)
            .cloned()
    }
}

#[derive(Default, Clone)]
pub struct ToolRegistry {
    tools: BTreeMap<String, Arc<dyn Tool>>,
    dynamic: Arc<DynamicTools>,
    /// A read-only registry's answer to any other tool: the call is denied
    /// before the permission gate asks anyone.
    refusal: Option<&'static str>,
}

impl ToolRegistry {
    /// The business tools and `load_skill`.
    pub fn standard() -> Self {
        let mut registry = Self::default();
        for tool in business_tools() {
            registry.register(tool);
        }
        registry
    }

    /// The read-only business tools and `load_skill` (a worker's); any
    /// other call is denied with `why`.
    pub fn read_only(why: &'static str) -> Self {
        let mut registry = Self {
            refusal: Some(why),
            ..Self::default()
        };
        for tool in business_tools() {
            if crate::permissions::is_read_only(tool.name()) {
                registry.register(tool);
            }
        }
        registry
    }

    /// Add a tool; a later tool with the same name replaces the earlier one.
    pub fn register(&mut self, tool: Arc<dyn Tool>) {
        self.tools.insert(tool.name().to_string(), tool);
    }

    /// The permission rule a tool carries itself, if any.
    pub fn rule(&self, name: &str) -> Option<crate::permissions::Rule> {
        if let Some(why) = self.refusal
            && !self.tools.contains_key(name)
        {
            return Some(crate::permissions::Rule::Deny(why.to_string()));
        }
        self.tools
            .get(name)
            .cloned()
            .or_else(|| self.dynamic.get(name))
            .and_then(|t| t.rule())
    }

    /// Whether every call of `name` needs its own approval (the rule
    /// table's review-required tools, and tools that say so themselves).
    pub fn review_required(&self, name: &str) -> bool {
        crate::permissions::REVIEW_REQUIRED.contains(&name)
            || self
                .tools
                .get(name)
                .cloned()
                .or_else(|| self.dynamic.get(name))
                .is_some_and(|t| t.review_required())
    }

    /// Where tools that come and go are kept (MCP servers').
    pub fn dynamic(&self) -> Arc<DynamicTools> {
        Arc::clone(&self.dynamic)
    }

    pub fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.tools.keys().cloned().collect();
        names.extend(self.dynamic.snapshot().iter().map(|t| t.name().to_string()));
        names
    }

    /// What the model is offered.
    pub fn specs(&self) -> Vec<ToolSpec> {
        self.tools
            .values()
            .cloned()
            .chain(self.dynamic.snapshot())
            .map(|t| ToolSpec {
                name: t.name().to_string(),
                description: t.description().to_string(),
                parameters: t.parameters(),
            })
            .collect()
    }

    /// Validate the arguments, run the tool (cancellable), and turn every
    /// failure into an error result the model can act on.
    /// What a call would be refused for anyway — an unknown tool,
    /// arguments its schema refuses, the tool's own [`Tool::check`] — so
    /// that nobody is asked to approve a call that cannot succeed.
    pub async fn check(
        &self,
        name: &str,
        args: &Value,
        ctx: &ToolContext,
    ) -> Result<(), ToolOutput> {
        let Some(tool) = self
            .tools
            .get(name)
            .cloned()
            .or_else(|| self.dynamic.get(name))
        else {
            return Err(ToolOutput::error(format!(
                "there is no tool named {name:?}; available tools: {}",
                self.names().join(", ")
            )));
        };
        if let Err(problem) = schema::validate(&tool.parameters(), args) {
            return Err(ToolOutput::error(format!("{name}: {problem}")));
        }
        tool.check(args, ctx)
            .await
            .map_err(|e| ToolOutput::error(e.to_string()))
    }

    pub async fn call(&self, name: &str, args: &Value, ctx: &ToolContext) -> ToolOutput {
        let Some(tool) = self
            .tools
            .get(name)
            .cloned()
            .or_else(|| self.dynamic.get(name))
        else {
            return ToolOutput::error(format!(
                "there is no tool named {name:?}; available tools: {}",
                self.names().join(", ")
            ));
        };
        if let Err(problem) = schema::validate(&tool.parameters(), args) {
            return ToolOutput::error(format!("{name}: {problem}"));
        }
        let mut cancel = ctx.cancel.clone();
        if *cancel.borrow() {
            return ToolOutput::error(format!("{name} was not run: the turn was cancelled"));
        }
        tokio::select! {
            result = tool.execute(args, ctx) => match result {
                Ok(output) => output,
                Err(e) => ToolOutput::error(e.to_string()),
            },
            _ = cancel.wait_for(|c| *c) => ToolOutput::error(format!("{name} was cancelled before it finished")),
        }
    }
}

#[cfg(test)]
mod tests;
