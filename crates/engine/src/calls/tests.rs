//! Direct calls: allow runs at once, ask waits and answers pending, the
//! same call after the decision runs the tool exactly once — across a
//! restart and with two callers at once.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use tinycode_shared::proto::{ApprovalDecision, ClientRef};

use super::*;
use crate::sessions::tests::{defaults, open_with};
use crate::testing::fixture_copy;

fn agent() -> ClientRef {
    ClientRef {
        name: "tinycode mcp serve".into(),
        uid: 0,
        pid: 7,
    }
}

fn request(tool: &str, args: serde_json::Value, wait_ms: u64) -> CallRequest {
    let mut r = CallRequest::new("claude-code", tool, &args.to_string(), 1, agent()).unwrap();
    r.wait = Duration::from_millis(wait_ms);
    r
}

async fn run(calls: &Arc<DirectCalls>, r: CallRequest) -> (Vec<Update>, Update) {
    let (tx, mut rx) = tokio::sync::mpsc::channel(64);
    calls.call(r, tx).await.unwrap();
    let mut all = Vec::new();
    while let Some(u) = rx.recv().await {
        all.push(u);
    }
    let last = all.pop().expect("an answer");
    (all, last)
}

struct Fixture {
    tmp: tempfile::TempDir,
    ws: std::path::PathBuf,
    store: EventStore,
    sessions: Arc<Sessions>,
    calls: Arc<DirectCalls>,
}

async fn open(tmp: tempfile::TempDir, ws: std::path::PathBuf) -> Fixture {
    let store = EventStore::open(&tmp.path().join("db")).unwrap();
    open_on(tmp, ws, store).await
}

/// Open the models and the calls on `store` (again, after a "restart":
/// nothing but what is stored carries over).
async fn open_on(tmp: tempfile::TempDir, ws: std::path::PathBuf, store: EventStore) -> Fixture {
    let sessions = open_with(&ws, &store, defaults()).await;
    let calls = DirectCalls::new(store.clone(), Arc::clone(&sessions));
    Fixture {
        tmp,
        ws,
        store,
        sessions,
        calls,
    }
}

async fn fixture() -> Fixture {
    let (tmp, ws) = fixture_copy();
    open(tmp, ws).await
}

fn replies(f: &Fixture, id: &str) -> usize {
    f.sessions
        .desk
        .get_ticket(id)
        .unwrap()
        .messages
        .iter()
        .filter(|m| m.from == "agent")
        .count()
}

fn reply() -> serde_json::Value {
    json!({"ticket_id": "T-1001", "message": "Your parcel left the depot today."})
}

#[tokio::test]
async fn an_allowed_call_runs_at_once_and_is_recorded() {
    let f = fixture().await;
    let r = request("get_ticket", json!({"ticket_id": "T-1001"}), 100);
    let stream = r.stream();
    let (_, answer) = run(&f.calls, r.clone()).await;
    let Update::Result {
        output, call_id, ..
    } = answer
    else {
        panic!("not a result: {answer:?}")
    };
    assert!(!output.is_error, "{}", output.content);
    assert!(output.content.contains("T-1001"));
    let kinds: Vec<_> = f
        .store
        .read_stream(&stream, 1, 10)
        .await
        .unwrap()
        .into_iter()
        .map(|e| match e.payload {
            Some(Payload::DirectCallRequested(r)) => {
                assert_eq!(r.by.unwrap().name, "tinycode mcp serve");
                assert_eq!(r.caller, "claude-code");
                "requested"
            }
            Some(Payload::DirectCallFinished(_)) => "finished",
            Some(Payload::DirectCallDelivered(_)) => "delivered",
            _ => "other",
        })
        .collect();
    assert_eq!(kinds, ["requested", "finished", "delivered"]);
    // The same call again is a new call.
    let (_, again) = run(&f.calls, r).await;
    let Update::Result {
        call_id: second, ..
    } = again
    else {
        panic!("not a result")
    };
    assert_ne!(call_id, second);
}

#[tokio::test]
async fn an_ask_waits_then_the_same_call_after_approval_runs_once() {
    let f = fixture().await;
    let (progress, answer) = run(&f.calls, request("reply_customer", reply(), 150)).await;
    assert!(progress.is_empty(), "no 5 s tick within 150 ms");
    let Update::Pending {
        approval_id,
        message,
        ..
    } = answer
    else {
        panic!("not pending: {answer:?}")
    };
    assert!(message.contains(&format!("tinycode approvals approve {approval_id}")));
    let info = f.sessions.approvals().get(&approval_id).unwrap();
    let asked = info.request.unwrap();
    assert_eq!(asked.caller, "claude-code");
    assert!(asked.session_id.is_empty());
    assert_eq!(replies(&f, "T-1001"), 0, "nothing sent before approval");
    // Asked again before anyone decided: the same approval, no new one.
    let (_, again) = run(&f.calls, request("reply_customer", reply(), 50)).await;
    assert!(matches!(&again, Update::Pending { approval_id: a, .. } if *a == approval_id));
    assert_eq!(f.sessions.approvals().list(false, "").unwrap().len(), 1);

    f.sessions
        .decide(
            &approval_id,
            ApprovalDecision::AllowOnce,
            "",
            false,
            agent(),
        )
        .await
        .unwrap();
    let (_, done) = run(&f.calls, request("reply_customer", reply(), 1_000)).await;
    let Update::Result {
        output,
        approval_id: from,
        ..
    } = done
    else {
        panic!("not a result: {done:?}")
    };
    assert!(!output.is_error, "{}", output.content);
    assert_eq!(from, approval_id);
    assert_eq!(replies(&f, "T-1001"), 1);
    // Delivered: the next identical call is a new call with a new approval.
    let (_, next) = run(&f.calls, request("reply_customer", reply(), 50)).await;
    assert!(matches!(&next, Update::Pending { approval_id: a, .. } if *a != approval_id));
    assert_eq!(replies(&f, "T-1001"), 1);
}

#[tokio::test]
async fn a_call_waiting_when_the_call_comes_in_resumes_on_the_decision() {
    let f = fixture().await;
    let (_, first) = run(&f.calls, request("reply_customer", reply(), 20)).await;
    let Update::Pending { approval_id, .. } = first else {
        panic!("not pending")
    };
    let calls = Arc::clone(&f.calls);
    let waiting =
        tokio::spawn(async move { run(&calls, request("reply_customer", reply(), 2_000)).await });
    let second = {
        let calls = Arc::clone(&f.calls);
        tokio::spawn(async move { run(&calls, request("reply_customer", reply(), 2_000)).await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    f.sessions
        .decide(
            &approval_id,
            ApprovalDecision::AllowOnce,
            "",
            false,
            agent(),
        )
        .await
        .unwrap();
    let outcomes = [waiting.await.unwrap().1, second.await.unwrap().1];
    let results = outcomes
        .iter()
        .filter(|u| matches!(u, Update::Result { approval_id: a, .. } if *a == approval_id))
        .count();
    // One caller gets the result; the other, coming in after it was
    // delivered, starts a new call (which asks again).
    assert_eq!(results, 1, "{outcomes:?}");
    assert_eq!(replies(&f, "T-1001"), 1, "the reply was sent exactly once");
}

#[tokio::test]
async fn a_pending_call_survives_a_restart() {
    let f = fixture().await;
    let (_, first) = run(&f.calls, request("reply_customer", reply(), 20)).await;
    let Update::Pending { approval_id, .. } = first else {
        panic!("not pending")
    };
    let Fixture {
        tmp,
        ws,
        store,
        sessions,
        calls,
    } = f;
    drop((sessions, calls));
    let f = open_on(tmp, ws, store).await;
    f.sessions
        .decide(
            &approval_id,
            ApprovalDecision::AllowOnce,
            "",
            false,
            agent(),
        )
        .await
        .unwrap();
    let (_, done) = run(&f.calls, request("reply_customer", reply(), 1_000)).await;
    assert!(
        matches!(&done, Update::Result { output, .. } if !output.is_error),
        "{done:?}"
    );
    assert_eq!(replies(&f, "T-1001"), 1);
    drop(f.tmp);
}

#[tokio::test]
async fn a_denied_call_reports_the_refusal_and_changes_nothing() {
    let f = fixture().await;
    let (_, first) = run(&f.calls, request("reply_customer", reply(), 20)).await;
    let Update::Pending { approval_id, .. } = first else {
        panic!("not pending")
    };
    f.sessions
        .decide(
            &approval_id,
            ApprovalDecision::Deny,
            "wrong tone",
            false,
            agent(),
        )
        .await
        .unwrap();
    let (_, done) = run(&f.calls, request("reply_customer", reply(), 1_000)).await;
    let Update::Result { output, .. } = done else {
        panic!("not a result")
    };
    assert!(output.is_error);
    assert!(output.content.contains("wrong tone"), "{}", output.content);
    assert_eq!(replies(&f, "T-1001"), 0);
}

#[tokio::test]
async fn bad_calls_are_refused_with_a_reason() {
    let f = fixture().await;
    let unknown = f
        .calls
        .call(
            request("drop_tables", json!({}), 10),
            tokio::sync::mpsc::channel(1).0,
        )
        .await;
    assert!(matches!(unknown, Err(CallError::UnknownTool { .. })));
    for (args, why) in [
        ("[1, 2]", "one JSON object"),
        ("{\"ticket_id\": ", "not valid JSON"),
    ] {
        let e = CallRequest::new("x", "get_ticket", args, 0, agent()).unwrap_err();
        assert!(e.to_string().contains(why), "{e}");
    }
    let big = json!({"ticket_id": "x".repeat(MAX_ARGUMENTS)}).to_string();
    let e = CallRequest::new("x", "get_ticket", &big, 0, agent()).unwrap_err();
    assert!(e.to_string().contains("at most"), "{e}");
    // A call the tool refuses is an error result, not a failed call.
    let (_, answer) = run(
        &f.calls,
        request("get_ticket", json!({"ticket_id": "../etc"}), 10),
    )
    .await;
    assert!(matches!(answer, Update::Result { output, .. } if output.is_error));
}

#[test]
fn the_same_arguments_in_another_order_are_the_same_call() {
    let a = CallRequest::new(
        "c",
        "route_ticket",
        r#"{"a":1,"b":{"x":1,"y":2}}"#,
        0,
        agent(),
    )
    .unwrap();
    let b = CallRequest::new(
        "c",
        "route_ticket",
        r#"{"b":{"y":2,"x":1},"a":1}"#,
        0,
        agent(),
    )
    .unwrap();
    let c = CallRequest::new(
        "d",
        "route_ticket",
        r#"{"a":1,"b":{"x":1,"y":2}}"#,
        0,
        agent(),
    )
    .unwrap();
    assert_eq!(a.stream(), b.stream());
    assert_ne!(a.stream(), c.stream(), "per caller");
    assert_eq!(a.wait, DEFAULT_WAIT);
}
