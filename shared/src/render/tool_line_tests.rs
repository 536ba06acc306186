use super::*;
use crate::proto::{ToolCallFinished, ToolCallRef};

fn finished(
    name: &str,
    args: &str,
    details: serde_json::Value,
    is_error: bool,
    content: &str,
) -> ToolCallFinished {
    ToolCallFinished {
        call: Some(ToolCallRef {
            id: "c".into(),
            name: name.into(),
            arguments_json: args.into(),
            ..Default::default()
        }),
        content: content.into(),
        is_error,
        details_json: details.to_string(),
        ..ToolCallFinished::default()
    }
}

#[test]
fn a_start_shows_its_stage_and_a_bar() {
    let p = crate::proto::StartupProgress {
        stage: "importing the workspace files".into(),
        unit: "files".into(),
        done: 25,
        total: 100,
        elapsed_ms: 8_400,
    };
    assert_eq!(
        startup_line(&p),
        "tinycoded is starting: importing the workspace files [#####···············] 25 / 100 files · 8 s"
    );
    let bare = crate::proto::StartupProgress {
        stage: "opening the log".into(),
        ..Default::default()
    };
    assert_eq!(
        startup_line(&bare),
        "tinycoded is starting: opening the log · 0 s"
    );
}

#[test]
fn a_question_reads_as_one_and_says_how_to_answer() {
    use crate::proto::{ApprovalDecided, ApprovalRequested};
    let r = ApprovalRequested {
        approval_id: "A-4".into(),
        session_id: "S-2".into(),
        question: "Refund 900 €?".into(),
        choices: vec!["yes".into(), "no".into()],
        ..ApprovalRequested::default()
    };
    assert_eq!(
        approval_requested_line(&r),
        "? A-4 session S-2 asks: Refund 900 €? (1. yes · 2. no)"
    );
    let how = how_to_answer_request(&r);
    assert!(how.contains("approvals answer A-4 1"), "{how}");
    let d = ApprovalDecided {
        approval_id: "A-4".into(),
        answer: "yes".into(),
        ..ApprovalDecided::default()
    };
    assert_eq!(approval_decided_line(&d), "✓ A-4 answered by someone: yes");
}

#[test]
fn always_on_a_reviewed_tool_says_it_will_ask_again() {
    use crate::proto::{ApprovalDecided, ApprovalDecision};
    let d = |remembered| ApprovalDecided {
        approval_id: "A-1".into(),
        decision: ApprovalDecision::AlwaysAllow as i32,
        remembered,
        ..ApprovalDecided::default()
    };
    let line = approval_decided_line(&d(false));
    assert!(line.contains("will ask again next time"), "{line}");
    let line = approval_decided_line(&d(true));
    assert!(line.contains("always allowed (this session)"), "{line}");
}

#[test]
fn get_ticket_shows_the_subject_not_the_files_first_brace() {
    let t = serde_json::json!({"ticket": {"id": "T-1001", "subject": "退款什么时候到账？"}});
    assert_eq!(
        tool_line(&finished(
            "get_ticket",
            r#"{"ticket_id":"T-1001"}"#,
            t,
            false,
            "{\n  \"id\": \"T-1001\""
        )),
        "● get_ticket T-1001 → ✓ \"退款什么时候到账？\""
    );
}

#[test]
fn tool_lines_read_like_the_design() {
    let t = serde_json::json!({"ticket": {"category": "退款", "priority": "P1", "status": "triaged", "queue": "售后组"}});
    assert_eq!(
        tool_line(&finished(
            "classify_ticket",
            r#"{"ticket_id":"T-1001"}"#,
            t.clone(),
            false,
            ""
        )),
        "● classify_ticket T-1001 → ✓ 退款 · P1 → triaged"
    );
    assert_eq!(
        tool_line(&finished(
            "route_ticket",
            r#"{"ticket_id":"T-1001","queue":"售后组"}"#,
            t,
            false,
            ""
        )),
        "● route_ticket T-1001 → ✓ 售后组 → triaged"
    );
    assert_eq!(
        tool_line(&finished(
            "propose_knowledge_edit",
            r#"{"article_id":"refund-policy"}"#,
            serde_json::json!({"added": 1, "removed": 1}),
            false,
            ""
        )),
        "● propose_knowledge_edit refund-policy → ✓ +1 −1"
    );
    assert_eq!(
        tool_line(&finished(
            "get_ticket",
            r#"{"ticket_id":"T-9"}"#,
            serde_json::Value::Null,
            true,
            "ticket T-9 does not exist\nmore"
        )),
        "● get_ticket T-9 → ✗ ticket T-9 does not exist"
    );
    let agent = |tool: &str, details: serde_json::Value| {
        tool_line(&finished(tool, r#"{"agent_id":"a1"}"#, details, false, "…"))
    };
    assert_eq!(
        agent(
            "spawn_agent",
            serde_json::json!({"agentId": "a1", "task": "check refund-policy wording", "state": "running"})
        ),
        "● spawn_agent → a1 \"check refund-policy wording\""
    );
    assert_eq!(
        agent(
            "wait_agent",
            serde_json::json!({"agentId": "a1", "outcome": "completed", "steps": 3})
        ),
        "● wait_agent a1 → ✓ 3 steps"
    );
    assert_eq!(
        agent(
            "wait_agent",
            serde_json::json!({"agentId": "a1", "outcome": "cancelled", "steps": 2})
        ),
        "● wait_agent a1 → ✗ cancelled after 2 steps"
    );
    assert_eq!(
        agent(
            "wait_agent",
            serde_json::json!({"agentId": "a1", "state": "running"})
        ),
        "● wait_agent a1 → … still running"
    );
}
