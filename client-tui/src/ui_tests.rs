//! Rendering, fed with daemon events directly, drawn on ratatui's
//! `TestBackend` and compared with `insta` snapshots (`src/snapshots/`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use ratatui::Terminal;
use ratatui::backend::TestBackend;
use ratatui::style::Color;
use tinycode_shared::proto::TurnOutcome;

use crate::app::{App, Connection};
use crate::fixtures::*;
use crate::rpc::NetEvent;
use crate::ui;

fn draw(app: &mut App, width: u16, height: u16) -> Terminal<TestBackend> {
    let mut terminal = Terminal::new(TestBackend::new(width, height)).unwrap();
    terminal.draw(|f| ui::draw(f, app)).unwrap();
    terminal
}

/// The colour of the first cell of the first row containing `needle`
/// (rows read with the cells hidden by wide characters skipped).
fn row_colour(terminal: &Terminal<TestBackend>, needle: &str) -> Option<Color> {
    let buf = terminal.backend().buffer();
    (0..buf.area.height).find_map(|y| {
        let mut row = String::new();
        let mut columns = Vec::new();
        let mut x = 0;
        while x < buf.area.width {
            let symbol = buf[(x, y)].symbol();
            columns.extend(std::iter::repeat_n(x, symbol.len()));
            row.push_str(symbol);
            x += tinycode_shared::text::width(symbol).max(1) as u16;
        }
        let at = row.find(needle)?;
        Some(buf[(columns[at], y)].fg)
    })
}

#[test]
fn transcript_with_tool_lines_a_knowledge_edit_and_streaming_text() {
    let mut app = attached_app();
    triage_turn(&mut app);
    let terminal = draw(&mut app, 80, 22);
    insta::assert_snapshot!(terminal.backend());
    assert_eq!(row_colour(&terminal, "+未收到货"), Some(Color::Green));
    assert_eq!(row_colour(&terminal, "-未收到货"), Some(Color::Red));
}

#[test]
fn a_finished_turn_ends_the_loader_and_shows_its_outcome() {
    let mut app = attached_app();
    triage_turn(&mut app);
    app.on_net(session_event(
        20,
        said("T-1001 是退款类工单，已路由到售后组。", 1),
    ));
    app.on_net(session_event(21, completed(1, TurnOutcome::Completed)));
    app.on_net(session_event(22, user("and T-1003?", 2)));
    app.on_net(session_event(23, started(2)));
    app.on_net(session_event(24, completed(2, TurnOutcome::Failed)));
    let terminal = draw(&mut app, 80, 20);
    insta::assert_snapshot!(terminal.backend());
    assert_eq!(row_colour(&terminal, "— turn 2 failed"), Some(Color::Red));
}

#[test]
fn approval_dialog_with_rationale_and_coloured_diff() {
    let mut app = attached_app();
    triage_turn(&mut app);
    app.on_net(NetEvent::Approval(Box::new(event(
        30,
        "approval-A-1",
        knowledge_edit_request("A-1"),
    ))));
    let terminal = draw(&mut app, 80, 24);
    insta::assert_snapshot!(terminal.backend());
    assert_eq!(row_colour(&terminal, "+未收到货"), Some(Color::Green));
}

#[test]
fn status_bar_and_the_reconnect_banner() {
    let mut app = attached_app();
    app.on_net(NetEvent::Approval(Box::new(event(
        30,
        "approval-A-1",
        knowledge_edit_request("A-1"),
    ))));
    app.on_net(NetEvent::Approval(Box::new(event(
        31,
        "approval-A-2",
        escalation_request("A-2", "s7"),
    ))));
    app.dialog.key(
        ratatui::crossterm::event::KeyEvent::from(ratatui::crossterm::event::KeyCode::Esc),
        &app.dialog_request().cloned().unwrap(),
    );
    app.on_net(NetEvent::Disconnected(
        "tinycoded is not running (no answer on /run/tinycoded.sock)".into(),
    ));
    assert_eq!(
        app.connection,
        Connection::Lost("tinycoded is not running (no answer on /run/tinycoded.sock)".into())
    );
    let terminal = draw(&mut app, 100, 8);
    insta::assert_snapshot!(terminal.backend());
}

#[test]
fn chinese_text_wraps_by_display_width() {
    let mut app = attached_app();
    app.on_net(session_event(
        5,
        said(
            "您好！您的订单 8842 已确认未发货，退款将在 1 个工作日内原路退回到您的支付账户，请留意银行通知。",
            1,
        ),
    ));
    let terminal = draw(&mut app, 30, 10);
    insta::assert_snapshot!(terminal.backend());
}

#[test]
fn a_narrow_terminal_keeps_every_part_readable() {
    let mut app = attached_app();
    triage_turn(&mut app);
    app.on_net(NetEvent::Approval(Box::new(event(
        30,
        "approval-A-2",
        escalation_request("A-2", SESSION),
    ))));
    let terminal = draw(&mut app, 28, 16);
    insta::assert_snapshot!(terminal.backend());
}

#[test]
fn list_views_render_sessions_tickets_and_the_inbox() {
    use tinycode_shared::proto::{SessionInfo, Ticket};
    let mut app = attached_app();
    app.view = crate::views::View::loading_tickets();
    app.on_net(NetEvent::Tickets(vec![
        Ticket {
            id: "T-1001".into(),
            subject: "退款：订单 8842 已付款但未收到货".into(),
            status: "routed".into(),
            priority: "P1".into(),
            queue: "售后组".into(),
            ..Ticket::default()
        },
        Ticket {
            id: "T-1002".into(),
            subject: "物流：包裹停滞 3 天未更新".into(),
            status: "open".into(),
            ..Ticket::default()
        },
    ]));
    let tickets = draw(&mut app, 70, 8);
    app.view = crate::views::View::loading_sessions();
    app.on_net(NetEvent::Sessions(vec![SessionInfo {
        id: "s42".into(),
        title: "refunds".into(),
        model: "offline".into(),
        turns: 3,
        running: true,
        ..SessionInfo::default()
    }]));
    let sessions = draw(&mut app, 70, 6);
    app.on_net(NetEvent::Approval(Box::new(event(
        31,
        "approval-A-2",
        escalation_request("A-2", "s7"),
    ))));
    app.view = crate::views::View::Inbox { selected: 0 };
    let inbox = draw(&mut app, 100, 6);
    insta::assert_snapshot!(format!(
        "{}\n{}\n{}",
        tickets.backend(),
        sessions.backend(),
        inbox.backend()
    ));
}

#[test]
fn agents_lists_the_workers_and_in_a_worker_the_way_back() {
    use tinycode_shared::proto::SessionInfo;
    let worker = |agent: &str, id: &str, running: bool, title: &str| SessionInfo {
        id: id.into(),
        agent_id: agent.into(),
        parent_session_id: SESSION.into(),
        title: title.into(),
        created_sequence: 40,
        running,
        ..SessionInfo::default()
    };
    let mut app = attached_app();
    app.view = crate::views::View::loading_workers(SESSION.into(), false);
    app.on_net(NetEvent::Sessions(vec![
        worker("a1", "s9a1", false, "a1: check refund-policy wording"),
        worker("a2", "s9a2", true, "a2: read the escalation policy"),
    ]));
    let parent = draw(&mut app, 80, 8);
    app.view = crate::views::View::loading_workers(SESSION.into(), true);
    app.on_net(NetEvent::Sessions(vec![worker(
        "a1",
        "s9a1",
        false,
        "a1: check refund-policy wording",
    )]));
    let in_worker = draw(&mut app, 80, 8);
    app.view = crate::views::View::loading_workers(SESSION.into(), false);
    app.on_net(NetEvent::Sessions(Vec::new()));
    let none = draw(&mut app, 80, 7);
    insta::assert_snapshot!(format!(
        "{}\n{}\n{}",
        parent.backend(),
        in_worker.backend(),
        none.backend()
    ));
}
