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
}

pub async fn run(ctx: &Ctx, action: McpAction) -> anyhow::Result<ExitCode> {
    let McpAction::Status = action;
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
