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

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use tokio::sync::watch;
use tokio::task::JoinHandle;

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

/// One running supervisor.
struct Running {
    spec: McpServerSpec,
    status: Arc<Mutex<ServerStatus>>,
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

/// The MCP servers of the daemon.
pub struct McpHub {
    workspace: PathBuf,
    tools: Arc<DynamicTools>,
    servers: Mutex<Vec<Running>>,
    /// One reconfiguration at a time (a removed server's supervisor is
    /// awaited before a new one of the same name starts).
    reconfiguring: tokio::sync::Mutex<()>,
}

impl McpHub {
    /// Start every server of `specs`; their tools go to `tools`.
    pub fn start(specs: &[McpServerSpec], workspace: &Path, tools: Arc<DynamicTools>) -> Self {
        let hub = Self {
            workspace: workspace.to_path_buf(),
            tools,
            servers: Mutex::new(Vec::new()),
            reconfiguring: tokio::sync::Mutex::new(()),
        };
        let started = specs.iter().map(|spec| hub.launch(spec)).collect();
        *crate::sync::lock(&hub.servers) = started;
        hub
    }

    fn launch(&self, spec: &McpServerSpec) -> Running {
        let (stop, stopping) = watch::channel(false);
        let status = Arc::new(Mutex::new(ServerStatus {
            name: spec.name.clone(),
            state: ServerState::Connecting,
            starts: 0,
        }));
        let task = server::supervise(
            spec.clone(),
            self.workspace.clone(),
            Arc::clone(&self.tools),
            Arc::clone(&status),
            stopping,
        );
        Running {
            spec: spec.clone(),
            status,
            stop,
            task,
        }
    }

    /// Make the running servers those of `specs` (config order): a server
    /// that is gone or whose spec changed is stopped (its tools withdrawn,
    /// its process killed) before its successor starts; an unchanged one
    /// keeps running untouched.
    pub async fn reconfigure(&self, specs: &[McpServerSpec]) {
        let _one_at_a_time = self.reconfiguring.lock().await;
        let old = std::mem::take(&mut *crate::sync::lock(&self.servers));
        let mut kept = Vec::new();
        for running in old {
            if specs.contains(&running.spec) {
                kept.push(running);
            } else {
                running.stop.send_replace(true);
                let _ = running.task.await;
                // Its last act was withdrawing its tools; make sure.
                self.tools.replace(&prefix(&running.spec.name), Vec::new());
                tracing::info!(server = %running.spec.name, "an MCP server was stopped by a config change");
            }
        }
        let next = specs
            .iter()
            .map(|spec| match kept.iter().position(|r| &r.spec == spec) {
                Some(i) => kept.swap_remove(i),
                None => self.launch(spec),
            })
            .collect();
        *crate::sync::lock(&self.servers) = next;
    }

    /// Every server, in config order.
    pub fn status(&self) -> Vec<ServerStatus> {
        crate::sync::lock(&self.servers)
            .iter()
            .map(|r| crate::sync::lock(&r.status).clone())
            .collect()
    }

    /// Every server's spec and status, in config order.
    pub fn servers(&self) -> Vec<(McpServerSpec, ServerStatus)> {
        crate::sync::lock(&self.servers)
            .iter()
            .map(|r| (r.spec.clone(), crate::sync::lock(&r.status).clone()))
            .collect()
    }

    /// Stop every server (their child processes are killed).
    pub fn stop(&self) {
        for running in crate::sync::lock(&self.servers).iter() {
            running.stop.send_replace(true);
        }
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
