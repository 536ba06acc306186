//! End-to-end: the background triage worker of the real daemon. Tickets
//! arrive by file drop, CLI and gRPC and are each triaged once; a failing
//! model is retried then the ticket is left open with a note; a restart
//! with a queue of 20 finishes every ticket exactly once; an L2 escalation
//! waits for a human and completes after a CLI approval.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde_json::{Value, json};
use tinycode_shared::client::{ClientName, connect};
use tinycode_shared::proto::CreateTicketRequest;
use tinycode_shared::proto::tickets_client::TicketsClient;
use tinycode_tests::mock_llm::{MockLlm, Reply, text};
use tinycode_tests::shared_desk::route_reply;
use tinycode_tests::{Desk, LineReader, kill, wait_until};

/// The fixture desk with `autoTriage` on (and `extra` merged into it).
fn auto_desk(desk: Desk, extra: Value) -> Desk {
    desk.edit_config(|config| {
        let mut auto = json!({"enabled": true, "concurrency": 2, "pollIntervalMs": 100});
        for (k, v) in extra.as_object().unwrap() {
            auto[k] = v.clone();
        }
        config["autoTriage"] = auto;
    });
    desk
}

fn status(desk: &Desk) -> Value {
    desk.json(&["triage", "status"])
}

/// Poll `triage status` until `done` holds.
fn until_status(desk: &Desk, what: &str, done: impl Fn(&Value) -> bool) -> Value {
    let mut last = Value::Null;
    let ok = wait_until(Duration::from_secs(60), || {
        last = status(desk);
        done(&last)
    });
    assert!(ok, "{what}: {last:#}\n--- daemon log ---\n{}", desk.log());
    last
}

fn item<'a>(status: &'a Value, ticket: &str) -> &'a Value {
    status["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["ticket"] == ticket)
        .unwrap_or_else(|| panic!("no triage of {ticket}: {status:#}"))
}

/// How many events of `kind` each ticket's stream holds.
fn count_by_ticket(
    desk: &Desk,
    prefix: &str,
    kind: &str,
) -> std::collections::BTreeMap<String, usize> {
    let mut counts = std::collections::BTreeMap::new();
    for e in desk.events(&["--stream", prefix]) {
        if e.get(kind).is_some() {
            let stream = e["streamId"].as_str().unwrap();
            let ticket = stream.trim_start_matches(prefix).to_string();
            *counts.entry(ticket).or_default() += 1;
        }
    }
    counts
}

fn ticket_file(id: &str, subject: &str) -> String {
    json!({
        "id": id, "subject": subject, "customer": "Dropped Customer", "channel": "email",
        "createdAt": "2026-11-30T08:00:00Z", "slaMinutes": 480, "status": "open",
        "messages": [{"from": "customer", "text": "快递 物流 一直 没有 更新", "at": "2026-11-30T08:00:00Z"}]
    })
    .to_string()
}

#[tokio::test]
async fn tickets_from_a_file_drop_the_cli_and_grpc_are_each_triaged_once() {
    let desk = auto_desk(Desk::fixture(), json!({}));
    // The three open fixture tickets are triaged at start.
    let s = until_status(&desk, "the fixture tickets", |s| {
        s["done"] == 2 && s["waitingForApproval"] == 1
    });
    assert_eq!(item(&s, "T-1001")["queue"], "售后组");
    let waiting = item(&s, "T-1003");
    assert_eq!(waiting["state"], "waiting for approval");
    let mut watch = LineReader::spawn({
        let mut cmd = desk.cli();
        cmd.args(["triage", "watch"]);
        cmd
    });
    watch.until(Duration::from_secs(20), |lines| {
        lines.iter().any(|l| l.starts_with("triage:"))
    });

    desk.write(
        "tickets/T-2001.json",
        &ticket_file("T-2001", "Dropped parcel"),
    );
    let created = desk.ok(&[
        "ticket",
        "create",
        "--subject",
        "Parcel late",
        "--customer",
        "Bo",
        "--channel",
        "chat",
        "--body",
        "快递 物流 没有 更新",
    ]);
    let cli_id = created
        .split_whitespace()
        .find(|w| w.starts_with("T-"))
        .unwrap()
        .to_string();
    let channel = connect(&desk.socket(), &ClientName::new("grpc-script").unwrap())
        .await
        .unwrap();
    let grpc_id = TicketsClient::new(channel)
        .create(CreateTicketRequest {
            subject: "Where is my order".into(),
            customer: "Cy".into(),
            channel: "web".into(),
            body: "物流 信息 三天 没有 更新".into(),
            sla_minutes: 0,
        })
        .await
        .unwrap()
        .into_inner()
        .id;

    let s = until_status(&desk, "the three new tickets", |s| s["done"] == 5);
    for id in ["T-2001", cli_id.as_str(), grpc_id.as_str()] {
        let i = item(&s, id);
        assert_eq!(
            (i["state"].as_str(), i["queue"].as_str()),
            (Some("done"), Some("物流组")),
            "{id}: {i}"
        );
    }
    let lines = watch.until(Duration::from_secs(20), |lines| {
        ["T-2001", cli_id.as_str(), grpc_id.as_str()]
            .iter()
            .all(|id| lines.iter().any(|l| l.starts_with(&format!("{id} done"))))
    });
    assert!(
        lines.iter().any(|l| l.starts_with("T-2001 done · ")),
        "{lines:?}"
    );
    // Exactly one queue entry, one attempt and one triage session each.
    let queued = count_by_ticket(&desk, "triage-", "triageQueued");
    let started = count_by_ticket(&desk, "triage-", "triageStarted");
    for id in [
        "T-1001",
        "T-1002",
        "T-1003",
        "T-2001",
        cli_id.as_str(),
        grpc_id.as_str(),
    ] {
        assert_eq!(
            (queued.get(id), started.get(id)),
            (Some(&1), Some(&1)),
            "{id}"
        );
    }
    let sessions = desk.json(&["session", "list", "--limit", "100"]);
    let titles: Vec<&str> = sessions["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["title"].as_str().unwrap())
        .collect();
    for id in ["T-2001", cli_id.as_str(), grpc_id.as_str()] {
        assert_eq!(
            titles
                .iter()
                .filter(|t| **t == format!("triage {id}"))
                .count(),
            1,
            "{titles:?}"
        );
    }
    // The dropped file was imported and written back with the triage.
    assert_eq!(desk.ticket_file("T-2001")["queue"], "物流组");
    // Nothing is left open and never triaged: `--all` finds nothing.
    let again = desk.json(&["triage", "--all"]);
    assert_eq!(again, json!([]));
    drop(watch);
    desk.stop();
}

#[test]
fn a_failing_model_is_retried_with_backoff_then_the_ticket_is_left_open_with_a_note() {
    let mock = MockLlm::respond(|_| Reply::Status(401));
    let desk = auto_desk(
        Desk::fixture()
            .with_env("OPENAI_BASE_URL", &mock.base_url)
            .with_env("OPENAI_API_KEY", "sk-test")
            .with_env("TINYCODE_MODEL", "openai/gpt-test"),
        json!({"maxAttempts": 2, "retryDelayMs": 50}),
    );
    let s = until_status(&desk, "every triage failed", |s| s["failed"] == 3);
    let t1001 = item(&s, "T-1001");
    assert_eq!(t1001["attempts"], 2);
    assert_eq!(t1001["outcome"], "failed");
    assert!(t1001["error"].as_str().unwrap().contains("401"), "{t1001}");
    let ticket = desk.json(&["ticket", "show", "T-1001"]);
    assert_eq!(ticket["status"], "open");
    let notes = ticket["notes"].to_string();
    assert!(
        notes.contains("Auto-triage gave up: 2 attempts failed"),
        "{notes}"
    );
    let retried = count_by_ticket(&desk, "triage-", "triageAttemptFailed");
    assert_eq!(retried.get("T-1001"), Some(&1));
    assert_eq!(mock.request_sizes().len(), 6, "two requests per ticket");
    desk.stop();
}

#[test]
fn a_triage_whose_classification_was_refused_is_incomplete_even_when_routed() {
    // A model that names a category the desk does not have, then routes.
    let mock = MockLlm::respond(|request| {
        let messages = request["messages"].as_array().cloned().unwrap_or_default();
        let last_user = messages
            .iter()
            .rposition(|m| m["role"] == "user")
            .unwrap_or(0);
        let ticket = messages[last_user]["content"]
            .to_string()
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
            .find(|w| w.starts_with("T-"))
            .unwrap_or("T-0")
            .to_string();
        let results = messages[last_user..]
            .iter()
            .filter(|m| m["role"] == "tool")
            .count();
        match results {
            0 => tinycode_tests::mock_llm::tool(
                "classify_ticket",
                json!({"ticket_id": ticket, "category": "发票", "priority": "P2", "intent": "invoice"}),
            ),
            1 => tinycode_tests::mock_llm::tool(
                "route_ticket",
                json!({"ticket_id": ticket, "queue": "售后组", "reason": "invoice"}),
            ),
            _ => text("Done."),
        }
    });
    let desk = auto_desk(
        Desk::fixture()
            .with_env("OPENAI_BASE_URL", &mock.base_url)
            .with_env("OPENAI_API_KEY", "sk-test")
            .with_env("TINYCODE_MODEL", "openai/gpt-test"),
        json!({"maxAttempts": 1, "retryDelayMs": 50}),
    );
    let s = until_status(&desk, "every triage ended", |s| {
        s["failed"].as_u64().unwrap_or(0) + s["done"].as_u64().unwrap_or(0) == 3
    });
    assert_eq!(
        s["done"].as_u64().unwrap_or(0),
        0,
        "never done without a category: {s:#}"
    );
    let t1002 = item(&s, "T-1002");
    assert_eq!(t1002["outcome"], "incomplete", "{t1002}");
    assert!(
        t1002["error"]
            .as_str()
            .unwrap()
            .contains("could not classify it"),
        "{t1002}"
    );
    desk.stop();
}

#[test]
fn a_turn_that_decides_nothing_is_incomplete_retried_then_left_open_with_a_note() {
    // A model that says it is done and calls no tool.
    let mock = MockLlm::respond(|_| text("All done, the ticket is triaged."));
    let desk = auto_desk(
        Desk::fixture()
            .with_env("OPENAI_BASE_URL", &mock.base_url)
            .with_env("OPENAI_API_KEY", "sk-test")
            .with_env("TINYCODE_MODEL", "openai/gpt-test"),
        json!({"maxAttempts": 2, "retryDelayMs": 50}),
    );
    let s = until_status(&desk, "every triage gave up", |s| s["failed"] == 3);
    assert_eq!(
        s["done"], 0,
        "nothing is done when nothing was decided: {s:#}"
    );
    assert_eq!(s["incomplete"], 3, "{s:#}");
    let t1002 = item(&s, "T-1002");
    assert_eq!(t1002["outcome"], "incomplete");
    assert_eq!(t1002["attempts"], 2);
    assert!(
        t1002["error"]
            .as_str()
            .unwrap()
            .contains("without classifying, routing or escalating"),
        "{t1002}"
    );
    let ticket = desk.json(&["ticket", "show", "T-1002"]);
    assert_eq!(ticket["status"], "open");
    assert!(
        ticket["notes"].to_string().contains("Auto-triage gave up"),
        "{ticket}"
    );
    assert_eq!(
        count_by_ticket(&desk, "triage-", "triageAttemptFailed").get("T-1002"),
        Some(&1),
        "retried once, like a failure"
    );
    desk.stop();
}

#[test]
fn on_an_offline_desk_triages_asked_for_on_a_providers_model_run_two_at_a_time() {
    let mock = MockLlm::respond(|_| Reply::Hang);
    // The desk's default model is the offline one: 16 slots, unless a
    // turn uses a provider's model.
    let desk = Desk::fixture()
        .with_env("OPENAI_BASE_URL", &mock.base_url)
        .with_env("OPENAI_API_KEY", "sk-test");
    desk.edit_config(|config| {
        config["autoTriage"] = json!({"enabled": false, "pollIntervalMs": 100});
    });
    for n in 1..=5 {
        let id = format!("T-4{n:03}");
        desk.write(&format!("tickets/{id}.json"), &ticket_file(&id, "parcel"));
    }
    let _asked = LineReader::spawn({
        let mut cmd = desk.cli();
        cmd.args(["triage", "--all", "--model", "openai/gpt-test"]);
        cmd
    });
    // Eight open tickets (the fixture's three and five), the model hangs.
    let s = until_status(&desk, "two running, six queued", |s| {
        s["running"] == 2 && s["queued"] == 6
    });
    assert_eq!(s["concurrency"], 16, "{s:#}");
    std::thread::sleep(Duration::from_millis(500));
    let s = status(&desk);
    assert_eq!(
        (&s["running"], &s["queued"]),
        (&json!(2), &json!(6)),
        "{s:#}"
    );
    desk.stop();
}

#[test]
fn a_restart_with_a_queue_of_twenty_finishes_every_ticket_exactly_once() {
    let hang = Arc::new(AtomicBool::new(true));
    let mock = MockLlm::respond({
        let hang = Arc::clone(&hang);
        move |request| {
            if hang.load(Ordering::SeqCst) {
                Reply::Hang
            } else {
                route_reply(request)
            }
        }
    });
    let desk = auto_desk(
        Desk::fixture()
            .with_env("OPENAI_BASE_URL", &mock.base_url)
            .with_env("OPENAI_API_KEY", "sk-test")
            .with_env("TINYCODE_MODEL", "openai/gpt-test"),
        json!({"concurrency": 2}),
    );
    // Twenty tickets arrive with the three of the fixture: 23 in all.
    for n in 1..=20 {
        let id = format!("T-3{n:03}");
        desk.write(&format!("tickets/{id}.json"), &ticket_file(&id, "parcel"));
    }
    // The model hangs: two triages run, the rest wait their turn.
    let s = until_status(&desk, "two running, 21 queued", |s| {
        s["running"] == 2 && s["queued"] == 21
    });
    assert_eq!(s["done"], 0);
    let pid = desk.daemon_pid().unwrap();
    kill(pid, "KILL");
    assert!(wait_until(Duration::from_secs(10), || {
        !tinycode_tests::alive(pid)
    }));

    hang.store(false, Ordering::SeqCst);
    let s = until_status(&desk, "all 23 done after the restart", |s| s["done"] == 23);
    assert_eq!(
        (
            s["queued"].as_u64(),
            s["running"].as_u64(),
            s["failed"].as_u64()
        ),
        (Some(0), Some(0), Some(0))
    );
    let routed = count_by_ticket(&desk, "ticket-", "ticketRouted");
    assert_eq!(routed.len(), 23, "{routed:?}");
    assert!(
        routed.values().all(|n| *n == 1),
        "each ticket routed once: {routed:?}"
    );
    let queued = count_by_ticket(&desk, "triage-", "triageQueued");
    assert!(queued.values().all(|n| *n == 1), "{queued:?}");
    let sessions = desk.json(&["session", "list", "--limit", "100"]);
    let triage_sessions = sessions["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["title"].as_str().unwrap().starts_with("triage T-"))
        .count();
    assert_eq!(
        triage_sessions, 23,
        "one session per ticket, the interrupted two reused"
    );
    desk.stop();
}

#[test]
fn an_l2_escalation_waits_for_approval_and_completes_after_a_cli_approval() {
    let desk = auto_desk(Desk::fixture(), json!({}));
    let s = until_status(&desk, "T-1003 waits", |s| s["waitingForApproval"] == 1);
    let waiting = item(&s, "T-1003");
    let approval = waiting["waitingForApproval"].as_str().unwrap().to_string();
    assert_eq!(waiting["escalationNeedsApproval"], 2);
    let text = desk.ok(&["triage", "status"]);
    assert!(text.contains(&format!("L2 awaits {approval}")), "{text}");
    assert!(
        text.contains(&format!("tinycode approvals approve {approval}")),
        "{text}"
    );
    desk.ok(&["approvals", "approve", &approval]);
    let s = until_status(&desk, "T-1003 done", |s| s["done"] == 3);
    let t1003 = item(&s, "T-1003");
    assert_eq!(
        (t1003["escalateLevel"].as_u64(), t1003["status"].as_str()),
        (Some(2), Some("escalated"))
    );
    desk.stop();
}
