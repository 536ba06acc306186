//! `/sessions`, `/sessions/<id>` (the live timeline and its composer),
//! `/triage` (the worker's board) and `/settings` (read-only).

use maud::{Markup, html};
use tinycode_shared::proto::{ApprovalInfo, DaemonStatus, Event, SessionInfo, TriageStatus};
use tinycode_shared::render;

use super::approvals::card;
use super::{Tab, csrf, layout};
use crate::person::Person;
use crate::timeline::session_item;

pub fn sessions(person: &Person, from: u64, list: &[SessionInfo], more: bool) -> Markup {
    let body = html! {
        h1 { "Sessions" }
        form.new-session method="post" action="/sessions" {
            (csrf(person))
            input name="title" placeholder="title of a new session" maxlength="200";
            button type="submit" { "New session" }
        }
        section #sessions data-live="session-" data-src="/sessions?part=live" {
            (sessions_live(list, more))
        }
    };
    layout("Sessions", person, Tab::Sessions, from, body)
}

pub fn sessions_live(list: &[SessionInfo], more: bool) -> Markup {
    html! {
        table.sessions {
            thead { tr { th { "Session" } th { "Title" } th { "Model" } th { "Turns" } th { "State" } th { "Waiting" } } }
            tbody {
                @for s in list {
                    tr {
                        td { a href={ "/sessions/" (s.id) } { (s.id) } }
                        td { (s.title) @if !s.parent_session_id.is_empty() { " " span.tag { "sub-agent of " (s.parent_session_id) } } }
                        td { (s.model) }
                        td { (s.turns) }
                        td { @if s.running { "running" } @else { "idle" } @if s.queued > 0 { " · " (s.queued) " queued" } }
                        td { @if !s.pending_approvals.is_empty() { a href="/approvals" { (s.pending_approvals.len()) " approvals" } } }
                    }
                }
            }
        }
        @if more { p { "Older sessions are not shown." } }
    }
}

pub struct SessionView {
    pub info: SessionInfo,
    pub events: Vec<Event>,
    pub pending: Vec<ApprovalInfo>,
    /// The log's last sequence when the timeline was read: the live
    /// stream continues after it.
    pub last_sequence: u64,
}

pub fn session(person: &Person, v: &SessionView) -> Markup {
    let s = &v.info;
    let body = html! {
        h1 { (s.id) " " span.subject { (s.title) } }
        p.facts {
            "model " (s.model)
            @if !s.approve.is_empty() { " · approvals " (s.approve) }
            " · " (s.turns) " turns · " (s.context_tokens) " tokens of context"
            @if !s.parent_session_id.is_empty() {
                " · sub-agent of " a href={ "/sessions/" (s.parent_session_id) } { (s.parent_session_id) }
            }
        }
        @if !s.agents.is_empty() {
            ul.agents {
                @for a in &s.agents {
                    li { "sub-agent " (a.agent_id) " (" (a.state) "): " a href={ "/sessions/" (a.session_id) } { (a.task) } }
                }
            }
        }
        section #pending data-live="approval-" data-src={ "/sessions/" (s.id) "?part=pending" } {
            (session_pending(person, &s.id, &v.pending))
        }
        ol.timeline #timeline data-session=(s.id) data-after=(v.last_sequence) {
            @for e in &v.events { (session_item(e)) }
        }
        div.streaming #streaming hidden { pre.text #streaming-text {} }
        form.composer #composer method="post" action={ "/sessions/" (s.id) "/send" } data-async {
            (csrf(person))
            textarea name="text" rows="3" required maxlength="20000" placeholder="A message, or /skill arguments" {}
            button type="submit" { "Send" }
        }
        form.cancel method="post" action={ "/sessions/" (s.id) "/cancel" } data-async {
            (csrf(person))
            button type="submit" { "Cancel the turn" }
        }
    };
    layout(
        &format!("{} {}", s.id, s.title),
        person,
        Tab::Sessions,
        v.last_sequence,
        body,
    )
}

/// A session's approvals waiting for a decision, inline in its timeline.
pub fn session_pending(person: &Person, id: &str, pending: &[ApprovalInfo]) -> Markup {
    let back = format!("/sessions/{id}");
    html! { @for a in pending { (card(person, a, &back)) } }
}

pub fn triage(person: &Person, from: u64, status: &TriageStatus) -> Markup {
    let body = html! {
        h1 { "Triage" }
        section #triage data-live="triage-,approval-" data-src="/triage?part=live" {
            (triage_live(status))
        }
    };
    layout("Triage", person, Tab::Triage, from, body)
}

const STATE_ORDER: [i32; 7] = [2, 3, 1, 4, 6, 5, 7];

pub fn triage_live(s: &TriageStatus) -> Markup {
    html! {
        p.counts { (render::triage_counts(s)) @if !s.auto_triage { " · automatic triage is off" } }
        @if !s.queues.is_empty() {
            p.queues { "Routed: " @for q in &s.queues { span.tag { (q.queue) " " (q.tickets) } " " } }
        }
        @for state in STATE_ORDER {
            @let items: Vec<_> = s.items.iter().filter(|i| i.state == state).collect();
            @if !items.is_empty() {
                h2 { (render::triage_state_name(state)) " (" (items.len()) ")" }
                table.triage data-state=(render::triage_state_name(state)) {
                    tbody {
                        @for i in items {
                            tr {
                                td { a href={ "/tickets/" (i.ticket_id) } { (i.ticket_id) } }
                                td { @if !i.session_id.is_empty() { a href={ "/sessions/" (i.session_id) } { (i.session_id) } } }
                                td { (i.category) " " (i.priority) }
                                td { (i.queue) @if i.escalate_level > 0 { " · escalated " (i.escalate_level) } }
                                td { @for a in &i.approval_ids { a href={ "/approvals#" (a) } { (a) } " " } }
                                td { (i.outcome) " " span.error { (i.error) } }
                            }
                        }
                    }
                }
            }
        }
    }
}

pub fn settings(person: &Person, from: u64, s: &DaemonStatus) -> Markup {
    let body = html! {
        h1 { "Settings" }
        p.note { "Read-only here: change them with " code { "tinycode config" } ", " code { "tinycode mcp" } " and " code { "tinycode skills" } "." }
        dl.facts {
            dt { "Model" } dd #model { (s.default_model) }
            dt { "Permission mode" } dd { (s.permission_mode) }
            dt { "Workspace" } dd { code { (s.workspace) } }
            dt { "Daemon" } dd { "tinycoded " (s.version) ", pid " (s.pid) ", " (s.event_count) " events" }
            dt { "Queues" } dd { (s.queues.join(", ")) }
            dt { "Categories" } dd { (s.categories.join(", ")) }
            @if !s.needs_restart.is_empty() { dt { "Needs a restart" } dd { (s.needs_restart.join(", ")) } }
        }
        h2 { "MCP servers" }
        table.mcp {
            thead { tr { th { "Server" } th { "State" } th { "Tools" } th { "Error" } } }
            tbody {
                @for m in &s.mcp_servers {
                    tr { td { (m.name) } td { (m.state) } td { (m.tools) } td.error { (m.error) } }
                }
            }
        }
        h2 { "Skills" }
        ul.skills { @for k in &s.skills { li { code { "/" (k.name) } " " (k.description) } } }
        @if !s.workspace_problems.is_empty() {
            h2 { "Files refused" }
            ul { @for p in &s.workspace_problems { li { code { (p.file) } ": " (p.reason) } } }
        }
    };
    layout("Settings", person, Tab::Settings, from, body)
}
