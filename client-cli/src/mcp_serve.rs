//! `tinycode mcp serve`: the desk offered to other agents over MCP (stdio).
//!
//! A translator only: tools are the daemon's `Calls` service (the daemon
//! runs them through its permission gate and keeps approvals durable),
//! resources are tickets (`ticket://T-1001`) and articles
//! (`kb://refund-policy`), prompts are the workspace's skills. The daemon
//! is started when it is not running; when it restarts while a call waits,
//! the call is made again with the same arguments, which carries on with
//! the stored call instead of making a new one.

use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, GetPromptRequestParams,
    GetPromptResponse, GetPromptResult, Implementation, ListPromptsResult,
    ListResourceTemplatesResult, ListResourcesResult, ListToolsResult, PaginatedRequestParams,
    ProgressNotificationParam, Prompt, PromptMessage, ReadResourceRequestParams,
    ReadResourceResponse, ReadResourceResult, Resource, ResourceContents, ResourceTemplate, Role,
    ServerCapabilities, ServerConfig, Tool, ToolAnnotations,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler, ServiceExt};
use tinycode_shared::client::DaemonChannel;
use tinycode_shared::proto::calls_client::CallsClient;
use tinycode_shared::proto::knowledge_client::KnowledgeClient;
use tinycode_shared::proto::tickets_client::TicketsClient;
use tinycode_shared::proto::{
    CallToolRequest, GetArticleRequest, GetSkillRequest, GetTicketRequest, ListArticlesRequest,
    ListCallToolsRequest, ListSkillsRequest, ListTicketsRequest, call_tool_update,
};
use tonic::Code;

use crate::Ctx;

/// How many tickets `resources/list` names (newest first); any ticket can
/// be read by its URI.
const LISTED_TICKETS: u32 = 200;
/// How often a call whose daemon went away is tried again.
const RECONNECT_EVERY: Duration = Duration::from_millis(250);
/// How long a restart of the daemon may take before the call gives up.
const RECONNECT_FOR: Duration = Duration::from_secs(60);

pub async fn run(ctx: Ctx, wait_seconds: u32) -> anyhow::Result<std::process::ExitCode> {
    let bridge = Bridge {
        ctx: Arc::new(ctx),
        wait_seconds,
    };
    // Fail early, with the reason, when there is no daemon to bridge to.
    bridge.channel().await?;
    let running = bridge
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|e| anyhow::anyhow!("the MCP session did not start: {e}"))?;
    running
        .waiting()
        .await
        .map_err(|e| anyhow::anyhow!("the MCP session ended with an error: {e}"))?;
    Ok(std::process::ExitCode::SUCCESS)
}

#[derive(Clone)]
struct Bridge {
    ctx: Arc<Ctx>,
    wait_seconds: u32,
}

/// A daemon error as the MCP client sees it.
fn mcp_error(status: tonic::Status) -> McpError {
    match status.code() {
        Code::NotFound => McpError::resource_not_found(status.message().to_string(), None),
        Code::InvalidArgument | Code::OutOfRange => {
            McpError::invalid_params(status.message().to_string(), None)
        }
        _ => McpError::internal_error(status.message().to_string(), None),
    }
}

fn unavailable(e: anyhow::Error) -> McpError {
    McpError::internal_error(format!("tinycoded is not reachable: {e:#}"), None)
}

impl Bridge {
    async fn channel(&self) -> anyhow::Result<DaemonChannel> {
        self.ctx.connect().await
    }

    /// Make the call; on a lost daemon, make it again (the daemon carries
    /// on with the stored call).
    async fn call(
        &self,
        caller: String,
        params: CallToolRequestParams,
        context: &RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let request = CallToolRequest {
            caller,
            tool: params.name.to_string(),
            arguments_json: serde_json::Value::Object(params.arguments.unwrap_or_default())
                .to_string(),
            wait_seconds: self.wait_seconds,
        };
        let progress = context.meta.get_progress_token();
        let lost_since = std::time::Instant::now();
        loop {
            let attempt = async {
                let mut calls = CallsClient::new(self.channel().await.map_err(Lost::Daemon)?);
                let mut stream = calls
                    .call(request.clone())
                    .await
                    .map_err(Lost::from)?
                    .into_inner();
                let mut ticks = 0.0;
                while let Some(update) = stream.message().await.map_err(Lost::from)? {
                    match update.update {
                        Some(call_tool_update::Update::Waiting(w)) => {
                            if let Some(token) = &progress {
                                ticks += 1.0;
                                let mut note = ProgressNotificationParam::new(token.clone(), ticks);
                                note.message = Some(format!(
                                    "waiting {} s for approval {} ({}); decide it with `tinycode approvals approve {}`",
                                    w.waited_seconds, w.approval_id, w.reason, w.approval_id
                                ));
                                let _ = context.peer.notify_progress(note).await;
                            }
                        }
                        Some(call_tool_update::Update::Result(r)) => {
                            let content = vec![ContentBlock::text(r.content)];
                            return Ok(if r.is_error {
                                CallToolResult::error(content)
                            } else {
                                CallToolResult::success(content)
                            });
                        }
                        Some(call_tool_update::Update::Pending(p)) => {
                            return Ok(CallToolResult::error(vec![ContentBlock::text(p.message)]));
                        }
                        None => {}
                    }
                }
                Err(Lost::Stream)
            };
            let outcome = tokio::select! {
                outcome = attempt => outcome,
                () = context.ct.cancelled() => {
                    return Err(McpError::internal_error("the call was cancelled; a pending approval stays pending", None));
                }
            };
            match outcome {
                Ok(result) => return Ok(result),
                Err(Lost::Refused(status)) => return Err(mcp_error(status)),
                Err(lost) if lost_since.elapsed() < RECONNECT_FOR => {
                    eprintln!(
                        "tinycode mcp serve: lost tinycoded during a call ({lost}); calling again"
                    );
                    tokio::time::sleep(RECONNECT_EVERY).await;
                }
                Err(lost) => {
                    return Err(McpError::internal_error(
                        format!(
                            "tinycoded went away during the call and did not come back within {} s: {lost}",
                            RECONNECT_FOR.as_secs()
                        ),
                        None,
                    ));
                }
            }
        }
    }
}

/// Why one attempt of a call ended without an answer.
#[derive(Debug, thiserror::Error)]
enum Lost {
    #[error("cannot reach tinycoded: {0:#}")]
    Daemon(anyhow::Error),
    #[error("the connection to tinycoded broke: {0}")]
    Broken(tonic::Status),
    #[error("the call's stream ended without an answer")]
    Stream,
    #[error("{0}")]
    Refused(tonic::Status),
}

impl From<tonic::Status> for Lost {
    fn from(status: tonic::Status) -> Self {
        match status.code() {
            Code::Unavailable | Code::Unknown | Code::Cancelled => Lost::Broken(status),
            _ => Lost::Refused(status),
        }
    }
}

/// `ticket://T-1001` → ("ticket", "T-1001").
fn parse_uri(uri: &str) -> Option<(&str, &str)> {
    let (scheme, id) = uri.split_once("://")?;
    (!id.is_empty()).then_some((scheme, id))
}

impl ServerHandler for Bridge {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_resources()
                .enable_prompts()
                .build(),
        )
        .with_server_info(Implementation::new("tinycode", env!("CARGO_PKG_VERSION")))
        .with_instructions(
            "A customer-support desk. Read tickets (ticket://ID) and knowledge articles (kb://ID), classify and route tickets; escalations, customer replies and knowledge edits wait for a human's approval: when a call answers that it waits for approval A-n, call it again with the same arguments after the human decided.",
        )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let channel = self.channel().await.map_err(unavailable)?;
        let tools = CallsClient::new(channel)
            .list_tools(ListCallToolsRequest {})
            .await
            .map_err(mcp_error)?
            .into_inner()
            .tools;
        let tools = tools
            .into_iter()
            .map(|t| {
                let schema: serde_json::Map<String, serde_json::Value> =
                    serde_json::from_str(&t.input_schema_json).unwrap_or_default();
                let description = match t.rule.as_str() {
                    "ask" => format!("{} (Needs a human's approval.)", t.description),
                    _ => t.description,
                };
                Tool::new(t.name, description, Arc::new(schema)).with_annotations(
                    ToolAnnotations::new()
                        .read_only(t.read_only)
                        .destructive(t.review_required || t.rule == "ask"),
                )
            })
            .collect();
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let caller = context
            .peer
            .peer_info()
            .map(|info| info.client_info.name.clone())
            .filter(|n| !n.trim().is_empty())
            .unwrap_or_else(|| "mcp-client".into());
        Ok(self.call(caller, request, &context).await?.into())
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, McpError> {
        let channel = self.channel().await.map_err(unavailable)?;
        let tickets = TicketsClient::new(channel.clone())
            .list(ListTicketsRequest {
                limit: LISTED_TICKETS,
                ..Default::default()
            })
            .await
            .map_err(mcp_error)?
            .into_inner()
            .tickets;
        let articles = KnowledgeClient::new(channel)
            .list(ListArticlesRequest::default())
            .await
            .map_err(mcp_error)?
            .into_inner()
            .articles;
        let resources = tickets
            .into_iter()
            .map(|t| {
                Resource::new(
                    format!("ticket://{}", t.id),
                    format!("{}: {}", t.id, t.subject),
                )
                .with_mime_type("application/json")
            })
            .chain(articles.into_iter().map(|a| {
                Resource::new(format!("kb://{}", a.id), a.title).with_mime_type("text/markdown")
            }))
            .collect();
        Ok(ListResourcesResult::with_all_items(resources))
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, McpError> {
        Ok(ListResourceTemplatesResult::with_all_items(vec![
            ResourceTemplate::new("ticket://{id}", "ticket").with_mime_type("application/json"),
            ResourceTemplate::new("kb://{id}", "knowledge article").with_mime_type("text/markdown"),
        ]))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, McpError> {
        let uri = request.uri;
        let channel = self.channel().await.map_err(unavailable)?;
        let contents = match parse_uri(&uri) {
            Some(("ticket", id)) => {
                let ticket = TicketsClient::new(channel)
                    .get(GetTicketRequest {
                        id: id.to_string(),
                        ..Default::default()
                    })
                    .await
                    .map_err(mcp_error)?
                    .into_inner();
                ResourceContents::text(
                    tinycode_shared::render::message_json("tinycode.v1.Ticket", &ticket)
                        .to_string(),
                    &uri,
                )
                .with_mime_type("application/json")
            }
            Some(("kb", id)) => {
                let article = KnowledgeClient::new(channel)
                    .get(GetArticleRequest { id: id.to_string() })
                    .await
                    .map_err(mcp_error)?
                    .into_inner();
                ResourceContents::text(article.body, &uri).with_mime_type("text/markdown")
            }
            _ => {
                return Err(McpError::resource_not_found(
                    format!("{uri} is not a tinycode resource; use ticket://ID or kb://ID"),
                    None,
                ));
            }
        };
        Ok(ReadResourceResult::new(vec![contents]).into())
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, McpError> {
        let channel = self.channel().await.map_err(unavailable)?;
        let skills = CallsClient::new(channel)
            .list_skills(ListSkillsRequest {})
            .await
            .map_err(mcp_error)?
            .into_inner()
            .skills;
        Ok(ListPromptsResult::with_all_items(
            skills
                .into_iter()
                .map(|s| Prompt::new(s.name, Some(s.description), None))
                .collect(),
        ))
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, McpError> {
        let channel = self.channel().await.map_err(unavailable)?;
        let skill = CallsClient::new(channel)
            .get_skill(GetSkillRequest {
                name: request.name.clone(),
            })
            .await
            .map_err(mcp_error)?
            .into_inner();
        Ok(
            GetPromptResult::new(vec![PromptMessage::new_text(Role::User, skill.body)])
                .with_description(skill.description)
                .into(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resource_uris_name_a_kind_and_an_id() {
        assert_eq!(parse_uri("ticket://T-1001"), Some(("ticket", "T-1001")));
        assert_eq!(
            parse_uri("kb://refund-policy"),
            Some(("kb", "refund-policy"))
        );
        assert_eq!(parse_uri("kb://"), None);
        assert_eq!(parse_uri("T-1001"), None);
    }

    #[test]
    fn a_lost_daemon_is_retried_and_a_refusal_is_not() {
        assert!(matches!(
            Lost::from(tonic::Status::unavailable("gone")),
            Lost::Broken(_)
        ));
        assert!(matches!(
            Lost::from(tonic::Status::not_found("no tool")),
            Lost::Refused(_)
        ));
    }
}
