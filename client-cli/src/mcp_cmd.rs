//! `tinycode mcp status`: the MCP servers of the daemon and their state.

use std::process::ExitCode;

use clap::Subcommand;
use tinycode_shared::proto::GetStatusRequest;
use tinycode_shared::proto::daemon_client::DaemonClient;

use crate::{Ctx, output};

#[derive(Subcommand, Debug)]
pub enum McpAction {
    /// Each MCP server of config `mcpServers`: connecting, ready (with its
    /// tool count), failed (with the reason), disabled.
    Status,
    /// Serve this desk over MCP on stdin/stdout, for another agent (Claude
    /// Code, Codex, any MCP client): the business tools through the
    /// daemon's permission gate, tickets and articles as resources, skills
    /// as prompts. Register it as `{"command": "tinycode", "args": ["mcp",
    /// "serve"], "cwd": "/path/to/desk"}`.
    Serve {
        /// Seconds a call waits for a pending approval before answering
        /// that it waits (naming the approval); calling again with the same
        /// arguments after the decision gives the result.
        #[arg(long, default_value_t = 50)]
        wait: u32,
    },
}

pub async fn run(ctx: Ctx, action: McpAction) -> anyhow::Result<ExitCode> {
    match action {
        McpAction::Status => status(&ctx).await,
        McpAction::Serve { wait } => crate::mcp_serve::run(ctx, wait).await,
    }
}

async fn status(ctx: &Ctx) -> anyhow::Result<ExitCode> {
    let status = DaemonClient::new(ctx.connect().await?)
        .get_status(GetStatusRequest {})
        .await?
        .into_inner();
    if ctx.json {
        output::json_pretty(&serde_json::json!({
            "servers": status.mcp_servers.iter().map(|s| serde_json::json!({
                "name": s.name, "state": s.state, "tools": s.tools,
                "error": s.error, "starts": s.starts,
            })).collect::<Vec<_>>(),
        }));
        return Ok(ExitCode::SUCCESS);
    }
    if status.mcp_servers.is_empty() {
        println!("no MCP servers (config `mcpServers`)");
    }
    for s in &status.mcp_servers {
        let detail = match s.state.as_str() {
            "ready" => format!("{} tools", s.tools),
            "failed" | "unsupported" => s.error.clone(),
            _ => String::new(),
        };
        println!("{:<20} {:<12} {detail}", s.name, s.state);
    }
    Ok(ExitCode::SUCCESS)
}
