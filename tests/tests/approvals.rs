//! Durable approvals end to end: the real daemon, the real CLI in several
//! processes, the offline model and the scripted OpenAI-compatible mock.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use serde_json::json;
use tinycode_tests::mock_llm::{MockLlm, text, tool};
use tinycode_tests::{Desk, LineReader, kill, wait_until};

/// The id of the first pending approval, once there is one.
fn first_pending(desk: &Desk) -> String {
    let mut id = String::new();
    let found = wait_until(Duration::from_secs(20), || {
        let list = desk.json(&["approvals", "list"]);
        match list[0]["request"]["approvalId"].as_str() {
            Some(a) => {
                id = a.to_string();
                true
            }
            None => false,
        }
    });
    assert!(found, "no approval was requested");
    id
}

/// `tinycode run --approve ask TEXT`, followed until it prints how to
/// answer the approval it waits for.
fn run_until_it_asks(desk: &Desk, text: &str) -> LineReader {
    let mut run = LineReader::spawn({
        let mut cmd = desk.cli();
        cmd.args(["run", "--approve", "ask", text]);
        cmd
    });
    run.until(Duration::from_secs(30), |seen| {
        seen.iter().any(|l| l.contains("approvals approve A-"))
    });
    run
}

/// A new session in mode ask that was sent "triage T-1003"; its id.
fn session_triaging_t1003(desk: &Desk) -> String {
    let session = desk.new_session(&["--approve", "ask"]);
    desk.ok(&["session", "send", &session, "triage T-1003"]);
    session
}

#[test]
fn run_shows_the_pending_approval_and_a_second_cli_process_answers_it() {
    let desk = Desk::fixture();
    let mut run = run_until_it_asks(&desk, "triage T-1003");
    let ask = run
        .seen
        .iter()
        .find(|l| l.starts_with("⏸ "))
        .unwrap()
        .clone();
    assert!(
        ask.contains("escalate_ticket T-1003 needs approval"),
        "{ask}"
    );
    let id = first_pending(&desk);
    let mut watch = LineReader::spawn({
        let mut cmd = desk.cli();
        cmd.args(["approvals", "watch", "--from", "1"]);
        cmd
    });
    watch.until(Duration::from_secs(20), |seen| {
        seen.iter()
            .any(|l| l.starts_with(&format!("⏸ {id} escalate_ticket")))
    });
    let shown = desk.ok(&["approvals", "show", &id]);
    assert!(shown.contains("tool     escalate_ticket"), "{shown}");
    assert!(
        shown.contains("\"level\":2") || shown.contains("\"level\": 2"),
        "{shown}"
    );
    let approved = desk.ok(&["approvals", "approve", &id]);
    assert!(
        approved.contains(&format!("✓ {id} allowed by tinycode")),
        "{approved}"
    );
    let lines = run.until(Duration::from_secs(30), |seen| {
        seen.iter().any(|l| l.contains("— turn 1 "))
    });
    assert!(
        lines
            .iter()
            .any(|l| l.contains(&format!("✓ {id} allowed by"))),
        "the attached run saw the decision: {lines:#?}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.contains("● escalate_ticket T-1003 → ✓ L2 → escalated")),
        "{lines:#?}"
    );
    assert!(
        lines.iter().any(|l| l.contains("— turn 1 completed")),
        "{lines:#?}"
    );
    assert!(run.child.wait().unwrap().success());
    watch.until(Duration::from_secs(20), |seen| {
        seen.iter()
            .any(|l| l.starts_with(&format!("✓ {id} allowed by tinycode")))
    });
    let ticket = desk.ticket_file("T-1003");
    assert_eq!(ticket["escalateLevel"], 2);
    // Read and classify never asked: exactly one approval was recorded.
    assert_eq!(
        desk.json(&["approvals", "list", "--all"])
            .as_array()
            .unwrap()
            .len(),
        1
    );
    let late = desk.run(&["approvals", "deny", &id]);
    assert_eq!(late.code, 1);
    assert!(
        late.stderr
            .contains(&format!("approval {id} was already allowed by tinycode")),
        "{}",
        late.stderr
    );
}

#[test]
fn sigkill_while_waiting_then_restart_and_approve_completes_the_turn_once() {
    let desk = Desk::fixture();
    let session = session_triaging_t1003(&desk);
    let id = first_pending(&desk);
    let pid = desk.daemon_pid().unwrap();
    kill(pid, "KILL");
    assert!(wait_until(Duration::from_secs(10), || {
        !tinycode_tests::alive(pid)
    }));

    // Restarted (auto-start): the approval is still pending and listed.
    let list = desk.json(&["approvals", "list"]);
    assert_eq!(list[0]["request"]["approvalId"], id.as_str(), "{list}");
    assert_ne!(desk.daemon_pid(), Some(pid));
    desk.ok(&["approvals", "approve", &id]);
    let done = wait_until(Duration::from_secs(30), || {
        desk.ok(&["session", "show", &session])
            .contains("— turn 1 completed")
    });
    assert!(done, "{}", desk.ok(&["session", "show", &session]));
    let shown = desk.ok(&["session", "show", &session]);
    assert_eq!(
        shown.matches("● escalate_ticket").count(),
        1,
        "the approved call ran once: {shown}"
    );
    assert_eq!(shown.matches("needs approval").count(), 1, "{shown}");
    assert!(!shown.contains("interrupted"), "{shown}");
    let escalations = desk
        .events(&["--stream", "ticket-T-1003"])
        .iter()
        .filter(|e| e["ticketEscalated"].is_object())
        .count();
    assert_eq!(escalations, 1);
    assert_eq!(desk.ticket_file("T-1003")["escalateLevel"], 2);
}

#[test]
fn a_knowledge_edit_approval_carries_the_diff_the_edit_then_applies() {
    let mock = MockLlm::start(
        vec![
            tool(
                "propose_knowledge_edit",
                json!({"article_id": "refund-policy", "old_text": "款项在 7 个工作日内退回", "new_text": "款项在 5 个工作日内退回", "rationale": "财务已将退款周期缩短为 5 个工作日"}),
            ),
            text("已更新退款时效。"),
        ],
        Duration::ZERO,
    );
    let desk = Desk::fixture()
        .with_env("OPENAI_BASE_URL", &mock.base_url)
        .with_env("OPENAI_API_KEY", "sk-test")
        .with_env("TINYCODE_MODEL", "openai/gpt-test");
    let mut run = run_until_it_asks(&desk, "update the refund time");
    let id = first_pending(&desk);
    let info = desk.json(&["approvals", "show", &id]);
    let request = &info["request"];
    assert_eq!(request["articleId"], "refund-policy");
    assert_eq!(request["rationale"], "财务已将退款周期缩短为 5 个工作日");
    assert_eq!(request["beforeText"], "款项在 7 个工作日内退回");
    assert_eq!(request["afterText"], "款项在 5 个工作日内退回");
    assert_eq!(
        (request["added"].as_u64(), request["removed"].as_u64()),
        (Some(1), Some(1))
    );
    let diff = request["diff"].as_str().unwrap().to_string();
    assert!(diff.contains("+") && diff.contains("5 个工作日"), "{diff}");
    // "Always" is never remembered for knowledge edits.
    let decided = desk.json(&["approvals", "approve", &id, "--always"]);
    assert_eq!(
        decided["decision"]["remembered"],
        serde_json::Value::Null,
        "{decided}"
    );
    run.until(Duration::from_secs(30), |seen| {
        seen.iter().any(|l| l.contains("— turn 1 completed"))
    });
    assert!(
        desk.json(&["approvals", "rules"])
            .as_array()
            .unwrap()
            .is_empty()
    );
    let edited = desk
        .events(&["--stream", "kb-refund-policy"])
        .into_iter()
        .find(|e| e["knowledgeEdited"].is_object())
        .unwrap();
    assert_eq!(
        edited["knowledgeEdited"]["diff"].as_str().unwrap(),
        diff,
        "same diff"
    );
    desk.mirror_settled();
    assert!(
        desk.read("knowledge/refund-policy.md")
            .contains("款项在 5 个工作日内退回")
    );
}

#[test]
fn cancel_while_waiting_records_the_approval_as_cancelled() {
    let desk = Desk::fixture();
    let session = session_triaging_t1003(&desk);
    let id = first_pending(&desk);
    desk.ok(&["session", "cancel", &session]);
    let cancelled = wait_until(Duration::from_secs(20), || {
        desk.ok(&["session", "show", &session])
            .contains("— turn 1 cancelled")
    });
    assert!(cancelled);
    let info = desk.json(&["approvals", "show", &id]);
    assert_eq!(info["state"], "APPROVAL_STATE_CANCELLED", "{info}");
    assert!(
        desk.ok(&["session", "show", &session])
            .contains(&format!("– {id} cancelled"))
    );
    let late = desk.run(&["approvals", "approve", &id]);
    assert!(
        late.code != 0 && late.stderr.contains("was cancelled"),
        "{late:?}"
    );
}

#[test]
fn a_denial_from_another_process_reaches_the_model_and_nothing_is_escalated() {
    let desk = Desk::fixture();
    let mut run = run_until_it_asks(&desk, "triage T-1003");
    let id = first_pending(&desk);
    let denied = desk.ok(&[
        "approvals",
        "deny",
        &id,
        "--reason",
        "the supervisor is away; keep it at L1",
    ]);
    assert!(
        denied.contains(&format!("✗ {id} denied by tinycode")),
        "{denied}"
    );
    let lines = run.until(Duration::from_secs(30), |seen| {
        seen.iter().any(|l| l.contains("— turn 1 "))
    });
    let refused = lines
        .iter()
        .find(|l| l.starts_with("● escalate_ticket T-1003 → ✗"))
        .unwrap_or_else(|| panic!("{lines:#?}"));
    assert!(
        refused.contains("not approved") && refused.contains("the supervisor is away"),
        "{refused}"
    );
    assert!(
        lines.iter().any(|l| l.contains("— turn 1 completed")),
        "{lines:#?}"
    );
    let ticket = desk.ticket_file("T-1003");
    assert_eq!(ticket["escalateLevel"].as_u64().unwrap_or(0), 0, "{ticket}");
    let info = desk.json(&["approvals", "show", &id]);
    assert_eq!(info["state"], "APPROVAL_STATE_DENIED", "{info}");
    assert_eq!(
        info["decision"]["reason"],
        "the supervisor is away; keep it at L1"
    );
}

#[test]
fn a_script_follows_the_desks_permission_mode_unless_a_flag_says_otherwise() {
    let desk = Desk::fixture();
    desk.edit_config(|c| c["permissionMode"] = "auto".into());
    // --approve deny overrides the desk's auto, and the denial is in the
    // outcome: never a silent success.
    let out = desk.run(&["run", "triage T-1003", "--approve", "deny"]);
    assert_eq!(out.code, 0, "{out:?}");
    assert!(
        out.stdout.contains("— turn 1 completed, 1 action denied"),
        "{}",
        out.stdout
    );
    assert_eq!(desk.ticket_file("T-1003").get("escalateLevel"), None);
    // Without a flag the desk's auto applies: a script's run escalates.
    let out = desk.run(&["run", "triage T-1003"]);
    assert_eq!(out.code, 0, "{out:?}");
    assert!(
        out.stdout
            .contains("● escalate_ticket T-1003 → ✓ L2 → escalated"),
        "{}",
        out.stdout
    );
}

#[test]
fn a_script_on_a_desk_that_asks_waits_and_prints_how_to_decide() {
    // The desk says ask (the fixture's own): no flag, no terminal — the run
    // waits for a person and says how to decide.
    let desk = Desk::fixture();
    let mut run = LineReader::spawn({
        let mut cmd = desk.cli();
        cmd.args(["run", "triage T-1003"]);
        cmd
    });
    let seen = run.until(Duration::from_secs(30), |seen| {
        seen.iter().any(|l| l.contains("approvals approve A-"))
    });
    let ask = seen.iter().find(|l| l.starts_with("⏸ ")).unwrap().clone();
    assert!(ask.contains("escalate_ticket T-1003"), "{ask}");
    let id = first_pending(&desk);
    desk.ok(&["approvals", "approve", &id]);
    let lines = run.until(Duration::from_secs(30), |seen| {
        seen.iter().any(|l| l.contains("— turn 1 "))
    });
    assert!(
        lines.iter().any(|l| l.contains("— turn 1 completed")),
        "{lines:#?}"
    );
    assert!(run.child.wait().unwrap().success());
}

#[test]
fn sub_agent_tools_ask_unless_the_desk_allows_them() {
    // The fixture's config as shipped names no `permissions.allow`: the
    // L2 path's worker is a tool call a person approves (TinyCode's table).
    let desk = Desk::fixture_as_shipped();
    let mut run = run_until_it_asks(&desk, "triage T-1003");
    let ask = run
        .seen
        .iter()
        .find(|l| l.starts_with("⏸ "))
        .unwrap()
        .clone();
    assert!(ask.contains("spawn_agent needs approval"), "{ask}");
    drop(run.child.kill());
}

/// A desk whose model (the scripted mock) asks a person, then says `done`.
fn desk_asking(mock: &MockLlm) -> Desk {
    Desk::fixture()
        .with_env("OPENAI_BASE_URL", &mock.base_url)
        .with_env("OPENAI_API_KEY", "sk-test")
        .with_env("TINYCODE_MODEL", "openai/gpt-test")
}

fn asks_about_a_refund() -> MockLlm {
    MockLlm::start(
        vec![
            tool(
                "ask_user",
                json!({"question": "Refund 900 € to Ana?", "choices": ["yes", "no"]}),
            ),
            text("done"),
        ],
        Duration::ZERO,
    )
}

#[test]
fn the_agent_asks_a_person_who_answers_after_a_restart() {
    let mock = asks_about_a_refund();
    let desk = desk_asking(&mock);
    let session = desk.new_session(&["--approve", "ask"]);
    desk.ok(&["session", "send", &session, "should we refund Ana?"]);
    let id = first_pending(&desk);
    // The inbox shows the question and how to answer it.
    let listed = desk.ok(&["approvals", "show", &id]);
    assert!(listed.contains("question Refund 900 € to Ana?"), "{listed}");
    assert!(
        listed.contains(&format!("approvals answer {id} 1")),
        "{listed}"
    );
    // The daemon dies while the question waits; it is still there after.
    let pid = desk.daemon_pid().unwrap();
    kill(pid, "KILL");
    assert!(wait_until(Duration::from_secs(10), || {
        !tinycode_tests::alive(pid)
    }));
    // An answer the question does not offer is refused; nothing changes.
    let bad = desk.run(&["approvals", "answer", &id, "maybe"]);
    assert_eq!(bad.code, 1, "{bad:?}");
    assert!(
        bad.stderr.contains("offers these answers: 1. yes · 2. no"),
        "{}",
        bad.stderr
    );
    let answered = desk.ok(&["approvals", "answer", &id, "1"]);
    assert!(
        answered.contains(&format!("✓ {id} answered by")),
        "{answered}"
    );
    assert!(answered.trim_end().ends_with(": yes"), "{answered}");
    let done = wait_until(Duration::from_secs(30), || {
        desk.ok(&["session", "show", &session])
            .contains("— turn 1 completed")
    });
    assert!(done, "{}", desk.ok(&["session", "show", &session]));
    // The model read the answer as the call's result.
    let second = mock.requests().last().cloned().unwrap();
    let result = second["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap_or("").to_string())
        .unwrap_or_default();
    assert!(result.contains("answered: yes"), "{second}");
    // The first answer stands.
    let late = desk.run(&["approvals", "answer", &id, "no"]);
    assert_eq!(late.code, 1, "{late:?}");
}

#[test]
fn a_headless_run_hears_that_no_one_is_available() {
    let mock = asks_about_a_refund();
    let desk = desk_asking(&mock);
    let out = desk.run(&["run", "--approve", "auto", "should we refund Ana?"]);
    assert_eq!(out.code, 0, "{out:?}");
    assert!(
        out.stdout.contains("— turn 1 completed ·"),
        "answered, not denied: {}",
        out.stdout
    );
    let second = mock.requests().last().cloned().unwrap();
    assert!(
        second.to_string().contains("no one is available to answer"),
        "{second}"
    );
    assert_eq!(desk.json(&["approvals", "list", "--all"]), json!([]));
}
