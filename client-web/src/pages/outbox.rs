//! `/outbox`: what the desk owes the customers of connected helpdesks —
//! replies and resolutions, each with its state, attempts and last error —
//! and a "Try again" button on a parked one. The rows are the daemon's
//! `Connectors.ListOutbox`; the page only lays them out.

use maud::{Markup, html};
use tinycode_shared::proto::{OutboxItem, SourceStatus};

use super::{Tab, csrf, layout};
use crate::person::Person;

pub fn outbox(
    person: &Person,
    from: u64,
    sources: &[SourceStatus],
    items: &[OutboxItem],
) -> Markup {
    let body = html! {
        h1 { "Outbox" }
        @if sources.is_empty() {
            p.empty #no-sources { "No helpdesk is connected: see " code { "connectors" } " in docs/CONNECTORS.md." }
        } @else {
            table.sources #sources {
                thead { tr { th { "Source" } th { "In" } th { "Out" } th { "Waiting" } th { "Failed" } th { "Last error" } } }
                tbody {
                    @for s in sources {
                        tr {
                            td { (s.name) @if !s.kind.is_empty() && !s.secret_set { " — " strong { "$" (s.secret_env) " is not set" } } }
                            td { (s.received) } td { (s.sent) } td { (s.pending) } td { (s.failed) }
                            td { (s.last_error) }
                        }
                    }
                }
            }
        }
        section #outbox-list data-live="outbox-,ticket-" data-src="/outbox?part=live" {
            (outbox_live(person, items))
        }
    };
    layout("Outbox", person, Tab::Outbox, from, body)
}

pub fn outbox_live(person: &Person, items: &[OutboxItem]) -> Markup {
    html! {
        @if items.is_empty() {
            p.empty #no-deliveries { "Nothing owed to customers." }
        } @else {
            table.outbox {
                thead { tr { th { "#" } th { "Ticket" } th { "Source" } th { "Kind" } th { "State" } th { "Tries" } th { "When / why" } th {} } }
                tbody {
                    @for i in items {
                        tr data-state=(i.state) {
                            td { (i.sequence) }
                            td { a href={ "/tickets/" (i.ticket_id) } { (i.ticket_id) } }
                            td { (i.source) }
                            td { (i.kind) }
                            td { (i.state) }
                            td { (i.attempts) }
                            td {
                                @match i.state.as_str() {
                                    "sent" => { "sent " (i.sent_at) }
                                    "failed" => { (i.last_error) }
                                    _ => { @if i.last_error.is_empty() { "due now" } @else { "next " (i.next_at) " — " (i.last_error) } }
                                }
                            }
                            td {
                                @if i.state == "failed" {
                                    form method="post" action={ "/outbox/" (i.sequence) "/retry" } {
                                        (csrf(person))
                                        button type="submit" { "Try again" }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_parked_delivery_offers_a_retry_and_no_text_runs_as_markup() {
        let person = Person {
            id: "p".into(),
            name: "Ana".into(),
            csrf: "tok".into(),
        };
        let items = [
            OutboxItem {
                sequence: 42,
                ticket_id: "T-1001".into(),
                state: "failed".into(),
                last_error: "<script>alert(1)</script> answered 503".into(),
                ..OutboxItem::default()
            },
            OutboxItem {
                sequence: 41,
                ticket_id: "T-1001".into(),
                state: "sent".into(),
                ..OutboxItem::default()
            },
        ];
        let page = outbox_live(&person, &items).into_string();
        assert!(page.contains(r#"action="/outbox/42/retry""#), "{page}");
        assert!(!page.contains("/outbox/41/retry"), "{page}");
        assert!(page.contains(r#"name="csrf" value="tok""#), "{page}");
        assert!(!page.contains("<script>"), "{page}");
        assert!(page.contains("&lt;script&gt;"), "{page}");
    }
}
