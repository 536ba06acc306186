//! Folding approval and permission-rule events into the broker's state.
//! Idempotent: an event already applied (by sequence) changes nothing.

use tinycode_shared::proto::event::Payload;
use tinycode_shared::proto::{
    ApprovalDecision, ApprovalInfo, ApprovalState, Event, PermissionRule,
};

use super::Inner;

fn millis(e: &Event) -> i64 {
    e.recorded_at
        .as_ref()
        .map_or(0, |t| t.seconds * 1000 + i64::from(t.nanos) / 1_000_000)
}

fn number(id: &str, prefix: &str) -> u64 {
    id.strip_prefix(prefix)
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

impl Inner {
    pub(super) fn apply(&mut self, e: &Event) {
        let Some(payload) = &e.payload else { return };
        match payload {
            Payload::ApprovalRequested(r) => {
                if self.approvals.contains_key(&r.approval_id) {
                    return;
                }
                self.next_number = self.next_number.max(number(&r.approval_id, "A-") + 1);
                let call_id = r.call.as_ref().map(|c| c.id.clone()).unwrap_or_default();
                self.by_call.insert(
                    (r.session_id.clone(), r.turn, call_id),
                    r.approval_id.clone(),
                );
                self.approvals.insert(
                    r.approval_id.clone(),
                    ApprovalInfo {
                        request: Some(r.clone()),
                        state: ApprovalState::Pending as i32,
                        requested_sequence: e.sequence,
                        requested_at_ms: millis(e),
                        ..ApprovalInfo::default()
                    },
                );
            }
            Payload::ApprovalDecided(d) => {
                let Some(a) = self.approvals.get_mut(&d.approval_id) else {
                    return;
                };
                if a.state != ApprovalState::Pending as i32 {
                    return;
                }
                a.state = if d.decision == ApprovalDecision::Deny as i32 {
                    ApprovalState::Denied
                } else {
                    ApprovalState::Allowed
                } as i32;
                a.decision = Some(d.clone());
                a.decided_sequence = e.sequence;
                a.decided_at_ms = millis(e);
            }
            Payload::ApprovalCancelled(c) => {
                let Some(a) = self.approvals.get_mut(&c.approval_id) else {
                    return;
                };
                if a.state != ApprovalState::Pending as i32 {
                    return;
                }
                a.state = ApprovalState::Cancelled as i32;
                a.cancelled_reason = c.reason.clone();
                a.decided_sequence = e.sequence;
                a.decided_at_ms = millis(e);
            }
            Payload::PermissionRuleAdded(r) => {
                self.next_rule = self.next_rule.max(number(&r.rule_id, "R-") + 1);
                self.rules.insert(
                    r.rule_id.clone(),
                    PermissionRule {
                        rule_id: r.rule_id.clone(),
                        tool: r.tool.clone(),
                        session_id: r.session_id.clone(),
                        by: r.by.clone(),
                        from_approval: r.from_approval.clone(),
                        sequence: e.sequence,
                    },
                );
            }
            Payload::PermissionRuleRevoked(r) => {
                self.rules.remove(&r.rule_id);
            }
            _ => {}
        }
    }
}
