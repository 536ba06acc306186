//! The durable approval broker. An `ask` becomes `ApprovalRequested` in
//! stream `approval-<id>`; whoever decides first wins (the decision is
//! appended at the stream's expected version, so a second decision is a
//! store conflict, reported with who decided); waiters are woken by the
//! decision, a cancellation, or — after a restart — a decision that arrives
//! for an approval folded from the log. "Always allow" decisions become
//! `PermissionRuleAdded` events in stream `permissions`. What is read comes
//! from the approvals read model (`model.rs`); writers append and wait for
//! it to have their event.

mod model;
#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tinycode_shared::proto::event::Payload;
use tinycode_shared::proto::{
    ApprovalCancelled, ApprovalDecided, ApprovalDecision, ApprovalInfo, ApprovalRequested,
    ApprovalState, ClientRef, Event, PermissionRule, PermissionRuleAdded, PermissionRuleRevoked,
};
use tokio::sync::watch;

use crate::permissions::REVIEW_REQUIRED;
use crate::projection::{ProjectionError, Projector, ProjectorHandle};
use crate::store::{EventStore, ExpectedVersion, StoreError};
use model::{ApprovalsModel, Reader};

pub const PERMISSIONS_STREAM: &str = "permissions";

pub fn approval_stream(id: &str) -> String {
    format!("approval-{id}")
}

/// Longest answer to a question.
pub const MAX_ANSWER_CHARS: usize = 2000;

/// The answer `text` gives to `request`'s question: one of its choices
/// (also by number), or any text when it offers none.
pub fn answer_to(request: &ApprovalRequested, text: &str) -> Result<String, String> {
    let text = text.trim();
    let id = &request.approval_id;
    if text.is_empty() {
        return Err(format!(
            "{id} is a question: give an answer (`tinycode approvals answer {id} TEXT`), or deny it to decline"
        ));
    }
    if text.chars().count() > MAX_ANSWER_CHARS {
        return Err(format!(
            "the answer is longer than {MAX_ANSWER_CHARS} characters"
        ));
    }
    if request.choices.is_empty() {
        return Ok(text.to_string());
    }
    let by_number = text
        .parse::<usize>()
        .ok()
        .and_then(|n| n.checked_sub(1))
        .and_then(|i| request.choices.get(i));
    by_number
        .or_else(|| {
            request
                .choices
                .iter()
                .find(|c| c.trim().eq_ignore_ascii_case(text))
        })
        .cloned()
        .ok_or_else(|| {
            let offered: Vec<String> = request
                .choices
                .iter()
                .enumerate()
                .map(|(i, c)| format!("{}. {c}", i + 1))
                .collect();
            format!(
                "{id} offers these answers: {}; answer with one of them or its number",
                offered.join(" · ")
            )
        })
}

#[derive(Debug, thiserror::Error)]
pub enum ApprovalError {
    #[error("approval {0} does not exist; `tinycode approvals list` shows the pending ones")]
    NotFound(String),
    #[error("approval {id} was already {state} by {by}")]
    AlreadyDecided {
        id: String,
        state: &'static str,
        by: String,
    },
    #[error("approval {id} was cancelled: {reason}")]
    Cancelled { id: String, reason: String },
    #[error("permission rule {0} does not exist; `tinycode approvals rules` lists them")]
    RuleNotFound(String),
    #[error("`decision` must be allow_once, always_allow or deny")]
    NoDecision,
    /// A question answered without a usable answer.
    #[error("{0}")]
    BadAnswer(String),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Projection(#[from] ProjectionError),
}

/// How a wait for a human ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Allowed,
    /// A question (`ask_user`) was answered: the answer, and who gave it.
    Answered {
        answer: String,
        by: String,
    },
    Denied(String),
    Cancelled(String),
}

pub struct Approvals {
    store: EventStore,
    projector: ProjectorHandle,
    /// Bumped after every committed change, so waiters re-check.
    changed: watch::Receiver<u64>,
    /// Highest approval and rule numbers handed out by this daemon (the
    /// model may not have them yet).
    issued: [AtomicU64; 2],
}

fn who(by: Option<&ClientRef>) -> String {
    match by {
        Some(c) if c.pid != 0 => format!("{} (uid {}, pid {})", c.name, c.uid, c.pid),
        Some(c) => c.name.clone(),
        None => "someone".into(),
    }
}

impl Approvals {
    /// Follow the log into the approvals model and catch up.
    pub async fn open(store: EventStore) -> Result<Arc<Self>, ApprovalError> {
        let (changed_tx, changed) = watch::channel(0);
        let model = Arc::new(ApprovalsModel {
            changed: changed_tx,
        });
        let projector = Projector::spawn(&store, model)?;
        projector.wait_for(store.last_sequence()).await?;
        Ok(Arc::new(Self {
            store,
            projector,
            changed,
            issued: [AtomicU64::new(0), AtomicU64::new(0)],
        }))
    }

    /// The approvals model's projector (status, rebuild).
    pub fn projector(&self) -> &ProjectorHandle {
        &self.projector
    }

    fn read(&self) -> Reader<'_> {
        Reader(self.projector.tree())
    }

    /// Wait until the model has `events`.
    async fn folded(&self, events: &[Arc<Event>]) -> Result<(), ApprovalError> {
        let last = events.last().map_or(0, |e| e.sequence);
        Ok(self.projector.wait_for(last).await?)
    }

    /// The next `A-<n>` (which 0) or `R-<n>` (which 1) number.
    fn next_number(&self, which: usize) -> Result<u64, ApprovalError> {
        let (approvals, rules) = self.read().numbers()?;
        let seen = [approvals, rules][which];
        let issued = &self.issued[which];
        let mut current = issued.load(Ordering::Acquire);
        loop {
            let next = current.max(seen) + 1;
            match issued.compare_exchange(current, next, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return Ok(next),
                Err(now) => current = now,
            }
        }
    }

    /// The approval a tool call asked for before (a resumed turn), if any.
    pub fn for_call(
        &self,
        session: &str,
        turn: u64,
        call_id: &str,
    ) -> Result<Option<ApprovalInfo>, ApprovalError> {
        Ok(self.read().for_call(session, turn, call_id)?)
    }

    /// Record a new request; returns the stored event (to copy into the
    /// session). The id is `A-<n>`, numbered across the workspace.
    pub async fn request(
        &self,
        mut request: ApprovalRequested,
    ) -> Result<Arc<Event>, ApprovalError> {
        request.review_required |= REVIEW_REQUIRED.contains(
            &request
                .call
                .as_ref()
                .map(|c| c.name.as_str())
                .unwrap_or_default(),
        );
        loop {
            let id = format!("A-{}", self.next_number(0)?);
            request.approval_id = id.clone();
            let appended = self
                .store
                .append(
                    &approval_stream(&id),
                    ExpectedVersion::NoStream,
                    vec![Payload::ApprovalRequested(request.clone())],
                )
                .await;
            match appended {
                Ok(events) => {
                    self.folded(&events).await?;
                    return events.into_iter().next().ok_or(ApprovalError::NotFound(id));
                }
                // The number is taken (cannot happen while one daemon owns
                // the log, but costs nothing): take the next one.
                Err(StoreError::Conflict { .. }) => continue,
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Wait until the approval is decided or cancelled. Fails with
    /// [`StoreError::Closed`] when the daemon stops first.
    pub async fn wait(&self, id: &str) -> Result<Verdict, ApprovalError> {
        let mut changed = self.changed.clone();
        loop {
            let info = self.get(id)?;
            match ApprovalState::try_from(info.state).unwrap_or_default() {
                ApprovalState::Allowed => {
                    let question = info
                        .request
                        .as_ref()
                        .is_some_and(|r| !r.question.is_empty());
                    if !question {
                        return Ok(Verdict::Allowed);
                    }
                    let d = info.decision.unwrap_or_default();
                    return Ok(Verdict::Answered {
                        by: who(d.by.as_ref()),
                        answer: d.answer,
                    });
                }
                ApprovalState::Denied => {
                    let d = info.decision.unwrap_or_default();
                    let reason = if d.reason.trim().is_empty() {
                        format!("denied by {}", who(d.by.as_ref()))
                    } else {
                        format!("denied by {}: {}", who(d.by.as_ref()), d.reason.trim())
                    };
                    return Ok(Verdict::Denied(reason));
                }
                ApprovalState::Cancelled => return Ok(Verdict::Cancelled(info.cancelled_reason)),
                _ => {}
            }
            if changed.changed().await.is_err() {
                // The daemon is stopping: the approval stays pending in the
                // log, so this is no verdict — the caller hears "unavailable"
                // and asks again after the restart.
                return Err(StoreError::Closed.into());
            }
        }
    }

    /// The first decision wins. Returns the stored decision event (to copy
    /// into the session) and, for a remembered "always allow", the rule.
    pub async fn decide(
        &self,
        id: &str,
        decision: ApprovalDecision,
        reason: &str,
        workspace_wide: bool,
        by: ClientRef,
    ) -> Result<(ApprovalInfo, Vec<Arc<Event>>), ApprovalError> {
        if decision == ApprovalDecision::Unspecified {
            return Err(ApprovalError::NoDecision);
        }
        let info = self.get(id)?;
        self.refuse_if_settled(&info)?;
        let request = info.request.clone().unwrap_or_default();
        let remember = decision == ApprovalDecision::AlwaysAllow && !request.review_required;
        let mut decided = ApprovalDecided {
            approval_id: id.to_string(),
            session_id: request.session_id.clone(),
            decision: decision as i32,
            reason: reason.trim().chars().take(2000).collect(),
            by: Some(by.clone()),
            remembered: remember,
            workspace_wide: remember && workspace_wide,
            answer: String::new(),
        };
        if !request.question.is_empty() && decision != ApprovalDecision::Deny {
            // A question is answered once: the text is the answer.
            decided.answer = answer_to(&request, reason).map_err(ApprovalError::BadAnswer)?;
            decided.reason = String::new();
            decided.decision = ApprovalDecision::AllowOnce as i32;
        }
        let appended = self
            .store
            .append(
                &approval_stream(id),
                ExpectedVersion::Exact(1),
                vec![Payload::ApprovalDecided(decided)],
            )
            .await;
        let mut events = match appended {
            Ok(events) => events,
            Err(StoreError::Conflict { .. }) => {
                // Someone else decided first, in the same commit batch: wait
                // for their decision to be folded, then say who it was.
                let _ =
                    tokio::time::timeout(std::time::Duration::from_secs(5), self.wait(id)).await;
                self.refuse_if_settled(&self.get(id)?)?;
                return Err(ApprovalError::NotFound(id.to_string()));
            }
            Err(e) => return Err(e.into()),
        };
        self.folded(&events).await?;
        if remember {
            let rule_id = format!("R-{}", self.next_number(1)?);
            let added = self
                .store
                .append(
                    PERMISSIONS_STREAM,
                    ExpectedVersion::Any,
                    vec![Payload::PermissionRuleAdded(PermissionRuleAdded {
                        rule_id,
                        tool: request.call.map(|c| c.name).unwrap_or_default(),
                        session_id: if workspace_wide {
                            String::new()
                        } else {
                            request.session_id
                        },
                        by: Some(by),
                        from_approval: id.to_string(),
                    })],
                )
                .await?;
            self.folded(&added).await?;
            events.extend(added);
        }
        Ok((self.get(id)?, events))
    }

    fn refuse_if_settled(&self, info: &ApprovalInfo) -> Result<(), ApprovalError> {
        let id = info
            .request
            .as_ref()
            .map(|r| r.approval_id.clone())
            .unwrap_or_default();
        match ApprovalState::try_from(info.state).unwrap_or_default() {
            ApprovalState::Allowed | ApprovalState::Denied => Err(ApprovalError::AlreadyDecided {
                id,
                state: if info.state == ApprovalState::Allowed as i32 {
                    "allowed"
                } else {
                    "denied"
                },
                by: who(info.decision.as_ref().and_then(|d| d.by.as_ref())),
            }),
            ApprovalState::Cancelled => Err(ApprovalError::Cancelled {
                id,
                reason: info.cancelled_reason.clone(),
            }),
            _ => Ok(()),
        }
    }

    /// Cancel a pending approval (its turn ended). Returns the stored event,
    /// or `None` when it was already settled.
    pub async fn cancel(
        &self,
        id: &str,
        reason: &str,
    ) -> Result<Option<Arc<Event>>, ApprovalError> {
        let info = self.get(id)?;
        if info.state != ApprovalState::Pending as i32 {
            return Ok(None);
        }
        let cancelled = ApprovalCancelled {
            approval_id: id.to_string(),
            session_id: info.request.map(|r| r.session_id).unwrap_or_default(),
            reason: reason.to_string(),
        };
        match self
            .store
            .append(
                &approval_stream(id),
                ExpectedVersion::Exact(1),
                vec![Payload::ApprovalCancelled(cancelled)],
            )
            .await
        {
            Ok(events) => {
                self.folded(&events).await?;
                Ok(events.into_iter().next())
            }
            Err(StoreError::Conflict { .. }) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    pub fn get(&self, id: &str) -> Result<ApprovalInfo, ApprovalError> {
        self.read()
            .get(id.trim())?
            .ok_or_else(|| ApprovalError::NotFound(id.trim().to_string()))
    }

    /// Oldest first; pending only unless `all`; optionally one session's.
    pub fn list(&self, all: bool, session: &str) -> Result<Vec<ApprovalInfo>, ApprovalError> {
        let mut out: Vec<ApprovalInfo> = self
            .read()
            .approvals(all)?
            .into_iter()
            .filter(|a| {
                session.is_empty() || a.request.as_ref().is_some_and(|r| r.session_id == session)
            })
            .collect();
        out.sort_by_key(|a| a.requested_sequence);
        Ok(out)
    }

    /// Pending approvals of one turn.
    pub fn pending_of_turn(&self, session: &str, turn: u64) -> Result<Vec<String>, ApprovalError> {
        Ok(self
            .list(false, session)?
            .into_iter()
            .filter_map(|a| a.request)
            .filter(|r| r.turn == turn)
            .map(|r| r.approval_id)
            .collect())
    }

    /// Whether an "always allow" rule covers `tool` in `session`.
    pub fn remembered(&self, session: &str, tool: &str) -> Result<bool, ApprovalError> {
        Ok(!REVIEW_REQUIRED.contains(&tool)
            && self
                .read()
                .rules()?
                .iter()
                .any(|r| r.tool == tool && (r.session_id.is_empty() || r.session_id == session)))
    }

    /// Rules in force: workspace-wide ones and, with a session, its own.
    pub fn rules(&self, session: &str) -> Result<Vec<PermissionRule>, ApprovalError> {
        Ok(self
            .read()
            .rules()?
            .into_iter()
            .filter(|r| session.is_empty() || r.session_id.is_empty() || r.session_id == session)
            .collect())
    }

    pub async fn revoke(&self, rule_id: &str, by: ClientRef) -> Result<(), ApprovalError> {
        if !self.read().has_rule(rule_id)? {
            return Err(ApprovalError::RuleNotFound(rule_id.to_string()));
        }
        let events = self
            .store
            .append(
                PERMISSIONS_STREAM,
                ExpectedVersion::Any,
                vec![Payload::PermissionRuleRevoked(PermissionRuleRevoked {
                    rule_id: rule_id.to_string(),
                    by: Some(by),
                })],
            )
            .await?;
        self.folded(&events).await
    }
}
