//! The Connectors service: requests checked here, the work is
//! `crate::connectors`.

use std::sync::Arc;

use tinycode_shared::proto::connectors_server::Connectors as ConnectorsRpc;
use tinycode_shared::proto::{
    ConnectorsStatus, ConnectorsStatusRequest, HookDelivery, HookReceipt, ImportProgress,
    ImportRequest, ListOutboxRequest, ListOutboxResponse, OutboxItem, RetryDeliveryRequest,
};
use tonic::{Request, Response, Status};

use super::peer::caller_and;
use super::{OrStatus, ResponseStream, stream_from, validate};
use crate::connectors::outbox::state;
use crate::connectors::{Connectors, ImportKind, Mapping, Receipt};

pub struct ConnectorsService {
    connectors: Arc<Connectors>,
}

impl ConnectorsService {
    pub fn new(connectors: Arc<Connectors>) -> Self {
        Self { connectors }
    }
}

#[tonic::async_trait]
impl ConnectorsRpc for ConnectorsService {
    async fn receive(
        &self,
        request: Request<HookDelivery>,
    ) -> Result<Response<HookReceipt>, Status> {
        let d = request.into_inner();
        validate::max_len("source", &d.source, 64)?;
        let header = |name: &str| d.headers.get(name).cloned();
        let receipt = self
            .connectors
            .receive(&d.source, header, &d.body)
            .await
            .or_status()?;
        Ok(Response::new(match receipt {
            Receipt::Stored(r) => HookReceipt {
                ticket_id: r.ticket,
                created: r.created,
                duplicate: r.duplicate,
                ignored: String::new(),
            },
            Receipt::Ignored(why) => HookReceipt {
                ignored: why,
                ..HookReceipt::default()
            },
        }))
    }

    type ImportStream = ResponseStream<ImportProgress>;

    async fn import(
        &self,
        request: Request<ImportRequest>,
    ) -> Result<Response<Self::ImportStream>, Status> {
        let r = request.into_inner();
        let kind = ImportKind::parse(&r.kind).ok_or_else(|| {
            Status::invalid_argument(format!(
                "`kind` must be one of {}, got {:?}",
                ImportKind::NAMES.join(", "),
                r.kind
            ))
        })?;
        let path = std::path::PathBuf::from(&r.path);
        if !path.is_absolute() {
            return Err(Status::invalid_argument(format!(
                "`path` must be absolute (the daemon reads it), got {:?}",
                r.path
            )));
        }
        let mapping =
            Mapping::new(r.map.into_iter().collect()).map_err(Status::invalid_argument)?;
        let connectors = Arc::clone(&self.connectors);
        Ok(Response::new(stream_from(move |tx| async move {
            let (progress, mut updates) = tokio::sync::mpsc::channel(4);
            let forward = tx.clone();
            let relay = tokio::spawn(async move {
                while let Some(p) = updates.recv().await {
                    if forward.send(Ok(p)).await.is_err() {
                        break;
                    }
                }
            });
            let into = (!r.source.is_empty()).then_some(r.source.as_str());
            let result = connectors
                .import(kind, &path, &mapping, into, progress)
                .await;
            let _ = relay.await;
            if let Err(e) = result {
                let _ = tx.send(Err(e).or_status()).await;
            }
        })))
    }

    async fn list_outbox(
        &self,
        request: Request<ListOutboxRequest>,
    ) -> Result<Response<ListOutboxResponse>, Status> {
        let r = request.into_inner();
        if !r.state.is_empty() && !state::ALL.contains(&r.state.as_str()) {
            return Err(Status::invalid_argument(format!(
                "`state` must be one of {}, got {:?}",
                state::ALL.join(", "),
                r.state
            )));
        }
        let limit = validate::limit("limit", r.limit, 50, 1_000)?;
        let items = self.connectors.list(&r.state, limit).await.or_status()?;
        Ok(Response::new(ListOutboxResponse { items }))
    }

    async fn status(
        &self,
        _request: Request<ConnectorsStatusRequest>,
    ) -> Result<Response<ConnectorsStatus>, Status> {
        let sources = self.connectors.status().await.or_status()?;
        Ok(Response::new(ConnectorsStatus { sources }))
    }

    async fn retry_delivery(
        &self,
        request: Request<RetryDeliveryRequest>,
    ) -> Result<Response<OutboxItem>, Status> {
        let (by, r) = caller_and(request);
        self.connectors
            .retry(r.sequence, by)
            .await
            .map(Response::new)
            .or_status()
    }
}
