//! The durable approval broker. An `ask` becomes `ApprovalRequested` in
//! stream `approval-<id>`; whoever decides first wins (the decision is
//! appended at the stream's expected version, so a second decision is a
//! store conflict, reported with who decided); waiters are woken by the
//! decision, a cancellation, or — after a restart — a decision that arrives
//! for an approval folded from the log. "Always allow" decisions become
//! `PermissionRuleAdded` events in stream `permissions`.

mod fold;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use tinycode_shared::proto::event::Payload;
use tinycode_shared::proto::{
    ApprovalCancelled, ApprovalDecided, ApprovalDecision, ApprovalInfo, ApprovalRequested,
    ApprovalState, ClientRef, Event, PermissionRule, PermissionRuleAdded, PermissionRuleRevoked,
};
use tokio::sync::watch;

use crate::permissions::REVIEW_REQUIRED;
use crate::store::{EventStore, ExpectedVersion, StoreError, SubscriptionOptions};
use crate::sync::lock;

pub const PERMISSIONS_STREAM: &str = "permissions";

pub fn approval_stream(id: &str) -> String {
    format!("approval-{id}")
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
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// How a wait for a human ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Allowed,
    Denied(String),
    Cancelled(String),
}

#[derive(Default)]
struct Inner {
    approvals: BTreeMap<String, ApprovalInfo>,
    /// (session, turn, call id) → approval id: a resumed turn finds the
    /// approval its tool call already asked for.
    by_call: HashMap<(String, u64, String), String>,
    rules: BTreeMap<String, PermissionRule>,
    next_number: u64,
    next_rule: u64,
}

pub struct Approvals {
    store: EventStore,
    inner: Mutex<Inner>,
    /// Bumped on every approval event, so waiters re-check their approval.
    changed: watch::Sender<u64>,
}

fn who(by: Option<&ClientRef>) -> String {
    match by {
        Some(c) if c.pid != 0 => format!("{} (uid {}, pid {})", c.name, c.uid, c.pid),
        Some(c) => c.name.clone(),
        None => "someone".into(),
    }
}

impl Approvals {
    /// Fold every approval and permission rule from the log.
    pub async fn open(store: EventStore) -> Result<Arc<Self>, StoreError> {
        let mut inner = Inner {
            next_number: 1,
            next_rule: 1,
            ..Inner::default()
        };
        for prefix in ["approval-", PERMISSIONS_STREAM] {
            let mut sub = store.subscribe(SubscriptionOptions {
                from_sequence: 1,
                stream_prefix: prefix.into(),
                follow: false,
            });
            while let Some(event) = sub.recv().await {
                inner.apply(&*event?);
            }
        }
        let (changed, _) = watch::channel(0);
        Ok(Arc::new(Self {
            store,
            inner: Mutex::new(inner),
            changed,
        }))
    }

    fn fold(&self, events: &[Arc<Event>]) {
        let mut inner = lock(&self.inner);
        for e in events {
            inner.apply(e);
        }
        drop(inner);
        self.changed.send_modify(|n| *n += 1);
    }

    /// The approval a tool call asked for before (a resumed turn), if any.
    pub fn for_call(&self, session: &str, turn: u64, call_id: &str) -> Option<ApprovalInfo> {
        let inner = lock(&self.inner);
        let id = inner
            .by_call
            .get(&(session.to_string(), turn, call_id.to_string()))?;
        inner.approvals.get(id).cloned()
    }

    /// Record a new request; returns the stored event (to copy into the
    /// session). The id is `A-<n>`, numbered across the workspace.
    pub async fn request(
        &self,
        mut request: ApprovalRequested,
    ) -> Result<Arc<Event>, ApprovalError> {
        request.review_required = REVIEW_REQUIRED.contains(
            &request
                .call
                .as_ref()
                .map(|c| c.name.as_str())
                .unwrap_or_default(),
        );
        loop {
            let id = {
                let mut inner = lock(&self.inner);
                inner.next_number += 1;
                format!("A-{}", inner.next_number - 1)
            };
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
                    self.fold(&events);
                    return events.into_iter().next().ok_or(ApprovalError::NotFound(id));
                }
                // The number is taken (cannot happen while one daemon owns
                // the log, but costs nothing): take the next one.
                Err(StoreError::Conflict { .. }) => continue,
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Wait until the approval is decided or cancelled.
    pub async fn wait(&self, id: &str) -> Result<Verdict, ApprovalError> {
        let mut changed = self.changed.subscribe();
        loop {
            let info = self.get(id)?;
            match ApprovalState::try_from(info.state).unwrap_or_default() {
                ApprovalState::Allowed => return Ok(Verdict::Allowed),
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
                return Ok(Verdict::Cancelled("the daemon is stopping".into()));
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
        let decided = ApprovalDecided {
            approval_id: id.to_string(),
            session_id: request.session_id.clone(),
            decision: decision as i32,
            reason: reason.trim().chars().take(2000).collect(),
            by: Some(by.clone()),
            remembered: remember,
            workspace_wide: remember && workspace_wide,
        };
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
        self.fold(&events);
        if remember {
            let rule_id = {
                let mut inner = lock(&self.inner);
                inner.next_rule += 1;
                format!("R-{}", inner.next_rule - 1)
            };
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
            self.fold(&added);
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
                self.fold(&events);
                Ok(events.into_iter().next())
            }
            Err(StoreError::Conflict { .. }) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    pub fn get(&self, id: &str) -> Result<ApprovalInfo, ApprovalError> {
        lock(&self.inner)
            .approvals
            .get(id.trim())
            .cloned()
            .ok_or_else(|| ApprovalError::NotFound(id.trim().to_string()))
    }

    /// Oldest first; pending only unless `all`; optionally one session's.
    pub fn list(&self, all: bool, session: &str) -> Vec<ApprovalInfo> {
        let mut out: Vec<ApprovalInfo> = lock(&self.inner)
            .approvals
            .values()
            .filter(|a| all || a.state == ApprovalState::Pending as i32)
            .filter(|a| {
                session.is_empty() || a.request.as_ref().is_some_and(|r| r.session_id == session)
            })
            .cloned()
            .collect();
        out.sort_by_key(|a| a.requested_sequence);
        out
    }

    /// Pending approvals of one turn.
    pub fn pending_of_turn(&self, session: &str, turn: u64) -> Vec<String> {
        self.list(false, session)
            .into_iter()
            .filter_map(|a| a.request)
            .filter(|r| r.turn == turn)
            .map(|r| r.approval_id)
            .collect()
    }

    /// Whether an "always allow" rule covers `tool` in `session`.
    pub fn remembered(&self, session: &str, tool: &str) -> bool {
        !REVIEW_REQUIRED.contains(&tool)
            && lock(&self.inner)
                .rules
                .values()
                .any(|r| r.tool == tool && (r.session_id.is_empty() || r.session_id == session))
    }

    /// Rules in force: workspace-wide ones and, with a session, its own.
    pub fn rules(&self, session: &str) -> Vec<PermissionRule> {
        lock(&self.inner)
            .rules
            .values()
            .filter(|r| session.is_empty() || r.session_id.is_empty() || r.session_id == session)
            .cloned()
            .collect()
    }

    pub async fn revoke(&self, rule_id: &str, by: ClientRef) -> Result<(), ApprovalError> {
        if !lock(&self.inner).rules.contains_key(rule_id) {
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
        self.fold(&events);
        Ok(())
    }
}
