//! The Reports service: requests checked here, the work is
//! `crate::reports`.

use std::sync::Arc;

use tinycode_shared::proto::reports_server::Reports as ReportsRpc;
use tinycode_shared::proto::{
    GenerateReportRequest, GetReportRequest, ListReportsRequest, ListReportsResponse,
    ReportContent, ReportInfo,
};
use tonic::{Request, Response, Status};

use super::{OrStatus, validate};
use crate::reports::{Ask, Reports};

pub struct ReportsService {
    reports: Arc<Reports>,
}

impl ReportsService {
    pub fn new(reports: Arc<Reports>) -> Self {
        Self { reports }
    }
}

#[tonic::async_trait]
impl ReportsRpc for ReportsService {
    async fn generate(
        &self,
        request: Request<GenerateReportRequest>,
    ) -> Result<Response<ReportInfo>, Status> {
        let r = request.into_inner();
        for (field, value) in [("day", &r.day), ("from", &r.from), ("to", &r.to)] {
            validate::max_len(field, value, 10)?;
        }
        validate::max_len("queue", &r.queue, 64)?;
        let offset = self.reports.offset();
        let now = crate::clock::now_unix();
        let ask = Ask::of(&r.day, &r.from, &r.to, &r.queue, offset, now).or_status()?;
        self.reports
            .generate(ask)
            .await
            .map(Response::new)
            .or_status()
    }

    async fn list(
        &self,
        request: Request<ListReportsRequest>,
    ) -> Result<Response<ListReportsResponse>, Status> {
        let limit = validate::limit("limit", request.into_inner().limit, 50, 1_000)?;
        let reports = self.reports.list(limit).await.or_status()?;
        Ok(Response::new(ListReportsResponse { reports }))
    }

    async fn get(
        &self,
        request: Request<GetReportRequest>,
    ) -> Result<Response<ReportContent>, Status> {
        let id = validate::id("report_id", &request.into_inner().report_id)?;
        self.reports.get(&id).await.map(Response::new).or_status()
    }
}
