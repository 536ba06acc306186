//! Events as the page shows them: a session's timeline (messages, folded
//! thinking, tool lines with their results, turns, sub-agents) and a
//! ticket's history (each change with who made it and when). Every text
//! passes through maud's escaping: customers and models wrote it.

use maud::{Markup, html};
use tinycode_shared::proto::event::Payload;
use tinycode_shared::proto::{ClientRef, Event, ToolOrigin};
use tinycode_shared::render;

/// `2026-12-03 10:11:12` (UTC) of an event.
pub fn when(event: &Event) -> String {
    event
        .recorded_at
        .as_ref()
        .map(|t| render::rfc3339(t.seconds, t.nanos))
        .map(|t| t.replace('T', " ").chars().take(19).collect())
        .unwrap_or_default()
}

/// One event of a session's stream as a timeline item carrying its
/// sequence (`data-seq`: the page shows each once, in order).
pub fn session_item(event: &Event) -> Markup {
    let seq = event.sequence;
    let Some(payload) = &event.payload else {
        return html! { li.ev data-seq=(seq) {} };
    };
    let body = match payload {
        Payload::UserMessageAdded(m) => html! {
            div.msg.user {
                span.who { (render::client_name(m.from.as_ref())) }
                @if !m.skill.is_empty() { span.tag { "/" (m.skill) } }
                pre.text { (m.text) }
            }
        },
        Payload::AssistantMessageAdded(m) => html! {
            div.msg.assistant {
                @for t in &m.thinking {
                    details.thinking { summary { "thinking" } pre { (t) } }
                }
                @if !m.text.is_empty() { pre.text { (m.text) } }
                @for c in &m.tool_calls {
                    div.call { "→ " code { (c.name) } " " span.args { (clip(&c.arguments_json, 300)) } }
                }
            }
        },
        Payload::ToolCallFinished(f) => html! {
            details.tool.error[f.is_error] {
                summary { (render::tool_line(f)) }
                pre { (f.content) }
            }
        },
        Payload::TurnStarted(t) => html! { div.turn { "turn " (t.turn) } },
        Payload::TurnCompleted(c) => html! { div.turn.end { (render::turn_line(c)) } },
        Payload::SubAgentSpawned(s) => html! {
            div.agent {
                "sub-agent " (s.agent_id) ": " (s.task) " — "
                a href={ "/sessions/" (s.session_id) } { "its timeline" }
            }
        },
        Payload::SubAgentFinished(s) => html! {
            div.agent {
                "sub-agent " (s.agent_id) " " (render::outcome_name(s.outcome)) ": " (clip(&s.summary, 400))
            }
        },
        Payload::SessionCreated(c) => html! {
            div.meta { "created by " (render::client_name(c.created_by.as_ref())) " · model " (c.model) }
        },
        Payload::SessionRenamed(r) => html! { div.meta { "renamed “" (r.title) "”" } },
        Payload::SessionCompacted(c) => html! {
            div.meta { (c.summarized_messages) " earlier messages summarised" }
        },
        other => match render::session_line(other) {
            Some(line) => html! { div.meta { (line) } },
            None => html! { div.meta { (kind_of(event)) } },
        },
    };
    html! { li.ev data-seq=(seq) data-kind=(kind_of(event)) { span.at { (when(event)) } (body) } }
}

/// The payload's kind: `ticket_routed`.
pub fn kind_of(event: &Event) -> String {
    render::event_line(event)
        .split_whitespace()
        .nth(3)
        .unwrap_or("event")
        .to_string()
}

fn who(by: Option<&ClientRef>, origin: Option<&ToolOrigin>) -> Markup {
    match (by, origin) {
        (Some(by), _) => html! { span.who { (render::client_name(Some(by))) } },
        (None, Some(o)) if !o.session_id.is_empty() => html! {
            span.who { "the agent, " a href={ "/sessions/" (o.session_id) } { "session " (o.session_id) } " turn " (o.turn) }
        },
        _ => html! { span.who { "the desk" } },
    }
}

fn reason(text: &str) -> Markup {
    html! { @if !text.is_empty() { " — " span.reason { (text) } } }
}

/// One change of a ticket's stream: what, who, when.
pub fn ticket_item(event: &Event) -> Markup {
    let what = match &event.payload {
        Some(Payload::TicketImported(t)) => html! { "imported from " code { (t.file) } },
        Some(Payload::TicketCreated(_)) => html! { "created" },
        Some(Payload::TicketUpdatedFromFile(t)) => html! { "edited in " code { (t.file) } },
        Some(Payload::CustomerMessageAdded(_)) => html! { "the customer wrote" },
        Some(Payload::AgentReplyAdded(r)) => html! {
            "reply to the customer " (who(r.by.as_ref(), r.origin.as_ref()))
        },
        Some(Payload::TicketClassified(c)) => html! {
            "classified " b { (dash(&c.category)) " · " (dash(&c.priority)) " · " (dash(&c.intent)) }
            " by " (who(c.by.as_ref(), c.origin.as_ref()))
        },
        Some(Payload::TicketRouted(r)) => html! {
            "routed to " b { (r.queue) } " by " (who(r.by.as_ref(), r.origin.as_ref())) (reason(&r.reason))
        },
        Some(Payload::TicketEscalated(e)) => html! {
            "escalated to level " b { (e.level) } " by " (who(None, e.origin.as_ref())) (reason(&e.reason))
        },
        Some(Payload::TicketNoteAdded(n)) => html! { "note by " (who(n.by.as_ref(), None)) },
        Some(Payload::TicketStatusChanged(s)) => html! {
            "status → " b { (s.status) } " by " (who(s.by.as_ref(), None)) (reason(&s.reason))
        },
        _ => html! { (kind_of(event)) },
    };
    html! { li.ev data-seq=(event.sequence) { span.at { (when(event)) } " " (what) } }
}

fn dash(s: &str) -> &str {
    if s.is_empty() { "—" } else { s }
}

/// At most `n` characters of `s`, with `…` when cut.
pub fn clip(s: &str, n: usize) -> String {
    match s.char_indices().nth(n) {
        Some((cut, _)) => format!("{}…", &s[..cut]),
        None => s.to_string(),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use tinycode_shared::proto::{TicketRouted, UserMessageAdded};

    #[test]
    fn what_a_customer_or_model_wrote_is_escaped() {
        let event = Event {
            sequence: 7,
            stream_id: "session-S-1".into(),
            payload: Some(Payload::UserMessageAdded(UserMessageAdded {
                text: "<script>alert(1)</script><img src=x onerror=alert(2)>".into(),
                ..Default::default()
            })),
            ..Default::default()
        };
        let html = session_item(&event).into_string();
        assert!(html.contains("data-seq=\"7\""), "{html}");
        assert!(
            !html.contains("<script>") && !html.contains("<img"),
            "{html}"
        );
        assert!(html.contains("&lt;script&gt;"), "{html}");
    }

    #[test]
    fn a_ticket_change_says_who_made_it() {
        let event = Event {
            sequence: 3,
            payload: Some(Payload::TicketRouted(TicketRouted {
                queue: "billing".into(),
                reason: "refund <b>".into(),
                by: Some(ClientRef {
                    name: "Ana (via tinycode-web/0.1.0)".into(),
                    uid: 1000,
                    pid: 42,
                }),
                ..Default::default()
            })),
            ..Default::default()
        };
        let html = ticket_item(&event).into_string();
        assert!(html.contains("Ana (via tinycode-web/0.1.0)"), "{html}");
        assert!(html.contains("refund &lt;b&gt;"), "{html}");
        assert_eq!(clip("abcdef", 3), "abc…");
        assert_eq!(clip("abc", 3), "abc");
    }
}
