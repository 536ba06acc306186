//! One MCP server's supervisor: start, hand-shake, list tools, follow list
//! changes, notice the end, restart with backoff.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::ClientHandler;
use rmcp::model::ProtocolVersion;
use rmcp::service::{
    ClientLifecycleMode, ClientServiceExt, NotificationContext, RoleClient, RunningService,
};
use rmcp::transport::TokioChildProcess;
use tokio::io::AsyncBufReadExt;
use tokio::sync::{Notify, watch};

use super::tool::McpTool;
use super::{ServerState, ServerStatus, prefix};
use crate::config::{McpServerSpec, McpTransport};
use crate::tools::{DynamicTools, Tool};

/// How long a server may take to answer the MCP hand-shake, at most (a
/// server's own `timeoutSeconds` may shorten it).
const HANDSHAKE: Duration = Duration::from_secs(30);
/// Backoff between restarts: doubles from the first to the last.
const FIRST_BACKOFF: Duration = Duration::from_secs(1);
const LAST_BACKOFF: Duration = Duration::from_secs(60);
/// Lines of a server's stderr kept for its failure message.
const STDERR_LINES: usize = 5;

/// Tells the supervisor that the server's tool list changed.
struct Listener {
    changed: Arc<Notify>,
}

impl ClientHandler for Listener {
    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.changed.notify_one();
    }
}

/// Why one run of a server ended.
enum Ended {
    Stopping,
    Failed(String),
}

pub(super) fn supervise(
    spec: McpServerSpec,
    workspace: PathBuf,
    tools: Arc<DynamicTools>,
    status: Arc<Mutex<ServerStatus>>,
    mut stopping: watch::Receiver<bool>,
) -> tokio::task::JoinHandle<()> {
    let set = {
        let status = Arc::clone(&status);
        move |state: ServerState| crate::sync::lock(&status).state = state
    };
    tokio::spawn(async move {
        if !spec.enabled {
            set(ServerState::Disabled);
            return;
        }
        if let McpTransport::Remote { kind, .. } = &spec.transport {
            set(ServerState::Unsupported { kind: kind.clone() });
            return;
        }
        let mut backoff = FIRST_BACKOFF;
        loop {
            crate::sync::lock(&status).starts += 1;
            set(ServerState::Connecting);
            let ended = run_once(&spec, &workspace, &tools, &set, &mut stopping).await;
            tools.replace(&prefix(&spec.name), Vec::new());
            let error = match ended {
                Ended::Stopping => return,
                Ended::Failed(error) => error,
            };
            tracing::warn!(server = %spec.name, %error, retry_in_s = backoff.as_secs(), "an MCP server failed; its tools are withdrawn until it is back");
            set(ServerState::Failed { error });
            tokio::select! {
                () = tokio::time::sleep(backoff) => {}
                () = stopped(&mut stopping) => return,
            }
            backoff = (backoff * 2).min(LAST_BACKOFF);
        }
    })
}

/// One run of the server: start it, hand-shake, list its tools and follow
/// their changes until it ends or the daemon stops.
async fn run_once(
    spec: &McpServerSpec,
    workspace: &std::path::Path,
    tools: &DynamicTools,
    set: &(impl Fn(ServerState) + Send + Sync),
    stopping: &mut watch::Receiver<bool>,
) -> Ended {
    let (transport, stderr) = match spawn(spec, workspace) {
        Ok(spawned) => spawned,
        Err(ended) => return ended,
    };
    let tail = StderrTail::follow(stderr, &spec.name);
    let changed = Arc::new(Notify::new());
    let listener = Listener {
        changed: Arc::clone(&changed),
    };
    let service = match handshake(spec, listener, transport, &tail, stopping).await {
        Ok(service) => service,
        Err(ended) => return ended,
    };
    serve(spec, service, tools, set, stopping, &changed, &tail).await
}

/// Start the server's command (a stdio server; any other is not run).
fn spawn(
    spec: &McpServerSpec,
    workspace: &std::path::Path,
) -> Result<(TokioChildProcess, Option<tokio::process::ChildStderr>), Ended> {
    let McpTransport::Stdio {
        command,
        args,
        env,
        cwd,
    } = &spec.transport
    else {
        return Err(Ended::Stopping);
    };
    let mut cmd = tokio::process::Command::new(command);
    cmd.args(args)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .current_dir(
            cwd.as_ref()
                .map_or(workspace.to_path_buf(), |c| workspace.join(c)),
        )
        .kill_on_drop(true);
    TokioChildProcess::builder(cmd)
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| Ended::Failed(format!("cannot start `{command}`: {e}")))
}

/// The last lines a server wrote to its stderr (each logged at debug).
struct StderrTail(Arc<Mutex<VecDeque<String>>>);

impl StderrTail {
    /// Read the server's stderr, if captured, until it closes.
    fn follow(stderr: Option<tokio::process::ChildStderr>, name: &str) -> Self {
        let tail = Arc::new(Mutex::new(VecDeque::new()));
        if let Some(stderr) = stderr {
            let (tail, name) = (Arc::clone(&tail), name.to_string());
            tokio::spawn(async move {
                let mut lines = tokio::io::BufReader::new(stderr).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    tracing::debug!(server = %name, "{line}");
                    let mut tail = crate::sync::lock(&tail);
                    if tail.len() == STDERR_LINES {
                        tail.pop_front();
                    }
                    tail.push_back(line.chars().take(300).collect::<String>());
                }
            });
        }
        Self(tail)
    }

    /// `; it said: …` with the lines kept, for a failure message (empty
    /// when it said nothing).
    fn said(&self) -> String {
        let tail = crate::sync::lock(&self.0);
        if tail.is_empty() {
            String::new()
        } else {
            format!(
                "; it said: {}",
                tail.iter().cloned().collect::<Vec<_>>().join(" | ")
            )
        }
    }
}

/// The MCP hand-shake, within the server's time.
async fn handshake(
    spec: &McpServerSpec,
    listener: Listener,
    transport: TokioChildProcess,
    tail: &StderrTail,
    stopping: &mut watch::Receiver<bool>,
) -> Result<RunningService<RoleClient, Listener>, Ended> {
    let handshake = HANDSHAKE.min(Duration::from_secs(spec.timeout_seconds));
    // The 2026-07-28 `server/discover`, falling back to the legacy
    // `initialize` for a server that does not know it.
    let lifecycle = ClientLifecycleMode::Auto {
        preferred_versions: vec![ProtocolVersion::LATEST],
        legacy_version: None,
    };
    tokio::select! {
        started = tokio::time::timeout(handshake, listener.serve_with_lifecycle(transport, lifecycle)) => match started {
            Ok(Ok(service)) => Ok(service),
            Ok(Err(e)) => Err(Ended::Failed(format!("the MCP hand-shake failed: {e}{}", tail.said()))),
            Err(_) => Err(Ended::Failed(format!(
                "it did not answer the MCP hand-shake within {} s{}", handshake.as_secs(), tail.said()
            ))),
        },
        () = stopped(stopping) => Err(Ended::Stopping),
    }
}

/// List the server's tools, then follow their changes until the server
/// ends or the daemon stops.
async fn serve(
    spec: &McpServerSpec,
    service: RunningService<RoleClient, Listener>,
    tools: &DynamicTools,
    set: &(impl Fn(ServerState) + Send + Sync),
    stopping: &mut watch::Receiver<bool>,
    changed: &Notify,
    tail: &StderrTail,
) -> Ended {
    let peer = service.peer().clone();
    let cancel = service.cancellation_token();
    let timeout = Duration::from_secs(spec.timeout_seconds);
    if let Err(e) = refresh(spec, &peer, tools, set, timeout).await {
        cancel.cancel();
        return Ended::Failed(format!("{e}{}", tail.said()));
    }
    let mut waiting = std::pin::pin!(service.waiting());
    loop {
        tokio::select! {
            quit = &mut waiting => {
                return Ended::Failed(format!("the server stopped ({}){}", match quit {
                    Ok(reason) => format!("{reason:?}").to_lowercase(),
                    Err(e) => e.to_string(),
                }, tail.said()));
            }
            () = changed.notified() => {
                if let Err(e) = refresh(spec, &peer, tools, set, timeout).await {
                    tracing::warn!(server = %spec.name, error = %e, "refreshing an MCP server's tools failed; the old list stays");
                }
            }
            () = stopped(stopping) => {
                cancel.cancel();
                let _ = waiting.await;
                return Ended::Stopping;
            }
        }
    }
}

/// List the server's tools and put them in the registry.
async fn refresh(
    spec: &McpServerSpec,
    peer: &rmcp::Peer<RoleClient>,
    tools: &DynamicTools,
    set: &(impl Fn(ServerState) + Send + Sync),
    timeout: Duration,
) -> Result<(), String> {
    let listed = tokio::time::timeout(timeout, peer.list_all_tools())
        .await
        .map_err(|_| format!("tools/list did not answer within {} s", timeout.as_secs()))?
        .map_err(|e| format!("tools/list failed: {e}"))?;
    let found: Vec<Arc<dyn Tool>> = listed
        .into_iter()
        .filter_map(|t| {
            McpTool::new(
                &spec.name,
                t,
                peer.clone(),
                timeout,
                spec.allow_read_only_tools,
            )
        })
        .map(|t| Arc::new(t) as Arc<dyn Tool>)
        .collect();
    let count = found.len() as u32;
    tools.replace(&prefix(&spec.name), found);
    set(ServerState::Ready { tools: count });
    tracing::info!(server = %spec.name, tools = count, "an MCP server is ready");
    Ok(())
}

/// Resolves once `stopping` turns true (holding nothing across awaits).
async fn stopped(stopping: &mut watch::Receiver<bool>) {
    let _ = stopping.wait_for(|s| *s).await;
}
