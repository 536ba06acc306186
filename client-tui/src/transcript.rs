//! The transcript: what a session's events read as, wrapped to the screen's
//! width once per entry (again only on a resize), drawn a screenful at a
//! time. Events are folded once, in sequence order; an event at or below
//! the last sequence seen is a duplicate (a replay after a reconnect) and
//! is dropped.

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use tinycode_shared::proto::event::Payload;
use tinycode_shared::proto::{Delta, Event, TurnOutcome};
use tinycode_shared::render;

use tinycode_shared::text::wrap;

/// How an entry is styled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    User,
    Assistant,
    Thinking,
    Tool,
    ToolError,
    DiffAdded,
    DiffRemoved,
    DiffContext,
    Approval,
    Allowed,
    Denied,
    Boundary,
    Outcome,
    Failure,
    Notice,
    Error,
}

impl Kind {
    fn style(self) -> Style {
        let s = Style::default();
        match self {
            Kind::User => s.fg(Color::Cyan).add_modifier(Modifier::BOLD),
            Kind::Assistant => s,
            Kind::Thinking => s.fg(Color::DarkGray).add_modifier(Modifier::ITALIC),
            Kind::Tool => s.fg(Color::Green),
            Kind::ToolError | Kind::Error | Kind::Failure | Kind::Denied => s.fg(Color::Red),
            Kind::DiffAdded => s.fg(Color::Green),
            Kind::DiffRemoved => s.fg(Color::Red),
            Kind::DiffContext | Kind::Boundary | Kind::Outcome | Kind::Notice => {
                s.fg(Color::DarkGray)
            }
            Kind::Approval => s.fg(Color::Yellow),
            Kind::Allowed => s.fg(Color::Green),
        }
    }
}

/// How a decision on an approval is coloured: green when allowed, red
/// when denied (or cancelled).
pub fn decision_kind(payload: &Payload) -> Kind {
    match payload {
        Payload::ApprovalDecided(d)
            if d.decision != tinycode_shared::proto::ApprovalDecision::Deny as i32 =>
        {
            Kind::Allowed
        }
        _ => Kind::Denied,
    }
}

#[derive(Debug, Clone)]
pub struct Entry {
    pub kind: Kind,
    pub text: String,
}

/// Diff lines shown under a knowledge edit (the approval dialog shows all).
const DIFF_PREVIEW_LINES: usize = 8;

/// The session's transcript as the screen shows it.
#[derive(Debug, Default)]
pub struct Transcript {
    entries: Vec<Entry>,
    /// Highest event sequence folded.
    pub last_sequence: u64,
    /// Text and thinking of the step being streamed (turn, text, thinking chars).
    streaming: Option<(u64, String, usize)>,
    /// Turn running now (from `TurnStarted` to `TurnCompleted`).
    pub running_turn: Option<u64>,
    /// Rows scrolled up from the bottom (0: follow the end).
    pub scroll: usize,
    /// Wrapped rows of `entries[..wrapped_entries]` at `wrapped_width`.
    rows: Vec<Line<'static>>,
    wrapped_entries: usize,
    wrapped_width: u16,
}

impl Transcript {
    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    pub fn push(&mut self, kind: Kind, text: impl Into<String>) {
        let text = text.into();
        for line in text.lines() {
            self.entries.push(Entry {
                kind,
                text: line.to_string(),
            });
        }
        if text.is_empty() {
            self.entries.push(Entry { kind, text });
        }
    }

    /// Forget everything (another session, or `/clear`); the next event
    /// folded may have any sequence.
    pub fn reset(&mut self) {
        *self = Self::default();
    }

    /// `/clear`: an empty screen; events already seen stay seen.
    pub fn clear_screen(&mut self) {
        self.entries.clear();
        self.rows.clear();
        self.wrapped_entries = 0;
        self.scroll = 0;
    }

    /// A reconnect: the daemon re-sends the text so far of a running step.
    pub fn drop_streaming(&mut self) {
        self.streaming = None;
    }

    /// Fold one stored event; `false` when it was a duplicate.
    pub fn apply(&mut self, event: &Event) -> bool {
        if event.sequence <= self.last_sequence {
            return false;
        }
        self.last_sequence = event.sequence;
        let Some(payload) = &event.payload else {
            return true;
        };
        match payload {
            Payload::TurnStarted(t) => self.running_turn = Some(t.turn),
            Payload::AssistantMessageAdded(m) => {
                self.streaming = None;
                let thinking: usize = m.thinking.iter().map(|t| t.chars().count()).sum();
                if thinking > 0 {
                    self.push(Kind::Thinking, format!("∴ thought ({thinking} chars)"));
                }
                if !m.text.is_empty() {
                    self.push(Kind::Assistant, m.text.clone());
                }
            }
            Payload::ToolCallFinished(f) => {
                let kind = if f.is_error {
                    Kind::ToolError
                } else {
                    Kind::Tool
                };
                self.push(kind, render::tool_line(f));
                let details: serde_json::Value =
                    serde_json::from_str(&f.details_json).unwrap_or_default();
                if let Some(diff) = details["diff"].as_str() {
                    self.push_diff(diff, DIFF_PREVIEW_LINES);
                }
            }
            Payload::TurnCompleted(c) => {
                self.streaming = None;
                self.running_turn = None;
                let kind = if c.outcome == TurnOutcome::Completed as i32 {
                    Kind::Outcome
                } else {
                    Kind::Failure
                };
                self.push(kind, render::turn_line(c));
            }
            Payload::ApprovalRequested(r) => {
                self.push(Kind::Approval, render::approval_requested_line(r))
            }
            Payload::ApprovalDecided(d) => {
                self.push(decision_kind(payload), render::approval_decided_line(d))
            }
            other => {
                if let Some(line) = render::session_line(other) {
                    let kind = match other {
                        Payload::UserMessageAdded(_) => Kind::User,
                        Payload::SessionCompacted(_) => Kind::Boundary,
                        _ => Kind::Notice,
                    };
                    self.push(kind, line);
                }
            }
        }
        true
    }

    /// Fold a live delta of the running step.
    pub fn delta(&mut self, d: &Delta) {
        let (turn, text, thinking) = self.streaming.get_or_insert((d.turn, String::new(), 0));
        if *turn != d.turn {
            *turn = d.turn;
            text.clear();
            *thinking = 0;
        }
        match d.kind.as_str() {
            "thinking" => *thinking += d.text.chars().count(),
            _ => text.push_str(&d.text),
        }
        self.running_turn.get_or_insert(d.turn);
    }

    /// Diff lines coloured by their sign; at most `max` of them, then a count.
    pub fn push_diff(&mut self, diff: &str, max: usize) {
        let lines: Vec<&str> = diff.lines().filter(|l| !l.starts_with("@@")).collect();
        for line in lines.iter().take(max) {
            let kind = match line.chars().next() {
                Some('+') => Kind::DiffAdded,
                Some('-') | Some('−') => Kind::DiffRemoved,
                _ => Kind::DiffContext,
            };
            self.push(kind, format!("    {line}"));
        }
        if lines.len() > max {
            self.push(
                Kind::DiffContext,
                format!("    … {} more diff lines", lines.len() - max),
            );
        }
    }

    /// Wrapped rows of the stored entries (wrapping only what is new).
    fn wrap_to(&mut self, width: u16) {
        if width != self.wrapped_width {
            self.rows.clear();
            self.wrapped_entries = 0;
            self.wrapped_width = width;
        }
        for entry in &self.entries[self.wrapped_entries..] {
            let style = entry.kind.style();
            for row in wrap(&entry.text, width as usize) {
                self.rows.push(Line::from(Span::styled(row, style)));
            }
        }
        self.wrapped_entries = self.entries.len();
    }

    /// Rows of the step being streamed (not cached: they change per delta).
    fn streaming_rows(&self, width: u16) -> Vec<Line<'static>> {
        let Some((_, text, thinking)) = &self.streaming else {
            return Vec::new();
        };
        let mut rows = Vec::new();
        if *thinking > 0 {
            let style = Kind::Thinking.style();
            rows.push(Line::from(Span::styled(
                format!("∴ thinking… ({thinking} chars)"),
                style,
            )));
        }
        for line in text.lines() {
            for row in wrap(line, width as usize) {
                rows.push(Line::from(row));
            }
        }
        rows
    }

    /// Total rows at `width` (for scrolling).
    pub fn height(&mut self, width: u16) -> usize {
        self.wrap_to(width);
        self.rows.len() + self.streaming_rows(width).len()
    }

    /// Draw the visible rows into `area`: only those are touched.
    pub fn render(&mut self, area: Rect, buf: &mut Buffer) {
        if area.width == 0 || area.height == 0 {
            return;
        }
        self.wrap_to(area.width);
        let live = self.streaming_rows(area.width);
        let total = self.rows.len() + live.len();
        let height = area.height as usize;
        self.scroll = self.scroll.min(total.saturating_sub(height));
        let end = total - self.scroll;
        let start = end.saturating_sub(height);
        for (i, index) in (start..end).enumerate() {
            let line = match self.rows.get(index) {
                Some(l) => l,
                None => &live[index - self.rows.len()],
            };
            buf.set_line(area.x, area.y + i as u16, line, area.width);
        }
    }

    /// Scroll up (positive) or down by `rows`.
    pub fn scroll_by(&mut self, rows: isize) {
        self.scroll = self.scroll.saturating_add_signed(rows);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tinycode_shared::proto::{UserMessageAdded, event::Payload};

    fn user(seq: u64, text: &str) -> Event {
        Event {
            sequence: seq,
            payload: Some(Payload::UserMessageAdded(UserMessageAdded {
                text: text.into(),
                ..Default::default()
            })),
            ..Default::default()
        }
    }

    #[test]
    fn replayed_events_are_not_shown_twice() {
        let mut t = Transcript::default();
        assert!(t.apply(&user(3, "a")));
        assert!(!t.apply(&user(3, "a")));
        assert!(!t.apply(&user(2, "old")));
        assert!(t.apply(&user(5, "b")));
        let texts: Vec<_> = t.entries().iter().map(|e| e.text.as_str()).collect();
        assert_eq!(texts, ["› a", "› b"]);
    }

    #[test]
    fn only_new_entries_are_wrapped_and_only_visible_rows_drawn() {
        let mut t = Transcript::default();
        for i in 0..1000 {
            t.push(Kind::Assistant, format!("line {i}"));
        }
        assert_eq!(t.height(20), 1000);
        t.push(Kind::Assistant, "x".repeat(45));
        assert_eq!(t.height(20), 1003);
        let mut buf = Buffer::empty(Rect::new(0, 0, 20, 3));
        t.scroll = 3;
        t.render(buf.area, &mut buf);
        let row = |y: u16| {
            (0..20)
                .map(|x| buf[(x, y)].symbol().to_string())
                .collect::<String>()
        };
        assert_eq!(row(0).trim_end(), "line 997");
        assert_eq!(row(2).trim_end(), "line 999");
    }

    #[test]
    fn a_delta_streams_until_the_message_is_stored() {
        let mut t = Transcript::default();
        t.delta(&Delta {
            turn: 1,
            kind: "text".into(),
            text: "Hel".into(),
        });
        t.delta(&Delta {
            turn: 1,
            kind: "text".into(),
            text: "lo".into(),
        });
        assert_eq!(t.height(10), 1);
        assert_eq!(t.running_turn, Some(1));
        t.drop_streaming();
        assert_eq!(t.height(10), 0);
    }
}
