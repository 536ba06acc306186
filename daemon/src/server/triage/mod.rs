//! The Triage service: each handler converts its request (`convert.rs`),
//! calls the triage once and converts the answer back.

mod convert;

use std::sync::Arc;
use std::time::Duration;

use tinycode_shared::proto::triage_server::Triage as TriageApi;
use tinycode_shared::proto::{
    EnqueueTriageRequest, EnqueueTriageResponse, TriageStatus, TriageStatusRequest,
};
use tonic::{Request, Response, Status};

use super::{OrStatus, ResponseStream, Shared, stream_from};
use crate::triage::Triage;
use convert::{Enqueue, StatusQuery};

/// `Triage.Watch` sends at most one status per this interval.
const WATCH_INTERVAL: Duration = Duration::from_millis(200);

pub struct TriageService {
    shared: Shared,
    triage: Arc<Triage>,
}

impl TriageService {
    pub fn new(shared: Shared) -> Self {
        let triage = Arc::clone(&shared.triage);
        Self { shared, triage }
    }
}

#[tonic::async_trait]
impl TriageApi for TriageService {
    async fn get_status(
        &self,
        request: Request<TriageStatusRequest>,
    ) -> Result<Response<TriageStatus>, Status> {
        let q = StatusQuery::try_from(request.into_inner())?;
        q.ask(&self.triage).map(Response::new)
    }

    type WatchStream = ResponseStream<TriageStatus>;

    async fn watch(
        &self,
        request: Request<TriageStatusRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        let q = StatusQuery::try_from(request.into_inner())?;
        let triage = Arc::clone(&self.triage);
        let mut stopping = self.shared.stopping.clone();
        Ok(Response::new(stream_from(move |tx| async move {
            let (mut board, mut live) = triage.subscribe();
            loop {
                board.mark_unchanged();
                live.mark_unchanged();
                let status = q.ask(&triage);
                let failed = status.is_err();
                if tx.send(status).await.is_err() || failed {
                    return;
                }
                tokio::select! {
                    changed = board.changed() => if changed.is_err() { return },
                    changed = live.changed() => if changed.is_err() { return },
                    _ = stopping.wait_for(|s| *s) => return,
                    () = tx.closed() => return,
                }
                // Coalesce bursts of changes into one status.
                tokio::time::sleep(WATCH_INTERVAL).await;
            }
        })))
    }

    async fn enqueue(
        &self,
        request: Request<EnqueueTriageRequest>,
    ) -> Result<Response<EnqueueTriageResponse>, Status> {
        let e = Enqueue::try_from(request)?;
        let (queued, already) = self
            .triage
            .enqueue(&e.ticket_ids, e.all_open, &e.approve, &e.model, e.by)
            .await
            .or_status()?;
        Ok(Response::new(EnqueueTriageResponse { queued, already }))
    }
}
