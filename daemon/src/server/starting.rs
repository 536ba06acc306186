//! The gRPC surface while the daemon starts: `Daemon.GetStatus` answers
//! from the first moment with the start-up's stage and progress (so a
//! client waits while a large desk imports, instead of taking a silent
//! socket for a failure); every other call is UNAVAILABLE. When the start
//! is over this server steps aside and the full one takes the socket.

use std::sync::Arc;
use std::time::Instant;

use tinycode_shared::PROTOCOL_VERSION;
use tinycode_shared::paths::Layout;
use tinycode_shared::proto::daemon_server::{Daemon, DaemonServer};
use tinycode_shared::proto::{
    DaemonStatus, GetStatusRequest, RebuildRequest, RebuildResponse, ReloadRequest, ReloadResponse,
    ShutdownRequest, ShutdownResponse, StartupProgress,
};
use tonic::{Request, Response, Status};

use crate::progress::Progress;

pub struct StartingService {
    pub layout: Arc<Layout>,
    pub progress: Arc<Progress>,
    pub started: Instant,
}

/// The start-up's progress as the wire carries it.
pub fn startup_progress(progress: &Progress) -> StartupProgress {
    let s = progress.snapshot();
    StartupProgress {
        stage: s.stage,
        unit: s.unit,
        done: s.done,
        total: s.total,
        elapsed_ms: s.elapsed_ms,
    }
}

fn starting(progress: &Progress) -> Status {
    let s = progress.snapshot();
    let count = if s.total > 0 {
        format!(" ({} of {} {})", s.done, s.total, s.unit)
    } else {
        String::new()
    };
    let stage = if s.stage.is_empty() {
        HANDING_OVER
    } else {
        &s.stage
    };
    Status::unavailable(format!(
        "tinycoded is starting: {stage}{count}; ask again in a moment"
    ))
}

/// What the start-up server says once the start is over and it is
/// stepping aside: never an empty stage, which a client takes for the full
/// server answering and sends its calls on the same connection.
pub const HANDING_OVER: &str = "handing over to the full server";

impl StartingService {
    fn progress_now(&self) -> StartupProgress {
        let mut progress = startup_progress(&self.progress);
        if progress.stage.is_empty() {
            progress.stage = HANDING_OVER.to_string();
        }
        progress
    }
}

#[tonic::async_trait]
impl Daemon for StartingService {
    async fn get_status(
        &self,
        _request: Request<GetStatusRequest>,
    ) -> Result<Response<DaemonStatus>, Status> {
        let layout = &self.layout;
        Ok(Response::new(DaemonStatus {
            version: env!("CARGO_PKG_VERSION").to_string(),
            protocol_version: PROTOCOL_VERSION,
            pid: std::process::id(),
            uptime_ms: self.started.elapsed().as_millis() as u64,
            workspace: layout
                .workspace
                .as_ref()
                .map(|w| w.display().to_string())
                .unwrap_or_default(),
            state_dir: layout.state_dir.display().to_string(),
            socket_path: layout.socket.display().to_string(),
            log_path: layout.log_path().display().to_string(),
            startup: Some(self.progress_now()),
            ..DaemonStatus::default()
        }))
    }

    async fn shutdown(
        &self,
        _request: Request<ShutdownRequest>,
    ) -> Result<Response<ShutdownResponse>, Status> {
        Err(starting(&self.progress))
    }

    async fn rebuild(
        &self,
        _request: Request<RebuildRequest>,
    ) -> Result<Response<RebuildResponse>, Status> {
        Err(starting(&self.progress))
    }

    async fn reload(
        &self,
        _request: Request<ReloadRequest>,
    ) -> Result<Response<ReloadResponse>, Status> {
        Err(starting(&self.progress))
    }
}

/// Serve the start-up's status on `listener` until `done` resolves; the
/// listener is left to the full server.
pub async fn serve_while_starting(
    service: StartingService,
    listener: Arc<tokio::net::UnixListener>,
    done: impl std::future::Future<Output = ()> + Send + 'static,
) {
    let routes = tonic::service::Routes::new(DaemonServer::new(service));
    let served = super::serve_routes(
        routes,
        listener,
        Box::pin(done),
        super::status::unserved_while_starting,
    )
    .await;
    if let Err(e) = served {
        tracing::warn!(error = %e, "the start-up status server stopped");
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[tokio::test]
    async fn a_finished_start_says_it_hands_over_never_an_empty_stage() {
        let tmp = tempfile::tempdir().unwrap();
        let layout = Layout::resolve(None, tmp.path(), Some(tmp.path()), tmp.path()).unwrap();
        let service = StartingService {
            layout: Arc::new(layout),
            progress: Arc::new(Progress::default()),
            started: Instant::now(),
        };
        service.progress.stage("opening the log");
        let stage = |s: DaemonStatus| s.startup.unwrap().stage;
        let status = service.get_status(Request::new(GetStatusRequest {}));
        assert_eq!(stage(status.await.unwrap().into_inner()), "opening the log");
        service.progress.finish();
        let status = service.get_status(Request::new(GetStatusRequest {}));
        assert_eq!(stage(status.await.unwrap().into_inner()), HANDING_OVER);
        let refused = service.reload(Request::new(ReloadRequest::default())).await;
        assert_eq!(
            refused.unwrap_err().message(),
            format!("tinycoded is starting: {HANDING_OVER}; ask again in a moment")
        );
    }
}
