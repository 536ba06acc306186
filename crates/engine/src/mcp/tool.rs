//! An MCP server's tool in the registry: `mcp__<server>__<tool>`, its input
//! schema as given, arguments checked (schema, 64 KiB, nesting depth 10)
//! before they are sent, results capped at 2 MiB, a time limit per call.

use std::time::Duration;

use futures::future::BoxFuture;
use rmcp::Peer;
use rmcp::model::{CallToolRequestParams, ContentBlock, Tool as RemoteTool};
use rmcp::service::RoleClient;
use serde_json::Value;

use crate::tools::{Tool, ToolContext, ToolError, ToolOutput};

/// Largest arguments sent to a server, serialized.
pub const MAX_ARGS_BYTES: usize = 64 * 1024;
/// Deepest nesting of arguments sent to a server.
pub const MAX_ARGS_DEPTH: usize = 10;
/// Largest result taken from a server (then cut like any tool result).
pub const MAX_RESULT_BYTES: usize = 2 * 1024 * 1024;

pub(super) struct McpTool {
    full_name: String,
    remote_name: String,
    server: String,
    description: String,
    schema: Value,
    peer: Peer<RoleClient>,
    timeout: Duration,
    /// Runs without asking: the server says it changes nothing
    /// (`readOnlyHint`) and config trusts that (`allowReadOnlyTools`).
    allowed: bool,
    /// The server says it may destroy (`destructiveHint`): every call is
    /// reviewed, never remembered by "always allow".
    destructive: bool,
}

impl McpTool {
    /// `None` for a tool whose name cannot be part of a registry name.
    pub(super) fn new(
        server: &str,
        remote: RemoteTool,
        peer: Peer<RoleClient>,
        timeout: Duration,
        trust_read_only: bool,
    ) -> Option<Self> {
        let name = remote.name.to_string();
        let usable = !name.is_empty()
            && name.len() <= 64
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
        if !usable {
            tracing::warn!(server, tool = %name, "an MCP tool with an unusable name is left out");
            return None;
        }
        let annotations = remote.annotations.clone().unwrap_or_default();
        Some(Self {
            full_name: format!("{}{name}", super::prefix(server)),
            description: remote
                .description
                .as_deref()
                .unwrap_or("(no description)")
                .chars()
                .take(2000)
                .collect(),
            schema: Value::Object((*remote.input_schema).clone()),
            remote_name: name,
            server: server.to_string(),
            peer,
            timeout,
            allowed: trust_read_only
                && annotations.read_only_hint == Some(true)
                && annotations.destructive_hint != Some(true),
            destructive: annotations.destructive_hint == Some(true),
        })
    }
}

impl Tool for McpTool {
    fn name(&self) -> &str {
        &self.full_name
    }

    fn description(&self) -> &str {
        &self.description
    }

    fn parameters(&self) -> Value {
        self.schema.clone()
    }

    fn review_required(&self) -> bool {
        self.destructive
    }

    fn rule(&self) -> Option<crate::permissions::Rule> {
        Some(if self.allowed {
            crate::permissions::Rule::Allow
        } else {
            crate::permissions::Rule::Ask(format!(
                "{} comes from the MCP server {}: its tools need a human's approval",
                self.full_name, self.server
            ))
        })
    }

    fn execute<'a>(
        &'a self,
        args: &'a Value,
        _ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        Box::pin(async move {
            check_arguments(args)?;
            let mut params = CallToolRequestParams::new(self.remote_name.clone());
            if let Value::Object(map) = args {
                params.arguments = Some(map.clone());
            }
            let result = tokio::time::timeout(self.timeout, self.peer.call_tool(params))
                .await
                .map_err(|_| {
                    ToolError::Invalid(format!(
                        "{}: the MCP server {} did not answer within {} s; try again later or do without it",
                        self.full_name,
                        self.server,
                        self.timeout.as_secs()
                    ))
                })?
                .map_err(|e| {
                    ToolError::Invalid(format!(
                        "{}: the MCP server {} failed: {e}",
                        self.full_name, self.server
                    ))
                })?;
            let mut text = result
                .content
                .iter()
                .map(content_text)
                .collect::<Vec<_>>()
                .join("\n");
            if text.is_empty()
                && let Some(structured) = &result.structured_content
            {
                text = structured.to_string();
            }
            if text.len() > MAX_RESULT_BYTES {
                let mut cut = MAX_RESULT_BYTES;
                while !text.is_char_boundary(cut) {
                    cut -= 1;
                }
                text.truncate(cut);
                text.push_str("\n[… the server's result was cut at 2 MiB …]");
            }
            let details = serde_json::json!({ "server": self.server, "tool": self.remote_name });
            if result.is_error == Some(true) {
                return Ok(ToolOutput {
                    content: format!("{} reported an error: {text}", self.full_name),
                    details,
                    is_error: true,
                });
            }
            Ok(ToolOutput::ok(text, details))
        })
    }
}

/// What a content block says, as text.
fn content_text(block: &ContentBlock) -> String {
    match block {
        ContentBlock::Text(t) => t.text.clone(),
        ContentBlock::Image(i) => format!("[an image, {}]", i.mime_type),
        ContentBlock::Audio(a) => format!("[audio, {}]", a.mime_type),
        ContentBlock::Resource(r) => serde_json::to_string(&r.resource).unwrap_or_default(),
        ContentBlock::ResourceLink(l) => format!("[a resource: {}]", l.uri),
        #[allow(unreachable_patterns)]
        _ => "[content of a kind tinycode does not show]".into(),
    }
}

/// Arguments within the limits a server is sent.
fn check_arguments(args: &Value) -> Result<(), ToolError> {
    let bytes = args.to_string().len();
    if bytes > MAX_ARGS_BYTES {
        return Err(ToolError::Invalid(format!(
            "the arguments are {bytes} bytes; an MCP call may send at most {MAX_ARGS_BYTES}"
        )));
    }
    let depth = depth(args);
    if depth > MAX_ARGS_DEPTH {
        return Err(ToolError::Invalid(format!(
            "the arguments nest {depth} levels deep; an MCP call may nest at most {MAX_ARGS_DEPTH}"
        )));
    }
    Ok(())
}

fn depth(v: &Value) -> usize {
    match v {
        Value::Array(items) => 1 + items.iter().map(depth).max().unwrap_or(0),
        Value::Object(map) => 1 + map.values().map(depth).max().unwrap_or(0),
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_over_the_limits_are_refused_before_sending() {
        assert!(check_arguments(&serde_json::json!({"a": "x"})).is_ok());
        let big = serde_json::json!({"a": "x".repeat(MAX_ARGS_BYTES)});
        assert!(
            check_arguments(&big)
                .unwrap_err()
                .to_string()
                .contains("at most 65536")
        );
        let mut deep = serde_json::json!(1);
        for _ in 0..12 {
            deep = serde_json::json!({ "d": deep });
        }
        assert!(
            check_arguments(&deep)
                .unwrap_err()
                .to_string()
                .contains("nest 12 levels")
        );
    }
}
