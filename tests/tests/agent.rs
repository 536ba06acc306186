//! End-to-end: the agent turn in the real daemon, driven by `tinycode run`
//! and `tinycode session`, with the embedded offline model.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use tinycode_tests::{Desk, LineReader};

#[test]
fn run_triages_t1001_to_refunds_and_the_after_sales_queue() {
    let desk = Desk::fixture();
    let untouched = desk.read("tickets/T-1002.json");
    let out = desk.run(&["run", "triage T-1001"]);
    assert_eq!(out.code, 0, "{out:?}");
    let s = &out.stdout;
    assert!(s.contains("● get_ticket T-1001 → ✓"), "{s}");
    assert!(
        s.contains("● search_knowledge") && s.contains("→ ✓ refund-policy"),
        "{s}"
    );
    assert!(
        s.contains("● classify_ticket T-1001 → ✓ 退款 · P1 → triaged"),
        "{s}"
    );
    assert!(
        s.contains("● route_ticket T-1001 → ✓ 售后组 → routed"),
        "{s}"
    );
    assert!(
        s.contains("[offline model] T-1001: 退款 · P1 → 售后组."),
        "{s}"
    );
    assert!(s.contains("— turn 1 completed"), "{s}");
    let t = desk.ticket_file("T-1001");
    assert_eq!(
        (
            t["category"].as_str(),
            t["queue"].as_str(),
            t["status"].as_str()
        ),
        (Some("退款"), Some("售后组"), Some("routed"))
    );
    assert_eq!(
        desk.read("tickets/T-1002.json"),
        untouched,
        "other tickets untouched"
    );
    // The session replays complete from the log.
    let sessions = desk.json(&["session", "list"]);
    let id = sessions["sessions"][0]["id"].as_str().unwrap().to_string();
    let routed = "● route_ticket T-1001 → ✓ 售后组 → routed";
    let shown = desk.ok_when(&["session", "show", &id], &[routed, "— turn 1 completed"]);
    assert!(shown.starts_with("› triage T-1001"), "{shown}");
    assert!(
        shown.contains(routed) && shown.contains("— turn 1 completed"),
        "{shown}"
    );
}

#[test]
fn t1002_goes_to_logistics_without_any_approval() {
    let desk = Desk::fixture();
    let out = desk.run(&["run", "triage T-1002"]);
    assert_eq!(out.code, 0, "{out:?}");
    assert!(
        !out.stdout.contains("✗"),
        "nothing asked or refused: {}",
        out.stdout
    );
    let t = desk.ticket_file("T-1002");
    assert_eq!(
        (t["category"].as_str(), t["queue"].as_str()),
        (Some("物流"), Some("物流组"))
    );
}

#[test]
fn t1003_reaches_the_ask_path_for_an_l2_escalation() {
    let desk = Desk::fixture();
    let out = desk.run(&["run", "triage T-1003", "--approve", "deny"]);
    assert_eq!(out.code, 0, "{out:?}");
    assert!(
        out.stdout
            .contains("● escalate_ticket T-1003 → ✗ escalate_ticket was not run: not approved"),
        "{}",
        out.stdout
    );
    assert_eq!(
        desk.ticket_file("T-1003").get("escalateLevel"),
        None,
        "not escalated without approval"
    );

    let out = desk.run(&["run", "triage T-1003", "--approve", "auto"]);
    assert_eq!(out.code, 0, "{out:?}");
    assert!(
        out.stdout
            .contains("● escalate_ticket T-1003 → ✓ L2 → escalated"),
        "{}",
        out.stdout
    );
    let t = desk.ticket_file("T-1003");
    assert_eq!(
        (t["escalateLevel"].as_u64(), t["status"].as_str()),
        (Some(2), Some("escalated"))
    );
    // Each decision left a note (classification, escalation, routing), as
    // in TinyCode; the escalation's cites the policy.
    let notes: Vec<&str> = t["notes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["text"].as_str().unwrap())
        .collect();
    assert!(
        notes
            .iter()
            .any(|n| n.starts_with("升级 L2") && n.contains("escalation-policy")),
        "{notes:?}"
    );
}

#[test]
fn two_attached_clients_see_the_same_turn_and_a_leaving_one_changes_nothing() {
    let desk = Desk::fixture();
    let id = desk
        .ok(&["session", "new", "--title", "shared"])
        .trim()
        .to_string();
    let attach = || {
        let mut cmd = desk.cli();
        cmd.args(["--json", "session", "attach", &id]);
        LineReader::spawn(cmd)
    };
    let mut a = attach();
    let mut b = attach();
    let mut c = attach();
    // All three see the stored SessionCreated first.
    for r in [&mut a, &mut b, &mut c] {
        r.until(Duration::from_secs(10), |l| !l.is_empty());
    }
    drop(c); // a client leaves before the turn: it must not matter
    let sent = desk.json(&["session", "send", &id, "triage T-1002"]);
    assert_eq!(sent["turn"], 1);
    let done = |lines: &[String]| lines.iter().any(|l| l.contains("turnCompleted"));
    let a = a.until(Duration::from_secs(30), done).to_vec();
    let b = b.until(Duration::from_secs(30), done).to_vec();
    assert_eq!(a, b, "the same updates, in the same order");
    let kinds: Vec<String> = a
        .iter()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            match (&v["event"], &v["delta"]) {
                (e, _) if e.is_object() => e
                    .as_object()
                    .unwrap()
                    .keys()
                    .find(|k| {
                        !["sequence", "streamId", "streamVersion", "recordedAt"]
                            .contains(&k.as_str())
                    })
                    .cloned()
                    .unwrap_or_default(),
                (_, d) if d.is_object() => "delta".into(),
                _ => "?".into(),
            }
        })
        .collect();
    assert_eq!(kinds[0], "sessionCreated");
    assert_eq!(kinds[1], "userMessageAdded");
    assert_eq!(kinds[2], "turnStarted");
    assert_eq!(
        kinds.iter().filter(|k| *k == "toolCallFinished").count(),
        6,
        "{kinds:?}"
    );
    // A delta comes before the stored message of its step, never after it:
    // the next event after a delta is that message (or the turn's end). A
    // step stored with the write after it takes its deltas with it: the
    // offline model answers at once, so its deltas may all be dropped.
    for (i, kind) in kinds.iter().enumerate() {
        if kind == "delta" {
            let next = kinds[i..].iter().find(|k| *k != "delta");
            assert!(
                matches!(
                    next.map(String::as_str),
                    Some("assistantMessageAdded" | "turnCompleted")
                ),
                "{kinds:?}"
            );
        }
    }
    assert!(
        kinds
            .iter()
            .filter(|k| *k == "assistantMessageAdded")
            .count()
            >= 7,
        "{kinds:?}"
    );
    assert_eq!(desk.ticket_file("T-1002")["queue"], "物流组");
}

#[test]
fn bad_models_and_failing_providers_say_what_is_wrong() {
    let desk = Desk::fixture();
    let out = desk
        .cli()
        .env_remove("OPENAI_API_KEY")
        .args(["run", "hi", "--model", "openai/gpt-4o"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("tinycode auth set openai") && err.contains("OPENAI_API_KEY"),
        "{err}"
    );
    assert_eq!(err.trim().lines().count(), 1, "{err}");

    // A provider that cannot be reached fails the turn (exit 2), clearly.
    let desk = Desk::fixture();
    let out = desk
        .cli()
        .env("OLLAMA_BASE_URL", "http://127.0.0.1:9/v1")
        .args(["run", "hi", "--model", "ollama/llama3"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(2), "{stdout}");
    assert!(
        stdout.contains("— turn 1 failed")
            && stdout.contains("cannot reach ollama at http://127.0.0.1:9/v1"),
        "{stdout}"
    );
}

#[test]
fn sessions_are_renamed_forked_and_deleted_through_the_cli() {
    let desk = Desk::fixture();
    desk.ok(&["run", "triage T-1002"]);
    let id = desk.json(&["session", "list"])["sessions"][0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    // Forked and compacted once the sessions model has the turn's end.
    desk.ok_when(&["session", "show", &id], &["— turn 1 completed"]);
    assert_eq!(
        desk.json(&["session", "rename", &id, "logistics"])["title"],
        "logistics"
    );
    let fork = desk.json(&["session", "fork", &id, "--title", "copy"]);
    let fork_id = fork["id"].as_str().unwrap().to_string();
    assert_eq!(fork["turns"], 1);
    assert!(
        desk.ok(&["session", "show", &fork_id])
            .contains("● route_ticket T-1002 → ✓ 物流组 → routed")
    );
    // One turn: the recent messages are all kept, nothing to summarise.
    assert!(
        desk.ok(&["session", "compact", &id])
            .contains("nothing to compact")
    );
    desk.ok(&["run", "--session", &id, "what is the refund policy?"]);
    desk.ok(&["run", "--session", &id, "how long do refunds take?"]);
    desk.ok_when(&["session", "show", &id], &["— turn 3 completed"]);
    // Two short turns hold the 8 recent messages kept by default.
    let compacted = desk.json(&["session", "compact", &id]);
    assert_eq!(compacted["compacted"], true, "{compacted}");
    assert_eq!(compacted["firstKeptTurn"], 2);
    let shown = desk.ok(&["session", "show", &id]);
    assert!(shown.contains("earlier messages summarised"), "{shown}");
    assert_eq!(
        desk.json(&["session", "delete", &id])["deleted"],
        id.as_str()
    );
    let listed = desk.json(&["session", "list"]);
    let ids: Vec<&str> = listed["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| s["id"].as_str())
        .collect();
    assert_eq!(ids, [fork_id.as_str()]);
    let out = desk.run(&["session", "show", &id]);
    assert!(
        out.code == 1 && out.stderr.contains(&format!("session {id} was deleted")),
        "{out:?}"
    );
    assert!(
        desk.events(&["--stream", &format!("session-{id}")]).len() > 3,
        "its events stay in the log"
    );
}
