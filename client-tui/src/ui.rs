//! One frame: the reconnect banner, the transcript (or a list view), the
//! loader / message line, the editor, the status bar, and the approval
//! dialog over them.

use ratatui::Frame;
use ratatui::layout::{Constraint, Layout};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Paragraph};

use crate::app::{App, Connection};
use crate::transcript::Kind;
use crate::views::View;
use tinycode_shared::text::clip;

const SPINNER: [&str; 10] = ["⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"];
/// Editor rows shown at most (it scrolls beyond).
const EDITOR_ROWS: u16 = 6;

pub fn draw(frame: &mut Frame, app: &mut App) {
    let area = frame.area();
    let banner = u16::from(matches!(app.connection, Connection::Lost(_)));
    let editor_rows = (app.editor.lines() as u16).clamp(1, EDITOR_ROWS) + 1;
    let [top, body, line, editor, status] = Layout::vertical([
        Constraint::Length(banner),
        Constraint::Min(1),
        Constraint::Length(1),
        Constraint::Length(editor_rows),
        Constraint::Length(1),
    ])
    .areas(area);
    if let Connection::Lost(why) = &app.connection {
        let text = format!(
            " daemon connection lost ({why}) — reconnecting; the session resumes where it stopped"
        );
        frame.render_widget(
            Paragraph::new(clip(&text, area.width as usize))
                .style(Style::default().bg(Color::Red).fg(Color::White)),
            top,
        );
    }
    if matches!(app.view, View::Chat) {
        app.transcript.render(body, frame.buffer_mut());
    } else {
        crate::views::render(frame, body, app);
    }
    frame.render_widget(Paragraph::new(message_line(app, line.width)), line);
    let block = Block::default()
        .borders(Borders::TOP)
        .border_style(Style::default().fg(Color::DarkGray));
    let inner = block.inner(editor);
    frame.render_widget(block, editor);
    frame.render_widget(app.editor.widget(), inner);
    crate::status::render(app, status, frame.buffer_mut());
    if let Some(request) = app.dialog_request().cloned() {
        app.dialog.render(frame, body, &request);
    }
}

/// The flash message, else the loader while a turn runs, else the hint
/// that scrolled-up output is waiting below.
fn message_line(app: &App, width: u16) -> Line<'static> {
    let width = width as usize;
    if let Some((kind, text)) = &app.flash {
        let style = match kind {
            Kind::Error | Kind::Denied | Kind::Failure => Style::default().fg(Color::Red),
            Kind::Allowed => Style::default().fg(Color::Green),
            Kind::Approval => Style::default().fg(Color::Yellow),
            _ => Style::default().fg(Color::DarkGray),
        };
        let first = text.lines().next().unwrap_or("");
        return Line::from(Span::styled(clip(first, width), style));
    }
    if let Some(turn) = app.transcript.running_turn {
        let frame = SPINNER[(app.tick % SPINNER.len() as u64) as usize];
        let waiting = app.answerable().count();
        let what = if waiting > 0 {
            "waiting for an approval"
        } else {
            "working"
        };
        let text = format!("{frame} turn {turn} {what}… (Ctrl+C to cancel or detach)");
        return Line::from(Span::styled(
            clip(&text, width),
            Style::default()
                .fg(Color::Magenta)
                .add_modifier(Modifier::BOLD),
        ));
    }
    if app.transcript.scroll > 0 {
        return Line::from(Span::styled(
            clip("↓ more below (PgDn)", width),
            Style::default().fg(Color::DarkGray),
        ));
    }
    Line::default()
}
