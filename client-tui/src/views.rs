//! The list views over the transcript: the session picker, the tickets
//! (open one to read it) and the approvals inbox across sessions. ↑/↓ (or
//! j/k) select, Enter opens, Esc goes back to the chat.

use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Paragraph};
use tinycode_shared::proto::{SessionInfo, Ticket};
use tinycode_shared::render;

use crate::app::App;
pub use crate::view::View;
use tinycode_shared::text::{clip, pad, wrap};

/// Draw the current list view into `area`.
pub fn render(frame: &mut Frame, area: Rect, app: &App) {
    let width = area.width.saturating_sub(2) as usize;
    let (title, rows, selected): (&str, Vec<String>, usize) = match &app.view {
        View::Chat => return,
        View::Sessions {
            list,
            selected,
            workers_of,
            back,
        } => (
            if workers_of.is_some() {
                " Workers (sub-agents) — Enter: attach · Esc: back "
            } else {
                " Sessions — Enter: attach · Esc: back "
            },
            session_rows(list.as_deref(), workers_of.is_some(), back.is_some()),
            *selected,
        ),
        View::Tickets { list, selected } => (
            " Tickets — Enter: read · Esc: back ",
            list.as_ref().map_or_else(
                || vec!["loading…".into()],
                |l| l.iter().map(ticket_row).collect(),
            ),
            *selected,
        ),
        View::Inbox { selected } => (
            " Approvals waiting in every session — Enter: answer · Esc: back ",
            inbox_rows(app),
            *selected,
        ),
        View::Ticket(t) => {
            render_ticket(frame, area, t, width);
            return;
        }
    };
    render_list(frame, area, title, &rows, selected);
}

/// The session picker's rows (or the workers'); with a way `back`, the
/// first row is the parent session.
fn session_rows(list: Option<&[SessionInfo]>, workers: bool, back: bool) -> Vec<String> {
    match list {
        None => vec!["loading…".into()],
        Some(l) if l.is_empty() && workers => {
            vec!["no workers: the agent starts them with spawn_agent".into()]
        }
        Some(l) => l
            .iter()
            .enumerate()
            .map(|(i, s)| {
                if back && i == 0 {
                    format!("{}  {}", s.id, s.title)
                } else {
                    session_row(s)
                }
            })
            .collect(),
    }
}

/// The approvals waiting in every session, who asked first.
fn inbox_rows(app: &App) -> Vec<String> {
    if app.pending.is_empty() {
        return vec!["no approval is waiting".into()];
    }
    app.pending
        .values()
        .map(|r| {
            format!(
                "{}  {}",
                render::requested_by(r),
                render::approval_requested_line(r)
            )
        })
        .collect()
}

/// One ticket to read, wrapped to `width`.
fn render_ticket(frame: &mut Frame, area: Rect, t: &Ticket, width: usize) {
    let lines: Vec<Line> = ticket_text(t)
        .lines()
        .flat_map(|l| wrap(l, width))
        .map(Line::from)
        .collect();
    let block = Block::bordered().title(format!(" {} — Esc: back ", t.id));
    frame.render_widget(Paragraph::new(lines).block(block), area);
}

/// A list with its `selected` row highlighted. Only the rows that fit are
/// built into lines, scrolled to the selection.
fn render_list(frame: &mut Frame, area: Rect, title: &str, rows: &[String], selected: usize) {
    let width = area.width.saturating_sub(2) as usize;
    let visible = area.height.saturating_sub(2) as usize;
    let first = selected.saturating_sub(visible.saturating_sub(1));
    let lines: Vec<Line> = rows
        .iter()
        .enumerate()
        .skip(first)
        .take(visible)
        .map(|(i, row)| {
            let style = if i == selected {
                Style::default().add_modifier(Modifier::REVERSED)
            } else {
                Style::default()
            };
            Line::from(Span::styled(clip(row, width), style))
        })
        .collect();
    let block = Block::bordered()
        .title(title)
        .border_style(Style::default().fg(Color::Blue));
    frame.render_widget(Paragraph::new(lines).block(block), area);
}

fn session_row(s: &SessionInfo) -> String {
    let state = if s.running { "running" } else { "idle" };
    if !s.agent_id.is_empty() {
        return format!("{}  {:<7}  {}  {}", s.agent_id, state, s.id, s.title);
    }
    format!(
        "{}  {:<7} {:>3} turns  {}  {}",
        s.id, state, s.turns, s.model, s.title
    )
}

fn ticket_row(t: &Ticket) -> String {
    let or_dash = |s: &str| {
        if s.is_empty() {
            "-".to_string()
        } else {
            s.to_string()
        }
    };
    format!(
        "{}  {} {} {} {}",
        t.id,
        pad(&or_dash(&t.status), 10),
        pad(&or_dash(&t.priority), 3),
        pad(&or_dash(&t.queue), 8),
        t.subject
    )
}

fn ticket_text(t: &Ticket) -> String {
    let mut out = format!(
        "{}\ncustomer: {} · channel: {} · created: {}\nstatus: {} · category: {} · priority: {} · queue: {} · escalation: L{}\n",
        t.subject,
        t.customer,
        t.channel,
        t.created_at,
        t.status,
        t.category,
        t.priority,
        t.queue,
        t.escalate_level
    );
    if !t.confidence.is_empty() {
        let c = tinycode_shared::render::confidence(&t.confidence);
        out.push_str(&format!("confidence: {c}\n"));
    }
    if let Some(s) = &t.suggestion {
        let held = tinycode_shared::render::suggestion(s);
        out.push_str(&format!(
            "NEEDS REVIEW: {held} — `tinycode triage review accept {}`\n",
            t.id
        ));
    }
    for m in &t.messages {
        out.push_str(&format!("\n[{}] {}:\n{}\n", m.at, m.from, m.text));
    }
    for n in &t.notes {
        out.push_str(&format!("\nnote: {}\n", n.text));
    }
    out
}

#[cfg(test)]
mod tests {
    use tinycode_shared::proto::{DecisionSuggested, FieldConfidence, Ticket};

    #[test]
    fn the_ticket_view_shows_the_models_confidence_and_a_held_decision() {
        let c = |field: &str, value| FieldConfidence {
            field: field.into(),
            value,
        };
        let t = Ticket {
            id: "T-1001".into(),
            confidence: vec![c("queue", 0.97)],
            suggestion: Some(DecisionSuggested {
                category: "退款".into(),
                priority: "P2".into(),
                confidence: vec![c("category", 0.41)],
                below: vec!["category".into()],
                ..Default::default()
            }),
            ..Ticket::default()
        };
        let text = super::ticket_text(&t);
        assert!(text.contains("confidence: queue high 0.97"), "{text}");
        assert!(
            text.contains("NEEDS REVIEW: suggested 退款 · P2 (category low 0.41; below: category)"),
            "{text}"
        );
        assert!(
            text.contains("tinycode triage review accept T-1001"),
            "{text}"
        );
        let plain = super::ticket_text(&Ticket::default());
        assert!(
            !plain.contains("confidence") && !plain.contains("REVIEW"),
            "{plain}"
        );
    }
}
