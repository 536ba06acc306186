use std::sync::Arc;
use std::time::Duration;

use tinycode_shared::proto::triage_server::Triage as TriageApi;
use tinycode_shared::proto::{
    EnqueueTriageRequest, EnqueueTriageResponse, TriageStatus, TriageStatusRequest,
};
use tonic::{Request, Response, Status};

use super::sessions_svc::client_ref;
use super::validate;
use super::{OrStatus, ResponseStream, Shared, stream_from};
use crate::domain::limits::MAX_NAME;
use crate::triage::Triage;

/// `Triage.Watch` sends at most one status per this interval.
const WATCH_INTERVAL: Duration = Duration::from_millis(200);
/// Ticket ids one request may name.
const MAX_IDS: usize = 10_000;

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

fn check_ids(ids: &[String]) -> Result<(), Status> {
    if ids.len() > MAX_IDS {
        return Err(Status::invalid_argument(format!(
            "`ticket_ids` names {} tickets; at most {MAX_IDS} per request",
            ids.len()
        )));
    }
    ids.iter()
        .try_for_each(|id| validate::max_len("ticket_ids", id, MAX_NAME))
}

#[tonic::async_trait]
impl TriageApi for TriageService {
    async fn get_status(
        &self,
        request: Request<TriageStatusRequest>,
    ) -> Result<Response<TriageStatus>, Status> {
        let req = request.into_inner();
        check_ids(&req.ticket_ids)?;
        self.triage
            .status(
                &req.ticket_ids,
                req.counts_only,
                token(&req.page_token),
                req.limit as usize,
            )
            .map(Response::new)
            .or_status()
    }

    type WatchStream = ResponseStream<TriageStatus>;

    async fn watch(
        &self,
        request: Request<TriageStatusRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        let req = request.into_inner();
        check_ids(&req.ticket_ids)?;
        let triage = Arc::clone(&self.triage);
        let mut stopping = self.shared.stopping.clone();
        Ok(Response::new(stream_from(move |tx| async move {
            let (mut board, mut live) = triage.subscribe();
            loop {
                board.mark_unchanged();
                live.mark_unchanged();
                let status = triage
                    .status(
                        &req.ticket_ids,
                        req.counts_only,
                        token(&req.page_token),
                        req.limit as usize,
                    )
                    .or_status();
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
        let by = client_ref(&request);
        let req = request.into_inner();
        check_ids(&req.ticket_ids)?;
        validate::max_len("model", &req.model, MAX_NAME)?;
        if req.ticket_ids.is_empty() && !req.all_open {
            return Err(Status::invalid_argument(
                "name `ticket_ids` or set `all_open` (every open ticket never triaged)",
            ));
        }
        let (queued, already) = self
            .triage
            .enqueue(&req.ticket_ids, req.all_open, &req.approve, &req.model, by)
            .await
            .or_status()?;
        Ok(Response::new(EnqueueTriageResponse { queued, already }))
    }
}

/// A page token (empty: from the start).
fn token(text: &str) -> Option<String> {
    (!text.is_empty()).then(|| text.to_string())
}
