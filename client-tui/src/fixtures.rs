//! Events and daemon answers for the tests and the bench, built the way
//! the daemon builds them.

use tinycode_shared::proto::event::Payload;
use tinycode_shared::proto::session_update::Update;
use tinycode_shared::proto::{
    ApprovalDecided, ApprovalDecision, ApprovalRequested, AssistantMessageAdded, ClientRef,
    DaemonStatus, Delta, Event, ModelUsage, SessionInfo, SessionUpdate, SkillSummary,
    ToolCallFinished, ToolCallRef, TurnCompleted, TurnOutcome, TurnStarted, UserMessageAdded,
};

use crate::app::{App, Start};
use crate::rpc::NetEvent;

pub const SESSION: &str = "s42";

pub fn event(sequence: u64, stream: &str, payload: Payload) -> Event {
    Event {
        sequence,
        stream_id: stream.into(),
        payload: Some(payload),
        ..Event::default()
    }
}

pub fn session_event(sequence: u64, payload: Payload) -> NetEvent {
    NetEvent::Update {
        session_id: SESSION.into(),
        update: Box::new(SessionUpdate {
            update: Some(Update::Event(event(
                sequence,
                &format!("session-{SESSION}"),
                payload,
            ))),
        }),
    }
}

pub fn delta(turn: u64, text: &str) -> NetEvent {
    NetEvent::Update {
        session_id: SESSION.into(),
        update: Box::new(SessionUpdate {
            update: Some(Update::Delta(Delta {
                turn,
                kind: "text".into(),
                text: text.into(),
            })),
        }),
    }
}

pub fn user(text: &str, turn: u64) -> Payload {
    Payload::UserMessageAdded(UserMessageAdded {
        text: text.into(),
        from: Some(tui_client()),
        turn,
        ..Default::default()
    })
}

pub fn tui_client() -> ClientRef {
    ClientRef {
        name: "tinycode-tui/0.1.0".into(),
        uid: 1000,
        pid: 4242,
    }
}

pub fn started(turn: u64) -> Payload {
    Payload::TurnStarted(TurnStarted {
        turn,
        ..TurnStarted::default()
    })
}

pub fn said(text: &str, turn: u64) -> Payload {
    Payload::AssistantMessageAdded(AssistantMessageAdded {
        text: text.into(),
        turn,
        ..AssistantMessageAdded::default()
    })
}

pub fn tool(name: &str, args: serde_json::Value, details: serde_json::Value) -> Payload {
    Payload::ToolCallFinished(ToolCallFinished {
        call: Some(ToolCallRef {
            id: format!("call-{name}"),
            name: name.into(),
            arguments_json: args.to_string(),
            ..Default::default()
        }),
        content: "ok".into(),
        details_json: details.to_string(),
        turn: 1,
        ..ToolCallFinished::default()
    })
}

pub fn completed(turn: u64, outcome: TurnOutcome) -> Payload {
    Payload::TurnCompleted(TurnCompleted {
        turn,
        outcome: outcome as i32,
        steps: 7,
        tool_calls: 6,
        usage: Some(ModelUsage {
            input_tokens: 5420,
            output_tokens: 208,
            ..ModelUsage::default()
        }),
        error: String::new(),
        denied: 0,
    })
}

pub const DIFF: &str = "@@ -3,3 +3,3 @@\n 退款申请需在签收后 7 天内提交。\n-未收到货的订单，退款在 3 个工作日内原路退回。\n+未收到货的订单，退款在 1 个工作日内原路退回。\n 其他情况请联系售后组。";

pub fn knowledge_edit_request(id: &str) -> Payload {
    Payload::ApprovalRequested(ApprovalRequested {
        approval_id: id.into(),
        session_id: SESSION.into(),
        turn: 1,
        call: Some(ToolCallRef {
            id: "call-edit".into(),
            name: "propose_knowledge_edit".into(),
            arguments_json: serde_json::json!({"article_id": "refund-policy"}).to_string(),
            ..Default::default()
        }),
        reason: "editing the knowledge base needs a human's approval".into(),
        article_id: "refund-policy".into(),
        rationale: "工单 T-1001 显示退款时效已改为 1 个工作日".into(),
        diff: DIFF.into(),
        added: 1,
        removed: 1,
        review_required: true,
        ..ApprovalRequested::default()
    })
}

pub fn escalation_request(id: &str, session: &str) -> Payload {
    Payload::ApprovalRequested(ApprovalRequested {
        approval_id: id.into(),
        session_id: session.into(),
        turn: 2,
        call: Some(ToolCallRef {
            id: "call-esc".into(),
            name: "escalate_ticket".into(),
            arguments_json: serde_json::json!({"ticket_id": "T-1003", "level": 2}).to_string(),
            ..Default::default()
        }),
        reason: "escalating to a supervisor (level 2) needs a human's confirmation".into(),
        ..ApprovalRequested::default()
    })
}

/// The agent asks a person (`ask_user`) with two choices.
pub fn question_request(id: &str, session: &str) -> Payload {
    Payload::ApprovalRequested(ApprovalRequested {
        approval_id: id.into(),
        session_id: session.into(),
        turn: 2,
        call: Some(ToolCallRef {
            id: "call-ask".into(),
            name: "ask_user".into(),
            arguments_json:
                serde_json::json!({"question": "Refund 900 € to Ana?", "choices": ["yes", "no"]})
                    .to_string(),
            ..Default::default()
        }),
        reason: "the agent asks a person; whoever answers first answers it".into(),
        question: "Refund 900 € to Ana?".into(),
        choices: vec!["yes".into(), "no".into()],
        review_required: true,
        ..ApprovalRequested::default()
    })
}

pub fn decided(id: &str, decision: ApprovalDecision, by: ClientRef) -> Payload {
    Payload::ApprovalDecided(ApprovalDecided {
        approval_id: id.into(),
        session_id: SESSION.into(),
        decision: decision as i32,
        by: Some(by),
        ..ApprovalDecided::default()
    })
}

pub fn daemon_status() -> DaemonStatus {
    DaemonStatus {
        version: "0.1.0".into(),
        pid: 777,
        workspace: "/desks/support-desk".into(),
        default_model: "offline".into(),
        skills: vec![SkillSummary {
            name: "triage-sop".into(),
            description: "how to triage a ticket".into(),
        }],
        ..DaemonStatus::default()
    }
}

pub fn session_info() -> SessionInfo {
    SessionInfo {
        id: SESSION.into(),
        title: "refunds".into(),
        model: "offline".into(),
        context_tokens: 12_345,
        attached_clients: 2,
        ..SessionInfo::default()
    }
}

/// An app attached to [`SESSION`], connected, with nothing shown yet.
pub fn attached_app() -> App {
    let mut app = App::new(Start {
        session: Some(SESSION.into()),
        ..Start::default()
    });
    app.take_rpcs();
    app.on_net(NetEvent::Connected(Box::new(daemon_status())));
    app.on_net(NetEvent::Info(Box::new(session_info())));
    app
}

/// The T-1001 turn as the daemon streams it, up to a step in progress.
pub fn triage_turn(app: &mut App) {
    let ticket = serde_json::json!({"ticket": {"category": "退款", "priority": "P1", "status": "triaged", "queue": "售后组"}});
    let events = [
        user("triage T-1001", 1),
        started(1),
        tool(
            "get_ticket",
            serde_json::json!({"ticket_id": "T-1001"}),
            serde_json::json!({}),
        ),
        tool(
            "search_knowledge",
            serde_json::json!({"query": "退款 未收到货"}),
            serde_json::json!({"hits": ["refund-policy", "logistics-sla"]}),
        ),
        tool(
            "classify_ticket",
            serde_json::json!({"ticket_id": "T-1001"}),
            ticket.clone(),
        ),
        tool(
            "propose_knowledge_edit",
            serde_json::json!({"article_id": "refund-policy"}),
            serde_json::json!({"added": 1, "removed": 1, "diff": DIFF}),
        ),
    ];
    for (i, e) in events.into_iter().enumerate() {
        app.on_net(session_event(10 + i as u64, e));
    }
    app.on_net(delta(1, "T-1001 是退款类工单，"));
    app.on_net(delta(1, "已路由到售后组。"));
}
