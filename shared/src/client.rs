//! Connecting to `tinycoded` over its Unix socket, starting it when needed.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use hyper_util::rt::TokioIo;
use tonic::metadata::{AsciiMetadataValue, MetadataValue};
use tonic::service::Interceptor;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Channel, Endpoint, Uri};

use crate::CLIENT_NAME_METADATA;
use crate::paths::Layout;

/// A channel that names its client on every request.
pub type DaemonChannel = InterceptedService<Channel, ClientName>;

/// How long an auto-start waits for the socket to answer.
pub const START_TIMEOUT: Duration = Duration::from_secs(15);

/// A starting daemon whose progress has not moved for this long is taken
/// for stuck (a large desk's start moves all the time: files, events).
pub const START_STALL: Duration = Duration::from_secs(30);

/// How often a client waiting for a starting daemon asks how far it is:
/// every 10 ms for the first second, then every 50 ms, so the wait ends
/// within that of the daemon serving (it asked every 200 ms, which added up
/// to 200 ms to every start a client waited for). Each ask is one
/// `GetStatus`; a terminal's progress line is redrawn at most every
/// [`START_REDRAW`].
fn start_poll(waited: Duration) -> Duration {
    if waited < Duration::from_secs(1) {
        Duration::from_millis(10)
    } else {
        Duration::from_millis(50)
    }
}

/// How often the start-up progress line is redrawn on a terminal.
const START_REDRAW: Duration = Duration::from_millis(200);

/// How long the start-up server's hand-over to the full one may leave a
/// client without an answer before the start counts as stopped.
const HANDOVER: Duration = Duration::from_secs(5);

#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error(
        "tinycoded is not running (no answer on {}); start it with `tinycode daemon start`, or drop --no-autostart",
        socket.display()
    )]
    NotRunning { socket: PathBuf },
    #[error(
        "the tinycoded on {} belongs to another user{}: its socket is private to that user; run tinycode as that user, or give this workspace its own state directory (TINYCODE_HOME)",
        socket.display(),
        owner.map(|u| format!(" (uid {u})")).unwrap_or_default()
    )]
    OtherUser { socket: PathBuf, owner: Option<u32> },
    #[error(
        "cannot find the tinycoded binary (looked beside {} and on PATH); build it with `cargo build -p tinycoded`",
        beside.display()
    )]
    DaemonBinaryNotFound { beside: PathBuf },
    #[error(
        "cannot start tinycoded without a workspace; run `tinycode init` or pass --workspace DIR"
    )]
    NoWorkspace,
    #[error("tinycoded exited during start-up ({status}): {message}")]
    StartFailed { status: String, message: String },
    #[error(
        "tinycoded did not answer on {} within {}s; see {}",
        socket.display(), timeout.as_secs(), log.display()
    )]
    StartTimeout {
        socket: PathBuf,
        timeout: Duration,
        log: PathBuf,
    },
    #[error("cannot start {}: {source}", binary.display())]
    Spawn {
        binary: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("invalid client name {0:?}: only visible ASCII is allowed")]
    BadClientName(String),
    #[error(
        "tinycoded has been starting ({stage}) without progress for {}s; see {log}{last}",
        START_STALL.as_secs()
    )]
    StartStalled {
        stage: String,
        log: String,
        /// The log's last lines, each on a line of its own.
        last: String,
    },
    #[error("tinycoded stopped while it was starting ({stage}); see {log}{last}")]
    StoppedStarting {
        stage: String,
        log: String,
        last: String,
    },
}

/// The last `n` lines of the log at `path`, indented, after a newline
/// (empty when there are none).
fn last_lines(path: &str, n: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    lines[lines.len().saturating_sub(n)..]
        .iter()
        .map(|l| format!("\n  {}", crate::secrets::redact(l)))
        .collect()
}

/// Interceptor adding `x-tinycode-client: <name>` to every request.
#[derive(Clone, Debug)]
pub struct ClientName(AsciiMetadataValue);

impl ClientName {
    pub fn new(name: &str) -> Result<Self, ConnectError> {
        MetadataValue::try_from(name)
            .map(Self)
            .map_err(|_| ConnectError::BadClientName(name.to_string()))
    }
}

impl Interceptor for ClientName {
    fn call(&mut self, mut req: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        req.metadata_mut()
            .insert(CLIENT_NAME_METADATA, self.0.clone());
        Ok(req)
    }
}

/// Is `pid` still running (Linux `/proc`)? A zombie thread-group leader
/// whose other threads are still exiting counts as running: the process's
/// file descriptors — a daemon's socket and locks — are released only when
/// its last thread exits.
pub fn process_running(pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // The state follows the parenthesised command name.
    let state = stat
        .rsplit_once(") ")
        .and_then(|(_, rest)| rest.chars().next());
    if state != Some('Z') {
        return true;
    }
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|threads| threads.count() > 1)
        .unwrap_or(false)
}

/// Connect to the daemon listening on `socket`. Fails fast when nobody answers.
pub async fn connect(socket: &Path, client: &ClientName) -> Result<DaemonChannel, ConnectError> {
    let marker = crate::paths::starting_marker(socket);
    // Looked at before connecting too: with no marker then, the start-up
    // server accepts no more, and this connection is the full server's.
    let starting = marker.exists();
    let channel = connect_now(socket, client).await?;
    // A daemon that serves has no marker: no call before the caller's own.
    if starting || marker.exists() {
        wait_started(&channel).await?;
    }
    Ok(channel)
}

/// [`connect`], without waiting for a starting daemon (`daemon status`
/// shows how far the start is).
pub async fn connect_now(
    socket: &Path,
    client: &ClientName,
) -> Result<DaemonChannel, ConnectError> {
    let not_running = || ConnectError::NotRunning {
        socket: socket.to_path_buf(),
    };
    // Connect here first: `connect_with_connector` would otherwise report a
    // generic transport error for a missing or stale socket. The channel's
    // first connection is this one; a reconnect dials again.
    let first = tokio::net::UnixStream::connect(socket)
        .await
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::PermissionDenied => ConnectError::OtherUser {
                socket: socket.to_path_buf(),
                owner: owner_of(socket),
            },
            _ => not_running(),
        })?;
    let first = std::sync::Mutex::new(Some(first));
    let path = socket.to_path_buf();
    let channel = Endpoint::from_static("http://tinycoded.invalid")
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let path = path.clone();
            let first = first.lock().ok().and_then(|mut f| f.take());
            async move {
                let stream = match first {
                    Some(stream) => stream,
                    None => tokio::net::UnixStream::connect(path).await?,
                };
                Ok::<_, std::io::Error>(TokioIo::new(stream))
            }
        }))
        .await
        .map_err(|_| not_running())?;
    Ok(InterceptedService::new(channel, client.clone()))
}

/// While the daemon on `channel` starts (a large desk imports for a while),
/// wait, showing how far it is on a terminal; a start whose progress stops
/// moving, or a daemon that goes away, is an error naming its log's last
/// lines. A daemon that serves (or predates start-up progress) passes at
/// once.
async fn wait_started(channel: &DaemonChannel) -> Result<(), ConnectError> {
    use std::io::IsTerminal;
    let show = std::io::stderr().is_terminal();
    let began = Instant::now();
    let mut last_move = began;
    let mut drawn: Option<Instant> = None;
    let mut seen: Option<(String, u64)> = None;
    let mut log = String::new();
    let mut unanswered: Option<Instant> = None;
    loop {
        let progress = match startup_status(channel).await {
            Ok(s) => {
                let s = s.into_inner();
                log = s.log_path.clone();
                unanswered = None;
                match s.startup {
                    Some(p) if !p.stage.is_empty() => p,
                    _ => break,
                }
            }
            // The start-up server hands over to the full one: a moment
            // without an answer. A daemon that never answers has stopped.
            // A refusal (another uid, an old daemon) is the call's to tell.
            Err(e)
                if seen.is_some()
                    && !matches!(
                        e.code(),
                        tonic::Code::PermissionDenied | tonic::Code::Unimplemented
                    ) =>
            {
                if unanswered.get_or_insert_with(Instant::now).elapsed() > HANDOVER {
                    if show {
                        eprintln!();
                    }
                    return Err(ConnectError::StoppedStarting {
                        stage: format!(
                            "{} — {}",
                            seen.map(|s| s.0).unwrap_or_default(),
                            e.message()
                        ),
                        last: last_lines(&log, 5),
                        log,
                    });
                }
                tokio::time::sleep(start_poll(began.elapsed())).await;
                continue;
            }
            // Not a starting daemon's answer: let the call itself tell.
            Err(_) => return Ok(()),
        };
        let now = (progress.stage.clone(), progress.done);
        if seen.as_ref() != Some(&now) {
            seen = Some(now);
            last_move = Instant::now();
        } else if last_move.elapsed() > START_STALL {
            if show {
                eprintln!();
            }
            return Err(ConnectError::StartStalled {
                stage: crate::render::startup_line(&progress),
                last: last_lines(&log, 5),
                log,
            });
        }
        if show && drawn.is_none_or(|at| at.elapsed() >= START_REDRAW) {
            eprint!("\r\x1b[2K{}", crate::render::startup_line(&progress));
            drawn = Some(Instant::now());
        }
        tokio::time::sleep(start_poll(began.elapsed())).await;
    }
    if show && seen.is_some() {
        eprint!("\r\x1b[2K");
    }
    Ok(())
}

/// The daemon's status, within [`HANDOVER`]: a connection accepted but
/// never answered counts as no answer.
async fn startup_status(
    channel: &DaemonChannel,
) -> Result<tonic::Response<crate::proto::DaemonStatus>, tonic::Status> {
    use crate::proto::daemon_client::DaemonClient;
    let mut daemon = DaemonClient::new(channel.clone());
    let call = daemon.get_status(crate::proto::GetStatusRequest {});
    tokio::time::timeout(HANDOVER, call)
        .await
        .unwrap_or_else(|_| {
            Err(tonic::Status::deadline_exceeded(
                "tinycoded did not answer how far its start is",
            ))
        })
}

/// The uid owning `path`, or the nearest directory above it this user can
/// read.
fn owner_of(path: &Path) -> Option<u32> {
    use std::os::unix::fs::MetadataExt;
    path.ancestors()
        .find_map(|p| std::fs::metadata(p).ok())
        .map(|m| m.uid())
}

/// Connect, starting `tinycoded` first when nobody answers and `autostart`.
pub async fn connect_or_start(
    layout: &Layout,
    client: &ClientName,
    autostart: bool,
) -> Result<DaemonChannel, ConnectError> {
    match connect(&layout.socket, client).await {
        Ok(channel) => Ok(channel),
        Err(ConnectError::NotRunning { .. }) if autostart => {
            start_daemon(layout).await?;
            connect(&layout.socket, client).await
        }
        Err(e) => Err(e),
    }
}

/// The `tinycoded` binary: beside the running executable, else on PATH.
pub fn find_daemon_binary() -> Result<PathBuf, ConnectError> {
    find_binary("tinycoded").map_err(|beside| ConnectError::DaemonBinaryNotFound { beside })
}

/// A tinycode program (`tinycoded`, `tinycode-tui`): beside the running
/// executable, else on PATH. The error is the directory looked in first.
pub fn find_binary(name: &str) -> Result<PathBuf, PathBuf> {
    let exe = std::env::current_exe().unwrap_or_default();
    let beside = exe.parent().map(Path::to_path_buf).unwrap_or_default();
    let candidate = beside.join(name);
    if candidate.is_file() {
        return Ok(candidate);
    }
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
        .ok_or(beside)
}

/// Start `tinycoded` detached (own process group, stdio away from the
/// terminal, stderr to `<state>/logs/tinycoded.stderr.log`) and wait until
/// its socket answers. Returns the child's pid.
pub async fn start_daemon(layout: &Layout) -> Result<u32, ConnectError> {
    use std::os::unix::process::CommandExt;

    let workspace = layout.workspace.as_ref().ok_or(ConnectError::NoWorkspace)?;
    let binary = find_daemon_binary()?;
    let spawn_err = |source| ConnectError::Spawn {
        binary: binary.clone(),
        source,
    };
    crate::paths::create_private_dir(&layout.state_dir).map_err(spawn_err)?;
    crate::paths::create_private_dir(&layout.log_dir()).map_err(spawn_err)?;
    // Appended, not truncated: a concurrent start must not wipe the
    // running daemon's start-up errors.
    let stderr = crate::paths::open_private_append(&layout.stderr_path()).map_err(spawn_err)?;
    let stderr_start = stderr.metadata().map(|m| m.len()).unwrap_or(0);
    let mut child = std::process::Command::new(&binary)
        .arg("--workspace")
        .arg(workspace)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(stderr)
        .process_group(0)
        .spawn()
        .map_err(spawn_err)?;
    let pid = child.id();
    let started = Instant::now();
    loop {
        if tokio::net::UnixStream::connect(&layout.socket)
            .await
            .is_ok()
        {
            // Reap the child later from a thread so it never lingers as a
            // zombie while this client keeps running (TUI, tests).
            std::thread::spawn(move || child.wait());
            return Ok(pid);
        }
        if let Ok(Some(status)) = child.try_wait() {
            let all = std::fs::read(layout.stderr_path()).unwrap_or_default();
            let ours = all.get(stderr_start as usize..).unwrap_or_default();
            let message = String::from_utf8_lossy(ours).to_string();
            // Another client started a daemon at the same moment and won
            // the lock: wait for its socket instead of failing.
            if !message.contains("already running") {
                return Err(ConnectError::StartFailed {
                    status: status.to_string(),
                    message: message.trim().to_string(),
                });
            }
        }
        if started.elapsed() > START_TIMEOUT {
            return Err(ConnectError::StartTimeout {
                socket: layout.socket.clone(),
                timeout: START_TIMEOUT,
                log: layout.log_path(),
            });
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    #[tokio::test]
    async fn a_connection_is_dialled_once() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("tinycoded.sock");
        let listener = tokio::net::UnixListener::bind(&socket).unwrap();
        let accepted = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&accepted);
        tokio::spawn(async move {
            let mut open = Vec::new();
            while let Ok((stream, _)) = listener.accept().await {
                counted.fetch_add(1, Ordering::SeqCst);
                open.push(stream);
            }
        });
        let client = ClientName::new("tests").unwrap();
        let _channel = tokio::time::timeout(Duration::from_secs(5), connect_now(&socket, &client))
            .await
            .expect("connected")
            .unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(
            accepted.load(Ordering::SeqCst),
            1,
            "the probe is the channel's connection"
        );
    }
}
