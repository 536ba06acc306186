//! How a session's turn settles an `ask`: remembered "always allow" rules,
//! then the session's mode (`auto` allows, `deny` refuses without asking),
//! then a durable approval that any client may decide. The request is
//! stored (and copied into the session) before the turn waits; a resumed
//! turn finds the approval its call already asked for instead of asking
//! again.

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use serde_json::Value;
use tinycode_shared::proto::event::Payload;
use tinycode_shared::proto::{ApprovalDecision, ApprovalRequested, ClientRef, ToolCallRef};
use tokio::sync::mpsc;

use super::Sessions;
use super::jobs::Write;
use super::writer::acknowledged;
use crate::agent::Approver;
use crate::approvals::{ApprovalError, Verdict};
use crate::model::ToolCall;
use crate::permissions::{ApprovalMode, Decision, RunPolicy};
use crate::store::StoreError;

pub(super) struct SessionApprover {
    pub sessions: Arc<Sessions>,
    pub session: String,
    pub turn: u64,
    pub mode: ApprovalMode,
    pub writer: mpsc::UnboundedSender<Write>,
    pub timeout: Option<Duration>,
}

/// Who decides when nobody did within `approvalTimeoutSeconds`.
fn timeout_client() -> ClientRef {
    ClientRef {
        name: "tinycoded (approvalTimeoutSeconds)".into(),
        uid: 0,
        pid: 0,
    }
}

/// The approval request for `call`: the call, the rule's reason and, for
/// knowledge edits, the same diff the edit would apply. The caller sets
/// who asks (a session's turn, or a direct call's caller).
pub(crate) fn approval_request(
    sessions: &Sessions,
    call: &ToolCall,
    reason: &str,
) -> Result<ApprovalRequested, String> {
    let mut request = ApprovalRequested {
        call: Some(ToolCallRef {
            id: call.id.clone(),
            name: call.name.clone(),
            arguments_json: call.raw_arguments.clone(),
            ..Default::default()
        }),
        reason: reason.to_string(),
        review_required: sessions.tools.review_required(&call.name),
        ..ApprovalRequested::default()
    };
    if call.name == crate::tools::ask::ASK_USER {
        let (question, choices) = crate::tools::ask::question_of(&call.arguments);
        request.question = question;
        request.choices = choices;
        request.review_required = true;
    }
    if call.name == "propose_knowledge_edit" {
        let arg = |k: &str| {
            call.arguments
                .get(k)
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string()
        };
        let plan = sessions
            .desk
            .preview_article_edit(&arg("article_id"), &arg("old_text"), &arg("new_text"))
            .map_err(|e| e.to_string())?;
        request.article_id = arg("article_id");
        request.rationale = arg("rationale");
        request.before_text = arg("old_text");
        request.after_text = arg("new_text");
        request.diff = plan.diff;
        request.added = plan.added;
        request.removed = plan.removed;
    }
    Ok(request)
}

impl SessionApprover {
    fn request(&self, call: &ToolCall, reason: &str) -> Result<ApprovalRequested, String> {
        Ok(ApprovalRequested {
            session_id: self.session.clone(),
            turn: self.turn,
            ..approval_request(&self.sessions, call, reason)?
        })
    }

    /// Store the request copy in the session through the turn's writer, so
    /// it lands after the assistant message that made the call.
    async fn copy_to_session(&self, payload: Payload) -> Result<(), String> {
        acknowledged(&self.writer, |ack| Write::StoreAck(Box::new(payload), ack)).await
    }

    async fn ask(&self, call: &ToolCall, reason: &str) -> Decision {
        let approvals = &self.sessions.approvals;
        let id = match approvals.for_call(&self.session, self.turn, &call.id) {
            Err(e) => return Decision::Deny(format!("the approvals cannot be read: {e}")),
            Ok(Some(existing)) => existing.request.unwrap_or_default().approval_id,
            Ok(None) => {
                let request = match self.request(call, reason) {
                    Ok(r) => r,
                    Err(problem) => return Decision::Deny(problem),
                };
                let event = match approvals.request(request).await {
                    Ok(e) => e,
                    Err(e) => {
                        return Decision::Deny(format!("the approval could not be recorded: {e}"));
                    }
                };
                let Some(Payload::ApprovalRequested(r)) = event.payload.clone() else {
                    return Decision::Deny("the approval could not be recorded".into());
                };
                let id = r.approval_id.clone();
                if let Err(e) = self.copy_to_session(Payload::ApprovalRequested(r)).await {
                    return Decision::Deny(format!(
                        "the approval request could not be stored: {e}"
                    ));
                }
                tracing::info!(session = %self.session, approval = %id, tool = %call.name, "waiting for approval");
                id
            }
        };
        let verdict = match self.timeout {
            None => approvals.wait(&id).await,
            Some(limit) => match tokio::time::timeout(limit, approvals.wait(&id)).await {
                Ok(v) => v,
                Err(_) => {
                    let reason = format!("nobody decided within {} s", limit.as_secs());
                    let decided = self
                        .sessions
                        .decide(
                            &id,
                            ApprovalDecision::Deny,
                            &reason,
                            false,
                            timeout_client(),
                        )
                        .await;
                    match decided {
                        // Someone decided at the last moment: theirs counts.
                        Err(_) => approvals.wait(&id).await,
                        Ok(_) => Ok(Verdict::Denied(reason)),
                    }
                }
            },
        };
        let question = call.name == crate::tools::ask::ASK_USER;
        self.decision(&id, question, verdict)
    }

    /// What the wait's verdict on approval `id` means for the call.
    fn decision(
        &self,
        id: &str,
        question: bool,
        verdict: Result<Verdict, ApprovalError>,
    ) -> Decision {
        match verdict {
            Ok(Verdict::Allowed) => Decision::Allow,
            Ok(Verdict::Answered { answer, by }) => {
                Decision::Answered(crate::tools::ask::answered(&by, &answer))
            }
            // A question a person declined is answered so, not denied.
            Ok(Verdict::Denied(why)) if question => {
                Decision::Answered(crate::tools::ask::declined(&why))
            }
            Ok(Verdict::Denied(why)) => Decision::Deny(format!(
                "not approved ({id}): {why}; continue without this action"
            )),
            Ok(Verdict::Cancelled(why)) => {
                Decision::Deny(format!("approval {id} was cancelled: {why}"))
            }
            // The daemon stops: the approval stays pending in the log and
            // the turn resumes at this call. (The approvals model stopping
            // while the daemon runs is an error the model is told.)
            Err(ApprovalError::Store(StoreError::Closed))
                if *self.sessions.store.closing().borrow() =>
            {
                Decision::Unsettled(format!(
                    "the daemon stopped before approval {id} was decided"
                ))
            }
            Err(e) => Decision::Deny(e.to_string()),
        }
    }
}

impl Approver for SessionApprover {
    fn settle<'a>(&'a self, call: &'a ToolCall, reason: &'a str) -> BoxFuture<'a, Decision> {
        Box::pin(async move {
            let reviewed = self.sessions.tools.review_required(&call.name);
            match self
                .sessions
                .approvals
                .remembered(&self.session, &call.name)
            {
                Ok(true) if !reviewed => return Decision::Allow,
                Ok(_) => {}
                Err(e) => return Decision::Deny(format!("the approvals cannot be read: {e}")),
            }
            match self.mode {
                // Nobody is asked in these modes: a question gets no answer.
                ApprovalMode::Auto | ApprovalMode::Deny
                    if call.name == crate::tools::ask::ASK_USER =>
                {
                    Decision::Answered(crate::tools::ask::NO_ONE.into())
                }
                ApprovalMode::Auto => RunPolicy::Auto.settle(reason),
                ApprovalMode::Deny => RunPolicy::Deny.settle(reason),
                ApprovalMode::Ask => self.ask(call, reason).await,
            }
        })
    }
}
