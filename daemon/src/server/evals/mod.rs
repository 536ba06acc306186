//! The Evals service: requests become a typed [`RunSpec`] here; the work is
//! `crate::eval`.

mod convert;

use std::sync::Arc;

use tinycode_shared::proto::evals_server::Evals as EvalsRpc;
use tinycode_shared::proto::{
    CancelEvalRequest, CancelEvalResponse, EvalReport, EvalUpdate, GetEvalRequest,
    ListEvalsRequest, ListEvalsResponse, RunEvalRequest, eval_update::Update,
};
use tokio::sync::mpsc;
use tonic::{Request, Response, Status};

use super::{OrStatus, ResponseStream, stream_from, validate};
use crate::eval::Evals;
use convert::Spec;

pub struct EvalsService {
    evals: Arc<Evals>,
}

impl EvalsService {
    pub fn new(evals: Arc<Evals>) -> Self {
        Self { evals }
    }
}

#[tonic::async_trait]
impl EvalsRpc for EvalsService {
    type RunStream = ResponseStream<EvalUpdate>;

    async fn run(
        &self,
        request: Request<RunEvalRequest>,
    ) -> Result<Response<Self::RunStream>, Status> {
        let Spec(spec) = Spec::try_from(request.into_inner())?;
        let evals = Arc::clone(&self.evals);
        Ok(Response::new(stream_from(move |tx| async move {
            let (progress, mut updates) = mpsc::channel(16);
            let forward = {
                let tx = tx.clone();
                tokio::spawn(async move {
                    while let Some(p) = updates.recv().await {
                        let update = EvalUpdate {
                            update: Some(Update::Progress(p)),
                        };
                        if tx.send(Ok(update)).await.is_err() {
                            return; // the client left: `progress` closes
                        }
                    }
                })
            };
            let report = evals.run(spec, progress).await;
            let _ = forward.await;
            let last = report
                .map(|r| EvalUpdate {
                    update: Some(Update::Report(r)),
                })
                .or_status();
            let _ = tx.send(last).await;
        })))
    }

    async fn cancel(
        &self,
        request: Request<CancelEvalRequest>,
    ) -> Result<Response<CancelEvalResponse>, Status> {
        let id = request.into_inner().eval_id;
        validate::max_len("eval_id", &id, 64)?;
        let cancelled = self.evals.cancel(&id);
        if !cancelled {
            // Not running: one that finished is answered `false`; an id no
            // evaluation ever had is not found.
            self.evals.get(&id).await.or_status()?;
        }
        Ok(Response::new(CancelEvalResponse { cancelled }))
    }

    async fn list(
        &self,
        request: Request<ListEvalsRequest>,
    ) -> Result<Response<ListEvalsResponse>, Status> {
        let limit = validate::limit("limit", request.into_inner().limit, 20, 1000)?;
        let evals = self.evals.list(limit).await.or_status()?;
        Ok(Response::new(ListEvalsResponse { evals }))
    }

    async fn get(&self, request: Request<GetEvalRequest>) -> Result<Response<EvalReport>, Status> {
        let req = request.into_inner();
        validate::max_len("eval_id", &req.eval_id, 64)?;
        let report = self.evals.get(&req.eval_id).await.or_status()?;
        Ok(Response::new(report))
    }
}
