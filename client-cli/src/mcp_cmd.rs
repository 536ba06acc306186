//! `tinycode mcp list|add|remove|status|serve`: the MCP servers whose tools
//! the agent uses (config `mcpServers`, changed without a daemon restart),
//! and the desk served over MCP to other agents.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::{Args, Subcommand};
use tinycode_shared::proto::extensions_client::ExtensionsClient;
use tinycode_shared::proto::{
    AddMcpServerRequest, ListMcpServersRequest, McpServerInfo, McpServerStatus,
    RemoveMcpServerRequest,
};

use crate::{Ctx, output};

#[derive(Subcommand, Debug)]
pub enum McpAction {
    /// The configured servers: state, tools and how each is started.
    List,
    /// Each MCP server of config `mcpServers`: connecting, ready (with its
    /// tool count), failed (with the reason), disabled.
    Status,
    /// Add a server to `.tinycode/config.json` and connect it (no restart):
    /// `tinycode mcp add everything -- npx -y @modelcontextprotocol/server-everything`.
    Add(AddArgs),
    /// Remove a server from the config; its process stops, its tools go.
    Remove { name: String },
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

#[derive(Args, Debug)]
pub struct AddArgs {
    /// The server's name (letters, digits, `-`, `_`); its tools become
    /// `mcp__<name>__<tool>`.
    name: String,
    /// The command and its arguments (after `--`).
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    command: Vec<String>,
    /// An environment variable for the server, `KEY=VALUE` (repeatable).
    #[arg(short, long = "env", value_name = "KEY=VALUE")]
    env: Vec<String>,
    /// Its working directory (relative to the workspace, or absolute).
    #[arg(long)]
    cwd: Option<String>,
    /// Seconds per call (default 30).
    #[arg(long)]
    timeout: Option<u64>,
    /// Run the tools it marks `readOnlyHint` without asking.
    #[arg(long)]
    allow_read_only_tools: bool,
    /// Add it switched off (`"enabled": false`).
    #[arg(long)]
    disabled: bool,
    /// The server's whole object as it goes under `mcpServers`, instead of
    /// the options above: `--spec '{"command":"uvx","args":["x"]}'`.
    #[arg(long, conflicts_with_all = ["command", "env", "cwd", "timeout"])]
    spec: Option<String>,
    /// Replace a server of that name.
    #[arg(long)]
    replace: bool,
    /// Return at once instead of waiting (up to 15 s) to say whether it
    /// connected.
    #[arg(long)]
    no_wait: bool,
}

pub async fn run(ctx: Ctx, action: McpAction) -> anyhow::Result<ExitCode> {
    match action {
        McpAction::List => list(&ctx, true).await,
        McpAction::Status => list(&ctx, false).await,
        McpAction::Add(args) => add(&ctx, args).await,
        McpAction::Remove { name } => {
            client(&ctx)
                .await?
                .remove_mcp_server(RemoveMcpServerRequest { name: name.clone() })
                .await?;
            if ctx.json {
                output::json_pretty(&serde_json::json!({"removed": name}));
            } else {
                println!("removed MCP server `{name}`; its tools are gone");
            }
            Ok(ExitCode::SUCCESS)
        }
        McpAction::Serve { wait } => crate::mcp_serve::run(ctx, wait).await,
    }
}

async fn client(
    ctx: &Ctx,
) -> anyhow::Result<ExtensionsClient<tinycode_shared::client::DaemonChannel>> {
    Ok(ExtensionsClient::new(ctx.connect().await?))
}

async fn servers(ctx: &Ctx) -> anyhow::Result<Vec<McpServerInfo>> {
    Ok(client(ctx)
        .await?
        .list_mcp_servers(ListMcpServersRequest {})
        .await?
        .into_inner()
        .servers)
}

fn status_of(info: &McpServerInfo) -> McpServerStatus {
    info.status.clone().unwrap_or_default()
}

/// `ready (12 tools)`, `failed: why`, `connecting`, `disabled`.
fn state_line(s: &McpServerStatus) -> String {
    match s.state.as_str() {
        "ready" => format!("ready ({} tools)", s.tools),
        "failed" | "unsupported" => format!("{}: {}", s.state, s.error),
        other => other.to_string(),
    }
}

async fn list(ctx: &Ctx, with_launch: bool) -> anyhow::Result<ExitCode> {
    let servers = servers(ctx).await?;
    if ctx.json {
        output::json_pretty(&serde_json::json!({
            "servers": servers.iter().map(|info| {
                let s = status_of(info);
                serde_json::json!({
                    "name": s.name, "state": s.state, "tools": s.tools,
                    "error": s.error, "starts": s.starts, "enabled": info.enabled,
                    "launch": info.launch,
                    "spec": serde_json::from_str::<serde_json::Value>(&info.spec_json).unwrap_or_default(),
                })
            }).collect::<Vec<_>>(),
        }));
        return Ok(ExitCode::SUCCESS);
    }
    if servers.is_empty() {
        println!(
            "{}",
            tinycode_shared::hint::localize(
                "no MCP servers (config `mcpServers`; add one with `tinycode mcp add NAME -- COMMAND …`)"
            )
        );
    }
    for info in &servers {
        let s = status_of(info);
        let detail = match s.state.as_str() {
            "ready" => format!("{} tools", s.tools),
            "failed" | "unsupported" => s.error.clone(),
            _ => String::new(),
        };
        if with_launch {
            println!(
                "{:<20} {:<12} {:<10} {}",
                s.name, s.state, detail, info.launch
            );
        } else {
            println!("{:<20} {:<12} {detail}", s.name, s.state);
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The server's object under `mcpServers` from the options.
fn spec_of(args: &AddArgs) -> anyhow::Result<serde_json::Value> {
    if let Some(spec) = &args.spec {
        return serde_json::from_str(spec).map_err(|e| anyhow::anyhow!("--spec is not JSON: {e}"));
    }
    let Some((command, rest)) = args.command.split_first() else {
        anyhow::bail!(
            "say how to start the server after `--`, e.g. `tinycode mcp add {} -- npx -y @modelcontextprotocol/server-everything`, or give --spec",
            args.name
        );
    };
    let mut spec = serde_json::json!({ "command": command });
    if !rest.is_empty() {
        spec["args"] = rest.into();
    }
    if !args.env.is_empty() {
        let mut env = serde_json::Map::new();
        for pair in &args.env {
            let (k, v) = pair
                .split_once('=')
                .ok_or_else(|| anyhow::anyhow!("--env takes KEY=VALUE, got {pair:?}"))?;
            env.insert(k.to_string(), v.into());
        }
        spec["env"] = env.into();
    }
    if let Some(cwd) = &args.cwd {
        spec["cwd"] = cwd.as_str().into();
    }
    if let Some(timeout) = args.timeout {
        spec["timeoutSeconds"] = timeout.into();
    }
    if args.allow_read_only_tools {
        spec["allowReadOnlyTools"] = true.into();
    }
    if args.disabled {
        spec["enabled"] = false.into();
    }
    Ok(spec)
}

async fn add(ctx: &Ctx, args: AddArgs) -> anyhow::Result<ExitCode> {
    let spec = spec_of(&args)?;
    let added = client(ctx)
        .await?
        .add_mcp_server(AddMcpServerRequest {
            name: args.name.clone(),
            spec_json: spec.to_string(),
            replace: args.replace,
        })
        .await?
        .into_inner();
    let mut state = status_of(&added);
    let deadline = Instant::now() + Duration::from_secs(15);
    while !args.no_wait && state.state == "connecting" && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(200)).await;
        if let Some(now) = servers(ctx)
            .await?
            .iter()
            .find(|s| status_of(s).name == args.name)
        {
            state = status_of(now);
        }
    }
    if ctx.json {
        output::json_pretty(&serde_json::json!({
            "name": args.name, "state": state.state, "tools": state.tools, "error": state.error,
        }));
    } else {
        println!("added MCP server `{}`: {}", args.name, state_line(&state));
    }
    Ok(match state.state.as_str() {
        "failed" | "unsupported" => {
            if !ctx.json {
                eprintln!(
                    "{}",
                    tinycode_shared::hint::localize(&format!(
                        "it stays in the config and is retried with backoff; `tinycode mcp remove {}` drops it",
                        args.name
                    ))
                );
            }
            ExitCode::from(2)
        }
        _ => ExitCode::SUCCESS,
    })
}
