//! The approval dialog: a centred overlay over the transcript showing the
//! tool, the reason, the arguments and, for a knowledge edit, the rationale
//! and the coloured diff. Only a deliberate key decides: `y` allows once,
//! `a` always allows in this session, `w` everywhere (neither is offered
//! for a review-required tool), `n` denies (a reason is asked), Esc puts it
//! aside (`/approvals` lists it again). Enter decides nothing (it says
//! which keys do), and keys that arrive in the first moment after a dialog
//! appears are ignored: what was typed for the editor never approves.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, Instant};

use ratatui::Frame;
use ratatui::crossterm::event::{KeyCode, KeyEvent};
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Clear, Paragraph};
use tinycode_shared::proto::{ApprovalDecision, ApprovalRequested, DecideApprovalRequest};

use crate::rpc::Rpc;
use tinycode_shared::render;
use tinycode_shared::text::wrap;

#[derive(Debug, Default)]
pub struct Dialog {
    /// Put aside with Esc (still pending).
    dismissed: HashSet<String>,
    /// Chosen in the inbox: shown before the others.
    focused: Option<String>,
    /// Typing the reason of a denial.
    pub reason: Option<String>,
    /// The decision was sent; the dialog closes when the daemon records it.
    pub sent: Option<String>,
    pub scroll: u16,
    /// The approval drawn last and when it first appeared: its keys are
    /// read only after [`ARMED_AFTER`].
    shown: RefCell<Option<(String, Instant)>>,
    /// Enter was pressed: the foot says which keys decide.
    pub hinted: bool,
    /// An answer to a question being typed (Enter sends it).
    pub answer: Option<String>,
}

/// Keys within this long of a dialog appearing were typed for something
/// else: they are ignored.
pub const ARMED_AFTER: Duration = Duration::from_millis(400);

impl Dialog {
    /// The request to show: the focused one, else the oldest not put aside.
    pub fn current<'a>(
        &self,
        mut answerable: impl Iterator<Item = &'a ApprovalRequested>,
        pending: &'a BTreeMap<u64, ApprovalRequested>,
    ) -> Option<&'a ApprovalRequested> {
        if let Some(id) = &self.focused
            && let Some(r) = pending.values().find(|r| &r.approval_id == id)
        {
            return Some(r);
        }
        answerable.find(|r| !self.dismissed.contains(&r.approval_id))
    }

    /// Show this approval now (from the inbox).
    pub fn focus(&mut self, id: &str) {
        self.dismissed.remove(id);
        self.focused = Some(id.to_string());
    }

    /// The shown approval was decided or cancelled (by anyone).
    pub fn closed(&mut self) {
        self.focused = None;
        self.reason = None;
        self.answer = None;
        self.sent = None;
        self.scroll = 0;
        self.hinted = false;
    }

    /// Whether keys for `id` are read yet (it has been on screen long
    /// enough; one never drawn — tests, a key before the first frame — is).
    fn armed(&self, id: &str) -> bool {
        match &*self.shown.borrow() {
            Some((shown, at)) if shown == id => at.elapsed() >= ARMED_AFTER,
            _ => true,
        }
    }

    /// A key while `request` is shown: typing an answer or a denial's
    /// reason, else a decision key (ignored until the dialog is armed,
    /// except Esc). The decision to send, if the key made one.
    pub fn key(&mut self, key: KeyEvent, request: &ApprovalRequested) -> Option<Rpc> {
        let id = request.approval_id.clone();
        if self.answer.is_some() {
            return self.type_answer(key, id);
        }
        if self.reason.is_some() {
            return self.type_reason(key, id);
        }
        if key.code != KeyCode::Esc && !self.armed(&id) {
            return None;
        }
        self.decision_key(key, request, id)
    }

    /// A key while an answer is typed: Enter sends it (unless blank), Esc
    /// goes back.
    fn type_answer(&mut self, key: KeyEvent, id: String) -> Option<Rpc> {
        let answer = self.answer.as_mut()?;
        match key.code {
            KeyCode::Enter if !answer.trim().is_empty() => {
                let answer = std::mem::take(answer);
                self.answer = None;
                return Some(self.answer_with(id, answer));
            }
            KeyCode::Esc => self.answer = None,
            KeyCode::Backspace => {
                answer.pop();
            }
            KeyCode::Char(c) => answer.push(c),
            _ => {}
        }
        None
    }

    /// A key while a denial's reason is typed: Enter denies, Esc goes back.
    fn type_reason(&mut self, key: KeyEvent, id: String) -> Option<Rpc> {
        let reason = self.reason.as_mut()?;
        match key.code {
            KeyCode::Enter => {
                let reason = std::mem::take(reason);
                self.reason = None;
                return Some(self.decide(id, ApprovalDecision::Deny, reason, false));
            }
            KeyCode::Esc => self.reason = None,
            KeyCode::Backspace => {
                reason.pop();
            }
            KeyCode::Char(c) => reason.push(c),
            _ => {}
        }
        None
    }

    /// A key on the armed dialog: allow, always allow, deny, answer a
    /// question, put aside, or scroll.
    fn decision_key(
        &mut self,
        key: KeyEvent,
        request: &ApprovalRequested,
        id: String,
    ) -> Option<Rpc> {
        let always = !request.review_required;
        let question = !request.question.is_empty();
        match key.code {
            // A question: a choice's number answers it, `y` types an answer.
            KeyCode::Char(c @ '1'..='9') if question => {
                let choice = request.choices.get(c as usize - '1' as usize)?;
                Some(self.answer_with(id, choice.clone()))
            }
            KeyCode::Char('y') if question => {
                self.answer = Some(String::new());
                None
            }
            KeyCode::Char('y') => {
                Some(self.decide(id, ApprovalDecision::AllowOnce, String::new(), false))
            }
            KeyCode::Char('a') if always && !question => {
                Some(self.decide(id, ApprovalDecision::AlwaysAllow, String::new(), false))
            }
            KeyCode::Char('w') if always && !question => {
                Some(self.decide(id, ApprovalDecision::AlwaysAllow, String::new(), true))
            }
            KeyCode::Char('n') | KeyCode::Char('d') => {
                self.reason = Some(String::new());
                None
            }
            KeyCode::Enter => {
                // Not a decision: say which keys are.
                self.hinted = true;
                None
            }
            KeyCode::Esc => {
                self.dismissed.insert(id);
                self.closed();
                None
            }
            KeyCode::Down | KeyCode::Char('j') => {
                self.scroll = self.scroll.saturating_add(1);
                None
            }
            KeyCode::Up | KeyCode::Char('k') => {
                self.scroll = self.scroll.saturating_sub(1);
                None
            }
            _ => None,
        }
    }

    fn answer_with(&mut self, approval_id: String, answer: String) -> Rpc {
        self.sent = Some(approval_id.clone());
        Rpc::Decide(DecideApprovalRequest {
            approval_id,
            decision: ApprovalDecision::AllowOnce as i32,
            answer,
            ..DecideApprovalRequest::default()
        })
    }

    fn decide(
        &mut self,
        approval_id: String,
        decision: ApprovalDecision,
        reason: String,
        workspace_wide: bool,
    ) -> Rpc {
        self.sent = Some(approval_id.clone());
        Rpc::Decide(DecideApprovalRequest {
            approval_id,
            decision: decision as i32,
            reason,
            workspace_wide,
            answer: String::new(),
        })
    }

    /// Draw the dialog centred in `area`; the keys stay visible at its
    /// foot while the body scrolls (↑/↓).
    pub fn render(&self, frame: &mut Frame, area: Rect, request: &ApprovalRequested) {
        {
            let mut shown = self.shown.borrow_mut();
            if shown
                .as_ref()
                .is_none_or(|(id, _)| id != &request.approval_id)
            {
                *shown = Some((request.approval_id.clone(), Instant::now()));
            }
        }
        let width = area.width.saturating_sub(4).clamp(20, 100).min(area.width);
        let inner_width = width.saturating_sub(2) as usize;
        let body = self.lines(request, inner_width);
        let footer = self.footer(inner_width, request);
        let wanted = (body.len() + footer.len()) as u16 + 2;
        let height = wanted.min(area.height);
        let rect = Rect {
            x: area.x + (area.width - width) / 2,
            y: area.y + (area.height - height) / 2,
            width,
            height,
        };
        let block = Block::bordered()
            .title(format!(
                " Approval {} · {} ",
                request.approval_id,
                render::requested_by(request)
            ))
            .border_style(Style::default().fg(Color::Yellow));
        let inner = block.inner(rect);
        frame.render_widget(Clear, rect);
        frame.render_widget(block, rect);
        let foot = (footer.len() as u16).min(inner.height);
        let [top, bottom] =
            Layout::vertical([Constraint::Min(0), Constraint::Length(foot)]).areas(inner);
        frame.render_widget(Paragraph::new(body).scroll((self.scroll, 0)), top);
        frame.render_widget(Paragraph::new(footer), bottom);
    }

    fn footer(&self, width: usize, request: &ApprovalRequested) -> Vec<Line<'static>> {
        let review_required = request.review_required;
        let question_keys = match request.choices.len() {
            0 => "y: type the answer · n: decline (with a reason) · Esc: later".to_string(),
            n => format!(
                "1–{n}: answer with that choice · y: type an answer · n: decline (with a reason) · Esc: later"
            ),
        };
        let keys = if !request.question.is_empty() {
            question_keys.as_str()
        } else if review_required {
            "y: allow once · n: deny (with a reason) · Esc: later — reviewed every time: no \"always\""
        } else {
            "y: allow once · a: always (this session) · w: always (every session) · n: deny (with a reason) · Esc: later"
        };
        let text = if let Some(answer) = &self.answer {
            format!("Answer: {answer}▏  (Enter: send · Esc: back)")
        } else if let Some(reason) = &self.reason {
            format!("Deny — reason: {reason}▏  (Enter: deny · Esc: back)")
        } else if let Some(id) = &self.sent {
            format!("Decision on {id} sent; waiting for the daemon…")
        } else if self.hinted {
            format!("Enter does not decide. {keys}")
        } else {
            keys.to_string()
        };
        wrap(&text, width)
            .into_iter()
            .map(|row| Line::from(Span::styled(row, Style::default().fg(Color::Yellow))))
            .collect()
    }

    fn lines(&self, r: &ApprovalRequested, width: usize) -> Vec<Line<'static>> {
        let call = r.call.clone().unwrap_or_default();
        let bold = Style::default().add_modifier(Modifier::BOLD);
        let dim = Style::default().fg(Color::DarkGray);
        let mut out = Vec::new();
        let mut text = |label: &str, value: &str, style: Style| {
            let joined = format!("{label}{value}");
            for line in joined.lines() {
                for row in wrap(line, width) {
                    out.push(Line::from(Span::styled(row, style)));
                }
            }
        };
        if !r.question.is_empty() {
            text("Question: ", &r.question, bold);
            for (i, c) in r.choices.iter().enumerate() {
                text(&format!("  {}. ", i + 1), c, Style::default());
            }
            out.push(Line::default());
            return out;
        }
        text("Tool: ", &call.name, bold);
        text("Reason: ", &r.reason, Style::default());
        let args = serde_json::from_str::<serde_json::Value>(&call.arguments_json)
            .ok()
            .and_then(|v| serde_json::to_string_pretty(&v).ok())
            .unwrap_or(call.arguments_json.clone());
        if r.diff.is_empty() {
            text("Arguments: ", &args, dim);
        } else {
            text("Article: ", &r.article_id, bold);
            text("Rationale: ", &r.rationale, Style::default());
            text("", &format!("Diff (+{} −{}):", r.added, r.removed), bold);
            for line in r.diff.lines() {
                let style = match line.chars().next() {
                    Some('+') => Style::default().fg(Color::Green),
                    Some('-') => Style::default().fg(Color::Red),
                    _ => dim,
                };
                text("", line, style);
            }
        }
        out.push(Line::default());
        out
    }
}
