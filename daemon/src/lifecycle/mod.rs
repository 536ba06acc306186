//! The daemon's life: lock the state dir, open the store, record
//! `DaemonStarted`, bind the socket, serve until SIGTERM / SIGINT /
//! `Shutdown`, then stop accepting, finish in-flight work, record
//! `DaemonStopped`, flush and remove the socket.
//!
//! - `state_dir.rs`: the state dir's lock and the socket;
//! - `secrets.rs`: the secrets registered before anything is logged;
//! - `engine.rs`: everything the daemon serves, opened in order;
//! - `serve.rs`: serving until asked to stop, and the stop.

mod engine;
mod secrets;
mod serve;
mod state_dir;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use tinycode_shared::PROTOCOL_VERSION;
use tinycode_shared::paths::Layout;
use tinycode_shared::proto::DaemonStarted;
use tinycode_shared::proto::event::Payload;

use crate::config::{Config, ConfigError};
use crate::domain::desk::DomainError;
use crate::server::{self, ServeError};
use crate::store::{EventStore, ExpectedVersion, StoreError};
use engine::Engine;
use secrets::register_secrets;
use serve::{Stop, serve_until_stopped};
pub(crate) use state_dir::create_private_dir;
pub use state_dir::{StateLock, bind_socket, lock_state_dir};

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
    #[error("cannot start the connectors: {0}")]
    Connectors(#[from] crate::connectors::ConnectorError),
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

/// Where the log is: `$TINYCODE_STORE_URL`, else config `store.url`, else
/// the embedded sled log (`None`).
pub(crate) fn store_url(config: &Config) -> Option<String> {
    std::env::var("TINYCODE_STORE_URL")
        .ok()
        .filter(|u| !u.trim().is_empty())
        .or_else(|| config.store_url.clone())
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
    // The start-up marker `bind_socket` writes goes with this start.
    let starting = RemoveOnDrop(tinycode_shared::paths::starting_marker(&layout.socket));
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
    // The workspace's files are listed and `stat`ed while the log opens.
    let look = crate::domain::desk::FilesLook::start(&workspace, &config.desk());
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
        (&cluster, &progress, look),
        &mut stages,
    )
    .await?;
    progress.finish();
    // The start-up server steps aside (its clients reconnect to the full
    // one on the same socket).
    let _ = started_tx.send(());
    let abort = status_while_starting.abort_handle();
    if tokio::time::timeout(SHUTDOWN_GRACE, status_while_starting)
        .await
        .is_err()
    {
        // Only the waiting stops: tonic's per-connection tasks are not cut,
        // but each got GOAWAY and closes once its (unary) calls end.
        abort.abort();
        tracing::warn!("the start-up server's connections did not all close in time");
    }
    // The full server answers: clients stop asking how far the start is.
    drop(starting);
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

/// Removes the socket when the daemon's run ends, also when its start
/// fails after binding it (no stale socket is left for clients to find).
struct RemoveOnDrop(PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        match std::fs::remove_file(&self.0) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                tracing::warn!(path = %self.0.display(), error = %e, "could not remove a file of the daemon's")
            }
        }
    }
}
