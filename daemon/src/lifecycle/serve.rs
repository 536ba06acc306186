//! Serving until the daemon is asked to stop, and the stop itself.

use std::sync::Arc;
use std::time::Instant;

use tinycode_shared::paths::Layout;
use tinycode_shared::proto::DaemonStopped;
use tinycode_shared::proto::event::Payload;
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::{mpsc, watch};

use crate::domain::desk::Desk;
use crate::server::{self, Shared};
use crate::store::{EventStore, ExpectedVersion};

use super::engine::Engine;
use super::{DaemonError, SETTLE_AT_STOP, SHUTDOWN_GRACE, io};

/// Serve until a signal or the Shutdown RPC; returns how serving ended and
/// why the daemon stops. Graceful shutdown waits for every connection to
/// close, but a client that keeps an idle connection open must not keep
/// the daemon alive: after the grace period the rest are dropped.
pub(super) async fn serve_until_stopped(
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
        reports: Arc::clone(&engine.reports),
        connectors: Arc::clone(&engine.connectors),
        credentials: Arc::clone(&engine.credentials),
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
    let server = server::serve(shared, listener, stop);
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
pub(super) struct Stop<'a> {
    pub(super) store: &'a EventStore,
    pub(super) lifecycle: &'a str,
    pub(super) desk: &'a Arc<Desk>,
    pub(super) cluster: &'a crate::cluster::Cluster,
    pub(super) layout: &'a Layout,
}

impl Stop<'_> {
    /// In-flight requests have completed: record `DaemonStopped`, let the
    /// read models and files catch up, close the log (within a limit: a
    /// failed disk must not keep the daemon from stopping — what it
    /// acknowledged is durable already), leave the daemons sharing it, and
    /// remove the socket. Returns the record's and the close's results.
    pub(super) async fn run(
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
