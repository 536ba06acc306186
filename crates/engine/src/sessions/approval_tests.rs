//! Turns that ask: the T-1003 L2 escalation with the offline model, decided
//! by another client, denied, cancelled, timed out, and resumed after the
//! daemon was stopped while waiting.

use std::sync::Arc;
use std::time::Duration;

use tinycode_shared::proto::event::Payload;
use tinycode_shared::proto::{ApprovalDecision, ApprovalState, ClientRef, Event, TurnOutcome};

use super::tests::{defaults, me, open_with, until_done};
use super::*;
use crate::testing::fixture_copy;

fn other_client() -> ClientRef {
    ClientRef {
        name: "second-cli".into(),
        uid: 1000,
        pid: 4242,
    }
}

/// A copy of the fixture desk with a session (mode `approve`) whose first
/// turn triages T-1003, the ticket whose L2 escalation asks.
struct T1003 {
    _tmp: tempfile::TempDir,
    sessions: Arc<Sessions>,
    id: String,
}

async fn triage_t1003(d: TurnDefaults, approve: &str) -> T1003 {
    let (tmp, ws) = fixture_copy();
    let store = EventStore::open(&tmp.path().join("db")).unwrap();
    let sessions = open_with(&ws, &store, d).await;
    let s = sessions.create("", "offline", approve, me()).await.unwrap();
    sessions.send(&s.id, "triage T-1003", me()).await.unwrap();
    T1003 {
        _tmp: tmp,
        sessions,
        id: s.id,
    }
}

/// Wait until the session has a pending approval, copied into its
/// stream; returns its id.
async fn pending(sessions: &Sessions, id: &str) -> String {
    for _ in 0..400 {
        let copied = sessions.get(id).unwrap().pending_approvals();
        if let Some(a) = sessions.approvals.list(false, id).unwrap().first() {
            let approval = a.request.clone().unwrap_or_default().approval_id;
            if copied.contains(&approval) {
                return approval;
            }
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("no approval was requested")
}

fn payloads(events: &[Arc<Event>]) -> Vec<&Payload> {
    events.iter().filter_map(|e| e.payload.as_ref()).collect()
}

fn escalations(events: &[Arc<Event>]) -> Vec<&tinycode_shared::proto::ToolCallFinished> {
    payloads(events)
        .into_iter()
        .filter_map(|p| match p {
            Payload::ToolCallFinished(f)
                if f.call.as_ref().is_some_and(|c| c.name == "escalate_ticket") =>
            {
                Some(f)
            }
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn t1003_asks_once_and_a_second_client_approves() {
    let T1003 {
        _tmp, sessions, id, ..
    } = triage_t1003(defaults(), "ask").await;
    let approval = pending(&sessions, &id).await;
    let info = sessions.approvals.get(&approval).unwrap();
    let request = info.request.unwrap();
    assert_eq!(request.call.unwrap().name, "escalate_ticket");
    assert!(request.reason.contains("level 2"), "{}", request.reason);
    assert_eq!(
        sessions.get(&id).unwrap().pending_approvals(),
        std::slice::from_ref(&approval)
    );

    let decided = sessions
        .decide(
            &approval,
            ApprovalDecision::AllowOnce,
            "",
            false,
            other_client(),
        )
        .await
        .unwrap();
    assert_eq!(decided.state, ApprovalState::Allowed as i32);
    let events = until_done(&sessions, &id, 1).await;
    let asked = payloads(&events)
        .iter()
        .filter(|p| matches!(p, Payload::ApprovalRequested(_)))
        .count();
    assert_eq!(asked, 1, "only the L2 escalation asks");
    let decision = payloads(&events)
        .into_iter()
        .find_map(|p| match p {
            Payload::ApprovalDecided(d) => Some(d.clone()),
            _ => None,
        })
        .expect("the decision is in the session, for every attached client");
    assert_eq!(decision.by.unwrap().name, "second-cli");
    assert_eq!(escalations(&events).len(), 1);
    assert!(!escalations(&events)[0].is_error);
    let Some(Payload::TurnCompleted(done)) = events.last().unwrap().payload.clone() else {
        panic!()
    };
    assert_eq!(done.outcome, TurnOutcome::Completed as i32);
    let t = sessions.desk.get_ticket("T-1003").unwrap();
    assert_eq!((t.status.as_str(), t.escalate_level), ("escalated", 2));
    assert!(t.notes.iter().any(|n| n.text.contains("escalation-policy")));
    assert!(sessions.get(&id).unwrap().pending_approvals().is_empty());
}

#[tokio::test]
async fn a_denial_reaches_the_model_and_nothing_is_escalated() {
    let T1003 {
        _tmp, sessions, id, ..
    } = triage_t1003(defaults(), "ask").await;
    let approval = pending(&sessions, &id).await;
    sessions
        .decide(
            &approval,
            ApprovalDecision::Deny,
            "the supervisor is on leave; keep it at L1",
            false,
            other_client(),
        )
        .await
        .unwrap();
    let events = until_done(&sessions, &id, 1).await;
    let result = escalations(&events)[0];
    assert!(result.is_error);
    assert!(
        result
            .content
            .contains("the supervisor is on leave; keep it at L1")
            && result.content.contains("second-cli"),
        "{}",
        result.content
    );
    assert_eq!(
        sessions.desk.get_ticket("T-1003").unwrap().escalate_level,
        0
    );
}

#[tokio::test]
async fn cancel_while_waiting_cancels_the_approval_and_the_turn() {
    let T1003 {
        _tmp, sessions, id, ..
    } = triage_t1003(defaults(), "ask").await;
    let approval = pending(&sessions, &id).await;
    assert!(sessions.cancel(&id).unwrap());
    let events = until_done(&sessions, &id, 1).await;
    let Some(Payload::TurnCompleted(done)) = events.last().unwrap().payload.clone() else {
        panic!()
    };
    assert_eq!(done.outcome, TurnOutcome::Cancelled as i32);
    assert!(
        payloads(&events)
            .iter()
            .any(|p| matches!(p, Payload::ApprovalCancelled(c) if c.approval_id == approval)),
        "recorded as cancelled in the session"
    );
    let info = sessions.approvals.get(&approval).unwrap();
    assert_eq!(info.state, ApprovalState::Cancelled as i32);
    assert!(info.cancelled_reason.contains("cancelled"));
    let late = sessions
        .decide(
            &approval,
            ApprovalDecision::AllowOnce,
            "",
            false,
            other_client(),
        )
        .await;
    assert!(late.is_err());
    assert_eq!(
        sessions.desk.get_ticket("T-1003").unwrap().escalate_level,
        0
    );
}

#[tokio::test]
async fn nobody_deciding_within_the_timeout_is_a_denial() {
    let mut d = defaults();
    d.approval_timeout = Some(Duration::from_millis(100));
    let T1003 {
        _tmp, sessions, id, ..
    } = triage_t1003(d, "ask").await;
    let events = until_done(&sessions, &id, 1).await;
    let result = escalations(&events)[0];
    assert!(
        result.is_error && result.content.contains("nobody decided within"),
        "{}",
        result.content
    );
    let info = &sessions.approvals.list(true, &id).unwrap()[0];
    assert_eq!(info.state, ApprovalState::Denied as i32);
    assert!(
        info.decision
            .as_ref()
            .unwrap()
            .by
            .as_ref()
            .unwrap()
            .name
            .contains("approvalTimeoutSeconds")
    );
}

#[tokio::test]
async fn headless_deny_and_auto_never_wait() {
    let T1003 {
        _tmp, sessions, id, ..
    } = triage_t1003(defaults(), "deny").await;
    until_done(&sessions, &id, 1).await;
    assert!(
        sessions.approvals.list(true, "").unwrap().is_empty(),
        "nothing recorded, nobody asked"
    );
    assert_eq!(
        sessions.desk.get_ticket("T-1003").unwrap().escalate_level,
        0
    );
}

/// The T-1003 turn left waiting for its approval by a daemon that was then
/// killed. The first daemon runs on a runtime of its own, dropped with every
/// task on it once the approval is pending: its actor and its paused turn
/// stop as they would on SIGKILL. (Dropping its `Sessions` alone would leave
/// them running on the same store, and the old turn would run the call too
/// once the reopened daemon decides.)
struct Abandoned {
    _tmp: tempfile::TempDir,
    ws: std::path::PathBuf,
    store: EventStore,
    id: String,
    approval: String,
    call: tinycode_shared::proto::ToolCallRef,
}

async fn abandoned_t1003() -> Abandoned {
    let (tmp, ws) = fixture_copy();
    let store = EventStore::open(&tmp.path().join("db")).unwrap();
    let first = {
        let (ws, store) = (ws.clone(), store.clone());
        async move {
            let sessions = open_with(&ws, &store, defaults()).await;
            let s = sessions.create("", "offline", "ask", me()).await.unwrap();
            sessions.send(&s.id, "triage T-1003", me()).await.unwrap();
            let approval = pending(&sessions, &s.id).await;
            let call = sessions.approvals.get(&approval).unwrap().request.unwrap();
            (s.id, approval, call.call.unwrap())
        }
    };
    let (id, approval, call) = tokio::task::spawn_blocking(move || {
        let daemon = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        daemon.block_on(first)
        // `daemon` is dropped here: the kill.
    })
    .await
    .unwrap();
    Abandoned {
        _tmp: tmp,
        ws,
        store,
        id,
        approval,
        call,
    }
}

#[tokio::test]
async fn a_turn_stopped_while_waiting_resumes_after_restart_and_runs_the_call_once() {
    let Abandoned {
        _tmp,
        ws,
        store,
        id,
        approval,
        ..
    } = abandoned_t1003().await;
    let before = store
        .read_stream(&session_stream(&id), 1, usize::MAX)
        .await
        .unwrap()
        .len();
    // "Restart": a second daemon folds the log the killed one left.
    let reopened = open_with(&ws, &store, defaults()).await;
    let state = reopened.get(&id).unwrap();
    assert!(state.turns[&1].outcome.is_none(), "not marked interrupted");
    assert_eq!(state.pending_approvals(), std::slice::from_ref(&approval));
    assert_eq!(
        reopened.approvals.list(false, "").unwrap().len(),
        1,
        "still listed"
    );
    reopened
        .decide(
            &approval,
            ApprovalDecision::AllowOnce,
            "",
            false,
            other_client(),
        )
        .await
        .unwrap();
    let events = until_done(&reopened, &id, 1).await;
    assert!(events.len() > before);
    assert_eq!(escalations(&events).len(), 1, "the escalation ran once");
    let asked = payloads(&events)
        .iter()
        .filter(|p| matches!(p, Payload::ApprovalRequested(_)))
        .count();
    assert_eq!(asked, 1, "the resumed call did not ask again");
    let Some(Payload::TurnCompleted(done)) = events.last().unwrap().payload.clone() else {
        panic!()
    };
    assert_eq!(done.outcome, TurnOutcome::Completed as i32);
    let t = reopened.desk.get_ticket("T-1003").unwrap();
    assert_eq!(t.escalate_level, 2);
    // The routing after the escalation happened too: the model continued.
    assert!(!t.queue.is_empty());
}

#[tokio::test]
async fn a_change_made_before_a_crash_is_not_made_again_when_the_turn_resumes() {
    let Abandoned {
        _tmp,
        ws,
        store,
        id,
        approval,
        call,
    } = abandoned_t1003().await;
    // The escalation reached the log, then the daemon died (killed above) before the
    // call's result was stored (what a kill -9 between the two leaves).
    store
        .append(
            "ticket-T-1003",
            crate::store::ExpectedVersion::Any,
            vec![Payload::TicketEscalated(
                tinycode_shared::proto::TicketEscalated {
                    level: 2,
                    reason: "before the crash".into(),
                    origin: Some(tinycode_shared::proto::ToolOrigin {
                        session_id: id.clone(),
                        turn: 1,
                        call_id: call.id.clone(),
                    }),
                },
            )],
        )
        .await
        .unwrap();
    let reopened = open_with(&ws, &store, defaults()).await;
    reopened
        .decide(
            &approval,
            ApprovalDecision::AllowOnce,
            "",
            false,
            other_client(),
        )
        .await
        .unwrap();
    let events = until_done(&reopened, &id, 1).await;
    let result = escalations(&events);
    assert_eq!(result.len(), 1, "the call has its result");
    assert!(!result[0].is_error, "{}", result[0].content);
    let escalated = store
        .read_stream("ticket-T-1003", 1, usize::MAX)
        .await
        .unwrap()
        .iter()
        .filter(|e| matches!(e.payload, Some(Payload::TicketEscalated(_))))
        .count();
    assert_eq!(escalated, 1, "escalated once, before the crash");
    let Some(Payload::TurnCompleted(done)) = events.last().unwrap().payload.clone() else {
        panic!()
    };
    assert_eq!(done.outcome, TurnOutcome::Completed as i32);
}
