//! Self-fencing on a shared PostgreSQL log: a daemon cut off from the
//! database (a proxy in front of it stops forwarding, as a partition does)
//! for longer than its lease makes no tool effect once its lease lapsed —
//! neither an MCP call nor a route — while another daemon takes its turn
//! or its tickets' triage over; when the network returns it rejoins —
//! appends again — and records nothing twice.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tinycode_tests::mock_llm::{MockLlm, Reply, text, tool};
use tinycode_tests::pg::{Schema, base_url};
use tinycode_tests::proxy::Proxy;
use tinycode_tests::shared_desk::{member_at, router};
use tinycode_tests::{Desk, wait_until};

/// The shared desk's daemon: the mock that routes, a lease of 2 s, the
/// log at `url`.
fn daemon(url: &str, mock: &MockLlm) -> Desk {
    Desk::fixture()
        .with_env("TINYCODE_STORE_URL", url)
        .with_env("TINYCODE_LEASE_SECONDS", "2")
        .with_env("OPENAI_BASE_URL", &mock.base_url)
        .with_env("OPENAI_API_KEY", "sk-test")
        .with_env("TINYCODE_MODEL", "openai/gpt-test")
}

/// The database as a daemon behind a proxy the test can cut sees it: the
/// proxy, and the URL of `schema` through it.
fn behind_proxy(schema: &Schema) -> (Proxy, String) {
    let direct = base_url();
    let rest = direct.split_once("@").map_or("", |(_, r)| r);
    let (host_port, _) = rest.split_once('/').expect("a database in the URL");
    let proxy = Proxy::start(host_port);
    let through = schema
        .url()
        .replace(host_port, &format!("127.0.0.1:{}", proxy.port));
    (proxy, through)
}

/// Within half a lease (and a poll) `daemon status` says it is fenced.
fn says_fenced(d: &Desk) {
    let fenced = wait_until(Duration::from_secs(10), || {
        d.json(&["daemon", "status", "--json"])["writesPaused"]
            .as_str()
            .is_some_and(|s| s.contains("fenced since"))
    });
    assert!(fenced, "{}", d.log());
}

fn count(events: &[Value], key: &str) -> usize {
    events.iter().filter(|e| e.get(key).is_some()).count()
}

/// A model that calls the MCP tool `mcp__slow__grow` (whose server logs
/// every call it receives), then ends the turn; 5 s per answer.
fn grower() -> MockLlm {
    MockLlm::respond(|request| {
        let answered = request["messages"]
            .as_array()
            .is_some_and(|m| m.iter().any(|m| m["role"] == "tool"));
        let reply = if answered {
            text("grown.")
        } else {
            tool("mcp__slow__grow", json!({}))
        };
        Reply::Delayed(Duration::from_secs(5), Box::new(reply))
    })
}

#[test]
fn a_daemon_cut_off_past_its_lease_makes_no_tool_effect_and_rejoins_without_a_duplicate() {
    let schema = Schema::new("fence");
    let (proxy, through) = behind_proxy(&schema);
    // The tool has an effect outside the log: the MCP server (the fake one
    // of the MCP tests) appends each call it receives to `received`.
    let scratch = tempfile::tempdir().unwrap();
    let received = scratch.path().join("slow.jsonl");
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/mcp/fake_server.js");
    // The model answers each request after 5 s: A's tool call comes while
    // A is cut off.
    let mock = grower();
    let (a, b) = (daemon(&through, &mock), daemon(&schema.url(), &mock));
    a.edit_config(|c| {
        c["mcpServers"] = json!({
            "slow": { "command": "node", "args": [script, "slow", received.to_str().unwrap()] },
        });
    });
    a.ok(&["ticket", "list"]);
    b.ok(&["ticket", "list"]);
    let ready = wait_until(Duration::from_secs(60), || {
        a.json(&["mcp", "status"])["servers"][0]["state"] == "ready"
    });
    assert!(ready, "{}", a.ok(&["mcp", "status"]));
    let session = a.new_session(&["--approve", "auto"]);
    let stream = format!("session-{session}");
    a.ok(&["session", "send", &session, "grow please"]);
    assert!(wait_until(Duration::from_secs(30), || {
        count(&a.events(&["--stream", &stream]), "turnStarted") == 1
    }));
    let sent = Instant::now();

    // Cut off: within half a lease A says it is fenced; after the lease B
    // takes the turn over (records it interrupted).
    proxy.block(true);
    says_fenced(&a);
    let taken = wait_until(Duration::from_secs(30), || {
        b.events(&["--stream", &stream])
            .iter()
            .any(|e| e["turnCompleted"]["outcome"] == "TURN_OUTCOME_INTERRUPTED")
    });
    assert!(taken, "{}", b.log());
    // The model has answered A's request with the tool call meanwhile.
    let answered = Duration::from_secs(7);
    std::thread::sleep(answered.saturating_sub(sent.elapsed()));
    assert!(!mock.requests().is_empty());

    // Back: A renews its lease, sees its turn was taken and stops it; it
    // appends again within 10 s.
    proxy.block(false);
    let back = Instant::now();
    let appended = wait_until(Duration::from_secs(10), || {
        a.create_ticket("after the partition").code == 0
    });
    assert!(appended, "{}", a.log());
    assert!(back.elapsed() < Duration::from_secs(10));
    // A has had the time to carry on where it paused (it would call the
    // tool within a second; the model's next answer takes 5 s).
    std::thread::sleep(Duration::from_secs(3));

    // No tool effect of A's lapsed turn: the MCP server never got the
    // call; the turn ended once, as B recorded it.
    let calls = std::fs::read_to_string(&received).unwrap_or_default();
    assert!(
        !calls.contains("tools/call"),
        "the tool was called: {calls}\n--- A ---\n{}",
        a.log()
    );
    let events = b.events(&["--stream", &stream]);
    assert_eq!(count(&events, "turnCompleted"), 1, "{events:#?}");
    assert_eq!(count(&events, "toolCallFinished"), 0, "{events:#?}");
    assert!(a.log().contains("handed over"), "{}", a.log());
    a.stop();
    b.stop();
}

/// The daemons that started an attempt on `ticket`'s triage.
fn triage_runners(d: &Desk, ticket: &str) -> std::collections::BTreeSet<String> {
    d.events(&["--stream", &format!("triage-{ticket}")])
        .iter()
        .filter_map(|e| e["triageStarted"]["daemonId"].as_str().map(str::to_string))
        .collect()
}

/// Triage behind the partition: A holds two tickets' triage when it is
/// cut off; its model answers them with a route while it is fenced; B
/// takes both over after A's lease and routes them. Every ticket is routed
/// once, by B; A, back, hands them over.
#[test]
fn a_daemon_cut_off_mid_triage_routes_nothing_and_another_takes_its_tickets() {
    let schema = Schema::new("fence_triage");
    let (proxy, through) = behind_proxy(&schema);
    let mock = router(Duration::from_secs(5));
    // A triages the desk's three tickets, two at a time.
    let a = member_at(&through, &mock, 2);
    a.ok(&["ticket", "list"]);
    assert!(wait_until(Duration::from_secs(30), || mock
        .requests()
        .len()
        >= 2));
    let sent = Instant::now();
    let held: Vec<String> = ["T-1001", "T-1002", "T-1003"]
        .into_iter()
        .filter(|t| !triage_runners(&a, t).is_empty())
        .map(str::to_string)
        .collect();
    assert_eq!(held.len(), 2, "A holds two tickets' triage");
    let b = member_at(&schema.url(), &mock, 2);
    b.ok(&["ticket", "list"]);

    proxy.block(true);
    says_fenced(&a);
    // B takes A's tickets over once A's lease lapsed.
    let taken = wait_until(Duration::from_secs(30), || {
        held.iter().all(|t| triage_runners(&b, t).len() == 2)
    });
    assert!(taken, "{}", b.log());
    // A's model has answered its requests with routes meanwhile.
    std::thread::sleep(Duration::from_secs(7).saturating_sub(sent.elapsed()));

    proxy.block(false);
    let appended = wait_until(Duration::from_secs(10), || {
        a.create_ticket("after the partition").code == 0
    });
    assert!(appended, "{}", a.log());
    let routed = |t: &str| {
        count(
            &b.events(&["--stream", &format!("ticket-{t}")]),
            "ticketRouted",
        )
    };
    let all = wait_until(Duration::from_secs(60), || {
        ["T-1001", "T-1002", "T-1003"]
            .iter()
            .all(|t| routed(t) >= 1)
    });
    assert!(all, "--- A ---\n{}\n--- B ---\n{}", a.log(), b.log());
    // A had the time to carry on where it paused (it would route within
    // a second; the model's next answer takes 5 s).
    std::thread::sleep(Duration::from_secs(3));
    for t in ["T-1001", "T-1002", "T-1003"] {
        assert_eq!(
            routed(t),
            1,
            "{t}\n--- A ---\n{}\n--- B ---\n{}",
            a.log(),
            b.log()
        );
    }
    assert!(a.log().contains("handed over"), "{}", a.log());
    a.stop();
    b.stop();
}
