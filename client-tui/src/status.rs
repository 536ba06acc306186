//! The status bar (workspace, session, model, context tokens, attached
//! clients, pending approvals, daemon connection) and the `/status` text.

use std::path::Path;

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};

use crate::app::App;
use crate::rpc::Connection;
use tinycode_shared::text::clip;

/// `12.3k` for large token counts.
fn tokens(n: u64) -> String {
    if n >= 10_000 {
        format!("{:.1}k", n as f64 / 1000.0)
    } else {
        n.to_string()
    }
}

fn workspace_name(app: &App) -> String {
    app.daemon
        .as_ref()
        .and_then(|d| Path::new(&d.workspace).file_name())
        .map(|n| n.to_string_lossy().to_string())
        .unwrap_or_else(|| "…".into())
}

/// Draw the bar into one row.
pub fn render(app: &App, area: Rect, buf: &mut Buffer) {
    let bar = Style::default().bg(Color::DarkGray).fg(Color::White);
    let session = app.session.as_ref();
    let here = app.answerable().count();
    let all = app.pending.len();
    let mut parts = vec![workspace_name(app)];
    parts.push(
        app.session_id
            .clone()
            .unwrap_or_else(|| "no session".into()),
    );
    if let Some(s) = session {
        parts.push(s.model.clone());
        parts.push(format!("ctx {}", tokens(s.context_tokens)));
        parts.push(format!("{} attached", s.attached_clients));
        if s.queued > 0 {
            parts.push(format!("{} queued", s.queued));
        }
    }
    let approvals = match (here, all) {
        (0, 0) => "no approvals".to_string(),
        (h, a) if h == a => format!("{h} approval{}", if h == 1 { "" } else { "s" }),
        (h, a) => format!("{h} here / {a} approvals"),
    };
    let (dot, connection, color) = match &app.connection {
        Connection::Connected => ("●", "connected", Color::Green),
        Connection::Connecting => ("○", "connecting", Color::Yellow),
        Connection::Lost(_) => ("✗", "disconnected", Color::Red),
    };
    let right = format!(" {dot} {connection}");
    let left = parts.join(" │ ");
    let approvals_style = if all > 0 {
        bar.fg(Color::Yellow).add_modifier(Modifier::BOLD)
    } else {
        bar
    };
    let width = area.width as usize;
    let fixed = tinycode_shared::text::width(&right) + 3 + tinycode_shared::text::width(&approvals);
    let left = clip(&left, width.saturating_sub(fixed));
    let gap = width.saturating_sub(tinycode_shared::text::width(&left) + fixed);
    let line = Line::from(vec![
        Span::styled(left, bar),
        Span::styled(" │ ", bar),
        Span::styled(approvals, approvals_style),
        Span::styled(" ".repeat(gap), bar),
        Span::styled(right, bar.fg(color)),
    ]);
    buf.set_style(area, bar);
    buf.set_line(area.x, area.y, &line, area.width);
}
