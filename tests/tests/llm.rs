//! End-to-end over the real provider path: the daemon talks to a scripted
//! OpenAI-compatible server on 127.0.0.1 (no network), driven through the
//! real CLI. The TinyCode e2e scenarios, and the timing-dependent cases a
//! slow stream makes testable: cancel, attach mid-turn, SIGKILL mid-turn.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use serde_json::json;
use tinycode_tests::mock_llm::{MockLlm, Reply, text, tool};
use tinycode_tests::{Desk, LineReader, kill, wait_until};

const MODEL: &str = "openai/gpt-test";

fn desk_with(mock: &MockLlm) -> Desk {
    Desk::fixture()
        .with_env("OPENAI_BASE_URL", &mock.base_url)
        .with_env("OPENAI_API_KEY", "sk-test")
        .with_env("TINYCODE_MODEL", MODEL)
}

#[test]
fn t1001_with_a_scripted_llm_classifies_edits_the_knowledge_base_and_routes() {
    let mock = MockLlm::start(
        vec![
            tool("list_tickets", json!({})),
            tool("get_ticket", json!({"ticket_id": "T-1001"})),
            tool("search_knowledge", json!({"query": "退款 时效"})),
            tool(
                "classify_ticket",
                json!({"ticket_id": "T-1001", "category": "退款", "priority": "P1", "intent": "未收到货要求退款", "summary": "客户已付款未收到货，要求全额退款"}),
            ),
            tool(
                "propose_knowledge_edit",
                json!({"article_id": "refund-policy", "old_text": "款项在 7 个工作日内退回", "new_text": "款项在 5 个工作日内退回", "rationale": "财务已将退款周期缩短为 5 个工作日"}),
            ),
            tool(
                "route_ticket",
                json!({"ticket_id": "T-1001", "queue": "售后组", "reason": "refund-policy"}),
            ),
            text("T-1001 已分流到售后组。"),
        ],
        Duration::ZERO,
    );
    let desk = desk_with(&mock);
    let untouched = desk.read("tickets/T-1002.json");
    let out = desk.run(&["run", "triage T-1001", "--approve", "auto"]);
    assert_eq!(out.code, 0, "{out:?}");
    let s = &out.stdout;
    assert!(
        s.contains("● search_knowledge 退款 时效 → ✓ refund-policy"),
        "{s}"
    );
    assert!(
        s.contains("● classify_ticket T-1001 → ✓ 退款 · P1 → triaged"),
        "{s}"
    );
    assert!(
        s.contains("● propose_knowledge_edit refund-policy → ✓ +1 −1"),
        "{s}"
    );
    assert!(
        s.contains("● route_ticket T-1001 → ✓ 售后组 → routed"),
        "{s}"
    );
    assert!(
        s.contains("T-1001 已分流到售后组。")
            && s.contains("— turn 1 completed · 7 steps · 6 tool calls"),
        "{s}"
    );
    assert_eq!(desk.ticket_file("T-1001")["queue"], "售后组");
    // As TinyCode's scenario asserts: the classification and the routing
    // each left a note, one citing the policy article.
    let notes = desk.ticket_file("T-1001")["notes"].clone();
    let notes = notes.as_array().unwrap();
    assert_eq!(notes.len(), 2, "{notes:?}");
    assert!(
        notes
            .iter()
            .any(|n| n["text"].as_str().unwrap().contains("refund-policy")),
        "{notes:?}"
    );
    desk.mirror_settled();
    assert!(
        desk.read("knowledge/refund-policy.md")
            .contains("款项在 5 个工作日内退回")
    );
    assert_eq!(desk.read("tickets/T-1002.json"), untouched);
    // The model was given the tools, the system prompt and every result.
    let requests = mock.requests();
    assert_eq!(requests.len(), 7);
    assert!(
        requests[0]["messages"][0]["content"]
            .as_str()
            .unwrap()
            .contains("退款 / 物流 / 账户 / 技术")
    );
    // The ten business tools, load_skill, render_report, the four
    // sub-agent tools and ask_user.
    assert_eq!(requests[0]["tools"].as_array().unwrap().len(), 17);
    let last = requests[6]["messages"].as_array().unwrap();
    let search_result = last
        .iter()
        .find(|m| m["tool_call_id"] == "call_0_search_knowledge")
        .unwrap();
    assert!(
        search_result["content"]
            .as_str()
            .unwrap()
            .starts_with("[{\"id\":\"refund-policy\""),
        "{search_result}"
    );
    // The session replays complete from the log.
    let id = desk.json(&["session", "list"])["sessions"][0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let edit = "● propose_knowledge_edit refund-policy → ✓ +1 −1";
    let shown = desk.ok_when(&["session", "show", &id], &[edit, "turn 1 completed"]);
    assert!(
        shown.contains(edit) && shown.contains("turn 1 completed"),
        "{shown}"
    );
}

#[test]
fn t1003_escalation_asks_and_the_model_gets_the_refusal() {
    let mock = MockLlm::start(
        vec![
            tool(
                "classify_ticket",
                json!({"ticket_id": "T-1003", "category": "账户", "priority": "P0", "intent": "解冻"}),
            ),
            tool(
                "escalate_ticket",
                json!({"ticket_id": "T-1003", "level": 2, "reason": "支付安全，escalation-policy"}),
            ),
            text("需要主管批准升级。"),
        ],
        Duration::ZERO,
    );
    let desk = desk_with(&mock);
    let out = desk.run(&["run", "triage T-1003", "--approve", "deny"]);
    assert_eq!(out.code, 0, "{out:?}");
    assert!(
        out.stdout
            .contains("● escalate_ticket T-1003 → ✗ escalate_ticket was not run: not approved"),
        "{}",
        out.stdout
    );
    let third = &mock.requests()[2];
    let refusal = third["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "tool" && m["content"].as_str().unwrap().contains("not approved"))
        .cloned();
    assert!(
        refusal.is_some(),
        "the reason went back to the model: {third}"
    );
    assert_eq!(desk.ticket_file("T-1003").get("escalateLevel"), None);
}

#[test]
fn a_provider_500_is_retried_transparently() {
    let mock = MockLlm::start(
        vec![Reply::Status(500), text("hello after a retry")],
        Duration::ZERO,
    );
    let desk = desk_with(&mock);
    let out = desk.run(&["run", "hi"]);
    assert_eq!(out.code, 0, "{out:?}");
    assert!(out.stdout.contains("hello after a retry"), "{}", out.stdout);
    assert_eq!(mock.requests().len(), 2);
}

fn long_text() -> Reply {
    text(&"word ".repeat(200))
}

#[test]
fn cancel_during_a_stream_ends_the_turn_as_cancelled() {
    let mock = MockLlm::start(vec![long_text()], Duration::from_millis(30));
    let desk = desk_with(&mock);
    let mut run = {
        let mut cmd = desk.cli();
        cmd.args(["run", "tell me a long story"]);
        LineReader::spawn(cmd)
    };
    assert!(wait_until(Duration::from_secs(20), || desk
        .json(&["session", "list"])["sessions"][0]["running"]
        == true));
    let id = desk.json(&["session", "list"])["sessions"][0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    std::thread::sleep(Duration::from_millis(300));
    assert!(desk.ok(&["session", "cancel", &id]).contains("cancelled"));
    let lines = run.until(Duration::from_secs(20), |l| {
        l.iter().any(|x| x.contains("— turn 1"))
    });
    assert!(
        lines.iter().any(|l| l.contains("— turn 1 cancelled")),
        "{lines:?}"
    );
    let status = run.child.wait().unwrap();
    assert_eq!(status.code(), Some(130));
    // What was said before the cancel is kept in the transcript.
    let shown = desk.ok_when(
        &["session", "show", &id],
        &["word word", "turn 1 cancelled"],
    );
    assert!(
        shown.contains("word word") && shown.contains("turn 1 cancelled"),
        "{shown}"
    );
}

#[test]
fn a_client_attaching_mid_message_gets_the_text_so_far_then_the_rest() {
    let mock = MockLlm::start(vec![long_text()], Duration::from_millis(15));
    let desk = desk_with(&mock);
    let id = desk.ok(&["session", "new"]).trim().to_string();
    desk.ok(&["session", "send", &id, "go"]);
    std::thread::sleep(Duration::from_millis(600));
    let mut late = {
        let mut cmd = desk.cli();
        cmd.args(["--json", "session", "attach", &id]);
        LineReader::spawn(cmd)
    };
    let lines = late
        .until(Duration::from_secs(30), |l| {
            l.iter().any(|x| x.contains("turnCompleted"))
        })
        .to_vec();
    let updates: Vec<serde_json::Value> = lines
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let deltas: Vec<String> = updates
        .iter()
        .filter_map(|u| u["delta"]["text"].as_str().map(String::from))
        .collect();
    assert!(!deltas.is_empty(), "it joined while the model was talking");
    assert!(
        deltas[0].split_whitespace().count() > 1,
        "the first delta is the text so far: {:?}",
        deltas[0]
    );
    let streamed: String = deltas.concat();
    let stored = updates
        .iter()
        .find_map(|u| u["event"]["assistantMessageAdded"]["text"].as_str())
        .unwrap();
    assert_eq!(
        streamed, stored,
        "text so far + later deltas = the message, no gap, no duplicate"
    );
}

#[test]
fn sigkill_mid_turn_leaves_the_session_intact_and_the_turn_marked_interrupted() {
    let mock = MockLlm::start(
        vec![long_text(), text("after the restart")],
        Duration::from_millis(30),
    );
    let desk = desk_with(&mock);
    let id = desk.ok(&["session", "new"]).trim().to_string();
    desk.ok(&["session", "send", &id, "first"]);
    std::thread::sleep(Duration::from_millis(500));
    let pid = desk.daemon_pid().unwrap();
    kill(pid, "KILL");
    assert!(wait_until(Duration::from_secs(10), || {
        !tinycode_tests::alive(pid)
    }));
    desk.ok(&["daemon", "start"]);
    let shown = desk.ok(&["session", "show", &id]);
    assert!(
        shown.starts_with("› first") && shown.contains("— turn 1 interrupted"),
        "{shown}"
    );
    let out = desk.run(&["run", "--session", &id, "second"]);
    assert_eq!(out.code, 0, "{out:?}");
    assert!(
        out.stdout.contains("after the restart") && out.stdout.contains("— turn 2 completed"),
        "{}",
        out.stdout
    );
}

#[test]
fn t1002_takes_the_allow_level_path_with_no_approval_asked() {
    let mock = MockLlm::start(
        vec![
            tool("get_ticket", json!({"ticket_id": "T-1002"})),
            tool("search_knowledge", json!({"query": "物流 停滞"})),
            tool("read_article", json!({"article_id": "logistics-sla"})),
            tool(
                "classify_ticket",
                json!({"ticket_id": "T-1002", "category": "物流", "priority": "P1", "intent": "查询停滞包裹"}),
            ),
            tool(
                "escalate_ticket",
                json!({"ticket_id": "T-1002", "level": 1, "reason": "停滞超过 48 小时，logistics-sla"}),
            ),
            tool(
                "route_ticket",
                json!({"ticket_id": "T-1002", "queue": "物流组", "reason": "logistics-sla"}),
            ),
            text("已分流到物流组。"),
        ],
        Duration::ZERO,
    );
    let desk = desk_with(&mock);
    // --approve deny: anything asking would be refused.
    let out = desk.run(&["run", "triage T-1002", "--approve", "deny"]);
    assert_eq!(out.code, 0, "{out:?}");
    assert!(
        !out.stdout.contains("✗"),
        "nothing was refused: {}",
        out.stdout
    );
    assert!(
        out.stdout
            .contains("● escalate_ticket T-1002 → ✓ L1 → escalated"),
        "{}",
        out.stdout
    );
    let t = desk.ticket_file("T-1002");
    assert_eq!(
        (
            t["category"].as_str(),
            t["queue"].as_str(),
            t["escalateLevel"].as_u64()
        ),
        (Some("物流"), Some("物流组"), Some(1))
    );
}

#[test]
fn a_message_sent_while_a_turn_runs_is_queued_says_so_and_runs_next() {
    // 200 chunks 30 ms apart: the first turn runs for about 6 s.
    let mock = MockLlm::start(
        vec![long_text(), text("second answer")],
        Duration::from_millis(30),
    );
    let desk = desk_with(&mock);
    let id = desk.new_session(&[]);
    assert_eq!(desk.ok(&["session", "send", &id, "first"]).trim(), "turn 1");
    assert!(wait_until(Duration::from_secs(20), || desk
        .json(&["session", "list"])["sessions"][0]["running"]
        == true));
    assert_eq!(
        desk.ok(&["session", "send", &id, "second"]).trim(),
        "turn 2 (queued)"
    );
    let info = desk.json(&["session", "list"])["sessions"][0].clone();
    assert_eq!(info["queued"], 1, "{info}");
    let done = wait_until(Duration::from_secs(30), || {
        desk.ok(&["session", "show", &id])
            .contains("— turn 2 completed")
    });
    assert!(done);
    let shown = desk.ok(&["session", "show", &id]);
    let first = shown.find("— turn 1 completed").unwrap();
    let second = shown.find("second answer").unwrap();
    assert!(first < second, "turns ran in order: {shown}");
}

/// Every file under `dir`, as bytes.
fn files_under(dir: &std::path::Path) -> Vec<(std::path::PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(files_under(&path));
        } else if let Ok(bytes) = std::fs::read(&path) {
            out.push((path, bytes));
        }
    }
    out
}

#[test]
fn a_provider_that_echoes_the_key_never_gets_it_stored_or_printed() {
    let key = "sk-test-SECRET-0123456789abcdef";
    let mock = MockLlm::start(vec![Reply::EchoCredentials], Duration::ZERO);
    let desk = Desk::fixture()
        .with_env("OPENAI_BASE_URL", &mock.base_url)
        .with_env("OPENAI_API_KEY", key)
        .with_env("TINYCODE_MODEL", MODEL);
    let run = desk.run(&["run", "--approve", "deny", "triage T-1001"]);
    assert_eq!(run.code, 2, "{run:?}");
    let said = format!("{}{}", run.stdout, run.stderr);
    assert!(
        said.contains("[redacted]"),
        "the error is shown, without the key: {said}"
    );
    let events = desk.ok(&["--json", "events"]);
    assert!(events.contains("[redacted]"), "the failed turn is recorded");
    desk.stop();
    for (what, text) in [("output", said.as_str()), ("events", events.as_str())] {
        assert!(!text.contains("SECRET"), "the key is in the {what}: {text}");
    }
    let needle = b"SECRET-0123456789";
    for (path, bytes) in files_under(&desk.root) {
        assert!(
            !bytes.windows(needle.len()).any(|w| w == needle),
            "the key is in {}",
            path.display()
        );
    }
}
