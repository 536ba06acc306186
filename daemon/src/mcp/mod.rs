//! MCP servers' tools in the one registry (rmcp, over a child process's
//! stdio).
//!
//! Every enabled server of config `mcpServers` is started at daemon start,
//! all in parallel and without holding the start up: a supervisor task per
//! server (`server.rs`) connects, lists the tools and registers them as
//! `mcp__<server>__<tool>` (`tool.rs`), refreshes them on
//! `notifications/tools/list_changed`, and when the server exits, hangs at
//! start or speaks garbage, marks it failed with the reason, withdraws its
//! tools and starts it again with backoff. The daemon and the other servers
//! go on. `McpHub::status` is what `Daemon.GetStatus` and `tinycode mcp
//! status` show.

mod server;
mod tool;

use std::path::Path;
use std::sync::{Arc, Mutex};

use tokio::sync::watch;

use crate::config::McpServerSpec;
use crate::tools::DynamicTools;

/// Where one server is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerState {
    Connecting,
    Ready {
        tools: u32,
    },
    Failed {
        error: String,
    },
    Disabled,
    /// A transport this version does not speak (`http`, `sse`).
    Unsupported {
        kind: String,
    },
}

impl ServerState {
    pub fn name(&self) -> &'static str {
        match self {
            Self::Connecting => "connecting",
            Self::Ready { .. } => "ready",
            Self::Failed { .. } => "failed",
            Self::Disabled => "disabled",
            Self::Unsupported { .. } => "unsupported",
        }
    }
}

/// One server's name and state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerStatus {
    pub name: String,
    pub state: ServerState,
    /// Starts since the daemon started (restarts after failures count).
    pub starts: u32,
}

/// The MCP servers of the daemon.
pub struct McpHub {
    servers: Vec<Arc<Mutex<ServerStatus>>>,
    stop: watch::Sender<bool>,
}

impl McpHub {
    /// Start every server of `specs`; their tools go to `tools`.
    pub fn start(specs: &[McpServerSpec], workspace: &Path, tools: Arc<DynamicTools>) -> Self {
        let (stop, stopping) = watch::channel(false);
        let servers = specs
            .iter()
            .map(|spec| {
                let status = Arc::new(Mutex::new(ServerStatus {
                    name: spec.name.clone(),
                    state: ServerState::Connecting,
                    starts: 0,
                }));
                server::supervise(
                    spec.clone(),
                    workspace.to_path_buf(),
                    Arc::clone(&tools),
                    Arc::clone(&status),
                    stopping.clone(),
                );
                status
            })
            .collect();
        Self { servers, stop }
    }

    /// Every server, in config order.
    pub fn status(&self) -> Vec<ServerStatus> {
        self.servers
            .iter()
            .map(|s| crate::sync::lock(s).clone())
            .collect()
    }

    /// Stop every server (their child processes are killed).
    pub fn stop(&self) {
        self.stop.send_replace(true);
    }
}

impl Drop for McpHub {
    fn drop(&mut self) {
        self.stop();
    }
}

/// `mcp__<server>__` : the prefix of a server's tools.
pub fn prefix(server: &str) -> String {
    format!("mcp__{server}__")
}
