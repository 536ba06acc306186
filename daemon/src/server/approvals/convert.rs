//! The Approvals service's boundary: requests checked and typed
//! (`TryFrom`).

use tinycode_shared::proto::{
    ApprovalDecision, ClientRef, DecideApprovalRequest, ListApprovalsRequest,
};
use tonic::{Request, Status};

use super::super::peer::caller_and;
use super::super::validate;

/// A reason or an answer, at most this many bytes.
const MAX_REASON: usize = 2000;

/// `Approvals.List`, checked.
pub struct List {
    /// Only this session's (empty: every session's).
    pub session: String,
    pub all: bool,
    pub limit: usize,
    /// After this request's sequence (in the listing's order).
    pub after: Option<u64>,
    pub newest_first: bool,
    /// By the ticket's SLA due time (`order: "due"`); `after` is then an
    /// offset.
    pub by_due: bool,
}

impl TryFrom<ListApprovalsRequest> for List {
    type Error = Status;

    fn try_from(req: ListApprovalsRequest) -> Result<Self, Status> {
        let session = validate::optional_id("session_id", &req.session_id)?;
        let limit = validate::limit("limit", req.limit, 100, 1_000)?;
        validate::one_of_or_empty("order", &req.order, &["due"])?;
        let after = match req.page_token.trim() {
            "" => None,
            token => Some(token.parse::<u64>().map_err(|_| {
                Status::invalid_argument("`page_token` is not one this service returned")
            })?),
        };
        Ok(Self {
            session,
            all: req.all,
            limit,
            after,
            newest_first: req.newest_first,
            by_due: req.order == "due",
        })
    }
}

/// `Approvals.Decide`, checked: a question's answer travels as the
/// decision's text.
pub struct Decide {
    pub by: ClientRef,
    pub id: String,
    pub decision: ApprovalDecision,
    pub text: String,
    pub workspace_wide: bool,
}

impl TryFrom<Request<DecideApprovalRequest>> for Decide {
    type Error = Status;

    fn try_from(request: Request<DecideApprovalRequest>) -> Result<Self, Status> {
        let (by, req) = caller_and(request);
        let id = validate::id("approval_id", &req.approval_id)?;
        validate::max_len("reason", &req.reason, MAX_REASON)?;
        validate::max_len("answer", &req.answer, MAX_REASON)?;
        // An unknown number is "unspecified", which the sessions refuse
        // with a message naming the decisions.
        let decision = ApprovalDecision::try_from(req.decision).unwrap_or_default();
        let text = if req.answer.is_empty() {
            req.reason
        } else {
            req.answer
        };
        Ok(Self {
            by,
            id,
            decision,
            text,
            workspace_wide: req.workspace_wide,
        })
    }
}
