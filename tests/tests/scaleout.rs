//! Several daemons, one desk: three `tinycoded` on one PostgreSQL log share
//! the triage — every ticket triaged and routed exactly once, also when
//! one of them is killed mid-triage (the others take its tickets over after
//! the lease) — and each lists the others with their heartbeats.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::Value;
use tinycode_tests::pg::Schema;
use tinycode_tests::shared_desk::{member, router, ticket_file};
use tinycode_tests::{Desk, LineReader, kill, wait_until};

/// A desk on `schema`'s shared log whose model is the scripted `mock`.
fn on_mock(schema: &Schema, mock: &tinycode_tests::mock_llm::MockLlm) -> Desk {
    Desk::fixture()
        .with_env("TINYCODE_STORE_URL", &schema.url())
        .with_env("OPENAI_BASE_URL", &mock.base_url)
        .with_env("OPENAI_API_KEY", "sk-test")
        .with_env("TINYCODE_MODEL", "openai/gpt-test")
}

/// The first approval `desk` lists as pending, once there is one.
fn pending_approval(desk: &Desk) -> String {
    tinycode_tests::pending_approval(desk, Duration::from_secs(60))
}

/// Wait for a turn of `stream` to complete (as `desk` reads the log),
/// then check T-1003 was escalated exactly once.
fn completes_escalating_once(desk: &Desk, stream: &str) {
    let completed = wait_until(Duration::from_secs(60), || {
        desk.events(&["--stream", stream])
            .iter()
            .any(|e| e["turnCompleted"]["outcome"] == "TURN_OUTCOME_COMPLETED")
    });
    assert!(completed, "{}", desk.log());
    let escalated = desk
        .events(&["--stream", "ticket-T-1003"])
        .into_iter()
        .filter(|e| e.get("ticketEscalated").is_some())
        .count();
    assert_eq!(escalated, 1);
}

fn daemon_id(desk: &Desk) -> String {
    std::fs::read_to_string(desk.state_dir().join("daemon-id"))
        .unwrap()
        .trim()
        .to_string()
}

/// Per ticket of `prefix…`: its triage events, in order.
fn triage_events(desk: &Desk, prefix: &str) -> BTreeMap<String, Vec<Value>> {
    let mut out: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    for e in desk.events(&["--stream", &format!("triage-{prefix}")]) {
        let ticket = e["streamId"].as_str().unwrap()["triage-".len()..].to_string();
        out.entry(ticket).or_default().push(e);
    }
    out
}

fn finished(events: &[Value]) -> usize {
    events
        .iter()
        .filter(|e| e.get("triageFinished").is_some())
        .count()
}

/// Per ticket of `prefix…`: how many times it was routed.
fn routes(desk: &Desk, prefix: &str) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for e in desk.events(&["--stream", &format!("ticket-{prefix}")]) {
        if e.get("ticketRouted").is_some() {
            let ticket = e["streamId"].as_str().unwrap()["ticket-".len()..].to_string();
            *out.entry(ticket).or_default() += 1;
        }
    }
    out
}

fn wait_all_finished(desk: &Desk, prefix: &str, n: usize, within: Duration) {
    let mut done = 0;
    let ok = wait_until(within, || {
        done = triage_events(desk, prefix)
            .values()
            .filter(|e| finished(e) == 1)
            .count();
        done == n
    });
    assert!(ok, "{done} of {n} finished\n{}", desk.log());
}

#[test]
fn three_daemons_on_one_log_triage_three_hundred_tickets_exactly_once() {
    let schema = Schema::new("three");
    let mock = router(Duration::from_millis(20));
    let desks: Vec<Desk> = (0..3).map(|_| member(&schema, &mock, 4)).collect();
    for d in &desks {
        d.ok(&["ticket", "list"]); // start it
    }
    let ids: Vec<String> = desks.iter().map(daemon_id).collect();
    // 300 tickets dropped into one daemon's workspace: its mirror imports
    // them into the shared log, and every daemon lines them up.
    for n in 0..300 {
        let id = format!("T-5{n:03}");
        desks[0].write(&format!("tickets/{id}.json"), &ticket_file(&id));
    }
    wait_all_finished(&desks[0], "T-5", 300, Duration::from_secs(240));

    let records = triage_events(&desks[0], "T-5");
    let mut by_daemon: BTreeMap<String, usize> = BTreeMap::new();
    for (ticket, events) in &records {
        let started: Vec<&Value> = events
            .iter()
            .filter_map(|e| e.get("triageStarted"))
            .collect();
        assert_eq!(started.len(), 1, "{ticket} started once: {events:#?}");
        let done = events.iter().find_map(|e| e.get("triageFinished")).unwrap();
        assert_eq!(done["result"], "done", "{ticket}: {done}");
        let owner = started[0]["daemonId"].as_str().unwrap().to_string();
        assert!(ids.contains(&owner), "{owner} is one of {ids:?}");
        *by_daemon.entry(owner).or_default() += 1;
    }
    assert_eq!(records.len(), 300);
    let routed = routes(&desks[0], "T-5");
    assert_eq!(routed.len(), 300);
    assert!(
        routed.values().all(|n| *n == 1),
        "routed exactly once: {routed:?}"
    );
    // The work was shared.
    assert!(by_daemon.len() >= 2, "{by_daemon:?}");
    eprintln!("tickets triaged per daemon: {by_daemon:?}");

    // Each lists the three, alive, and which one it is.
    for (d, id) in desks.iter().zip(&ids) {
        let status = d.json(&["daemon", "status"]);
        assert_eq!(status["daemonId"], id.as_str());
        let daemons = status["daemons"].as_array().unwrap();
        assert_eq!(daemons.len(), 3, "{status:#}");
        assert!(daemons.iter().all(|m| m["alive"] == true), "{status:#}");
        let me: Vec<&Value> = daemons.iter().filter(|m| m["thisDaemon"] == true).collect();
        assert_eq!(me.len(), 1);
        assert_eq!(me[0]["id"], id.as_str());
    }
    // One stops cleanly: the others stop listing it at once.
    desks[2].stop();
    let status = desks[0].json(&["daemon", "status"]);
    assert_eq!(status["daemons"].as_array().unwrap().len(), 2, "{status:#}");
    desks[0].stop();
    desks[1].stop();
}

#[test]
fn a_daemon_killed_mid_triage_has_its_tickets_finished_by_the_others() {
    let schema = Schema::new("takeover");
    let mock = router(Duration::from_millis(400));
    let desks: Vec<Desk> = (0..3).map(|_| member(&schema, &mock, 2)).collect();
    for d in &desks {
        d.ok(&["ticket", "list"]);
    }
    let victim = daemon_id(&desks[1]);
    for n in 0..30 {
        let id = format!("T-6{n:03}");
        desks[0].write(&format!("tickets/{id}.json"), &ticket_file(&id));
    }
    // Kill it while it holds a running triage.
    let holding = wait_until(Duration::from_secs(60), || {
        triage_events(&desks[0], "T-6").values().any(|events| {
            finished(events) == 0
                && events
                    .iter()
                    .rev()
                    .find_map(|e| e.get("triageStarted"))
                    .is_some_and(|s| s["daemonId"] == victim.as_str())
        })
    });
    assert!(holding, "{}", desks[1].log());
    let pid = desks[1].daemon_pid().unwrap();
    kill(pid, "KILL");
    assert!(wait_until(Duration::from_secs(10), || {
        !tinycode_tests::alive(pid)
    }));
    // Until its lease runs out, the others list the triage it holds.
    let held = |status: &Value| {
        status["daemons"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["id"] == victim.as_str())
            .map(|m| m["triageLeases"].as_u64().unwrap_or(0))
    };
    let status = desks[0].json(&["daemon", "status"]);
    assert!(held(&status).is_some_and(|n| n >= 1), "{status:#}");

    wait_all_finished(&desks[0], "T-6", 30, Duration::from_secs(120));
    let records = triage_events(&desks[0], "T-6");
    let mut taken_over = 0;
    for (ticket, events) in &records {
        let done = events.iter().find_map(|e| e.get("triageFinished")).unwrap();
        assert_eq!(done["result"], "done", "{ticket}: {events:#?}");
        let owners: Vec<&str> = events
            .iter()
            .filter_map(|e| e.get("triageStarted"))
            .map(|s| s["daemonId"].as_str().unwrap())
            .collect();
        if owners.len() > 1 {
            // Only the dead daemon's tickets change hands, once.
            assert_eq!(owners.len(), 2, "{ticket}: {owners:?}");
            assert_eq!(owners[0], victim, "{ticket}: {owners:?}");
            assert_ne!(owners[1], victim);
            taken_over += 1;
            // The dead daemon's turn was ended once, as interrupted.
            let session = events
                .iter()
                .find_map(|e| e.get("triageStarted"))
                .and_then(|s| s["sessionId"].as_str())
                .unwrap();
            let ends: Vec<String> = desks[0]
                .events(&["--stream", &format!("session-{session}")])
                .iter()
                .filter_map(|e| e.get("turnCompleted"))
                .map(|c| format!("{}:{}", c["turn"], c["outcome"]))
                .collect();
            let mut unique = ends.clone();
            unique.sort();
            unique.dedup();
            assert_eq!(unique.len(), ends.len(), "each turn ends once: {ends:?}");
        }
    }
    assert!(
        taken_over >= 1,
        "the victim's running tickets were taken over"
    );
    let routed = routes(&desks[0], "T-6");
    assert_eq!(routed.len(), 30);
    assert!(
        routed.values().all(|n| *n == 1),
        "nothing routed twice: {routed:?}"
    );
    // The others see it dead until its lease row is gone.
    let status = desks[0].json(&["daemon", "status"]);
    let dead: Vec<&Value> = status["daemons"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["id"] == victim.as_str())
        .collect();
    assert_eq!(dead.len(), 1, "{status:#}");
    assert_eq!(held(&status), Some(0), "its tickets moved: {status:#}");
    assert!(
        dead[0].get("alive").is_none_or(|a| a == false),
        "{status:#}"
    );
    desks[0].stop();
    desks[2].stop();
}

#[test]
fn an_approval_asked_on_one_daemon_is_answered_through_another_and_the_turn_resumes() {
    let schema = Schema::new("approve");
    let on = |_: usize| {
        Desk::fixture()
            .with_env("TINYCODE_STORE_URL", &schema.url())
            .with_env("TINYCODE_LEASE_SECONDS", "3")
    };
    let (a, b, c) = (on(0), on(1), on(2));
    // The offline model escalates T-1003 to L2, which needs a human.
    let session = a.new_session(&["--approve", "ask"]);
    a.ok(&["session", "send", &session, "triage T-1003"]);
    // Daemon B lists the approval daemon A asked for.
    let id = pending_approval(&b);
    assert!(
        b.ok(&["approvals", "show", &id])
            .contains("escalate_ticket")
    );
    // A client of a third daemon follows the session from here on.
    let mut watcher = LineReader::spawn({
        let mut cmd = c.cli();
        cmd.args(["--json", "session", "attach", &session]);
        cmd
    });
    watcher.until(Duration::from_secs(30), |lines| {
        lines.iter().any(|l| l.contains("approvalRequested"))
    });
    b.ok(&["approvals", "approve", &id]);

    // The turn resumes where it waits: on A.
    completes_escalating_once(&a, &format!("session-{session}"));
    // B tells the same story as A, once its sessions model has the end.
    let escalated = "● escalate_ticket T-1003 → ✓ L2";
    let shown = b.ok_when(&["session", "show", &session], &[escalated]);
    assert!(shown.contains(escalated), "{shown}");
    // C's client saw the rest live: every stored event, in order.
    let seen = watcher
        .until(Duration::from_secs(30), |lines| {
            lines
                .iter()
                .any(|l| l.contains("turnCompleted") && l.contains("TURN_OUTCOME_COMPLETED"))
        })
        .to_vec();
    let sequences: Vec<u64> = seen
        .iter()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter_map(|v| {
            let e = &v["event"];
            e["sequence"]
                .as_u64()
                .or_else(|| e["sequence"].as_str()?.parse().ok())
        })
        .collect();
    let stored: Vec<u64> = a
        .events(&["--stream", &format!("session-{session}")])
        .iter()
        .filter_map(|e| {
            e["sequence"]
                .as_u64()
                .or_else(|| e["sequence"].as_str()?.parse().ok())
        })
        .collect();
    assert_eq!(sequences, stored, "what C's client saw, and the stream");
    a.stop();
    b.stop();
    c.stop();
}

#[test]
fn a_turn_left_waiting_by_a_killed_daemon_is_taken_over_and_finished_by_another() {
    let schema = Schema::new("orphan");
    let on = || {
        Desk::fixture()
            .with_env("TINYCODE_STORE_URL", &schema.url())
            .with_env("TINYCODE_LEASE_SECONDS", "2")
    };
    let (a, b) = (on(), on());
    b.ok(&["ticket", "list"]);
    let session = a.new_session(&["--approve", "ask"]);
    a.ok(&["session", "send", &session, "triage T-1003"]);
    let id = pending_approval(&b);
    let pid = a.daemon_pid().unwrap();
    kill(pid, "KILL");
    assert!(wait_until(Duration::from_secs(10), || {
        !tinycode_tests::alive(pid)
    }));

    // After the lease, B takes the waiting turn over (one `TurnStarted` of
    // its own), and the approval answered through B finishes it there.
    let b_id = daemon_id(&b);
    let stream = format!("session-{session}");
    let taken = wait_until(Duration::from_secs(30), || {
        b.events(&["--stream", &stream])
            .iter()
            .any(|e| e["turnStarted"]["daemonId"] == b_id.as_str())
    });
    assert!(taken, "{}", b.log());
    b.ok(&["approvals", "approve", &id]);
    completes_escalating_once(&b, &stream);
    b.stop();
}

#[test]
fn a_message_sent_through_another_daemon_queues_where_the_session_runs() {
    let schema = Schema::new("route");
    let mock = tinycode_tests::mock_llm::MockLlm::respond(|_| {
        tinycode_tests::mock_llm::Reply::Delayed(
            Duration::from_millis(1500),
            Box::new(tinycode_tests::mock_llm::text("ok")),
        )
    });
    let (a, b) = (on_mock(&schema, &mock), on_mock(&schema, &mock));
    a.ok(&["ticket", "list"]);
    b.ok(&["ticket", "list"]);
    let a_id = daemon_id(&a);
    let session = a.new_session(&[]);
    let stream = format!("session-{session}");
    a.ok(&["session", "send", &session, "first"]);
    assert!(wait_until(Duration::from_secs(30), || {
        a.events(&["--stream", &stream])
            .iter()
            .any(|e| e.get("turnStarted").is_some())
    }));
    // Sent through B while A runs turn 1: turn 2 queues on A.
    let sent = b.json(&["session", "send", &session, "second"]);
    assert_eq!(sent["turn"], 2, "{sent}");
    let both = wait_until(Duration::from_secs(60), || {
        b.events(&["--stream", &stream])
            .iter()
            .filter(|e| e["turnCompleted"]["outcome"] == "TURN_OUTCOME_COMPLETED")
            .count()
            == 2
    });
    assert!(both, "{}\n{}", a.log(), b.log());
    let events = a.events(&["--stream", &stream]);
    let started: Vec<(u64, String)> = events
        .iter()
        .filter_map(|e| e.get("turnStarted"))
        .map(|s| {
            (
                s["turn"].as_u64().unwrap_or(0),
                s["daemonId"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    assert_eq!(started, [(1, a_id.clone()), (2, a_id)], "{events:#?}");
    // One after the other: turn 2 started after turn 1 ended.
    let position = |pred: &dyn Fn(&Value) -> bool| events.iter().position(pred).unwrap();
    let first_end = position(&|e| e["turnCompleted"]["turn"] == 1);
    let second_start = position(&|e| e["turnStarted"]["turn"] == 2);
    assert!(first_end < second_start, "{events:#?}");
    a.stop();
    b.stop();
}

#[test]
fn a_triage_left_waiting_for_an_approval_by_a_killed_daemon_finishes_once_elsewhere() {
    let schema = Schema::new("waiting");
    let on = || {
        let desk = Desk::fixture()
            .with_env("TINYCODE_STORE_URL", &schema.url())
            .with_env("TINYCODE_LEASE_SECONDS", "2");
        desk.edit_config(|c| {
            c["autoTriage"] =
                serde_json::json!({"enabled": true, "concurrency": 2, "pollIntervalMs": 100});
        });
        desk
    };
    // A alone triages the fixture; its L2 escalation of T-1003 waits.
    let a = on();
    a.ok(&["ticket", "list"]);
    let id = pending_approval(&a);
    let b = on();
    b.ok(&["ticket", "list"]);
    let pid = a.daemon_pid().unwrap();
    kill(pid, "KILL");
    assert!(wait_until(Duration::from_secs(10), || {
        !tinycode_tests::alive(pid)
    }));
    // B takes the record and the waiting turn over; the approval through B
    // finishes both, once.
    let b_id = daemon_id(&b);
    let taken = wait_until(Duration::from_secs(30), || {
        b.events(&["--stream", "triage-T-1003"])
            .iter()
            .any(|e| e["triageStarted"]["daemonId"] == b_id.as_str())
    });
    assert!(taken, "{}", b.log());
    b.ok(&["approvals", "approve", &id]);
    let done = wait_until(Duration::from_secs(60), || {
        b.events(&["--stream", "triage-T-1003"])
            .iter()
            .any(|e| e["triageFinished"]["result"] == "done")
    });
    assert!(done, "{}", b.log());
    let ticket = b.events(&["--stream", "ticket-T-1003"]);
    let count = |kind: &str| ticket.iter().filter(|e| e.get(kind).is_some()).count();
    assert_eq!(count("ticketEscalated"), 1, "{ticket:#?}");
    assert!(count("ticketRouted") <= 1, "{ticket:#?}");
    b.stop();
}

/// The counts of `triage status` (without the items, whose order and
/// per-daemon fields may differ).
/// `triage status` as every daemon must show it alike: the counts, and each
/// item's ticket, state, outcome and approvals (the read model's sequence
/// is this daemon's own).
fn triage_counts(desk: &Desk) -> Value {
    let mut s = desk.json(&["triage", "status"]);
    let o = s.as_object_mut().unwrap();
    let mut items: Vec<Value> = o
        .remove("items")
        .and_then(|i| i.as_array().cloned())
        .unwrap_or_default()
        .into_iter()
        .map(|i| {
            let mut approvals: Vec<Value> =
                i["approvalIds"].as_array().cloned().unwrap_or_default();
            approvals.sort_by_key(|a| a.to_string());
            serde_json::json!({
                "ticket": i["ticket"],
                "state": i["state"],
                "outcome": i["outcome"],
                "approvals": approvals,
            })
        })
        .collect();
    items.sort_by_key(|i| i["ticket"].to_string());
    o.remove("sequence");
    o.insert("items".into(), Value::Array(items));
    s
}

#[test]
fn every_daemon_shows_the_same_triage_board_while_approvals_wait() {
    let schema = Schema::new("board");
    // Each triage asks for a supervisor escalation (an approval), then ends.
    let mock = tinycode_tests::mock_llm::MockLlm::respond(|request| {
        let messages = request["messages"].as_array().cloned().unwrap_or_default();
        let last_user = messages
            .iter()
            .rposition(|m| m["role"] == "user")
            .unwrap_or(0);
        let prompt = messages[last_user]["content"].to_string();
        let ticket = prompt
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
            .find(|w| w.starts_with("T-"))
            .unwrap_or("T-0")
            .to_string();
        if messages[last_user..].iter().any(|m| m["role"] == "tool") {
            tinycode_tests::mock_llm::text("escalated")
        } else {
            tinycode_tests::mock_llm::Reply::Tools(vec![
                (
                    "classify_ticket".to_string(),
                    serde_json::json!({"ticket_id": ticket, "category": "物流", "priority": "P1", "intent": "parcel late", "summary": "parcel"}),
                ),
                (
                    "escalate_ticket".to_string(),
                    serde_json::json!({"ticket_id": ticket, "level": 2, "reason": "a supervisor decides"}),
                ),
            ])
        }
    });
    let desks: Vec<Desk> = (0..3).map(|_| member(&schema, &mock, 2)).collect();
    for d in &desks {
        d.ok(&["ticket", "list"]);
    }
    for n in 0..9 {
        let id = format!("T-6{n:03}");
        desks[0].write(&format!("tickets/{id}.json"), &ticket_file(&id));
    }
    // The fixture's three open tickets are triaged too: 12 in all, each
    // waiting for its approval on whichever daemon runs it.
    let all_waiting = wait_until(Duration::from_secs(120), || {
        desks
            .iter()
            .all(|d| triage_counts(d)["waitingForApproval"] == 12)
    });
    let boards: Vec<Value> = desks.iter().map(triage_counts).collect();
    assert!(all_waiting, "{boards:#?}");
    assert!(
        boards.iter().all(|b| b == &boards[0]),
        "boards differ: {boards:#?}"
    );
    assert_eq!(boards[0]["running"], 0, "{:#}", boards[0]);
    // Decided through one daemon, every board drains alike.
    let list = desks[1].json(&["approvals", "list"]);
    for a in list.as_array().unwrap() {
        desks[1].ok(&[
            "approvals",
            "approve",
            a["request"]["approvalId"].as_str().unwrap(),
        ]);
    }
    let drained = wait_until(Duration::from_secs(120), || {
        desks.iter().all(|d| triage_counts(d)["done"] == 12)
    });
    let boards: Vec<Value> = desks.iter().map(triage_counts).collect();
    assert!(drained, "{boards:#?}");
    assert!(
        boards.iter().all(|b| b == &boards[0]),
        "boards differ: {boards:#?}"
    );
    assert_eq!(
        (
            boards[0]["running"].as_u64(),
            boards[0]["waitingForApproval"].as_u64()
        ),
        (Some(0), Some(0))
    );
    for d in &desks {
        d.stop();
    }
}

#[test]
fn a_daemon_joining_with_a_copied_workspace_adopts_its_unchanged_files() {
    let schema = Schema::new("join");
    let mock = router(Duration::from_millis(5));
    let first = member(&schema, &mock, 2);
    first.ok(&["ticket", "list"]);
    wait_all_finished(&first, "T-100", 3, Duration::from_secs(60));
    // A second daemon joins with the fixture's files as they were copied:
    // older than the log, never written by its mirror.
    let second = member(&schema, &mock, 2);
    second.ok(&["ticket", "list"]);
    second.mirror_settled();
    let rejected: Vec<String> = std::fs::read_dir(second.workspace().join("tickets"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .filter(|n| n.contains(".rejected"))
        .collect();
    assert!(
        rejected.is_empty(),
        "unchanged files were set aside: {rejected:?}"
    );
    assert!(!second.log().contains("hand edit"), "{}", second.log());
    // Its files follow the log (the first daemon's routing).
    let t = second.ticket_file("T-1001");
    assert_eq!(t["queue"], "物流组", "{t:#}");
    // The shared store's size is measured.
    let status = second.json(&["daemon", "status"]);
    let bytes = status["storeBytes"]
        .as_u64()
        .or_else(|| status["storeBytes"].as_str().and_then(|s| s.parse().ok()))
        .unwrap_or(0);
    assert!(bytes > 0, "{status:#}");
    second.stop();
    first.stop();
}

#[test]
fn a_cancel_sent_through_another_daemon_stops_the_turn_where_it_runs() {
    let schema = Schema::new("cancel");
    // The model never answers: only a cancel ends the turn.
    let mock =
        tinycode_tests::mock_llm::MockLlm::respond(|_| tinycode_tests::mock_llm::Reply::Hang);
    let (a, b) = (on_mock(&schema, &mock), on_mock(&schema, &mock));
    a.ok(&["ticket", "list"]);
    b.ok(&["ticket", "list"]);
    let session = a.new_session(&[]);
    let stream = format!("session-{session}");
    a.ok(&["session", "send", &session, "think forever"]);
    assert!(wait_until(Duration::from_secs(30), || {
        a.events(&["--stream", &stream])
            .iter()
            .any(|e| e.get("turnStarted").is_some())
    }));
    // Asked through B, which does not run it.
    b.ok(&["session", "cancel", &session]);
    let cancelled = wait_until(Duration::from_secs(30), || {
        a.events(&["--stream", &stream])
            .iter()
            .any(|e| e["turnCompleted"]["outcome"] == "TURN_OUTCOME_CANCELLED")
    });
    assert!(cancelled, "{}\n{}", a.log(), b.log());
    let events = a.events(&["--stream", &stream]);
    let asked: Vec<&Value> = events
        .iter()
        .filter_map(|e| e.get("turnCancelRequested"))
        .collect();
    assert_eq!(asked.len(), 1, "{events:#?}");
    assert_eq!(asked[0]["turn"], 1);
    // Nothing runs any more: once B's sessions model has the end, a
    // second cancel finds nothing.
    let idle = wait_until(Duration::from_secs(10), || {
        b.ok(&["session", "cancel", &session])
            .contains("no turn was running")
    });
    assert!(idle, "{}", b.log());
    a.stop();
    b.stop();
}
