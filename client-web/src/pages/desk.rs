//! `/` (the board of tickets) and `/tickets/<id>` (one ticket, its
//! history and a person's actions).

use maud::{Markup, html};
use tinycode_shared::proto::{Event, SearchHit, Ticket, TriageItem};
use tinycode_shared::render::sla;

use super::{Tab, csrf, layout, select};
use crate::person::Person;
use crate::timeline::{clip, session_item, ticket_item};

pub const STATUSES: [&str; 5] = ["open", "triaged", "routed", "escalated", "resolved"];
pub const PRIORITIES: [&str; 4] = ["P0", "P1", "P2", "P3"];

fn names(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

/// The board's filters, as the URL carries them.
#[derive(Debug, Default, Clone, serde::Deserialize, serde::Serialize)]
#[serde(default)]
pub struct Filter {
    pub status: String,
    pub queue: String,
    pub priority: String,
    pub category: String,
    /// Full-text search (`Tickets.Search`) instead of the board.
    pub q: String,
    /// The page: an offset into the urgent order.
    pub from: String,
    /// `live`: only the part that changes.
    pub part: String,
}

impl Filter {
    /// This filter as a query string (without `from`), plus `extra`.
    pub fn query(&self, extra: &str) -> String {
        let f = self;
        let pairs: Vec<(&str, &str)> = [
            ("status", f.status.as_str()),
            ("queue", &f.queue),
            ("priority", &f.priority),
            ("category", &f.category),
            ("q", &f.q),
        ]
        .into_iter()
        .filter(|(_, v)| !v.is_empty())
        .collect();
        let mut q = serde_urlencoded::to_string(pairs).unwrap_or_default();
        if !extra.is_empty() {
            if !q.is_empty() {
                q.push('&');
            }
            q.push_str(extra);
        }
        q
    }
}

pub struct DeskView {
    pub filter: Filter,
    pub queues: Vec<String>,
    pub categories: Vec<String>,
    pub tickets: Vec<Ticket>,
    pub total: u32,
    pub next: String,
    pub hits: Option<Vec<SearchHit>>,
}

pub fn desk(person: &Person, from: u64, v: &DeskView) -> Markup {
    let f = &v.filter;
    let body = html! {
        h1 { "Desk" }
        form.filters method="get" action="/" {
            input type="search" name="q" value=(f.q) placeholder="Search tickets" aria-label="search";
            (select("status", &names(&STATUSES), &f.status, Some("any status")))
            (select("queue", &v.queues, &f.queue, Some("any queue")))
            (select("priority", &names(&PRIORITIES), &f.priority, Some("any priority")))
            (select("category", &v.categories, &f.category, Some("any category")))
            button type="submit" { "Show" }
            a href="/" { "clear" }
        }
        nav.queues {
            "Queues: "
            @for q in &v.queues {
                a href={ "/?" (serde_urlencoded::to_string([("queue", q)]).unwrap_or_default()) } class=[(f.queue == *q).then_some("active")] { (q) } " "
            }
        }
        section #board data-live="ticket-" data-src={ "/?" (f.query("part=live")) } {
            (desk_live(v))
        }
    };
    layout("Desk", person, Tab::Desk, from, body)
}

/// The part of the desk that changes as tickets do.
pub fn desk_live(v: &DeskView) -> Markup {
    if let Some(hits) = &v.hits {
        return html! {
            p.count { (hits.len()) " matches for “" (v.filter.q) "”" }
            ol.hits {
                @for h in hits {
                    li {
                        @if h.kind == "ticket" {
                            a href={ "/tickets/" (h.id) } { (h.id) } " " b { (h.title) }
                        } @else {
                            span.tag { (h.kind) } " " (h.id) " " b { (h.title) }
                        }
                        div.snippet { (h.snippet) }
                    }
                }
            }
        };
    }
    html! {
        p.count { (v.total) " tickets, most urgent and newest first" }
        table.tickets {
            thead { tr { th { "Ticket" } th { "Subject" } th { "Customer" } th { "Priority" } th { "Status" } th { "SLA" } th { "Queue" } th { "Category" } th { "Created" } } }
            tbody {
                @for t in &v.tickets {
                    tr data-id=(t.id) class={ "ticket p-" (t.priority) " s-" (t.status) } {
                        td { a href={ "/tickets/" (t.id) } { (t.id) } }
                        td.subject {
                            a href={ "/tickets/" (t.id) } { (t.subject) }
                            @if let Some(m) = t.messages.last() { div.preview { (clip(&m.text, 120)) } }
                        }
                        td { (t.customer) }
                        td.priority { (t.priority) }
                        td { span.status { (t.status) } }
                        td { (sla_badge(t)) }
                        td { (t.queue) }
                        td { (t.category) }
                        td.at { (t.created_at.chars().take(16).collect::<String>().replace('T', " ")) }
                    }
                }
            }
        }
        @if !v.next.is_empty() {
            p { a.next href={ "/?" (v.filter.query(&format!("from={}", v.next))) } { "More tickets →" } }
        }
    }
}

/// A ticket's SLA at a glance: its worst state and the nearest due time.
fn sla_badge(t: &Ticket) -> Markup {
    let (kind, label) = sla::state(t);
    html! {
        span class={ "sla " (kind) } title=(label) {
            @if kind == "none" { "-" } @else { (label) " · " (sla::due(t)) }
        }
    }
}

pub struct TicketView {
    pub ticket: Ticket,
    pub history: Vec<Event>,
    pub triage: Option<TriageItem>,
    /// The triage session's timeline.
    pub triage_events: Vec<Event>,
    pub queues: Vec<String>,
    pub categories: Vec<String>,
}

pub fn ticket(person: &Person, from: u64, v: &TicketView) -> Markup {
    let t = &v.ticket;
    let post = |action: &str| format!("/tickets/{}/{action}", t.id);
    let body = html! {
        h1 { (t.id) " " span.subject { (t.subject) } }
        section #ticket data-live={ "ticket-" (t.id) ",triage-" (t.id) } data-src={ "/tickets/" (t.id) "?part=live" } {
            (ticket_live(v))
        }
        section.actions {
            h2 { "Act on this ticket" }
            @if t.suggestion.is_some() {
                form.review method="post" action=(post("review")) {
                    (csrf(person))
                    button type="submit" { "Accept the suggested decision" }
                    " (or correct it with Classify and Route below)"
                }
            }
            form.reply method="post" action=(post("reply")) {
                (csrf(person))
                label { "Reply to the customer" textarea name="text" rows="4" required maxlength="20000" {} }
                button type="submit" { "Send reply" }
            }
            form.note method="post" action=(post("note")) {
                (csrf(person))
                label { "Internal note" textarea name="text" rows="2" required maxlength="20000" {} }
                button type="submit" { "Add note" }
            }
            form.classify method="post" action=(post("classify")) {
                (csrf(person))
                (select("category", &v.categories, &t.category, Some("category")))
                (select("priority", &names(&PRIORITIES), &t.priority, Some("priority")))
                input name="intent" value=(t.intent) placeholder="intent" maxlength="200";
                button type="submit" { "Classify" }
            }
            form.route method="post" action=(post("route")) {
                (csrf(person))
                (select("queue", &v.queues, &t.queue, None))
                input name="reason" placeholder="why (kept as a note)" maxlength="2000";
                button type="submit" { @if t.queue.is_empty() { "Route" } @else { "Reassign" } }
            }
            form.status method="post" action=(post("status")) {
                (csrf(person))
                input name="reason" placeholder="why (kept as a note)" maxlength="2000";
                @if t.status == "resolved" {
                    button type="submit" name="status" value="open" { "Reopen" }
                } @else {
                    button type="submit" name="status" value="resolved" { "Close" }
                }
            }
            form.triage method="post" action=(post("triage")) {
                (csrf(person))
                button type="submit" { "Triage again" }
            }
        }
    };
    layout(
        &format!("{} {}", t.id, t.subject),
        person,
        Tab::Desk,
        from,
        body,
    )
}

/// The part of a ticket's page that changes as it does.
pub fn ticket_live(v: &TicketView) -> Markup {
    let t = &v.ticket;
    html! {
        dl.facts {
            dt { "Customer" } dd { (t.customer) " · " (t.channel) }
            dt { "Status" } dd.status { (t.status) }
            dt { "Priority" } dd.priority { (t.priority) }
            dt { "Category" } dd.category { (t.category) @if !t.intent.is_empty() { " · " (t.intent) } }
            dt { "Queue" } dd.queue { (t.queue) }
            @if t.escalate_level > 0 { dt { "Escalated" } dd { "level " (t.escalate_level) } }
            @if !t.confidence.is_empty() {
                dt { "Confidence" } dd.confidence { (tinycode_shared::render::confidence(&t.confidence)) }
            }
            @if let Some(s) = &t.suggestion {
                dt { "Needs review" } dd.suggestion { (tinycode_shared::render::suggestion(s)) }
            }
            dt { "Created" } dd { (t.created_at) " · SLA " (t.sla_minutes) " min" }
            @for c in &t.sla {
                dt { "SLA" } dd class={ "sla-clock " (c.state) @if c.at_risk { " at-risk" } } { (sla::line(c)) }
            }
        }
        h2 { "Conversation" }
        ol.messages {
            @for m in &t.messages {
                li class={ "msg " (m.from) } {
                    span.who { (m.from) } " " span.at { (m.at) }
                    pre.text { (m.text) }
                }
            }
        }
        @if !t.notes.is_empty() {
            h2 { "Notes" }
            ol.notes {
                @for n in &t.notes { li { span.at { (n.at) } pre.text { (n.text) } } }
            }
        }
        h2 { "History" }
        ol.history { @for e in &v.history { (ticket_item(e)) } }
        @if let Some(item) = &v.triage {
            h2 { "Triage" }
            p.triage {
                (tinycode_shared::render::triage_state_name(item.state))
                @if !item.session_id.is_empty() {
                    " · " a href={ "/sessions/" (item.session_id) } { "session " (item.session_id) }
                }
                @if !item.outcome.is_empty() { " · " (item.outcome) }
                @if !item.error.is_empty() { " · " span.error { (item.error) } }
            }
            @if !v.triage_events.is_empty() {
                details.timeline {
                    summary { "Its timeline (" (v.triage_events.len()) " events)" }
                    ol.timeline { @for e in &v.triage_events { (session_item(e)) } }
                }
            }
        }
    }
}
