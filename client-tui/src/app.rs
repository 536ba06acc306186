//! The UI's state and what keys and daemon events do to it. No I/O: keys
//! and [`NetEvent`]s come in, [`Rpc`]s go out through [`App::take_rpcs`],
//! and `ui` draws the state. Everything shown comes from the daemon's
//! events; the app keeps no agent state of its own.

use std::collections::BTreeMap;

use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use tinycode_shared::proto::event::Payload;
use tinycode_shared::proto::session_update::Update;
use tinycode_shared::proto::{
    ApprovalRequested, CancelTurnRequest, CompactSessionRequest, CreateSessionRequest,
    DaemonStatus, Event, GenerateReportRequest, ListSessionsRequest, ListTicketsRequest,
    SendMessageRequest, SessionInfo, SetSessionModelRequest,
};
use tinycode_shared::render;

use crate::dialog::Dialog;
use crate::editor::{Edit, Editor};
pub use crate::rpc::Connection;
use crate::rpc::{NetEvent, Rpc};
use crate::slash::{self, Command, Parsed};
use crate::transcript::{Kind, Transcript};
use crate::view::View;

mod lists;

/// How the app starts.
#[derive(Debug, Clone, Default)]
pub struct Start {
    /// Attach this session.
    pub session: Option<String>,
    /// Attach the newest session.
    pub continue_latest: bool,
    /// Show approvals of every session, not only the attached one's.
    pub inbox: bool,
    /// Model for sessions this client creates (empty: the daemon's).
    pub model: String,
}

pub struct App {
    pub transcript: Transcript,
    pub editor: Editor,
    pub view: View,
    pub dialog: Dialog,
    /// Pending approvals of every session, by the sequence of the request.
    pub pending: BTreeMap<u64, ApprovalRequested>,
    pub session: Option<SessionInfo>,
    /// The session followed (set before its info arrives).
    pub session_id: Option<String>,
    pub daemon: Option<DaemonStatus>,
    pub connection: Connection,
    /// One line above the editor: an answer, a question or an error.
    pub flash: Option<(Kind, String)>,
    /// Ctrl+C was pressed once: the next key decides.
    pub confirming: bool,
    pub inbox: bool,
    pub next_model: String,
    /// Ticks (about 10 per second while something moves).
    pub tick: u64,
    pub quit: bool,
    outbox: Vec<Rpc>,
}

/// Ticks between status-bar refreshes of the attached session.
const REFRESH_TICKS: u64 = 30;

impl App {
    pub fn new(start: Start) -> Self {
        let mut app = Self {
            transcript: Transcript::default(),
            editor: Editor::default(),
            view: View::Chat,
            dialog: Dialog::default(),
            pending: BTreeMap::new(),
            session: None,
            session_id: None,
            daemon: None,
            connection: Connection::Connecting,
            flash: None,
            confirming: false,
            inbox: start.inbox,
            next_model: start.model.clone(),
            tick: 0,
            quit: false,
            outbox: Vec::new(),
        };
        match (start.session, start.continue_latest) {
            (Some(id), _) => app.attach(id),
            (None, true) => app.outbox.push(Rpc::AttachLatest),
            (None, false) => app.outbox.push(Rpc::Create(CreateSessionRequest {
                model: start.model,
                ..CreateSessionRequest::default()
            })),
        }
        app
    }

    /// Requests produced since the last call.
    pub fn take_rpcs(&mut self) -> Vec<Rpc> {
        std::mem::take(&mut self.outbox)
    }

    pub fn send(&mut self, rpc: Rpc) {
        self.outbox.push(rpc);
    }

    pub fn note(&mut self, kind: Kind, text: impl Into<String>) {
        self.flash = Some((kind, text.into()));
    }

    /// Follow another session: its transcript replays from the start.
    pub fn attach(&mut self, id: String) {
        self.transcript.reset();
        self.session = None;
        self.session_id = Some(id.clone());
        self.view = View::Chat;
        self.outbox.push(Rpc::Attach {
            session_id: id,
            from_sequence: 1,
        });
    }

    /// The tickets view, loading.
    pub fn open_tickets(&mut self) {
        self.view = View::loading_tickets();
        self.outbox.push(Rpc::ListTickets(ListTicketsRequest {
            limit: 500,
            ..ListTicketsRequest::default()
        }));
    }

    pub fn turn_running(&self) -> bool {
        self.transcript.running_turn.is_some()
    }

    /// Pending approvals the dialog may show (this session's, or every
    /// session's in inbox mode), oldest first.
    pub fn answerable(&self) -> impl Iterator<Item = &ApprovalRequested> {
        let here = self.session_id.clone().unwrap_or_default();
        let inbox = self.inbox;
        self.pending
            .values()
            .filter(move |r| inbox || r.session_id == here)
    }

    /// The approval the dialog shows now, if any.
    pub fn dialog_request(&self) -> Option<&ApprovalRequested> {
        self.dialog.current(self.answerable(), &self.pending)
    }

    pub fn on_tick(&mut self) {
        self.tick += 1;
        if self.tick.is_multiple_of(REFRESH_TICKS)
            && self.connection == Connection::Connected
            && let Some(id) = &self.session_id
        {
            self.outbox.push(Rpc::Refresh {
                session_id: id.clone(),
            });
        }
    }

    pub fn on_paste(&mut self, text: &str) {
        if matches!(self.view, View::Chat) && self.dialog_request().is_none() {
            self.editor.paste(text);
        }
    }

    pub fn on_key(&mut self, key: KeyEvent) {
        let ctrl = key.modifiers.contains(KeyModifiers::CONTROL);
        if ctrl && key.code == KeyCode::Char('c') {
            return self.interrupt();
        }
        if self.confirming {
            self.confirming = false;
            self.flash = None;
            if key.code == KeyCode::Char('y') && self.turn_running() {
                self.cancel_turn();
            }
            return;
        }
        if let Some(request) = self.dialog_request().cloned() {
            if let Some(rpc) = self.dialog.key(key, &request) {
                self.outbox.push(rpc);
            }
            return;
        }
        if !matches!(self.view, View::Chat) {
            return self.view_key(key);
        }
        self.chat_key(key);
    }

    /// Ctrl+C: with a turn running, ask before cancelling it; a second
    /// Ctrl+C detaches (the turn keeps running in the daemon).
    fn interrupt(&mut self) {
        if self.confirming {
            self.quit = true;
            return;
        }
        if !self.turn_running() && !self.editor.text().is_empty() {
            self.editor.clear();
            return;
        }
        self.confirming = true;
        let question = if self.turn_running() {
            "Cancel the running turn? y: cancel · Ctrl+C: detach (the turn keeps running) · other keys: carry on"
        } else {
            "Ctrl+C again to detach · other keys: carry on"
        };
        self.note(Kind::Approval, question);
    }

    fn cancel_turn(&mut self) {
        if let Some(id) = &self.session_id {
            self.outbox.push(Rpc::Cancel(CancelTurnRequest {
                session_id: id.clone(),
            }));
        }
    }

    fn chat_key(&mut self, key: KeyEvent) {
        let page = 10;
        match key.code {
            KeyCode::PageUp => return self.transcript.scroll_by(page),
            KeyCode::PageDown => return self.transcript.scroll_by(-page),
            KeyCode::Tab => return self.complete(),
            KeyCode::Esc => {
                self.flash = None;
                return;
            }
            _ => {}
        }
        match self.editor.key(key) {
            Edit::Submit(text) => {
                self.flash = None;
                self.transcript.scroll = 0;
                if text.starts_with('/') {
                    self.slash(&text);
                } else {
                    self.send_text(text);
                }
            }
            Edit::Changed | Edit::Ignored => {}
        }
    }

    fn send_text(&mut self, text: String) {
        let Some(id) = self.session_id.clone() else {
            return self.note(
                Kind::Error,
                "not attached to a session yet; try again in a moment",
            );
        };
        self.outbox.push(Rpc::Send(SendMessageRequest {
            session_id: id,
            text,
            ..Default::default()
        }));
    }

    fn skills(&self) -> Vec<String> {
        self.daemon
            .iter()
            .flat_map(|d| d.skills.iter().map(|s| s.name.clone()))
            .collect()
    }

    /// Tab: complete a command or skill name; several matches are listed.
    fn complete(&mut self) {
        let text = self.editor.text();
        if !text.starts_with('/') || text.contains(char::is_whitespace) {
            return;
        }
        match slash::complete(&text, &self.skills()).as_slice() {
            [] => self.note(Kind::Error, format!("no command starts with {text}")),
            [one] => self.editor.set_text(&format!("/{one} ")),
            many => {
                let common = slash::common_prefix(many);
                self.editor.set_text(&format!("/{common}"));
                let list: Vec<String> = many.iter().map(|n| format!("/{n}")).collect();
                self.note(Kind::Notice, list.join("  "));
            }
        }
    }

    fn slash(&mut self, line: &str) {
        match slash::parse(line, &self.skills()) {
            Parsed::Skill(skill, args) => self.send_text(slash::skill_message(&skill, &args)),
            Parsed::Unknown(name) => self.note(
                Kind::Error,
                format!("unknown command /{name}; /help lists the commands and Tab completes them"),
            ),
            Parsed::Builtin(command, args) => self.command(command, args),
        }
    }

    fn command(&mut self, command: Command, args: String) {
        let session_id = self.session_id.clone().unwrap_or_default();
        match command {
            Command::Help => self.transcript.push(Kind::Notice, slash::help()),
            Command::New => self.outbox.push(Rpc::Create(CreateSessionRequest {
                model: self.next_model.clone(),
                ..CreateSessionRequest::default()
            })),
            Command::Clear => self.transcript.clear_screen(),
            Command::Resume if !args.is_empty() => self.attach(args),
            Command::Resume | Command::Sessions => {
                self.view = View::loading_sessions();
                self.outbox.push(Rpc::ListSessions(ListSessionsRequest {
                    limit: 50,
                    ..Default::default()
                }));
            }
            Command::Model => self.model(args),
            Command::Skills => {
                let skills: Vec<String> = self
                    .daemon
                    .iter()
                    .flat_map(|d| &d.skills)
                    .map(|s| format!("/{:<18} {}", s.name, s.description))
                    .collect();
                let text = if skills.is_empty() {
                    "this workspace has no skills (.tinycode/skills/<name>/SKILL.md)".to_string()
                } else {
                    skills.join("\n")
                };
                self.transcript.push(Kind::Notice, text);
            }
            Command::Mcp => {
                let text = self.mcp_text();
                self.transcript.push(Kind::Notice, text);
                // Servers connect in the background: the next /mcp is fresh.
                self.outbox.push(Rpc::Status);
            }
            Command::Agents => self.agents(),
            Command::Compact => self
                .outbox
                .push(Rpc::Compact(CompactSessionRequest { session_id })),
            Command::Status => {
                let text = self.status_text();
                self.transcript.push(Kind::Notice, text);
                self.outbox.push(Rpc::Status);
            }
            Command::Approvals => self.view = View::Inbox { selected: 0 },
            Command::Tickets => self.open_tickets(),
            Command::Report => self.outbox.push(Rpc::Report(GenerateReportRequest {
                day: args,
                ..GenerateReportRequest::default()
            })),
            Command::Exit => self.quit = true,
        }
    }

    /// `/agents`: the workers of the attached session (of its parent, with
    /// a way back, when it is a worker itself).
    fn agents(&mut self) {
        let Some(current) = &self.session else {
            self.note(Kind::Error, "attach a session first (/sessions)");
            return;
        };
        let (parent, back) = if current.parent_session_id.is_empty() {
            (current.id.clone(), false)
        } else {
            (current.parent_session_id.clone(), true)
        };
        self.view = View::loading_workers(parent.clone(), back);
        self.outbox.push(Rpc::ListSessions(ListSessionsRequest {
            limit: 50,
            parent_id: parent,
            ..Default::default()
        }));
    }

    fn model(&mut self, args: String) {
        let current = self
            .session
            .as_ref()
            .map(|s| s.model.clone())
            .unwrap_or_default();
        if args.is_empty() {
            let default = self
                .daemon
                .as_ref()
                .map(|d| d.default_model.clone())
                .unwrap_or_default();
            let next = if self.next_model.is_empty() {
                default
            } else {
                self.next_model.clone()
            };
            self.note(
                Kind::Notice,
                format!("model: {current} · /new uses {next} · /model provider/model changes that"),
            );
        } else if let Some(session) = &self.session {
            let session_id = session.id.clone();
            self.note(
                Kind::Notice,
                format!("this session's next turns use {args} (was {current}); /new uses it too"),
            );
            self.outbox.push(Rpc::SetModel(SetSessionModelRequest {
                session_id,
                model: args.clone(),
            }));
            self.next_model = args;
        } else {
            self.note(Kind::Notice, format!("/new will use {args}"));
            self.next_model = args;
        }
    }

    pub fn on_net(&mut self, event: NetEvent) {
        match event {
            NetEvent::Connected(status) => {
                self.connection = Connection::Connected;
                self.transcript.drop_streaming();
                self.daemon = Some(*status);
            }
            NetEvent::Disconnected(why) => self.connection = Connection::Lost(why),
            NetEvent::Opened(info) => {
                if self.session_id.as_deref() != Some(info.id.as_str()) {
                    self.attach(info.id.clone());
                }
                self.session = Some(*info);
            }
            NetEvent::Info(info) => {
                if self.session_id.as_deref() == Some(info.id.as_str()) {
                    self.session = Some(*info);
                }
            }
            NetEvent::Update { session_id, update } => {
                if self.session_id.as_deref() != Some(session_id.as_str()) {
                    return;
                }
                match update.update {
                    Some(Update::Event(e)) => self.session_event(&e),
                    Some(Update::Delta(d)) => self.transcript.delta(&d),
                    None => {}
                }
            }
            NetEvent::Approval(e) => self.approval_event(&e),
            NetEvent::Sessions(list) => self.view.set_sessions(list),
            NetEvent::Tickets(list) => self.view.set_tickets(list),
            NetEvent::Ticket(t) => self.view = View::Ticket(t),
            NetEvent::Report(r) => self
                .transcript
                .push(Kind::Notice, crate::report::summary(&r)),
            NetEvent::Notice(text) => self.note(Kind::Notice, text),
            NetEvent::Error(text) => self.note(Kind::Error, text),
        }
    }

    fn session_event(&mut self, e: &Event) {
        if !self.transcript.apply(e) {
            return;
        }
        let refresh = matches!(
            e.payload,
            Some(Payload::TurnStarted(_))
                | Some(Payload::TurnCompleted(_))
                | Some(Payload::SessionCompacted(_))
        );
        if refresh && let Some(id) = &self.session_id {
            self.outbox.push(Rpc::Refresh {
                session_id: id.clone(),
            });
        }
    }

    /// Approvals of every session: the dialog's source. A decision by
    /// anyone closes the dialog and says who decided.
    fn approval_event(&mut self, e: &Event) {
        let Some(payload) = &e.payload else {
            return;
        };
        let id = match payload {
            Payload::ApprovalRequested(r) => {
                self.pending.insert(e.sequence, r.clone());
                return;
            }
            Payload::ApprovalDecided(d) => d.approval_id.clone(),
            Payload::ApprovalCancelled(c) => c.approval_id.clone(),
            _ => return,
        };
        let shown = self.dialog_request().map(|r| r.approval_id.clone());
        self.pending.retain(|_, r| r.approval_id != id);
        if shown.as_deref() == Some(id.as_str())
            && let Some(line) = render::session_line(payload)
        {
            self.dialog.closed();
            self.note(crate::transcript::decision_kind(payload), line);
        }
    }
}
