//! The gRPC surface: tonic services, request validation, error mapping and
//! the peer-credential check. No business logic lives here.

mod approvals;
mod calls;
mod connectors;
mod daemon;
mod evals;
mod events;
mod extensions;
mod knowledge;
mod peer;
mod providers;
mod reports;
mod sessions;
pub mod starting;
mod status;
mod tickets;
mod triage;
mod validate;

use std::sync::Arc;
use std::time::Instant;

use tinycode_shared::paths::Layout;
use tinycode_shared::proto::FILE_DESCRIPTOR_SET;
use tinycode_shared::proto::approvals_server::ApprovalsServer;
use tinycode_shared::proto::calls_server::CallsServer;
use tinycode_shared::proto::connectors_server::ConnectorsServer;
use tinycode_shared::proto::daemon_server::DaemonServer;
use tinycode_shared::proto::evals_server::EvalsServer;
use tinycode_shared::proto::events_server::EventsServer;
use tinycode_shared::proto::extensions_server::ExtensionsServer;
use tinycode_shared::proto::knowledge_server::KnowledgeServer;
use tinycode_shared::proto::providers_server::ProvidersServer;
use tinycode_shared::proto::reports_server::ReportsServer;
use tinycode_shared::proto::sessions_server::SessionsServer;
use tinycode_shared::proto::tickets_server::TicketsServer;
use tinycode_shared::proto::triage_server::TriageServer;
use tokio::sync::{mpsc, watch};
use tonic::Status;
use tonic::service::InterceptorLayer;
use tonic::transport::Server;

use crate::domain::desk::Desk;
use crate::store::EventStore;
pub use peer::Peer;
pub use status::{IntoStatus, OrStatus};

/// Why the daemon is stopping (recorded in `DaemonStopped`).
pub type ShutdownReason = String;

/// What every service shares.
#[derive(Clone)]
pub struct Shared {
    pub store: EventStore,
    pub desk: Arc<Desk>,
    pub sessions: Arc<crate::sessions::Sessions>,
    pub triage: Arc<crate::triage::Triage>,
    pub mcp: Arc<crate::mcp::McpHub>,
    pub calls: Arc<crate::calls::DirectCalls>,
    /// Reload and drain (`Daemon.Reload`, `Shutdown{drain}`).
    pub control: Arc<crate::control::Control>,
    pub extensions: Arc<crate::extensions::Extensions>,
    pub evals: Arc<crate::eval::Evals>,
    pub reports: Arc<crate::reports::Reports>,
    pub connectors: Arc<crate::connectors::Connectors>,
    pub credentials: Arc<crate::auth::Credentials>,
    pub layout: Arc<Layout>,
    pub started: Instant,
    /// Ask the daemon to stop (Shutdown RPC).
    pub shutdown: mpsc::Sender<ShutdownReason>,
    /// Flips to true when the daemon begins stopping: long streams end.
    pub stopping: watch::Receiver<bool>,
}

impl Shared {
    /// Every read model, in dependency order (`Daemon.Rebuild`, status).
    pub fn read_models(&self) -> Vec<&crate::projection::ProjectorHandle> {
        let mut models = self.desk.projectors().to_vec();
        models.push(self.sessions.approvals().projector());
        models.push(self.sessions.projector());
        models.push(self.triage.projector());
        models.push(self.evals.history());
        models.push(self.evals.projector());
        models.push(self.connectors.projector());
        models
    }

    /// Read-your-writes: wait until `model` has every event up to
    /// `min_sequence` (0: no wait). A sequence the log does not have yet is
    /// refused rather than waited for.
    pub async fn read_at(
        &self,
        model: &crate::projection::ProjectorHandle,
        min_sequence: u64,
    ) -> Result<(), Status> {
        if min_sequence == 0 {
            return Ok(());
        }
        let head = self.store.last_sequence();
        if min_sequence > head {
            return Err(Status::out_of_range(format!(
                "`min_sequence` is {min_sequence}, but the log ends at {head}; pass a sequence this daemon has sent"
            )));
        }
        model.wait_for(min_sequence).await.or_status()
    }
}

pub(crate) use crate::paging::{MAX_PAGE_BYTES, page};

/// Serve every service on `listener` until `stop` resolves.
pub async fn serve(
    shared: Shared,
    listener: Arc<tokio::net::UnixListener>,
    stop: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError> {
    let reflection_v1 = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1()?;
    let reflection_v1alpha = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1alpha()?;
    let mut routes = tonic::service::Routes::builder();
    routes
        .add_service(health().await)
        .add_service(reflection_v1)
        .add_service(reflection_v1alpha);
    add_services(&mut routes, shared);
    serve_routes(routes.routes(), listener, Box::pin(stop), |r| r).await?;
    Ok(())
}

/// Serve `routes` on `listener` until `stop` resolves, to peers of this
/// daemon's uid only. The one place tonic's transport server (and the
/// hyper stack under it) is instantiated: the start-up status server uses
/// it too, so the daemon compiles that stack once, not twice.
/// A last change to every answer (the start-up server's: what it does not
/// serve is UNAVAILABLE, not UNIMPLEMENTED).
pub(crate) type Answer = fn(
    tonic::codegen::http::Response<tonic::body::Body>,
) -> tonic::codegen::http::Response<tonic::body::Body>;

pub(crate) async fn serve_routes(
    routes: tonic::service::Routes,
    listener: Arc<tokio::net::UnixListener>,
    stop: std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>,
    answer: Answer,
) -> Result<(), tonic::transport::Error> {
    let incoming = futures::stream::unfold(listener, |l| async move {
        let accepted = l.accept().await.map(|(stream, _)| stream);
        Some((accepted, l))
    });
    let own_uid = rustix::process::geteuid().as_raw();
    Server::builder()
        .layer(InterceptorLayer::new(peer::require_same_uid(own_uid)))
        .layer(tower::util::MapResponseLayer::new(move |r| {
            answer(status::undecodable_request_is_invalid_argument(r))
        }))
        .add_routes(routes)
        .serve_with_incoming_shutdown(incoming, stop)
        .await
}

/// The health service, every service serving.
async fn health()
-> tonic_health::pb::health_server::HealthServer<impl tonic_health::pb::health_server::Health> {
    let (reporter, service) = tonic_health::server::health_reporter();
    reporter
        .set_serving::<DaemonServer<daemon::DaemonService>>()
        .await;
    reporter
        .set_serving::<EventsServer<events::EventsService>>()
        .await;
    reporter
        .set_serving::<TicketsServer<tickets::TicketsService>>()
        .await;
    reporter
        .set_serving::<KnowledgeServer<knowledge::KnowledgeService>>()
        .await;
    reporter
        .set_serving::<SessionsServer<sessions::SessionsService>>()
        .await;
    reporter
        .set_serving::<ApprovalsServer<approvals::ApprovalsService>>()
        .await;
    reporter
        .set_serving::<TriageServer<triage::TriageService>>()
        .await;
    reporter
        .set_serving::<CallsServer<calls::CallsService>>()
        .await;
    reporter
        .set_serving::<ExtensionsServer<extensions::ExtensionsService>>()
        .await;
    reporter
        .set_serving::<EvalsServer<evals::EvalsService>>()
        .await;
    reporter
        .set_serving::<ReportsServer<reports::ReportsService>>()
        .await;
    reporter
        .set_serving::<ConnectorsServer<connectors::ConnectorsService>>()
        .await;
    reporter
        .set_serving::<ProvidersServer<providers::ProvidersService>>()
        .await;
    service
}

/// The daemon's own services.
fn add_services(routes: &mut tonic::service::RoutesBuilder, shared: Shared) {
    routes
        .add_service(DaemonServer::new(daemon::DaemonService::new(
            shared.clone(),
        )))
        .add_service(EventsServer::new(events::EventsService::new(
            shared.clone(),
        )))
        .add_service(TicketsServer::new(tickets::TicketsService::new(
            shared.clone(),
        )))
        .add_service(KnowledgeServer::new(knowledge::KnowledgeService::new(
            shared.clone(),
        )))
        .add_service(SessionsServer::new(sessions::SessionsService::new(
            shared.clone(),
        )))
        .add_service(ApprovalsServer::new(approvals::ApprovalsService::new(
            shared.clone(),
        )))
        .add_service(CallsServer::new(calls::CallsService::new(shared.clone())))
        .add_service(ExtensionsServer::new(extensions::ExtensionsService::new(
            Arc::clone(&shared.extensions),
        )))
        .add_service(EvalsServer::new(evals::EvalsService::new(Arc::clone(
            &shared.evals,
        ))))
        .add_service(ReportsServer::new(reports::ReportsService::new(
            Arc::clone(&shared.reports),
        )))
        .add_service(ConnectorsServer::new(connectors::ConnectorsService::new(
            Arc::clone(&shared.connectors),
        )))
        .add_service(ProvidersServer::new(providers::ProvidersService::new(
            Arc::clone(&shared.credentials),
        )))
        .add_service(TriageServer::new(triage::TriageService::new(shared)));
}

/// A server-streaming response fed by a producer task through a small
/// channel; the task ends when the client goes away (receiver dropped).
pub(crate) type ResponseStream<T> =
    std::pin::Pin<Box<dyn futures::Stream<Item = Result<T, tonic::Status>> + Send>>;

pub(crate) fn stream_from<T, F, Fut>(producer: F) -> ResponseStream<T>
where
    T: Send + 'static,
    F: FnOnce(mpsc::Sender<Result<T, tonic::Status>>) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let (tx, rx) = mpsc::channel(64);
    tokio::spawn(producer(tx));
    Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx))
}

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("gRPC reflection could not load the protocol descriptors: {0}")]
    Reflection(#[from] tonic_reflection::server::Error),
    #[error("the gRPC server failed: {0}")]
    Transport(#[from] tonic::transport::Error),
}
