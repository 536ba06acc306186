//! The approvals read model (tree `proj-approvals`), a [`Projection`] of the
//! `approval-<id>` streams and the `permissions` stream, and the only code
//! that folds them:
//!
//! - `a/<id>` → `ApprovalInfo`; `p/<id>` → `()` while it is pending;
//! - `k/<session> 0x00 <turn> <call id>` → approval id: a resumed turn finds
//!   the approval its call already asked for;
//! - `r/<rule id>` → `PermissionRule` while it is in force;
//! - `n/A`, `n/R` → the highest approval and rule numbers seen.
//!
//! Idempotent: an event already applied changes nothing. After each
//! committed batch that touched approvals, waiters are woken.

use prost::Message;
use tinycode_shared::proto::event::Payload;
use tinycode_shared::proto::{
    ApprovalDecision, ApprovalInfo, ApprovalState, Event, PermissionRule,
};
use tokio::sync::watch;

use crate::projection::{Projection, ProjectionError, Writes, decode_u64};

const APPROVAL: &[u8] = b"a/";
const PENDING: &[u8] = b"p/";
const BY_CALL: &[u8] = b"k/";
const RULE: &[u8] = b"r/";
const APPROVAL_NUMBER: &[u8] = b"n/A";
const RULE_NUMBER: &[u8] = b"n/R";

fn key(prefix: &[u8], id: &str) -> Vec<u8> {
    [prefix, id.as_bytes()].concat()
}

fn call_key(session: &str, turn: u64, call_id: &str) -> Vec<u8> {
    [
        BY_CALL,
        session.as_bytes(),
        &[0],
        &turn.to_be_bytes(),
        call_id.as_bytes(),
    ]
    .concat()
}

fn decode<M: Message + Default>(bytes: &[u8]) -> Result<M, ProjectionError> {
    M::decode(bytes).map_err(|e| ProjectionError::Corrupt(format!("a stored approval: {e}")))
}

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

/// Reads of the approvals model.
pub struct Reader<'a>(pub &'a sled::Tree);

impl Reader<'_> {
    pub fn get(&self, id: &str) -> Result<Option<ApprovalInfo>, ProjectionError> {
        self.0
            .get(key(APPROVAL, id))?
            .map(|v| decode(&v))
            .transpose()
    }

    pub fn for_call(
        &self,
        session: &str,
        turn: u64,
        call_id: &str,
    ) -> Result<Option<ApprovalInfo>, ProjectionError> {
        match self.0.get(call_key(session, turn, call_id))? {
            Some(id) => self.get(&String::from_utf8_lossy(&id)),
            None => Ok(None),
        }
    }

    /// Pending approvals, or every approval with `all`.
    pub fn approvals(&self, all: bool) -> Result<Vec<ApprovalInfo>, ProjectionError> {
        if all {
            return self
                .0
                .scan_prefix(APPROVAL)
                .map(|row| decode(&row?.1))
                .collect();
        }
        let mut out = Vec::new();
        for row in self.0.scan_prefix(PENDING) {
            let (k, _) = row?;
            if let Some(a) = self.get(&String::from_utf8_lossy(&k[PENDING.len()..]))? {
                out.push(a);
            }
        }
        Ok(out)
    }

    pub fn rules(&self) -> Result<Vec<PermissionRule>, ProjectionError> {
        self.0
            .scan_prefix(RULE)
            .map(|row| decode(&row?.1))
            .collect()
    }

    pub fn has_rule(&self, id: &str) -> Result<bool, ProjectionError> {
        Ok(self.0.contains_key(key(RULE, id))?)
    }

    /// Highest approval (`A-<n>`) and rule (`R-<n>`) numbers seen.
    pub fn numbers(&self) -> Result<(u64, u64), ProjectionError> {
        let n = |k: &[u8]| -> Result<u64, ProjectionError> {
            Ok(self.0.get(k)?.map_or(0, |v| decode_u64(&v)))
        };
        Ok((n(APPROVAL_NUMBER)?, n(RULE_NUMBER)?))
    }
}

/// The approvals read model.
pub struct ApprovalsModel {
    /// Bumped after each committed batch that changed an approval or rule.
    pub changed: watch::Sender<u64>,
}

impl ApprovalsModel {
    fn raise(writes: &mut Writes<'_>, k: &[u8], n: u64) -> Result<(), ProjectionError> {
        if writes.get(k)?.map_or(0, |v| decode_u64(&v)) < n {
            writes.put(k.to_vec(), n.to_be_bytes().to_vec());
        }
        Ok(())
    }

    /// Settle a pending approval (a decision or a cancellation).
    fn settle(
        writes: &mut Writes<'_>,
        id: &str,
        settle: impl FnOnce(&mut ApprovalInfo),
    ) -> Result<(), ProjectionError> {
        let Some(bytes) = writes.get(&key(APPROVAL, id))? else {
            return Ok(());
        };
        let mut a: ApprovalInfo = decode(&bytes)?;
        if a.state != ApprovalState::Pending as i32 {
            return Ok(());
        }
        settle(&mut a);
        writes.put(key(APPROVAL, id), a.encode_to_vec());
        writes.remove(key(PENDING, id));
        Ok(())
    }
}

impl Projection for ApprovalsModel {
    fn name(&self) -> &'static str {
        "approvals"
    }

    fn version(&self) -> u32 {
        1
    }

    fn apply(&self, writes: &mut Writes<'_>, e: &Event) -> Result<(), ProjectionError> {
        let Some(payload) = &e.payload else {
            return Ok(());
        };
        match payload {
            Payload::ApprovalRequested(r) => {
                let id = &r.approval_id;
                if writes.get(&key(APPROVAL, id))?.is_some() {
                    return Ok(());
                }
                Self::raise(writes, APPROVAL_NUMBER, number(id, "A-"))?;
                let call_id = r.call.as_ref().map(|c| c.id.as_str()).unwrap_or_default();
                writes.put(
                    call_key(&r.session_id, r.turn, call_id),
                    id.as_bytes().to_vec(),
                );
                let info = ApprovalInfo {
                    request: Some(r.clone()),
                    state: ApprovalState::Pending as i32,
                    requested_sequence: e.sequence,
                    requested_at_ms: millis(e),
                    ..ApprovalInfo::default()
                };
                writes.put(key(APPROVAL, id), info.encode_to_vec());
                writes.put(key(PENDING, id), Vec::new());
            }
            Payload::ApprovalDecided(d) => Self::settle(writes, &d.approval_id, |a| {
                a.state = if d.decision == ApprovalDecision::Deny as i32 {
                    ApprovalState::Denied
                } else {
                    ApprovalState::Allowed
                } as i32;
                a.decision = Some(d.clone());
                a.decided_sequence = e.sequence;
                a.decided_at_ms = millis(e);
            })?,
            Payload::ApprovalCancelled(c) => Self::settle(writes, &c.approval_id, |a| {
                a.state = ApprovalState::Cancelled as i32;
                a.cancelled_reason = c.reason.clone();
                a.decided_sequence = e.sequence;
                a.decided_at_ms = millis(e);
            })?,
            Payload::PermissionRuleAdded(r) => {
                Self::raise(writes, RULE_NUMBER, number(&r.rule_id, "R-"))?;
                let rule = PermissionRule {
                    rule_id: r.rule_id.clone(),
                    tool: r.tool.clone(),
                    session_id: r.session_id.clone(),
                    by: r.by.clone(),
                    from_approval: r.from_approval.clone(),
                    sequence: e.sequence,
                };
                writes.put(key(RULE, &r.rule_id), rule.encode_to_vec());
            }
            Payload::PermissionRuleRevoked(r) => writes.remove(key(RULE, &r.rule_id)),
            _ => {}
        }
        Ok(())
    }

    fn committed(&self, writes: &Writes<'_>) {
        if !writes.is_empty() {
            self.changed.send_modify(|n| *n += 1);
        }
    }
}
