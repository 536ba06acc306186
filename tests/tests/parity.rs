//! End-to-end: TinyCode parity. A desk whose tickets carry any id format
//! is triaged offline the same way as one with `T-` ids: every ticket gets
//! a decision, none is left "completed" with nothing done.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;
use tinycode_tests::{Desk, copy_dir};

/// Id formats a support desk may use (`sanitize_id` accepts them all).
fn mixed_id(n: usize) -> String {
    match n % 6 {
        0 => format!("ZD-{}", 4400 + n),
        1 => format!("{}", 12_000 + n),
        2 => format!("INC00{}", 12_300 + n),
        3 => format!("t-{n}"),
        4 => format!("H-{}", 2000 + n),
        _ => format!("T-{}", 5000 + n),
    }
}

/// The embedded demo desk (32 tickets, English and Chinese) plus 8 copies,
/// with each ticket's id made by `id_of(n)`.
fn demo_desk(id_of: impl Fn(usize) -> String) -> Desk {
    let desk = Desk::new();
    let demo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../client-cli/demo");
    copy_dir(&demo, &desk.workspace());
    let tickets = desk.workspace().join("tickets");
    let mut files: Vec<_> = std::fs::read_dir(&tickets)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    let originals: Vec<Value> = files
        .iter()
        .map(|f| serde_json::from_str(&std::fs::read_to_string(f).unwrap()).unwrap())
        .collect();
    for f in &files {
        std::fs::remove_file(f).unwrap();
    }
    for n in 0..originals.len() + 8 {
        let mut t = originals[n % originals.len()].clone();
        let id = id_of(n);
        t["id"] = Value::String(id.clone());
        std::fs::write(
            tickets.join(format!("{id}.json")),
            serde_json::to_string_pretty(&t).unwrap(),
        )
        .unwrap();
    }
    desk.edit_config(|c| {
        c.as_object_mut().unwrap().remove("autoTriage");
    });
    desk
}

/// (category, priority, queue, escalateLevel, status) per ticket number.
fn decisions(
    desk: &Desk,
    id_of: impl Fn(usize) -> String,
    n: usize,
) -> BTreeMap<usize, Vec<String>> {
    (0..n)
        .map(|i| {
            let t = desk.json(&["ticket", "show", &id_of(i)]);
            let field = |k: &str| match &t[k] {
                Value::String(s) => s.clone(),
                Value::Number(n) => n.to_string(),
                _ => String::new(),
            };
            (
                i,
                ["category", "priority", "queue", "escalateLevel", "status"]
                    .iter()
                    .map(|k| field(k))
                    .collect(),
            )
        })
        .collect()
}

#[test]
fn any_ticket_id_is_triaged_like_a_t_id() {
    let mixed = demo_desk(mixed_id);
    let plain = demo_desk(|n| format!("T-{}", 7000 + n));
    let total = mixed.json(&["ticket", "list"])["total"].as_u64().unwrap() as usize;
    assert_eq!(total, 40);
    for desk in [&mixed, &plain] {
        let out = desk.run(&["triage", "--all", "--approve", "auto"]);
        assert_eq!(out.code, 0, "{out:?}\n{}", desk.log());
    }
    let got = decisions(&mixed, mixed_id, total);
    let want = decisions(&plain, |n| format!("T-{}", 7000 + n), total);
    for (n, d) in &got {
        let (category, queue, level, status) = (&d[0], &d[2], &d[3], &d[4]);
        assert!(
            !category.is_empty() && (!queue.is_empty() || !level.is_empty()),
            "{} was left without a decision: {d:?}",
            mixed_id(*n)
        );
        assert!(
            status == "routed" || status == "escalated",
            "{}: {d:?}",
            mixed_id(*n)
        );
    }
    assert_eq!(
        got, want,
        "the same tickets get the same decisions whatever their ids"
    );
    // One taxonomy: every category is one TINY.md names.
    for d in got.values() {
        assert!(
            ["退款", "物流", "账户", "技术"].contains(&d[0].as_str()),
            "{d:?}"
        );
    }
    mixed.stop();
    plain.stop();
}

#[test]
fn a_turn_timeout_ends_timed_out_distinct_from_a_cancel() {
    use tinycode_tests::mock_llm::{MockLlm, Reply};
    let mock = MockLlm::respond(|_| Reply::Hang);
    let desk = Desk::fixture()
        .with_env("OPENAI_BASE_URL", &mock.base_url)
        .with_env("OPENAI_API_KEY", "sk-test")
        .with_env("TINYCODE_MODEL", "openai/gpt-test");
    // `run --timeout`: the turn ends `timed_out`, exit 124 (as timeout(1)).
    let started = std::time::Instant::now();
    let out = desk.run(&["run", "--timeout", "2s", "--approve", "deny", "hello"]);
    assert_eq!(out.code, 124, "{out:?}");
    assert!(started.elapsed() < std::time::Duration::from_secs(30));
    let sessions = desk.json(&["session", "list"]);
    let id = sessions["sessions"][0]["id"].as_str().unwrap().to_string();
    let outcomes: Vec<String> = desk
        .events(&["--stream", &format!("session-{id}")])
        .iter()
        .filter_map(|e| e["turnCompleted"]["outcome"].as_str().map(String::from))
        .collect();
    assert_eq!(outcomes, ["TURN_OUTCOME_TIMED_OUT"], "{outcomes:?}");
    let bad = desk.run(&["run", "--timeout", "2 days", "hello"]);
    assert_ne!(bad.code, 0);
    assert!(bad.stderr.contains("not a duration"), "{bad:?}");
    desk.stop();

    // A cancel is a cancel, not a timeout: exit 130, outcome cancelled.
    let mut child = desk
        .cli()
        .args(["run", "--timeout", "60", "--approve", "deny", "wait for me"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut running = String::new();
    assert!(tinycode_tests::wait_until(
        std::time::Duration::from_secs(20),
        || {
            let list = desk.json(&["session", "list"]);
            match list["sessions"]
                .as_array()
                .unwrap()
                .iter()
                .find(|s| s["running"] == true)
            {
                Some(s) => {
                    running = s["id"].as_str().unwrap().to_string();
                    true
                }
                None => false,
            }
        }
    ));
    desk.ok(&["session", "cancel", &running]);
    assert_eq!(child.wait().unwrap().code(), Some(130));
    let last = desk
        .events(&["--stream", &format!("session-{running}")])
        .iter()
        .filter_map(|e| e["turnCompleted"]["outcome"].as_str().map(String::from))
        .collect::<Vec<_>>();
    assert_eq!(last, ["TURN_OUTCOME_CANCELLED"]);
    desk.stop();

    // Config `turnTimeoutSeconds` is the default for every turn.
    desk.edit_config(|c| c["turnTimeoutSeconds"] = serde_json::json!(1));
    let out = desk.run(&["run", "--approve", "deny", "hello again"]);
    assert_eq!(out.code, 124, "{out:?}");
    desk.stop();
}

/// T-1001's decision and whether any tool call of the turn failed.
fn triage_t1001(desk: &Desk) -> (Vec<String>, Vec<String>) {
    let out = desk.run(&["run", "--approve", "auto", "triage T-1001"]);
    assert_eq!(out.code, 0, "{out:?}");
    let t = desk.json(&["ticket", "show", "T-1001"]);
    let decision = ["category", "priority", "queue", "status"]
        .iter()
        .map(|k| t[k].as_str().unwrap_or("").to_string())
        .collect();
    let errors = desk
        .events(&["--stream", "session-"])
        .iter()
        .filter(|e| e["toolCallFinished"]["isError"] == true)
        .map(|e| e["toolCallFinished"]["content"].to_string())
        .collect();
    (decision, errors)
}

#[test]
fn the_offline_model_decides_the_same_on_truncated_results_by_the_clock_it_is_given() {
    // Past T-1001's SLA (created 2026-09-18 09:12 +08:00, 240 minutes).
    let late = "2026-09-18T09:00:00Z";
    // Within it.
    let early = "2026-09-18T01:30:00Z";
    let full = Desk::fixture().with_env("TINYCODE_NOW", late);
    let (want, errors) = triage_t1001(&full);
    assert_eq!(want, ["退款", "P1", "售后组", "routed"]);
    assert!(errors.is_empty(), "{errors:?}");
    full.stop();

    let tight = Desk::fixture().with_env("TINYCODE_NOW", late);
    tight.edit_config(|c| c["maxToolResultChars"] = serde_json::json!(200));
    let (got, errors) = triage_t1001(&tight);
    assert_eq!(
        got, want,
        "the same decision on results cut to 200 characters"
    );
    assert!(errors.is_empty(), "no invalid call: {errors:?}");
    tight.stop();

    let in_time = Desk::fixture().with_env("TINYCODE_NOW", early);
    let (got, _) = triage_t1001(&in_time);
    assert_eq!(
        got[1], "P2",
        "within its SLA the ticket is not raised to P1: {got:?}"
    );
    in_time.stop();
}

#[test]
fn a_skill_command_from_the_cli_runs_in_the_daemon() {
    let desk = Desk::fixture();
    let out = desk.run(&["run", "--approve", "auto", "/triage-sop T-1002"]);
    assert_eq!(out.code, 0, "{out:?}");
    let user = desk
        .events(&["--stream", "session-"])
        .into_iter()
        .find(|e| e.get("userMessageAdded").is_some())
        .unwrap();
    assert_eq!(user["userMessageAdded"]["text"], "/triage-sop T-1002");
    assert_eq!(user["userMessageAdded"]["skill"], "triage-sop");
    assert_eq!(desk.json(&["ticket", "show", "T-1002"])["status"], "routed");
    let bad = desk.run(&["run", "/no-such-skill T-1002"]);
    assert_ne!(bad.code, 0);
    assert!(
        bad.stderr.contains("there is no skill /no-such-skill"),
        "{bad:?}"
    );
    desk.stop();
}
