//! Keys and daemon events → the requests the app sends.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use tinycode_shared::proto::{
    ApprovalDecision, CancelTurnRequest, CompactSessionRequest, CreateSessionRequest,
    DecideApprovalRequest, GetTicketRequest, ListSessionsRequest, SendMessageRequest, SessionInfo,
    SetSessionModelRequest, Ticket, TurnOutcome,
};

use crate::app::{App, Start};
use crate::fixtures::*;
use crate::rpc::{NetEvent, Rpc};
use crate::transcript::Kind;
use crate::views::View;

fn press(app: &mut App, code: KeyCode) {
    app.on_key(KeyEvent::new(code, KeyModifiers::NONE));
}

fn ctrl_c(app: &mut App) {
    app.on_key(KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL));
}

fn type_line(app: &mut App, text: &str) {
    for c in text.chars() {
        press(app, KeyCode::Char(c));
    }
    press(app, KeyCode::Enter);
}

fn flash(app: &App) -> String {
    app.flash.clone().map(|(_, t)| t).unwrap_or_default()
}

#[test]
fn how_the_app_starts_decides_what_it_attaches() {
    let mut new = App::new(Start {
        model: "openai/gpt-4o".into(),
        ..Start::default()
    });
    assert_eq!(
        new.take_rpcs(),
        [Rpc::Create(CreateSessionRequest {
            model: "openai/gpt-4o".into(),
            ..CreateSessionRequest::default()
        })]
    );
    // The created session is then attached from its first event.
    let mut info = session_info();
    info.id = "s9".into();
    new.on_net(NetEvent::Opened(Box::new(info)));
    assert_eq!(
        new.take_rpcs(),
        [Rpc::Attach {
            session_id: "s9".into(),
            from_sequence: 1
        }]
    );
    let mut latest = App::new(Start {
        continue_latest: true,
        ..Start::default()
    });
    assert_eq!(latest.take_rpcs(), [Rpc::AttachLatest]);
}

#[test]
fn enter_sends_the_message_to_the_attached_session() {
    let mut app = attached_app();
    type_line(&mut app, "triage T-1001");
    assert_eq!(
        app.take_rpcs(),
        [Rpc::Send(SendMessageRequest {
            session_id: SESSION.into(),
            text: "triage T-1001".into(),
            ..Default::default()
        })]
    );
    // Nothing is shown until the daemon stores it.
    assert!(app.transcript.entries().is_empty());
    app.on_net(session_event(3, user("triage T-1001", 1)));
    assert_eq!(app.transcript.entries()[0].text, "› triage T-1001");
}

#[test]
fn ctrl_c_asks_before_cancelling_and_twice_detaches_without_cancelling() {
    let mut app = attached_app();
    app.on_net(session_event(3, started(1)));
    app.take_rpcs();
    ctrl_c(&mut app);
    assert!(flash(&app).starts_with("Cancel the running turn?"));
    assert!(app.take_rpcs().is_empty());
    press(&mut app, KeyCode::Char('y'));
    assert_eq!(
        app.take_rpcs(),
        [Rpc::Cancel(CancelTurnRequest {
            session_id: SESSION.into()
        })]
    );
    assert!(!app.quit);

    ctrl_c(&mut app);
    ctrl_c(&mut app);
    assert!(app.quit);
    assert!(app.take_rpcs().is_empty(), "detaching never cancels");
}

#[test]
fn any_other_key_after_ctrl_c_carries_on() {
    let mut app = attached_app();
    app.on_net(session_event(3, started(1)));
    ctrl_c(&mut app);
    press(&mut app, KeyCode::Char('n'));
    assert!(!app.confirming && !app.quit);
    assert!(app.take_rpcs().iter().all(|r| !matches!(r, Rpc::Cancel(_))));
}

#[test]
fn the_dialog_answers_allow_always_and_deny_with_a_reason() {
    let mut app = attached_app();
    app.on_net(NetEvent::Approval(Box::new(event(
        30,
        "approval-A-1",
        knowledge_edit_request("A-1"),
    ))));
    assert_eq!(app.dialog_request().unwrap().approval_id, "A-1");
    // Typing goes to the dialog, not the editor.
    press(&mut app, KeyCode::Char('n'));
    for c in "wrong sla".chars() {
        press(&mut app, KeyCode::Char(c));
    }
    press(&mut app, KeyCode::Enter);
    assert_eq!(
        app.take_rpcs(),
        [Rpc::Decide(DecideApprovalRequest {
            approval_id: "A-1".into(),
            decision: ApprovalDecision::Deny as i32,
            reason: "wrong sla".into(),
            workspace_wide: false,
            answer: String::new(),
        })]
    );
    assert_eq!(app.editor.text(), "");
    // A knowledge edit is reviewed every time: no "always".
    press(&mut app, KeyCode::Char('w'));
    press(&mut app, KeyCode::Char('a'));
    assert_eq!(app.take_rpcs(), []);
    press(&mut app, KeyCode::Char('y'));
    assert_eq!(
        app.take_rpcs(),
        [Rpc::Decide(DecideApprovalRequest {
            approval_id: "A-1".into(),
            decision: ApprovalDecision::AllowOnce as i32,
            ..DecideApprovalRequest::default()
        })]
    );
    // An escalation may be always allowed, here or everywhere.
    app.on_net(NetEvent::Approval(Box::new(event(
        31,
        "approval-A-2",
        escalation_request("A-2", SESSION),
    ))));
    app.dialog.closed();
    let shown = app.dialog_request().unwrap().approval_id.clone();
    assert_eq!(shown, "A-1", "the oldest first");
    app.dialog.focus("A-2");
    press(&mut app, KeyCode::Char('w'));
    assert_eq!(
        app.take_rpcs(),
        [Rpc::Decide(DecideApprovalRequest {
            approval_id: "A-2".into(),
            decision: ApprovalDecision::AlwaysAllow as i32,
            reason: String::new(),
            workspace_wide: true,
            answer: String::new(),
        })]
    );
    press(&mut app, KeyCode::Char('a'));
    assert_eq!(
        app.take_rpcs(),
        [Rpc::Decide(DecideApprovalRequest {
            approval_id: "A-2".into(),
            decision: ApprovalDecision::AlwaysAllow as i32,
            reason: String::new(),
            workspace_wide: false,
            answer: String::new(),
        })]
    );
}

#[test]
fn enter_and_keys_typed_as_the_dialog_opens_never_approve() {
    let mut app = attached_app();
    app.on_net(NetEvent::Approval(Box::new(event(
        30,
        "approval-A-4",
        escalation_request("A-4", SESSION),
    ))));
    // Enter alone decides nothing; the foot then names the keys.
    press(&mut app, KeyCode::Enter);
    assert_eq!(app.take_rpcs(), []);
    assert!(app.dialog.hinted);
    // The dialog is drawn: keys typed in the next moment (meant for the
    // editor) are ignored, then a deliberate `y` decides.
    let backend = ratatui::backend::TestBackend::new(100, 30);
    let mut terminal = ratatui::Terminal::new(backend).unwrap();
    app.dialog.closed();
    app.dialog.focus("A-4");
    terminal.draw(|f| crate::ui::draw(f, &mut app)).unwrap();
    for c in "yay".chars() {
        press(&mut app, KeyCode::Char(c));
    }
    assert_eq!(app.take_rpcs(), [], "keys typed as it opened approved it");
    std::thread::sleep(crate::dialog::ARMED_AFTER + std::time::Duration::from_millis(50));
    press(&mut app, KeyCode::Char('y'));
    assert_eq!(
        app.take_rpcs(),
        [Rpc::Decide(DecideApprovalRequest {
            approval_id: "A-4".into(),
            decision: ApprovalDecision::AllowOnce as i32,
            ..DecideApprovalRequest::default()
        })]
    );
}

#[test]
fn a_decision_by_another_client_closes_the_dialog_and_says_who() {
    let mut app = attached_app();
    app.on_net(NetEvent::Approval(Box::new(event(
        30,
        "approval-A-1",
        knowledge_edit_request("A-1"),
    ))));
    let cli = tinycode_shared::proto::ClientRef {
        name: "tinycode-cli/0.1.0".into(),
        uid: 1000,
        pid: 99,
    };
    app.on_net(NetEvent::Approval(Box::new(event(
        31,
        "approval-A-1",
        decided("A-1", ApprovalDecision::Deny, cli),
    ))));
    assert!(app.dialog_request().is_none());
    assert_eq!(
        app.flash,
        Some((
            Kind::Denied,
            "✗ A-1 denied by tinycode-cli/0.1.0 (uid 1000, pid 99)".into()
        ))
    );
    // Keys reach the editor again.
    press(&mut app, KeyCode::Char('a'));
    assert_eq!(app.editor.text(), "a");
}

#[test]
fn other_sessions_approvals_wait_in_the_inbox_unless_in_inbox_mode() {
    let mut app = attached_app();
    app.on_net(NetEvent::Approval(Box::new(event(
        30,
        "approval-A-2",
        escalation_request("A-2", "s7"),
    ))));
    assert!(app.dialog_request().is_none());
    type_line(&mut app, "/approvals");
    assert!(matches!(app.view, View::Inbox { .. }));
    press(&mut app, KeyCode::Enter);
    assert_eq!(app.dialog_request().unwrap().approval_id, "A-2");

    let mut inbox = App::new(Start {
        inbox: true,
        ..Start::default()
    });
    inbox.on_net(NetEvent::Approval(Box::new(event(
        30,
        "approval-A-2",
        escalation_request("A-2", "s7"),
    ))));
    assert_eq!(inbox.dialog_request().unwrap().approval_id, "A-2");
}

#[test]
fn slash_commands_send_their_requests() {
    let mut app = attached_app();
    type_line(&mut app, "/compact");
    assert_eq!(
        app.take_rpcs(),
        [Rpc::Compact(CompactSessionRequest {
            session_id: SESSION.into()
        })]
    );
    type_line(&mut app, "/model anthropic/claude-sonnet-4");
    assert!(flash(&app).contains("this session's next turns use anthropic/claude-sonnet-4"));
    assert_eq!(
        app.take_rpcs(),
        [Rpc::SetModel(SetSessionModelRequest {
            session_id: SESSION.into(),
            model: "anthropic/claude-sonnet-4".into(),
        })]
    );
    type_line(&mut app, "/new");
    assert_eq!(
        app.take_rpcs(),
        [Rpc::Create(CreateSessionRequest {
            model: "anthropic/claude-sonnet-4".into(),
            ..CreateSessionRequest::default()
        })]
    );
    type_line(&mut app, "/resume s7");
    assert_eq!(
        app.take_rpcs(),
        [Rpc::Attach {
            session_id: "s7".into(),
            from_sequence: 1
        }]
    );
    type_line(&mut app, "/triage-sop T-1002");
    assert_eq!(
        app.take_rpcs(),
        [Rpc::Send(SendMessageRequest {
            session_id: "s7".into(),
            text: "/triage-sop T-1002".into(),
            ..Default::default()
        })]
    );
    type_line(&mut app, "/mcp");
    assert!(
        app.transcript
            .entries()
            .iter()
            .any(|e| e.text.starts_with("not connected") || e.text.starts_with("no MCP servers")),
        "/mcp says what it knows"
    );
    assert_eq!(
        app.take_rpcs(),
        [Rpc::Status],
        "and asks for a fresh status"
    );
    // Between /new and the daemon's answer no session is attached.
    type_line(&mut app, "/agents");
    assert!(
        flash(&app).contains("attach a session first"),
        "{}",
        flash(&app)
    );
    assert!(app.take_rpcs().is_empty());
    type_line(&mut app, "/bogus");
    assert!(flash(&app).starts_with("unknown command /bogus"));
    assert!(app.take_rpcs().is_empty());
    type_line(&mut app, "/help");
    assert!(
        app.transcript
            .entries()
            .iter()
            .any(|e| e.text.starts_with("/approvals"))
    );
    type_line(&mut app, "/exit");
    assert!(app.quit);
}

#[test]
fn tab_completes_commands_and_skills() {
    let mut app = attached_app();
    press(&mut app, KeyCode::Char('/'));
    press(&mut app, KeyCode::Char('c'));
    press(&mut app, KeyCode::Char('o'));
    press(&mut app, KeyCode::Tab);
    assert_eq!(app.editor.text(), "/compact ");
    app.editor.clear();
    press(&mut app, KeyCode::Char('/'));
    press(&mut app, KeyCode::Char('t'));
    press(&mut app, KeyCode::Tab);
    assert_eq!(flash(&app), "/tickets  /triage-sop");
}

#[test]
fn the_pickers_attach_a_session_and_open_a_ticket() {
    let mut app = attached_app();
    type_line(&mut app, "/sessions");
    assert_eq!(
        app.take_rpcs(),
        [Rpc::ListSessions(ListSessionsRequest {
            limit: 50,
            ..Default::default()
        })]
    );
    let other = |id: &str| SessionInfo {
        id: id.into(),
        ..SessionInfo::default()
    };
    app.on_net(NetEvent::Sessions(vec![other("s42"), other("s7")]));
    press(&mut app, KeyCode::Down);
    press(&mut app, KeyCode::Enter);
    assert_eq!(
        app.take_rpcs(),
        [Rpc::Attach {
            session_id: "s7".into(),
            from_sequence: 1
        }]
    );
    assert!(matches!(app.view, View::Chat));

    type_line(&mut app, "/tickets");
    assert!(matches!(app.take_rpcs().as_slice(), [Rpc::ListTickets(_)]));
    app.on_net(NetEvent::Tickets(vec![Ticket {
        id: "T-1002".into(),
        ..Ticket::default()
    }]));
    press(&mut app, KeyCode::Enter);
    assert_eq!(
        app.take_rpcs(),
        [Rpc::GetTicket(GetTicketRequest {
            id: "T-1002".into(),
            ..Default::default()
        })]
    );
    press(&mut app, KeyCode::Esc);
    press(&mut app, KeyCode::Esc);
    assert!(matches!(app.view, View::Chat));
}

#[test]
fn a_reconnect_replays_without_duplicates_and_restarts_the_streamed_text() {
    let mut app = attached_app();
    app.on_net(session_event(3, user("hello", 1)));
    app.on_net(session_event(4, started(1)));
    app.on_net(delta(1, "Hel"));
    app.on_net(NetEvent::Disconnected("gone".into()));
    // After the reconnect the daemon resends the text so far, and the
    // attach resumes after sequence 4 (a replayed 4 is ignored).
    app.on_net(NetEvent::Connected(Box::new(daemon_status())));
    app.on_net(session_event(4, started(1)));
    app.on_net(delta(1, "Hello"));
    app.on_net(session_event(5, said("Hello", 1)));
    app.on_net(session_event(6, completed(1, TurnOutcome::Completed)));
    let texts: Vec<&str> = app
        .transcript
        .entries()
        .iter()
        .map(|e| e.text.as_str())
        .collect();
    assert_eq!(texts[..2], ["› hello", "Hello"]);
    assert_eq!(texts.len(), 3);
    assert!(!app.turn_running());
}

#[test]
fn updates_of_a_session_left_behind_are_ignored() {
    let mut app = attached_app();
    type_line(&mut app, "/resume s7");
    app.on_net(session_event(3, user("from s42", 1)));
    assert!(app.transcript.entries().is_empty());
}

#[test]
fn mcp_lists_the_daemons_servers() {
    let mut app = App::new(Start {
        session: None,
        continue_latest: false,
        inbox: false,
        model: String::new(),
    });
    app.daemon = Some(tinycode_shared::proto::DaemonStatus {
        mcp_servers: vec![
            tinycode_shared::proto::McpServerStatus {
                name: "everything".into(),
                state: "ready".into(),
                tools: 13,
                ..Default::default()
            },
            tinycode_shared::proto::McpServerStatus {
                name: "broken".into(),
                state: "failed".into(),
                error: "cannot start `x`".into(),
                ..Default::default()
            },
        ],
        ..Default::default()
    });
    let text = app.mcp_text();
    assert!(
        text.contains("everything") && text.contains("13 tools"),
        "{text}"
    );
    assert!(
        text.contains("failed") && text.contains("cannot start `x`"),
        "{text}"
    );
}

#[test]
fn agents_lists_the_sessions_workers_attaches_one_and_goes_back() {
    let mut app = attached_app();
    type_line(&mut app, "/agents");
    assert_eq!(
        app.take_rpcs(),
        [Rpc::ListSessions(ListSessionsRequest {
            limit: 50,
            parent_id: SESSION.into(),
            ..Default::default()
        })]
    );
    let worker = SessionInfo {
        id: "s9a1".into(),
        agent_id: "a1".into(),
        parent_session_id: SESSION.into(),
        ..SessionInfo::default()
    };
    app.on_net(NetEvent::Sessions(vec![worker.clone()]));
    press(&mut app, KeyCode::Enter);
    assert_eq!(
        app.take_rpcs(),
        [Rpc::Attach {
            session_id: "s9a1".into(),
            from_sequence: 1
        }]
    );
    // In the worker, /agents lists its siblings under a way back.
    app.on_net(NetEvent::Info(Box::new(worker.clone())));
    type_line(&mut app, "/agents");
    assert_eq!(
        app.take_rpcs(),
        [Rpc::ListSessions(ListSessionsRequest {
            limit: 50,
            parent_id: SESSION.into(),
            ..Default::default()
        })]
    );
    app.on_net(NetEvent::Sessions(vec![worker]));
    press(&mut app, KeyCode::Enter);
    assert_eq!(
        app.take_rpcs(),
        [Rpc::Attach {
            session_id: SESSION.into(),
            from_sequence: 1
        }]
    );
}

#[test]
fn a_question_is_answered_by_a_choice_or_typed_text_never_by_enter() {
    let mut app = attached_app();
    app.on_net(NetEvent::Approval(Box::new(event(
        40,
        "approval-A-7",
        question_request("A-7", SESSION),
    ))));
    assert_eq!(app.dialog_request().unwrap().approval_id, "A-7");
    // Enter and the approval keys decide nothing for a question.
    for code in [
        KeyCode::Enter,
        KeyCode::Char('a'),
        KeyCode::Char('w'),
        KeyCode::Char('3'),
    ] {
        press(&mut app, code);
    }
    assert_eq!(app.take_rpcs(), []);
    // A choice's number answers with the choice.
    press(&mut app, KeyCode::Char('2'));
    assert_eq!(
        app.take_rpcs(),
        [Rpc::Decide(DecideApprovalRequest {
            approval_id: "A-7".into(),
            decision: ApprovalDecision::AllowOnce as i32,
            answer: "no".into(),
            ..DecideApprovalRequest::default()
        })]
    );
    // `y` types an answer; Enter sends it.
    app.dialog.closed();
    app.dialog.focus("A-7");
    press(&mut app, KeyCode::Char('y'));
    for c in "only 450".chars() {
        press(&mut app, KeyCode::Char(c));
    }
    press(&mut app, KeyCode::Enter);
    assert_eq!(
        app.take_rpcs(),
        [Rpc::Decide(DecideApprovalRequest {
            approval_id: "A-7".into(),
            decision: ApprovalDecision::AllowOnce as i32,
            answer: "only 450".into(),
            ..DecideApprovalRequest::default()
        })]
    );
}

#[test]
fn report_makes_a_report_and_shows_its_summary_and_files() {
    use tinycode_shared::proto::{GenerateReportRequest, ReportContent, ReportInfo};
    let mut app = attached_app();
    type_line(&mut app, "/report 2026-09-18");
    assert_eq!(
        app.take_rpcs(),
        [Rpc::Report(GenerateReportRequest {
            day: "2026-09-18".into(),
            ..GenerateReportRequest::default()
        })]
    );
    let before = app.transcript.entries().len();
    app.on_net(NetEvent::Report(Box::new(ReportContent {
        info: Some(ReportInfo {
            report_id: "R-20260918-1".into(),
            day: "2026-09-18".into(),
            directory: "reports/R-20260918-1".into(),
            summary: "3 new, 0 reopened; 3 open at the end; SLA 0 met, 3 breached".into(),
            ..ReportInfo::default()
        }),
        figures_json: r#"{"volume":{"byCategory":[{"name":"退款","new":2,"previousNew":1}]},"backlog":{"open":3,"under24h":3}}"#.into(),
        ..ReportContent::default()
    })));
    let shown = app.transcript.entries()[before..]
        .iter()
        .map(|e| e.text.as_str())
        .collect::<Vec<_>>()
        .join("\n");
    assert!(
        shown.starts_with("Report R-20260918-1 · 2026-09-18 · 3 new"),
        "{shown}"
    );
    assert!(shown.contains("退款"), "{shown}");
    assert!(
        shown.contains("Backlog: 3 open (< 4 h 0 · < 24 h 3"),
        "{shown}"
    );
    assert!(
        shown.contains("Files: reports/R-20260918-1/ under the daemon's state directory"),
        "{shown}"
    );
}
