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
        let all = all
            .into_iter()
            .map(|a| with_ticket_due(&self.shared.desk, a))
            .collect();
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
/// `a` with the ticket its call acts on and that ticket's SLA due time.
fn with_ticket_due(desk: &crate::domain::desk::Desk, mut a: ApprovalInfo) -> ApprovalInfo {
    if let Some(ticket) = a
        .request
        .as_ref()
        .and_then(|r| r.call.as_ref())
        .and_then(|c| {
            serde_json::from_str::<serde_json::Value>(&c.arguments_json).ok()?["ticket_id"]
                .as_str()
                .map(str::to_string)
        })
    {
        a.ticket_due_at = desk.ticket_due(&ticket).unwrap_or_default();
        a.ticket_id = ticket;
    }
    a
}

fn page_of(mut all: Vec<ApprovalInfo>, q: &List) -> (Vec<ApprovalInfo>, Option<u64>) {
    if q.by_due {
        // RFC 3339 UTC text sorts as time; no clock sorts last.
        all.sort_by(|a, b| {
            let due = |x: &ApprovalInfo| (x.ticket_due_at.is_empty(), x.ticket_due_at.clone());
            due(a)
                .cmp(&due(b))
                .then(a.requested_sequence.cmp(&b.requested_sequence))
        });
        let from = q.after.unwrap_or(0) as usize;
        let page: Vec<ApprovalInfo> = all.iter().skip(from).take(q.limit).cloned().collect();
        let next = (from + page.len() < all.len()).then_some((from + page.len()) as u64);
        return (page, next);
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn info(sequence: u64, due: &str) -> ApprovalInfo {
        ApprovalInfo {
            requested_sequence: sequence,
            ticket_due_at: due.into(),
            ..ApprovalInfo::default()
        }
    }

    #[test]
    fn the_inbox_by_due_puts_the_soonest_ticket_first_and_pages_by_offset() {
        let all = vec![
            info(1, ""),
            info(2, "2026-12-04T12:00:00.000Z"),
            info(3, "2026-12-04T09:30:00.000Z"),
            info(4, ""),
            info(5, "2026-12-04T12:00:00.000Z"),
        ];
        let q = |after| List {
            session: String::new(),
            all: false,
            limit: 3,
            after,
            newest_first: false,
            by_due: true,
        };
        let (page, next) = page_of(all.clone(), &q(None));
        let order: Vec<u64> = page.iter().map(|a| a.requested_sequence).collect();
        assert_eq!((order, next), (vec![3, 2, 5], Some(3)));
        let (page, next) = page_of(all, &q(Some(3)));
        let order: Vec<u64> = page.iter().map(|a| a.requested_sequence).collect();
        assert_eq!((order, next), (vec![1, 4], None));
    }
}
