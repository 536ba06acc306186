use std::sync::Arc;

use tinycode_shared::proto::approvals_server::Approvals as ApprovalsApi;
use tinycode_shared::proto::{
    ApprovalDecision, ApprovalInfo, DecideApprovalRequest, Event, GetApprovalRequest,
    ListApprovalsRequest, ListApprovalsResponse, ListRulesRequest, ListRulesResponse,
    RevokeRuleRequest, RevokeRuleResponse, WatchApprovalsRequest,
};
use tonic::{Request, Response, Status};

use super::sessions_svc::client_ref;
use super::validate;
use super::{OrStatus, ResponseStream, Shared};
use crate::approvals::Approvals;
use crate::store::SubscriptionOptions;

pub struct ApprovalsService {
    shared: Shared,
}

impl ApprovalsService {
    pub fn new(shared: Shared) -> Self {
        Self { shared }
    }

    fn approvals(&self) -> &Arc<Approvals> {
        self.shared.sessions.approvals()
    }
}

#[tonic::async_trait]
impl ApprovalsApi for ApprovalsService {
    async fn list(
        &self,
        request: Request<ListApprovalsRequest>,
    ) -> Result<Response<ListApprovalsResponse>, Status> {
        let req = request.into_inner();
        let session = validate::optional_id("session_id", &req.session_id)?;
        let limit = validate::limit("limit", req.limit, 100, 1_000)?;
        let after = match req.page_token.trim() {
            "" => None,
            token => Some(token.parse::<u64>().map_err(|_| {
                Status::invalid_argument("`page_token` is not one this service returned")
            })?),
        };
        let mut all = self.approvals().list(req.all, &session).or_status()?;
        let (approvals, next) = if req.newest_first {
            use std::cmp::Reverse;
            all.reverse();
            let (page, next) = super::page(
                all,
                |a| Reverse(a.requested_sequence),
                after.map(Reverse),
                limit,
            );
            (page, next.map(|n| n.0))
        } else {
            super::page(all, |a| a.requested_sequence, after, limit)
        };
        Ok(Response::new(ListApprovalsResponse {
            approvals,
            next_page_token: next.map(|n| n.to_string()).unwrap_or_default(),
        }))
    }

    async fn get(
        &self,
        request: Request<GetApprovalRequest>,
    ) -> Result<Response<ApprovalInfo>, Status> {
        let id = validate::id("approval_id", &request.into_inner().approval_id)?;
        self.approvals().get(&id).map(Response::new).or_status()
    }

    async fn decide(
        &self,
        request: Request<DecideApprovalRequest>,
    ) -> Result<Response<ApprovalInfo>, Status> {
        let by = client_ref(&request);
        let req = request.into_inner();
        let id = validate::id("approval_id", &req.approval_id)?;
        validate::max_len("reason", &req.reason, 2000)?;
        validate::max_len("answer", &req.answer, 2000)?;
        let decision = ApprovalDecision::try_from(req.decision).unwrap_or_default();
        // A question's answer travels as the decision's text.
        let text = if req.answer.is_empty() {
            &req.reason
        } else {
            &req.answer
        };
        self.shared
            .sessions
            .decide(&id, decision, text, req.workspace_wide, by)
            .await
            .map(Response::new)
            .or_status()
    }

    type WatchStream = ResponseStream<Event>;

    async fn watch(
        &self,
        request: Request<WatchApprovalsRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        let req = request.into_inner();
        Ok(Response::new(super::events_svc::subscribe(
            &self.shared,
            SubscriptionOptions {
                from_sequence: req.from_sequence,
                stream_prefix: "approval-".into(),
                follow: true,
            },
        )))
    }

    async fn list_rules(
        &self,
        request: Request<ListRulesRequest>,
    ) -> Result<Response<ListRulesResponse>, Status> {
        let session = validate::optional_id("session_id", &request.into_inner().session_id)?;
        Ok(Response::new(ListRulesResponse {
            rules: self.approvals().rules(&session).or_status()?,
        }))
    }

    async fn revoke_rule(
        &self,
        request: Request<RevokeRuleRequest>,
    ) -> Result<Response<RevokeRuleResponse>, Status> {
        let by = client_ref(&request);
        let rule = validate::id("rule_id", &request.into_inner().rule_id)?;
        self.approvals().revoke(&rule, by).await.or_status()?;
        Ok(Response::new(RevokeRuleResponse {}))
    }
}
