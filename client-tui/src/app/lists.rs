//! The list views' keys, and the texts of `/status` and `/mcp`.

use ratatui::crossterm::event::{KeyCode, KeyEvent};

use super::App;
use crate::rpc::Rpc;
use crate::view::View;

impl App {
    /// A key in a list view.
    pub(super) fn view_key(&mut self, key: KeyEvent) {
        let app = self;
        let len = match &app.view {
            View::Sessions { list, .. } => list.as_ref().map_or(0, Vec::len),
            View::Tickets { list, .. } => list.as_ref().map_or(0, Vec::len),
            View::Inbox { .. } => app.pending.len(),
            View::Ticket(_) | View::Chat => 0,
        };
        let selected = match &mut app.view {
            View::Sessions { selected, .. }
            | View::Tickets { selected, .. }
            | View::Inbox { selected } => Some(selected),
            View::Ticket(_) | View::Chat => None,
        };
        match key.code {
            KeyCode::Esc | KeyCode::Char('q') => match app.view {
                View::Ticket(_) => app.open_tickets(),
                _ => app.view = View::Chat,
            },
            KeyCode::Down | KeyCode::Char('j') => {
                if let Some(s) = selected {
                    *s = (*s + 1).min(len.saturating_sub(1));
                }
            }
            KeyCode::Up | KeyCode::Char('k') => {
                if let Some(s) = selected {
                    *s = s.saturating_sub(1);
                }
            }
            KeyCode::Enter => app.open_selected(),
            _ => {}
        }
    }

    /// Enter in a list view: attach, read, or decide what is selected.
    fn open_selected(&mut self) {
        let app = self;
        match &app.view {
            View::Sessions {
                list: Some(list),
                selected,
                ..
            } => {
                if let Some(s) = list.get(*selected) {
                    let id = s.id.clone();
                    app.attach(id);
                }
            }
            View::Tickets {
                list: Some(list),
                selected,
            } => {
                if let Some(t) = list.get(*selected) {
                    let id = t.id.clone();
                    app.send(Rpc::GetTicket(tinycode_shared::proto::GetTicketRequest {
                        id,
                        ..Default::default()
                    }));
                }
            }
            View::Inbox { selected } => {
                if let Some(r) = app.pending.values().nth(*selected) {
                    let id = r.approval_id.clone();
                    app.dialog.focus(&id);
                    app.view = View::Chat;
                }
            }
            _ => {}
        }
    }

    /// The `/status` text, from what the client already holds.
    pub fn status_text(&self) -> String {
        let app = self;
        let mut out = String::new();
        if let Some(d) = &app.daemon {
            out.push_str(&format!(
                "daemon: tinycoded {} (pid {}) · workspace {} · {} events · socket {}\n",
                d.version, d.pid, d.workspace, d.last_sequence, d.socket_path
            ));
        }
        match &app.session {
            Some(s) => out.push_str(&format!(
                "session: {} \"{}\" · model {} · {} turns · {} messages · context {} tokens · {} attached · {}\n",
                s.id,
                s.title,
                s.model,
                s.turns,
                s.messages,
                s.context_tokens,
                s.attached_clients,
                if s.running { "running" } else { "idle" }
            )),
            None => out.push_str("session: none attached\n"),
        }
        out.push_str(&format!(
            "approvals waiting: {} here, {} in all · connection: {:?}",
            app.answerable().count(),
            app.pending.len(),
            app.connection
        ));
        out
    }

    /// The `/mcp` text: each MCP server of the daemon and its state, as of the
    /// last status the daemon sent.
    pub fn mcp_text(&self) -> String {
        let app = self;
        let Some(daemon) = app.daemon.as_ref() else {
            return "not connected to tinycoded yet".into();
        };
        if daemon.mcp_servers.is_empty() {
            return "no MCP servers (config `mcpServers` in .tinycode/config.json)".into();
        }
        daemon
            .mcp_servers
            .iter()
            .map(|s| {
                let detail = match s.state.as_str() {
                    "ready" => format!("{} tools", s.tools),
                    "failed" | "unsupported" => tinycode_shared::text::clip(&s.error, 120),
                    _ => String::new(),
                };
                format!("{:<18} {:<12} {detail}", s.name, s.state)
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}
