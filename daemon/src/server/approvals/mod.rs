//! The Approvals service: each handler converts its request
//! (`convert.rs`), calls the approvals once and converts the answer back.

mod convert;

use std::sync::Arc;

use tinycode_shared::proto::approvals_server::Approvals as ApprovalsApi;
use tinycode_shared::proto::{
    ApprovalInfo, DecideApprovalRequest, Event, GetApprovalRequest, ListApprovalsRequest,
    ListApprovalsResponse, ListRulesRequest, ListRulesResponse, RevokeRuleRequest,
    RevokeRuleResponse, WatchApprovalsRequest,
};
use tonic::{Request, Response, Status};

use super::peer::client_ref;
use super::validate;
use super::{OrStatus, ResponseStream, Shared};
use crate::approvals::Approvals;
use crate::store::SubscriptionOptions;
use convert::{Decide, List};

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
        let q = List::try_from(request.into_inner())?;
        let all = self.approvals().list(q.all, &q.session).or_status()?;
        let (approvals, next) = page_of(all, &q);
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
        let d = Decide::try_from(request)?;
        let sessions = &self.shared.sessions;
        let decided = sessions.decide(&d.id, d.decision, &d.text, d.workspace_wide, d.by);
        decided.await.map(Response::new).or_status()
    }

    type WatchStream = ResponseStream<Event>;

    async fn watch(
        &self,
        request: Request<WatchApprovalsRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        let req = request.into_inner();
        Ok(Response::new(super::events::subscribe(
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

/// One page of approvals in the listing's order, and where the next starts.
fn page_of(mut all: Vec<ApprovalInfo>, q: &List) -> (Vec<ApprovalInfo>, Option<u64>) {
    if q.newest_first {
        use std::cmp::Reverse;
        all.reverse();
        let key = |a: &ApprovalInfo| Reverse(a.requested_sequence);
        let (page, next) = super::page(all, key, q.after.map(Reverse), q.limit);
        (page, next.map(|n| n.0))
    } else {
        super::page(all, |a| a.requested_sequence, q.after, q.limit)
    }
}
