//! The Triage service's boundary: requests checked and typed (`TryFrom`).

use tinycode_shared::proto::{ClientRef, EnqueueTriageRequest, TriageStatus, TriageStatusRequest};
use tonic::{Request, Status};

use super::super::OrStatus;
use super::super::peer::caller_and;
use super::super::validate::{self, MAX_NAME};
use crate::triage::Triage;

/// Ticket ids one request may name.
const MAX_IDS: usize = 10_000;

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

/// `Triage.GetStatus` and `Triage.Watch`, checked.
pub struct StatusQuery {
    pub ticket_ids: Vec<String>,
    pub counts_only: bool,
    /// Where a page starts (none: from the first).
    pub page_token: Option<String>,
    pub limit: usize,
}

impl TryFrom<TriageStatusRequest> for StatusQuery {
    type Error = Status;

    fn try_from(req: TriageStatusRequest) -> Result<Self, Status> {
        check_ids(&req.ticket_ids)?;
        Ok(Self {
            ticket_ids: req.ticket_ids,
            counts_only: req.counts_only,
            page_token: (!req.page_token.is_empty()).then_some(req.page_token),
            limit: req.limit as usize,
        })
    }
}

impl StatusQuery {
    /// The board as this query asks for it.
    pub fn ask(&self, triage: &Triage) -> Result<TriageStatus, Status> {
        triage
            .status(
                &self.ticket_ids,
                self.counts_only,
                self.page_token.clone(),
                self.limit,
            )
            .or_status()
    }
}

/// `Triage.Enqueue`, checked: named tickets or every open one.
pub struct Enqueue {
    pub by: ClientRef,
    pub ticket_ids: Vec<String>,
    pub all_open: bool,
    pub approve: String,
    pub model: String,
}

impl TryFrom<Request<EnqueueTriageRequest>> for Enqueue {
    type Error = Status;

    fn try_from(request: Request<EnqueueTriageRequest>) -> Result<Self, Status> {
        let (by, req) = caller_and(request);
        check_ids(&req.ticket_ids)?;
        validate::max_len("model", &req.model, MAX_NAME)?;
        if req.ticket_ids.is_empty() && !req.all_open {
            return Err(Status::invalid_argument(
                "name `ticket_ids` or set `all_open` (every open ticket never triaged)",
            ));
        }
        Ok(Self {
            by,
            ticket_ids: req.ticket_ids,
            all_open: req.all_open,
            approve: req.approve,
            model: req.model,
        })
    }
}
