use serde_json::json;
use tinycode_shared::proto::{SlaAlert, Ticket, TicketMessage};

use super::*;
use crate::sla::Before;
use tinycode_shared::proto::Event;
use tinycode_shared::proto::event::Payload;

fn t(text: &str) -> i64 {
    crate::clock::parse_rfc3339(text).unwrap()
}

fn settings() -> SlaSettings {
    SlaSettings::from_json(&json!({
        "policies": [
            {"name": "standard", "firstResponse": "1h", "nextResponse": "2h", "resolution": "8h"}
        ]
    }))
    .unwrap()
}

fn ticket(messages: &[(&str, &str)], status: &str) -> Ticket {
    Ticket {
        id: "T-1".into(),
        created_at: "2026-12-01T09:00:00Z".into(),
        status: status.into(),
        messages: messages
            .iter()
            .map(|(from, at)| TicketMessage {
                from: from.to_string(),
                text: "…".into(),
                at: at.to_string(),
                delivery: String::new(),
            })
            .collect(),
        ..Ticket::default()
    }
}

fn facts() -> Facts {
    Facts {
        entered_at: t("2026-12-01T09:00:00Z"),
        ..Facts::default()
    }
}

fn by_target(clocks: &[Clock], target: Target) -> &Clock {
    clocks.iter().find(|c| c.target == target).unwrap()
}

#[test]
fn a_ticket_left_alone_is_at_risk_then_breached() {
    let s = settings();
    let tk = ticket(&[("customer", "2026-12-01T09:00:00Z")], "open");
    let f = facts();
    let now = t("2026-12-01T09:50:00Z");
    let clocks = clocks(&s, &tk, &f, now);
    let first = by_target(&clocks, Target::FirstResponse);
    assert_eq!(first.due, Some(t("2026-12-01T10:00:00Z")));
    assert_eq!(first.at_risk_at, Some(t("2026-12-01T09:48:00Z")));
    assert_eq!(first.state, State::Running);
    assert!(first.at_risk(now));
    let pending = pending_alerts(&clocks, &f);
    let kinds: Vec<_> = pending.iter().map(|a| (a.kind, a.target, a.at)).collect();
    assert_eq!(
        kinds,
        vec![
            (
                AlertKind::AtRisk,
                Target::FirstResponse,
                t("2026-12-01T09:48:00Z")
            ),
            (
                AlertKind::Breached,
                Target::FirstResponse,
                t("2026-12-01T10:00:00Z")
            ),
            (
                AlertKind::AtRisk,
                Target::Resolution,
                t("2026-12-01T15:24:00Z")
            ),
            (
                AlertKind::Breached,
                Target::Resolution,
                t("2026-12-01T17:00:00Z")
            ),
        ]
    );
    assert_eq!(
        next_alert(&s, &tk, &f),
        Some((t("2026-12-01T09:48:00Z"), AlertKind::AtRisk))
    );
    let later = super::clocks(&s, &tk, &f, t("2026-12-01T10:00:00Z"));
    assert_eq!(
        by_target(&later, Target::FirstResponse).state,
        State::Breached
    );
}

#[test]
fn a_reply_in_time_owes_no_first_response_alert() {
    let s = settings();
    let tk = ticket(
        &[
            ("customer", "2026-12-01T09:00:00Z"),
            ("agent", "2026-12-01T09:30:00Z"),
        ],
        "routed",
    );
    let f = facts();
    let clocks = clocks(&s, &tk, &f, t("2026-12-01T12:00:00Z"));
    let first = by_target(&clocks, Target::FirstResponse);
    assert_eq!(first.state, State::Met);
    assert_eq!(first.ended, Some(t("2026-12-01T09:30:00Z")));
    // Waiting on the customer since the reply: the resolution clock is
    // paused, and owes nothing.
    assert_eq!(by_target(&clocks, Target::Resolution).state, State::Paused);
    assert!(pending_alerts(&clocks, &f).is_empty());
    assert_eq!(next_alert(&s, &tk, &f), None);
}

#[test]
fn the_customer_writing_again_starts_the_next_response_and_resumes_resolution() {
    let s = settings();
    let tk = ticket(
        &[
            ("customer", "2026-12-01T09:00:00Z"),
            ("agent", "2026-12-01T09:30:00Z"),
            ("customer", "2026-12-01T11:30:00Z"),
        ],
        "routed",
    );
    let f = facts();
    let clocks = clocks(&s, &tk, &f, t("2026-12-01T12:00:00Z"));
    let next = by_target(&clocks, Target::NextResponse);
    assert_eq!((next.cycle, next.due), (1, Some(t("2026-12-01T13:30:00Z"))));
    // 30 minutes used before the reply, two hours paused: 7.5 h left
    // from 11:30.
    let resolution = by_target(&clocks, Target::Resolution);
    assert_eq!(resolution.due, Some(t("2026-12-01T19:00:00Z")));
    assert_eq!(resolution.state, State::Running);
}

#[test]
fn a_late_reply_is_a_breach_and_owes_its_alerts() {
    let s = settings();
    let tk = ticket(
        &[
            ("customer", "2026-12-01T09:00:00Z"),
            ("agent", "2026-12-01T10:30:00Z"),
        ],
        "routed",
    );
    let f = facts();
    let clocks = clocks(&s, &tk, &f, t("2026-12-01T11:00:00Z"));
    assert_eq!(
        by_target(&clocks, Target::FirstResponse).state,
        State::Breached
    );
    let owed: Vec<_> = pending_alerts(&clocks, &f)
        .into_iter()
        .filter(|a| a.target == Target::FirstResponse)
        .map(|a| a.kind)
        .collect();
    assert_eq!(owed, vec![AlertKind::AtRisk, AlertKind::Breached]);
}

#[test]
fn recorded_alerts_are_not_owed_again_and_old_moments_are_not_alerted() {
    let s = settings();
    let tk = ticket(&[("customer", "2026-12-01T09:00:00Z")], "open");
    let mut f = facts();
    let alert = |kind: fn(SlaAlert) -> Payload, version| Event {
        stream_id: "sla-T-1".into(),
        stream_version: version,
        payload: Some(kind(SlaAlert {
            ticket_id: "T-1".into(),
            target: "first_response".into(),
            ..SlaAlert::default()
        })),
        ..Event::default()
    };
    f.apply(&alert(Payload::SlaAtRisk, 1), &Before::default(), &tk);
    f.apply(&alert(Payload::SlaBreached, 2), &Before::default(), &tk);
    assert_eq!(f.alerts_version, 2);
    let owed = pending_alerts(&clocks(&s, &tk, &f, 0), &f);
    assert!(
        owed.iter().all(|a| a.target == Target::Resolution),
        "{owed:?}"
    );
    // Imported a day late: its moments had all passed before the desk
    // knew the ticket.
    let late = Facts {
        entered_at: t("2026-12-02T09:00:00Z"),
        ..Facts::default()
    };
    assert!(pending_alerts(&clocks(&s, &tk, &late, 0), &late).is_empty());
}

#[test]
fn resolving_stops_the_clocks_and_reopening_resumes_resolution() {
    let s = settings();
    let open = ticket(&[("customer", "2026-12-01T09:00:00Z")], "open");
    let mut f = facts();
    let status = |seconds: i64| Event {
        stream_id: "ticket-T-1".into(),
        stream_version: 2,
        recorded_at: Some(prost_types::Timestamp { seconds, nanos: 0 }),
        ..Event::default()
    };
    let resolved = ticket(&[("customer", "2026-12-01T09:00:00Z")], "resolved");
    f.apply(
        &status(t("2026-12-01T09:20:00Z")),
        &Before::default(),
        &resolved,
    );
    let clocks_now = clocks(&s, &resolved, &f, t("2026-12-01T12:00:00Z"));
    assert_eq!(
        by_target(&clocks_now, Target::FirstResponse).state,
        State::Stopped
    );
    assert_eq!(by_target(&clocks_now, Target::Resolution).state, State::Met);
    assert!(pending_alerts(&clocks_now, &f).is_empty());
    // Reopened at 10:20: 20 minutes were used, the hour resolved is not
    // counted.
    f.apply(
        &status(t("2026-12-01T10:20:00Z")),
        &Before {
            resolved: true,
            ..Before::default()
        },
        &open,
    );
    let reopened = super::clocks(&s, &open, &f, t("2026-12-01T10:30:00Z"));
    assert_eq!(
        by_target(&reopened, Target::Resolution).due,
        Some(t("2026-12-01T18:00:00Z"))
    );
}

#[test]
fn business_hours_and_the_tickets_own_target() {
    let s = SlaSettings::from_json(&json!({
        "businessHours": {"timeZone": "+00:00", "open": "09:00", "close": "17:00"},
        "policies": [
            {"name": "p0", "match": {"priority": "P0"}, "businessHours": false, "firstResponse": "1h"},
            {"name": "standard", "firstResponse": "4h"}
        ]
    }))
    .unwrap();
    // Tuesday 15:00 UTC: two business hours that day, two more from
    // Wednesday 09:00.
    let mut tk = ticket(&[("customer", "2026-12-01T15:00:00Z")], "open");
    tk.created_at = "2026-12-01T15:00:00Z".into();
    let f = facts();
    let due = |tk: &Ticket| clocks(&s, tk, &f, 0)[0].due;
    assert_eq!(due(&tk), Some(t("2026-12-02T11:00:00Z")));
    tk.priority = "P0".into();
    assert_eq!(due(&tk), Some(t("2026-12-01T16:00:00Z")));
    // A policy's target wins over the ticket's own; with no policy
    // matching, the ticket's own counts, in the desk's business hours.
    tk.sla_minutes = 30;
    assert_eq!(due(&tk), Some(t("2026-12-01T16:00:00Z")));
    let mut s = s;
    s.policies.clear();
    let own = &clocks(&s, &tk, &f, 0)[0];
    assert_eq!(
        (own.policy.as_str(), own.due),
        ("ticket", Some(t("2026-12-01T15:30:00Z")))
    );
    tk.created_at = "2026-12-01T16:45:00Z".into();
    let own = &clocks(&s, &tk, &f, 0)[0];
    assert_eq!(own.due, Some(t("2026-12-02T09:15:00Z")));
}
