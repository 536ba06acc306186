//! The pages, rendered on the server with maud (every interpolated text is
//! escaped: customers write the tickets, models write the replies). Each
//! page is a bookmarkable URL; a live page marks the part that changes
//! with `data-live` (the stream prefixes that change it) and `data-src`
//! (where the fresh part is fetched), and the page's script refreshes it
//! when such an event arrives.

mod approvals;
mod desk;
mod outbox;
mod reports;
mod sessions;

pub use approvals::{ApprovalsView, approvals, approvals_live};
pub use desk::{DeskView, Filter, TicketView, desk, desk_live, ticket, ticket_live};
pub use outbox::{outbox, outbox_live};
pub use reports::{report, reports, reports_live};
pub use sessions::{
    SessionView, session, session_pending, sessions, sessions_live, settings, triage, triage_live,
};

use axum::http::StatusCode;
use maud::{DOCTYPE, Markup, html};

use crate::person::Person;

/// Which tab of the navigation a page is.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Tab {
    Desk,
    Approvals,
    Sessions,
    Triage,
    Reports,
    Outbox,
    Settings,
}

const TABS: [(Tab, &str, &str); 7] = [
    (Tab::Desk, "/", "Desk"),
    (Tab::Approvals, "/approvals", "Approvals"),
    (Tab::Sessions, "/sessions", "Sessions"),
    (Tab::Triage, "/triage", "Triage"),
    (Tab::Reports, "/reports", "Reports"),
    (Tab::Outbox, "/outbox", "Outbox"),
    (Tab::Settings, "/settings", "Settings"),
];

/// The head of every page; `live` pages load the script (the sign-in and
/// refusal pages have nothing live).
fn head(title: &str, live: bool) -> Markup {
    html! {
        meta charset="utf-8";
        meta name="viewport" content="width=device-width, initial-scale=1";
        title { (title) " · tinycode" }
        link rel="icon" href="/assets/favicon.svg";
        link rel="stylesheet" href="/assets/app.css";
        @if live { script type="module" src="/assets/app.js" {} }
    }
}

/// A whole page: navigation, who is working, the body. `live` lists the
/// stream prefixes whose events the page's script listens to (for
/// refreshes and approval notifications); `from` is the log sequence the
/// page was read at.
pub fn layout(title: &str, person: &Person, tab: Tab, from: u64, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                (head(title, true))
                meta name="csrf" content=(person.csrf);
            }
            body data-after=(from) {
                header.top {
                    a.brand href="/" { "tinycode" }
                    nav {
                        @for (t, href, name) in TABS {
                            a href=(href) class=[(t == tab).then_some("active")] { (name) }
                        }
                    }
                    span.live-state #live-state title="live updates" { "○" }
                    button.notify #notify type="button" hidden { "Notify me" }
                    span.person { (person.name) }
                }
                main #main { (body) }
            }
        }
    }
}

/// The page a refused or failed request gets: what happened and what to
/// do, nothing else.
pub fn refused(status: StatusCode, why: &str) -> Markup {
    let title = status.canonical_reason().unwrap_or("Refused");
    html! {
        (DOCTYPE)
        html lang="en" {
            head { (head(title, false)) }
            body {
                main.refused {
                    h1 { (status.as_u16()) " " (title) }
                    p #why { (why) }
                    p { a href="/" { "Back to the desk" } }
                }
            }
        }
    }
}

/// Asked once per browser session: the name recorded with this person's
/// decisions.
pub fn whoami(person: &Person, next: &str) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head { (head("Who is working", false)) }
            body {
                main.whoami {
                    h1 { "Who is working?" }
                    p { "Your name is recorded with every reply, note and decision you make here." }
                    form method="post" action="/whoami" {
                        (csrf(person))
                        input type="hidden" name="next" value=(next);
                        label { "Name " input #name name="name" required maxlength="80" autofocus value=(person.name); }
                        button type="submit" { "Start" }
                    }
                }
            }
        }
    }
}

/// The hidden CSRF field every form carries.
pub fn csrf(person: &Person) -> Markup {
    html! { input type="hidden" name="csrf" value=(person.csrf); }
}

/// `<select>` of `options`, `current` chosen, with an empty first choice
/// labelled `empty` when given.
pub fn select(name: &str, options: &[String], current: &str, empty: Option<&str>) -> Markup {
    html! {
        select name=(name) {
            @if let Some(label) = empty {
                option value="" selected[current.is_empty()] { (label) }
            }
            @for o in options {
                option value=(o) selected[o == current] { (o) }
            }
        }
    }
}

/// Unix milliseconds as `2026-12-03 10:11:12` (UTC).
pub fn at_ms(ms: i64) -> String {
    if ms <= 0 {
        return String::new();
    }
    let t = tinycode_shared::render::rfc3339(ms / 1000, ((ms % 1000) * 1_000_000) as i32);
    t.replace('T', " ").chars().take(19).collect()
}

/// A unified diff with its added and removed lines marked for colour.
pub fn diff(text: &str) -> Markup {
    html! {
        pre.diff {
            @for line in text.lines() {
                @let class = if line.starts_with("+++") || line.starts_with("---") {
                    "file"
                } else if line.starts_with('+') {
                    "add"
                } else if line.starts_with('-') {
                    "del"
                } else if line.starts_with("@@") {
                    "hunk"
                } else {
                    "ctx"
                };
                span class=(class) { (line) } "\n"
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_refusal_escapes_its_reason_and_diffs_are_marked() {
        let page = refused(StatusCode::FORBIDDEN, "<b>nope</b>").into_string();
        assert!(page.contains("403 Forbidden") && page.contains("&lt;b&gt;nope"));
        let d = diff("--- a\n+++ b\n@@ -1 +1 @@\n-old\n+<new>\n same").into_string();
        assert!(d.contains(r#"<span class="del">-old</span>"#), "{d}");
        assert!(
            d.contains(r#"<span class="add">+&lt;new&gt;</span>"#),
            "{d}"
        );
        assert_eq!(at_ms(0), "");
        assert_eq!(at_ms(1_000), "1970-01-01 00:00:01");
    }

    #[test]
    fn a_ticket_shows_the_models_confidence_and_a_held_decision_escaped() {
        use tinycode_shared::proto::{DecisionSuggested, FieldConfidence, Ticket};
        let c = |field: &str, value| FieldConfidence {
            field: field.into(),
            value,
        };
        let view = TicketView {
            ticket: Ticket {
                id: "T-1001".into(),
                confidence: vec![c("category", 0.97)],
                suggestion: Some(DecisionSuggested {
                    queue: "<b>售后组</b>".into(),
                    confidence: vec![c("queue", 0.41)],
                    below: vec!["queue".into()],
                    ..Default::default()
                }),
                ..Ticket::default()
            },
            history: Vec::new(),
            triage: None,
            triage_events: Vec::new(),
            queues: Vec::new(),
            categories: Vec::new(),
        };
        let html = ticket_live(&view).into_string();
        assert!(
            html.contains(r#"<dd class="confidence">category high 0.97</dd>"#),
            "{html}"
        );
        assert!(
            html.contains("suggested → &lt;b&gt;售后组&lt;/b&gt; (queue low 0.41; below: queue)"),
            "{html}"
        );
        let plain = TicketView {
            ticket: Ticket::default(),
            ..view
        };
        let html = ticket_live(&plain).into_string();
        assert!(
            !html.contains("confidence") && !html.contains("Needs review"),
            "{html}"
        );
    }
}
