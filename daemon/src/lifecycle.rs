//! The daemon's life: lock the state dir, open the store, record
//! `DaemonStarted`, bind the socket, serve until SIGTERM / SIGINT /
//! `Shutdown`, then stop accepting, finish in-flight work, record
//! `DaemonStopped`, flush and remove the socket.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use tinycode_shared::PROTOCOL_VERSION;
use tinycode_shared::paths::Layout;
use tinycode_shared::proto::event::Payload;
use tinycode_shared::proto::{DaemonStarted, DaemonStopped};
use tokio::net::UnixListener;
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::{mpsc, watch};

use crate::config::{Config, ConfigError};
use crate::domain::desk::{Desk, DomainError};
use crate::server::{self, ServeError, Shared};
use crate::store::{EventStore, ExpectedVersion, StoreError};

/// How long a stop waits for the read models and files to catch up.
const SETTLE_AT_STOP: std::time::Duration = std::time::Duration::from_secs(5);
/// How long a stopping daemon waits for in-flight requests and connected
/// clients before it closes their connections.
pub const SHUTDOWN_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

/// The stream holding the daemon's own lifecycle events.
pub use crate::store::DAEMON_STREAM;

#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error("tinycoded needs a workspace; run `tinycode init` or pass --workspace DIR")]
    NoWorkspace,
    #[error("another tinycoded{} is already running on {}", pid.map(|p| format!(" (pid {p})")).unwrap_or_default(), state_dir.display())]
    AlreadyRunning {
        state_dir: PathBuf,
        pid: Option<u32>,
    },
    #[error("{action} {}: {source}", path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "refusing to use socket directory {}: it must be owned by uid {uid} and not accessible to others",
        path.display()
    )]
    UnsafeSocketDir { path: PathBuf, uid: u32 },
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("cannot load the workspace: {0}")]
    Desk(#[from] DomainError),
    #[error("cannot load the approvals: {0}")]
    Approvals(#[from] crate::approvals::ApprovalError),
    #[error("cannot load the sessions: {0}")]
    Sessions(#[from] crate::sessions::SessionError),
    #[error("cannot start the triage worker: {0}")]
    Triage(#[from] crate::triage::TriageError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("cannot start a read model: {0}")]
    Projection(#[from] crate::projection::ProjectionError),
    #[error("cannot start the evaluations: {0}")]
    Evals(#[from] crate::eval::EvalError),
    #[error("{0}")]
    Maintenance(String),
    #[error(transparent)]
    Serve(#[from] ServeError),
}

pub(crate) fn io<'a>(
    action: &'static str,
    path: &'a Path,
) -> impl FnOnce(std::io::Error) -> DaemonError + 'a {
    move |source| DaemonError::Io {
        action,
        path: path.to_path_buf(),
        source,
    }
}

/// Holds the state-dir lock for the daemon's lifetime (released on drop).
pub struct StateLock {
    _file: File,
}

/// Create the state dir (0700) and take its exclusive lock.
pub fn lock_state_dir(layout: &Layout) -> Result<StateLock, DaemonError> {
    create_private_dir(&layout.state_dir)?;
    let path = layout.lock_path();
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(io("cannot open lock file", &path))?;
    match file.try_lock() {
        Ok(()) => {}
        Err(TryLockError::WouldBlock) => {
            let mut content = String::new();
            let _ = file.read_to_string(&mut content);
            return Err(DaemonError::AlreadyRunning {
                state_dir: layout.state_dir.clone(),
                pid: content.trim().parse().ok(),
            });
        }
        Err(TryLockError::Error(e)) => return Err(io("cannot lock", &path)(e)),
    }
    file.set_len(0)
        .map_err(io("cannot write lock file", &path))?;
    file.rewind().map_err(io("cannot write lock file", &path))?;
    writeln!(file, "{}", std::process::id()).map_err(io("cannot write lock file", &path))?;
    Ok(StateLock { _file: file })
}

pub(crate) fn create_private_dir(dir: &Path) -> Result<(), DaemonError> {
    std::fs::create_dir_all(dir).map_err(io("cannot create directory", dir))?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
        .map_err(io("cannot set permissions on", dir))
}

/// Bind the socket: private directory, stale socket removed (we hold the
/// lock, so any socket file left there belongs to a dead daemon), mode 0600.
pub fn bind_socket(layout: &Layout) -> Result<UnixListener, DaemonError> {
    let socket = &layout.socket;
    let dir = socket.parent().unwrap_or(Path::new("/"));
    if dir != layout.state_dir {
        // Fallback runtime dir (long state path): must be ours and private.
        create_private_dir(dir)?;
        let meta = std::fs::metadata(dir).map_err(io("cannot inspect", dir))?;
        let uid = rustix::process::geteuid().as_raw();
        if meta.uid() != uid || meta.mode() & 0o077 != 0 {
            return Err(DaemonError::UnsafeSocketDir {
                path: dir.to_path_buf(),
                uid,
            });
        }
    }
    match std::fs::remove_file(socket) {
        Ok(()) => {
            tracing::warn!(socket = %socket.display(), "removed a stale socket left by a previous run")
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io("cannot remove stale socket", socket)(e)),
    }
    let listener = UnixListener::bind(socket).map_err(io("cannot bind socket", socket))?;
    std::fs::set_permissions(socket, std::fs::Permissions::from_mode(0o600))
        .map_err(io("cannot set permissions on", socket))?;
    Ok(listener)
}

/// Where the log is: `$TINYCODE_STORE_URL`, else config `store.url`, else
/// the embedded sled log (`None`).
pub(crate) fn store_url(config: &Config) -> Option<String> {
    std::env::var("TINYCODE_STORE_URL")
        .ok()
        .filter(|u| !u.trim().is_empty())
        .or_else(|| config.store_url.clone())
}

/// SIGHUP reloads the config, as `tinycode daemon reload` does; the
/// outcome goes to the daemon's log.
fn reload_on_sighup(
    control: Arc<crate::control::Control>,
    layout: &Layout,
) -> Result<(), DaemonError> {
    let mut hangup = signal(SignalKind::hangup())
        .map_err(io("cannot install SIGHUP handler", &layout.state_dir))?;
    tokio::spawn(async move {
        while hangup.recv().await.is_some() {
            tracing::info!("SIGHUP: reloading the config");
            if let Err(e) = control.reload().await {
                tracing::error!(error = %e, "the config was not reloaded");
            }
        }
    });
    Ok(())
}

/// Every secret this daemon knows, by value, before anything is stored or
/// logged: provider keys in the environment, MCP servers' secret-looking
/// environment values, the store URL's password.
fn register_secrets(config: &Config) {
    let env = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
    crate::model::catalog::register_secrets(&config.providers, &env);
    for server in &config.mcp_servers {
        if let crate::config::McpTransport::Stdio { env, .. } = &server.transport {
            for (name, value) in env {
                if looks_secret(name) {
                    tinycode_shared::secrets::register(value);
                }
            }
        }
    }
    if let Some(url) = store_url(config)
        && let Some(password) = url_password(&url)
    {
        tinycode_shared::secrets::register(&password);
    }
}

/// A variable name that usually holds a credential.
fn looks_secret(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    [
        "KEY",
        "TOKEN",
        "SECRET",
        "PASSWORD",
        "PASSWD",
        "AUTH",
        "CREDENTIAL",
    ]
    .iter()
    .any(|w| upper.contains(w))
}

/// The password of a `scheme://user:password@host/…` URL, if it has one.
fn url_password(url: &str) -> Option<String> {
    let rest = url.split_once("://")?.1;
    let userinfo = rest.split_once('@')?.0;
    let password = userinfo.split_once(':')?.1;
    (!password.is_empty()).then(|| password.to_string())
}

/// `$TINYCODE_LEASE_SECONDS` (1..=600), else config `store.leaseSeconds`.
fn lease(config: &Config) -> std::time::Duration {
    std::env::var("TINYCODE_LEASE_SECONDS")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .filter(|s| (1..=600).contains(s))
        .map_or(config.lease, std::time::Duration::from_secs)
}

/// The stream of this daemon's `DaemonStarted`/`DaemonStopped`: `daemon`
/// on a log it alone writes, `daemon-<id>` on a shared one.
fn lifecycle_stream(store: &EventStore, daemon_id: &str) -> String {
    if store.shared() {
        format!("{DAEMON_STREAM}-{daemon_id}")
    } else {
        DAEMON_STREAM.to_string()
    }
}

/// Did the previous run end without `DaemonStopped`?
async fn previous_run_unclean(store: &EventStore, stream: &str) -> Result<bool, StoreError> {
    let version = store.stream_version(stream).await?;
    if version == 0 {
        return Ok(false);
    }
    let last = store.read_stream(stream, version, 1).await?;
    Ok(matches!(
        last.first().and_then(|e| e.payload.as_ref()),
        Some(Payload::DaemonStarted(_))
    ))
}

/// Time taken by each start-up stage (logged, for operators and the
/// benchmarks).
struct Stages {
    last: Instant,
    done: Vec<(&'static str, u128)>,
}

impl Stages {
    fn new() -> Self {
        Self {
            last: Instant::now(),
            done: Vec::new(),
        }
    }

    fn done(&mut self, stage: &'static str) {
        self.done.push((stage, self.last.elapsed().as_millis()));
        self.last = Instant::now();
    }
}

impl std::fmt::Display for Stages {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let parts: Vec<String> = self
            .done
            .iter()
            .map(|(stage, ms)| format!("{stage} {ms} ms"))
            .collect();
        f.write_str(&parts.join(", "))
    }
}

/// How to start.
#[derive(Debug, Clone, Copy, Default)]
pub struct RunOptions {
    /// Start on a damaged log (`--recover`).
    pub recover: bool,
}

/// Run the daemon until it is asked to stop. The caller has set up logging.
pub async fn run(layout: Layout, options: RunOptions) -> Result<(), DaemonError> {
    let started = Instant::now();
    let workspace = layout.workspace.clone().ok_or(DaemonError::NoWorkspace)?;
    let config = Config::load(&workspace)?;
    let _lock = lock_state_dir(&layout)?;
    for warning in &config.warnings {
        tracing::warn!("{warning}");
    }
    register_secrets(&config);
    // The socket answers from the first moment: while the daemon starts,
    // `Daemon.GetStatus` says how far it is (a large desk takes a while).
    let listener = Arc::new(bind_socket(&layout)?);
    let _socket = RemoveOnDrop(layout.socket.clone());
    let progress = Arc::new(crate::progress::Progress::default());
    let (started_tx, started_rx) = tokio::sync::oneshot::channel::<()>();
    let status_while_starting = tokio::spawn(server::starting::serve_while_starting(
        server::starting::StartingService {
            layout: Arc::new(layout.clone()),
            progress: Arc::clone(&progress),
            started,
        },
        Arc::clone(&listener),
        async {
            let _ = started_rx.await;
        },
    ));
    let mut stages = Stages::new();
    progress.stage("opening the log");
    let store = open_store(&layout, &config, &options).await?;
    stages.done("store");
    progress.stage("joining the daemons sharing the log");
    let (cluster, lifecycle) = join(&store, &layout, &workspace, &config).await?;
    let engine = Engine::open(
        &store,
        &layout,
        &workspace,
        &config,
        (&cluster, &progress),
        &mut stages,
    )
    .await?;
    progress.finish();
    // The start-up server steps aside (its clients reconnect to the full
    // one on the same socket).
    let _ = started_tx.send(());
    if tokio::time::timeout(SHUTDOWN_GRACE, status_while_starting)
        .await
        .is_err()
    {
        tracing::warn!("the start-up status server did not stop in time");
    }
    crate::heap::release_free_memory();
    tracing::info!(stages = %stages, "start-up");
    tracing::info!(socket = %layout.socket.display(), workspace = %workspace.display(), "tinycoded listening");
    let (served, reason) = serve_until_stopped(&engine, &layout, started, listener).await?;
    engine.mcp.stop();
    let stop = Stop {
        store: &store,
        lifecycle: &lifecycle,
        desk: &engine.desk,
        cluster: &cluster,
        layout: &layout,
    };
    let (stopped, closed) = stop.run(started, reason).await;
    served?;
    stopped?;
    closed?;
    tracing::info!("tinycoded stopped cleanly");
    Ok(())
}

/// The event log the config names (PostgreSQL, else sled under the state
/// dir), recovered when `--recover` asks.
async fn open_store(
    layout: &Layout,
    config: &Config,
    options: &RunOptions,
) -> Result<EventStore, DaemonError> {
    let store_options = crate::store::StoreOptions {
        recover: options.recover,
        ..Default::default()
    };
    let store = match store_url(config) {
        Some(url) if options.recover => {
            return Err(DaemonError::Maintenance(format!(
                "--recover works on the embedded log; this desk's log is in PostgreSQL ({}), which recovers itself",
                url.split('@').next_back().unwrap_or("")
            )));
        }
        Some(url) => {
            EventStore::open_postgres(&url, &layout.state_dir.join("projections"), store_options)
                .await?
        }
        None => EventStore::open_with(&layout.db_path(), store_options)?,
    };
    tracing::info!(backend = store.backend(), "the event log is open");
    if let Some(lost) = store.recovered() {
        tracing::warn!(
            lost_from = lost.lost_from,
            lost_to = lost.lost_to,
            "started on a recovered log: the lost range is recorded as LogRecovered"
        );
    }
    Ok(store)
}

/// Record `DaemonStarted` in this daemon's lifecycle stream and join the
/// daemons sharing the log (heard from before anything is claimed).
/// Returns the cluster and the lifecycle stream's name.
async fn join(
    store: &EventStore,
    layout: &Layout,
    workspace: &Path,
    config: &Config,
) -> Result<(Arc<crate::cluster::Cluster>, String), DaemonError> {
    let daemon_id = crate::cluster::daemon_id(&layout.state_dir)
        .map_err(io("cannot keep the daemon id in", &layout.state_dir))?;
    // Each daemon on a shared log keeps its own lifecycle stream.
    let lifecycle = lifecycle_stream(store, &daemon_id);
    let unclean = previous_run_unclean(store, &lifecycle).await?;
    if unclean {
        tracing::warn!(
            "the previous run did not stop cleanly; the log is intact up to its last acknowledged append"
        );
    }
    store
        .append(
            &lifecycle,
            ExpectedVersion::Any,
            vec![Payload::DaemonStarted(DaemonStarted {
                version: env!("CARGO_PKG_VERSION").to_string(),
                pid: std::process::id(),
                workspace: workspace.display().to_string(),
                protocol_version: PROTOCOL_VERSION,
                previous_run_unclean: unclean,
            })],
        )
        .await?;
    let cluster = crate::cluster::Cluster::join(
        store.clone(),
        crate::store::Member {
            id: daemon_id,
            host: crate::cluster::host_name(),
            pid: std::process::id(),
            socket: layout.socket.display().to_string(),
            workspace: workspace.display().to_string(),
            started_at: crate::clock::now_unix(),
            heartbeat_age_ms: 0,
        },
        lease(config),
    )
    .await?;
    tracing::info!(daemon = cluster.id(), lease = ?cluster.lease(), "joined the log");
    Ok((cluster, lifecycle))
}

/// Everything the daemon serves, opened in dependency order.
struct Engine {
    desk: Arc<Desk>,
    sessions: Arc<crate::sessions::Sessions>,
    triage: Arc<crate::triage::Triage>,
    mcp: Arc<crate::mcp::McpHub>,
    calls: Arc<crate::calls::DirectCalls>,
    control: Arc<crate::control::Control>,
    extensions: Arc<crate::extensions::Extensions>,
    evals: Arc<crate::eval::Evals>,
    store: EventStore,
}

impl Engine {
    async fn open(
        store: &EventStore,
        layout: &Layout,
        workspace: &Path,
        config: &Config,
        (cluster, progress): (
            &Arc<crate::cluster::Cluster>,
            &Arc<crate::progress::Progress>,
        ),
        stages: &mut Stages,
    ) -> Result<Self, DaemonError> {
        let settings = crate::domain::desk::DeskSettings {
            progress: Arc::clone(progress),
            ..config.desk()
        };
        let (desk, report) = Desk::open(store.clone(), workspace, &settings).await?;
        stages.done("desk");
        progress.stage("opening the approvals, sessions and triage");
        // The offline model learns from the desk's history, in the background.
        let learner = crate::learn::tickets::TicketLearner::start(store)?;
        tracing::info!(
            tickets = report.tickets,
            imported = report.imported,
            updated = report.updated,
            articles = report.articles,
            skipped = report.warnings.len(),
            "workspace loaded"
        );
        let (skills, skill_warnings) = crate::skills::Skills::discover(workspace);
        let skills = Arc::new(skills);
        for w in &skill_warnings {
            tracing::warn!("{w}");
        }
        let artifacts = layout.state_dir.join("artifacts");
        let defaults = crate::sessions::TurnDefaults::from_config(config, Some(artifacts.clone()));
        let eval_model = defaults.model.clone();
        let approvals = crate::approvals::Approvals::open(store.clone()).await?;
        stages.done("approvals");
        let sessions = crate::sessions::Sessions::open(
            crate::sessions::Parts {
                store: store.clone(),
                desk: Arc::clone(&desk),
                skills: Arc::clone(&skills),
                approvals,
                workspace: workspace.to_path_buf(),
                cluster: Arc::clone(cluster),
                // The offline model, handed the desk's learner (no global).
                offline: Arc::new(crate::offline::OfflineModel::new(Some(Arc::clone(
                    &learner,
                )))),
            },
            defaults,
        )
        .await?;
        stages.done("sessions");
        // MCP servers connect in the background: the daemon serves meanwhile.
        let mcp = Arc::new(crate::mcp::McpHub::start(
            &config.mcp_servers,
            workspace,
            sessions.tools().dynamic(),
        ));
        let triage = crate::triage::Triage::open(
            store.clone(),
            Arc::clone(&desk),
            Arc::clone(&sessions),
            config.auto_triage.clone(),
            Arc::clone(cluster),
        )
        .await?;
        stages.done("triage");
        let control = crate::control::Control::new(
            config.clone(),
            artifacts,
            Arc::clone(&sessions),
            Arc::clone(&triage),
            Arc::clone(&mcp),
            Arc::clone(&skills),
        );
        reload_on_sighup(Arc::clone(&control), layout)?;
        Ok(Self {
            calls: crate::calls::DirectCalls::new(store.clone(), Arc::clone(&sessions)),
            extensions: crate::extensions::Extensions::new(workspace, Arc::clone(&mcp), skills),
            evals: crate::eval::Evals::open(
                store.clone(),
                learner.projector().clone(),
                workspace.to_path_buf(),
                layout.state_dir.clone(),
                config.clone(),
                eval_model,
            )?,
            control,
            desk,
            sessions,
            triage,
            mcp,
            store: store.clone(),
        })
    }
}

/// Removes the socket when the daemon's run ends, also when its start
/// fails after binding it (no stale socket is left for clients to find).
struct RemoveOnDrop(PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        match std::fs::remove_file(&self.0) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => tracing::warn!(error = %e, "could not remove the socket"),
        }
    }
}

/// Serve until a signal or the Shutdown RPC; returns how serving ended and
/// why the daemon stops. Graceful shutdown waits for every connection to
/// close, but a client that keeps an idle connection open must not keep
/// the daemon alive: after the grace period the rest are dropped.
async fn serve_until_stopped(
    engine: &Engine,
    layout: &Layout,
    started: Instant,
    listener: Arc<tokio::net::UnixListener>,
) -> Result<(Result<(), DaemonError>, String), DaemonError> {
    let (shutdown_tx, mut shutdown_rx) = mpsc::channel::<String>(1);
    let (stopping_tx, stopping_rx) = watch::channel(false);
    let mut stopping = stopping_rx.clone();
    let shared = Shared {
        evals: Arc::clone(&engine.evals),
        store: engine.store.clone(),
        desk: Arc::clone(&engine.desk),
        calls: Arc::clone(&engine.calls),
        control: Arc::clone(&engine.control),
        extensions: Arc::clone(&engine.extensions),
        sessions: Arc::clone(&engine.sessions),
        triage: Arc::clone(&engine.triage),
        mcp: Arc::clone(&engine.mcp),
        layout: Arc::new(layout.clone()),
        started,
        shutdown: shutdown_tx,
        stopping: stopping_rx,
    };
    let mut sigterm = signal(SignalKind::terminate())
        .map_err(io("cannot install SIGTERM handler", &layout.state_dir))?;
    let mut sigint = signal(SignalKind::interrupt())
        .map_err(io("cannot install SIGINT handler", &layout.state_dir))?;
    let (reason_tx, reason_rx) = tokio::sync::oneshot::channel::<String>();
    let stop = async move {
        let reason = tokio::select! {
            _ = sigterm.recv() => "SIGTERM".to_string(),
            _ = sigint.recv() => "SIGINT".to_string(),
            r = shutdown_rx.recv() => r.unwrap_or_else(|| "Shutdown rpc".to_string()),
        };
        tracing::info!(%reason, "stopping");
        // End long-lived streams so graceful shutdown can complete.
        stopping_tx.send_replace(true);
        // The receiver is awaited below, after serving ends.
        let _ = reason_tx.send(reason);
    };
    let incoming = futures::stream::unfold(listener, |l| async move {
        let accepted = l.accept().await.map(|(stream, _)| stream);
        Some((accepted, l))
    });
    let server = server::serve(shared, incoming, stop);
    let served = tokio::select! {
        served = server => served,
        () = async {
            // A closed channel means the daemon is stopping too.
            let _ = stopping.wait_for(|s| *s).await;
            tokio::time::sleep(SHUTDOWN_GRACE).await;
        } => {
            tracing::warn!(grace = ?SHUTDOWN_GRACE, "clients still connected after the grace period; closing their connections");
            Ok(())
        }
    };
    let reason = reason_rx
        .await
        .unwrap_or_else(|_| "server error".to_string());
    Ok((served.map_err(DaemonError::from), reason))
}

/// What stopping touches.
struct Stop<'a> {
    store: &'a EventStore,
    lifecycle: &'a str,
    desk: &'a Arc<Desk>,
    cluster: &'a crate::cluster::Cluster,
    layout: &'a Layout,
}

impl Stop<'_> {
    /// In-flight requests have completed: record `DaemonStopped`, let the
    /// read models and files catch up, close the log (within a limit: a
    /// failed disk must not keep the daemon from stopping — what it
    /// acknowledged is durable already), leave the daemons sharing it, and
    /// remove the socket. Returns the record's and the close's results.
    async fn run(
        &self,
        started: Instant,
        reason: String,
    ) -> (Result<(), DaemonError>, Result<(), DaemonError>) {
        let stopped = self
            .store
            .append(
                self.lifecycle,
                ExpectedVersion::Any,
                vec![Payload::DaemonStopped(DaemonStopped {
                    pid: std::process::id(),
                    uptime_ms: started.elapsed().as_millis() as u64,
                    reason,
                })],
            )
            .await
            .map(drop)
            .map_err(DaemonError::from);
        match tokio::time::timeout(SETTLE_AT_STOP, self.desk.settled()).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "the read models did not catch up before the stop")
            }
            Err(_) => {
                tracing::warn!(limit = ?SETTLE_AT_STOP, "the read models did not catch up before the stop; they resume at the next start")
            }
        }
        let closed = match tokio::time::timeout(SETTLE_AT_STOP, self.store.close()).await {
            Ok(closed) => closed.map_err(DaemonError::from),
            Err(_) => {
                tracing::error!(limit = ?SETTLE_AT_STOP, "the event store did not close in time; stopping anyway (every acknowledged append is durable)");
                Ok(())
            }
        };
        // Nothing more is appended: others may take this daemon's work over
        // at once, not after the lease.
        self.cluster.leave().await;
        if let Err(e) = std::fs::remove_file(&self.layout.socket) {
            tracing::warn!(error = %e, "could not remove the socket");
        }
        (stopped, closed)
    }
}
