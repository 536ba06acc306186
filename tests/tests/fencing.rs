//! Self-fencing on a shared PostgreSQL log: a daemon cut off from the
//! database (a proxy in front of it stops forwarding, as a partition does)
//! for longer than its lease makes no tool effect once its lease lapsed,
//! while another daemon takes its turn over; when the network returns it
//! rejoins — appends again — and records nothing twice.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use serde_json::Value;
use tinycode_tests::pg::{Schema, base_url};
use tinycode_tests::proxy::Proxy;
use tinycode_tests::shared_desk::router;
use tinycode_tests::{Desk, wait_until};

/// The shared desk's daemon: the mock that routes, a lease of 2 s, the
/// log at `url`.
fn daemon(url: &str, mock: &tinycode_tests::mock_llm::MockLlm) -> Desk {
    Desk::fixture()
        .with_env("TINYCODE_STORE_URL", url)
        .with_env("TINYCODE_LEASE_SECONDS", "2")
        .with_env("OPENAI_BASE_URL", &mock.base_url)
        .with_env("OPENAI_API_KEY", "sk-test")
        .with_env("TINYCODE_MODEL", "openai/gpt-test")
}

fn count(events: &[Value], key: &str) -> usize {
    events.iter().filter(|e| e.get(key).is_some()).count()
}

#[test]
fn a_daemon_cut_off_past_its_lease_makes_no_tool_effect_and_rejoins_without_a_duplicate() {
    let schema = Schema::new("fence");
    // The database as A sees it: through a proxy the test can cut.
    let direct = base_url();
    let rest = direct.split_once("@").map_or("", |(_, r)| r);
    let (host_port, _) = rest.split_once('/').expect("a database in the URL");
    let proxy = Proxy::start(host_port);
    let through = schema
        .url()
        .replace(host_port, &format!("127.0.0.1:{}", proxy.port));
    // The model answers each request after 5 s: A's route comes while A
    // is cut off.
    let mock = router(Duration::from_secs(5));
    let (a, b) = (daemon(&through, &mock), daemon(&schema.url(), &mock));
    a.ok(&["ticket", "list"]);
    b.ok(&["ticket", "list"]);
    let session = a.new_session(&[]);
    let stream = format!("session-{session}");
    a.ok(&["session", "send", &session, "route T-1001"]);
    assert!(wait_until(Duration::from_secs(30), || {
        count(&a.events(&["--stream", &stream]), "turnStarted") == 1
    }));
    let sent = Instant::now();

    // Cut off: within half a lease A says it is fenced; after the lease B
    // takes the turn over (records it interrupted).
    proxy.block(true);
    let fenced = wait_until(Duration::from_secs(10), || {
        a.json(&["daemon", "status", "--json"])["writesPaused"]
            .as_str()
            .is_some_and(|s| s.contains("fenced since"))
    });
    assert!(fenced, "{}", a.log());
    let taken = wait_until(Duration::from_secs(30), || {
        b.events(&["--stream", &stream])
            .iter()
            .any(|e| e["turnCompleted"]["outcome"] == "TURN_OUTCOME_INTERRUPTED")
    });
    assert!(taken, "{}", b.log());
    // The model has answered A's request with the route meanwhile.
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
    // A has had the time to carry on where it paused (it would route
    // within a second; the model's next answer takes 5 s).
    std::thread::sleep(Duration::from_secs(3));

    // No tool effect of A's lapsed turn: T-1001 never routed; the turn
    // ended once, as B recorded it.
    let ticket = b.events(&["--stream", "ticket-T-1001"]);
    assert_eq!(
        count(&ticket, "ticketRouted"),
        0,
        "ours: {stream}\n{ticket:#?}\n--- A ---\n{}\n--- B ---\n{}",
        a.log(),
        b.log()
    );
    let events = b.events(&["--stream", &stream]);
    assert_eq!(count(&events, "turnCompleted"), 1, "{events:#?}");
    assert_eq!(count(&events, "toolCallFinished"), 0, "{events:#?}");
    assert!(a.log().contains("handed over"), "{}", a.log());
    a.stop();
    b.stop();
}
