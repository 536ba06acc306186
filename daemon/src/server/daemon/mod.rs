//! The Daemon service: status, rebuild, reload and shutdown.

mod convert;

use tinycode_shared::PROTOCOL_VERSION;
use tinycode_shared::proto::daemon_server::Daemon;
use tinycode_shared::proto::{
    DaemonMember, DaemonStatus, GetStatusRequest, ProjectionProgress, RebuildRequest,
    RebuildResponse, ReloadRequest, ReloadResponse, ShutdownRequest, ShutdownResponse,
    SkillSummary, WorkspaceProblem,
};

use super::OrStatus;
use crate::projection::ProjectorHandle;
use tonic::{Request, Response, Status};

use super::{Peer, Shared};
use convert::Shutdown;
pub(super) use convert::mcp_status;

pub struct DaemonService {
    shared: Shared,
}

impl DaemonService {
    pub fn new(shared: Shared) -> Self {
        Self { shared }
    }
}

impl DaemonService {
    /// The daemons sharing the log, with the triage records each holds.
    async fn daemons(&self) -> Vec<DaemonMember> {
        let cluster = self.shared.triage.cluster();
        let leases = self.shared.triage.leases();
        cluster
            .members()
            .await
            .into_iter()
            .map(|(m, alive)| DaemonMember {
                triage_leases: leases.get(&m.id).copied().unwrap_or(0),
                this_daemon: m.id == cluster.id(),
                lease_ms: cluster.lease().as_millis() as u64,
                id: m.id,
                host: m.host,
                pid: m.pid,
                socket: m.socket,
                workspace: m.workspace,
                started_at: m.started_at,
                heartbeat_age_ms: m.heartbeat_age_ms,
                alive,
            })
            .collect()
    }
}

#[tonic::async_trait]
impl Daemon for DaemonService {
    async fn get_status(
        &self,
        _request: Request<GetStatusRequest>,
    ) -> Result<Response<DaemonStatus>, Status> {
        let stats = self.shared.store.stats();
        let layout = &self.shared.layout;
        Ok(Response::new(DaemonStatus {
            version: env!("CARGO_PKG_VERSION").to_string(),
            protocol_version: PROTOCOL_VERSION,
            pid: std::process::id(),
            uptime_ms: self.shared.started.elapsed().as_millis() as u64,
            workspace: layout
                .workspace
                .as_ref()
                .map(|w| w.display().to_string())
                .unwrap_or_default(),
            state_dir: layout.state_dir.display().to_string(),
            event_count: stats.event_count,
            last_sequence: stats.last_sequence,
            store_bytes: stats.store_bytes,
            socket_path: layout.socket.display().to_string(),
            log_path: layout.log_path().display().to_string(),
            default_model: self.shared.sessions.defaults().model.clone(),
            skills: self
                .shared
                .sessions
                .skills()
                .all()
                .map(|s| SkillSummary {
                    name: s.name.clone(),
                    description: s.description.clone(),
                })
                .collect(),
            projections: self
                .shared
                .read_models()
                .into_iter()
                .map(|m| ProjectionProgress {
                    name: m.name().into(),
                    applied: m.applied(),
                })
                .collect(),
            mcp_servers: self.shared.mcp.status().iter().map(mcp_status).collect(),
            daemon_id: self.shared.triage.cluster().id().to_string(),
            daemons: self.daemons().await,
            workspace_problems: self
                .shared
                .desk
                .refused_files()
                .into_iter()
                .map(|(file, reason)| WorkspaceProblem { file, reason })
                .collect(),
            writes_paused: [
                self.shared.store.writes_paused(),
                self.shared.triage.cluster().fenced(),
            ]
            .into_iter()
            .flatten()
            .collect::<Vec<_>>()
            .join("; "),
            permission_mode: self.shared.sessions.defaults().approve.as_str().into(),
            needs_restart: self.shared.control.needs_restart(),
            startup: None,
            queues: self.shared.desk.queues().to_vec(),
            categories: self
                .shared
                .desk
                .taxonomy()
                .categories
                .iter()
                .map(|c| c.name.clone())
                .collect(),
        }))
    }

    async fn rebuild(
        &self,
        request: Request<RebuildRequest>,
    ) -> Result<Response<RebuildResponse>, Status> {
        let models = models(self.shared.read_models(), &request.into_inner().models)?;
        let mut done = Vec::new();
        for model in models {
            let applied = model.rebuild().await.or_status()?;
            tracing::info!(model = model.name(), applied, "rebuilt from the log");
            done.push(ProjectionProgress {
                name: model.name().into(),
                applied,
            });
        }
        Ok(Response::new(RebuildResponse { models: done }))
    }

    async fn shutdown(
        &self,
        request: Request<ShutdownRequest>,
    ) -> Result<Response<ShutdownResponse>, Status> {
        let peer = Peer::of(&request);
        let Shutdown { drain } = Shutdown::try_from(request.into_inner())?;
        tracing::info!(client = %peer.client_name, pid = ?peer.pid, drain = drain.is_some(), "shutdown requested");
        let still_running = match drain {
            Some(limit) => self.shared.control.drain(limit).await,
            None => Vec::new(),
        };
        let reason = format!("Shutdown rpc from {}", peer.client_name);
        // A full channel means a shutdown is already under way: fine.
        let _ = self.shared.shutdown.try_send(reason);
        Ok(Response::new(ShutdownResponse { still_running }))
    }

    async fn reload(
        &self,
        request: Request<ReloadRequest>,
    ) -> Result<Response<ReloadResponse>, Status> {
        let peer = Peer::of(&request);
        tracing::info!(client = %peer.client_name, pid = ?peer.pid, "reload requested");
        let done = self.shared.control.reload().await.or_status()?;
        let defaults = self.shared.sessions.defaults();
        Ok(Response::new(ReloadResponse {
            applied: done.applied,
            needs_restart: done.needs_restart,
            warnings: done.warnings,
            default_model: defaults.model.clone(),
            permission_mode: defaults.approve.as_str().into(),
        }))
    }
}

/// The models a rebuild names (none: all of them, in dependency order).
fn models<'a>(
    all: Vec<&'a ProjectorHandle>,
    names: &[String],
) -> Result<Vec<&'a ProjectorHandle>, Status> {
    if names.is_empty() {
        return Ok(all);
    }
    names
        .iter()
        .map(|n| {
            all.iter().find(|m| m.name() == n).copied().ok_or_else(|| {
                let known: Vec<&str> = all.iter().map(|m| m.name()).collect();
                Status::invalid_argument(format!(
                    "unknown read model {:?}; the models are {}",
                    n.chars().take(40).collect::<String>(),
                    known.join(", ")
                ))
            })
        })
        .collect()
}
