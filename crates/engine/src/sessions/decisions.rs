//! Approval decisions seen from the sessions: a decision is copied into the
//! asking session, and at start the session copies a crash missed are
//! re-appended.

use std::sync::Arc;

use tinycode_shared::proto::ClientRef;
use tinycode_shared::proto::event::Payload;

use super::{SessionError, Sessions, session_stream};
use crate::store::ExpectedVersion;

impl Sessions {
    /// Copy into each session the approval events its stream lacks (the
    /// approval stream is written first; a crash may fall in between).
    pub(super) async fn reconcile_approvals(&self) -> Result<(), SessionError> {
        for info in self.approvals.list(true, "")? {
            let Some(request) = info.request.clone() else {
                continue;
            };
            let Some(state) = self.stored_state(&request.session_id)? else {
                continue;
            };
            let seen = state
                .approvals
                .get(&request.approval_id)
                .copied()
                .unwrap_or(0);
            let mut missing = Vec::new();
            if seen == 0 {
                missing.push(Payload::ApprovalRequested(request.clone()));
            }
            if seen < 2 {
                if let Some(d) = info.decision.clone() {
                    missing.push(Payload::ApprovalDecided(d));
                } else if info.state == tinycode_shared::proto::ApprovalState::Cancelled as i32 {
                    missing.push(Payload::ApprovalCancelled(
                        tinycode_shared::proto::ApprovalCancelled {
                            approval_id: request.approval_id.clone(),
                            session_id: request.session_id.clone(),
                            reason: info.cancelled_reason.clone(),
                        },
                    ));
                }
            }
            if missing.is_empty() {
                continue;
            }
            self.store
                .append(
                    &session_stream(&request.session_id),
                    ExpectedVersion::Any,
                    missing,
                )
                .await?;
        }
        Ok(())
    }

    /// Decide an approval (the first decision wins) and copy the decision
    /// into the asking session, where every attached client sees it.
    pub async fn decide(
        self: &Arc<Self>,
        approval: &str,
        decision: tinycode_shared::proto::ApprovalDecision,
        reason: &str,
        workspace_wide: bool,
        by: ClientRef,
    ) -> Result<tinycode_shared::proto::ApprovalInfo, SessionError> {
        let (info, events) = self
            .approvals
            .decide(approval, decision, reason, workspace_wide, by)
            .await?;
        for e in events {
            if let Some(p @ Payload::ApprovalDecided(_)) = e.payload.clone() {
                let session = info
                    .request
                    .as_ref()
                    .map(|r| r.session_id.clone())
                    .unwrap_or_default();
                // A direct call's approval has no session to copy into.
                if !session.is_empty() {
                    self.record(&session, vec![p]).await?;
                }
            }
        }
        Ok(info)
    }
}
