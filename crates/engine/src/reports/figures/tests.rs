//! A scripted desk on fixed times: every figure of a day's report equals
//! one worked out by hand (the golden JSON below, with the reasoning
//! beside each ticket).

use serde_json::json;
use tinycode_shared::proto::event::Payload;
use tinycode_shared::proto::{
    AgentReplyAdded, ApprovalInfo, ApprovalState, AssistantMessageAdded, ClientRef,
    CustomerMessageAdded, Event, ModelUsage, Ticket, TicketClassified, TicketCreated,
    TicketEscalated, TicketMessage, TicketStatusChanged, ToolOrigin,
};

use super::*;
use crate::domain::sla::{Before, Facts, SlaSettings};

fn t(text: &str) -> i64 {
    crate::clock::parse_rfc3339(text).unwrap()
}

/// Fold `(time, payload)` events of one ticket the way the tickets read
/// model does.
fn fold(events: Vec<(&str, Payload)>) -> (Ticket, Facts) {
    let mut ticket = Ticket::default();
    let mut facts = Facts::default();
    for (version, (at, payload)) in events.into_iter().enumerate() {
        let event = Event {
            stream_id: "ticket-T".into(),
            stream_version: version as u64 + 1,
            recorded_at: Some(prost_types::Timestamp {
                seconds: t(at),
                nanos: 0,
            }),
            payload: Some(payload),
            ..Event::default()
        };
        let before = Before::of(&ticket);
        crate::domain::ticket::apply(&mut ticket, &event);
        facts.apply(&event, &before, &ticket);
    }
    (ticket, facts)
}

fn created(id: &str, at: &str, channel: &str, category: &str, queue: &str) -> Payload {
    Payload::TicketCreated(TicketCreated {
        ticket: Some(Ticket {
            id: id.into(),
            created_at: at.into(),
            channel: channel.into(),
            category: category.into(),
            queue: queue.into(),
            status: "open".into(),
            messages: vec![message("customer", at)],
            ..Ticket::default()
        }),
    })
}

fn message(from: &str, at: &str) -> TicketMessage {
    TicketMessage {
        from: from.into(),
        text: "…".into(),
        at: at.into(),
        delivery: String::new(),
    }
}

fn reply(at: &str) -> Payload {
    Payload::AgentReplyAdded(AgentReplyAdded {
        message: Some(message("agent", at)),
        ..Default::default()
    })
}

fn status(s: &str) -> Payload {
    Payload::TicketStatusChanged(TicketStatusChanged {
        status: s.into(),
        ..Default::default()
    })
}

fn classified(category: &str, priority: &str, agent: bool) -> Payload {
    Payload::TicketClassified(TicketClassified {
        category: category.into(),
        priority: priority.into(),
        origin: agent.then(ToolOrigin::default),
        by: (!agent).then(ClientRef::default),
        ..Default::default()
    })
}

fn approval(requested: &str, decided: &str, state: ApprovalState) -> ApprovalInfo {
    ApprovalInfo {
        requested_at_ms: t(requested) * 1000,
        decided_at_ms: t(decided) * 1000,
        state: state as i32,
        ..ApprovalInfo::default()
    }
}

/// A step of a triage session that reported `input` and `output` tokens.
fn step(at: &str, model: &str, input: u64, output: u64) -> Event {
    Event {
        stream_id: "session-S".into(),
        recorded_at: Some(prost_types::Timestamp {
            seconds: t(at),
            nanos: 0,
        }),
        payload: Some(Payload::AssistantMessageAdded(AssistantMessageAdded {
            model: model.into(),
            usage: Some(ModelUsage {
                input_tokens: input,
                output_tokens: output,
                ..ModelUsage::default()
            }),
            ..Default::default()
        })),
        ..Event::default()
    }
}

/// `desk()` with the model use of its triage sessions: A two steps of a
/// priced model, B one of the offline model, C one of a model with no
/// price; E's (the day before) is not counted; a step with no usage
/// reported adds nothing.
fn desk_with_model_use() -> Vec<(Ticket, Facts)> {
    let mut desk = desk();
    let steps = [
        (0, step("2026-12-03T09:04:00Z", "openai/gpt-4o", 1000, 50)),
        (0, step("2026-12-03T09:05:00Z", "openai/gpt-4o", 1200, 30)),
        (0, step("2026-12-03T09:06:00Z", "openai/gpt-4o", 0, 0)),
        (1, step("2026-12-03T16:01:00Z", "offline", 300, 20)),
        (2, step("2026-12-03T08:00:00Z", "anthropic/claude", 100, 10)),
        (4, step("2026-12-02T09:30:00Z", "openai/gpt-4o", 500, 5)),
    ];
    for (i, e) in steps {
        if let Some(s) = crate::domain::sla::StepUse::of(&e) {
            desk[i].1.used(s);
        }
    }
    desk
}

fn prices() -> crate::config::Prices {
    [(
        "openai/gpt-4o".to_string(),
        crate::config::Price {
            input: 2.5,
            output: 10.0,
        },
    )]
    .into()
}

fn settings() -> SlaSettings {
    SlaSettings::from_json(&json!({
        "businessHours": {"timeZone": "UTC", "open": "09:00", "close": "17:00"},
        "policies": [
            {"name": "chat", "match": {"channel": "chat"}, "businessHours": false, "firstResponse": "8h30m"},
            {"name": "standard", "firstResponse": "4h", "resolution": "2d"}
        ]
    }))
    .unwrap()
}

/// Thursday 2026-12-03, UTC; business hours 09:00–17:00 on weekdays.
fn desk() -> Vec<(Ticket, Facts)> {
    vec![
        // A: new; the agent classifies it; first reply after 1 business
        // hour, resolved after 3: first response and resolution met.
        fold(vec![
            (
                "2026-12-03T09:00:00Z",
                created("A", "2026-12-03T09:00:00Z", "email", "退款", "售后组"),
            ),
            ("2026-12-03T09:05:00Z", classified("退款", "P2", true)),
            ("2026-12-03T10:00:00Z", reply("2026-12-03T10:00:00Z")),
            ("2026-12-03T12:00:00Z", status("resolved")),
        ]),
        // B: new chat at 16:00 (wall-time policy, 8h30m: due 00:30 the
        // next day, within 4 h of the period's end); the agent says P2, a
        // person P1 (drift: priority, 物流); open, 8 h old.
        fold(vec![
            (
                "2026-12-03T16:00:00Z",
                created("B", "2026-12-03T16:00:00Z", "chat", "物流", "物流组"),
            ),
            ("2026-12-03T16:01:00Z", classified("物流", "P2", true)),
            ("2026-12-03T16:30:00Z", classified("物流", "P1", false)),
        ]),
        // C: new the day before (its first response breached then, not
        // counted today); escalated to L2 today at 08:00; open, 38 h old.
        fold(vec![
            (
                "2026-12-02T10:00:00Z",
                created("C", "2026-12-02T10:00:00Z", "email", "退款", "售后组"),
            ),
            (
                "2026-12-03T08:00:00Z",
                Payload::TicketEscalated(TicketEscalated {
                    level: 2,
                    ..Default::default()
                }),
            ),
        ]),
        // D: new at 11:00; replied at 16:00 — 5 business hours, due at
        // 15:00: breached; resolved at 16:30, reopened by the customer at
        // 17:30 (reopened today); open, 13 h old.
        fold(vec![
            (
                "2026-12-03T11:00:00Z",
                created("D", "2026-12-03T11:00:00Z", "email", "账户", "技术组"),
            ),
            ("2026-12-03T16:00:00Z", reply("2026-12-03T16:00:00Z")),
            ("2026-12-03T16:30:00Z", status("resolved")),
            (
                "2026-12-03T17:30:00Z",
                Payload::CustomerMessageAdded(CustomerMessageAdded {
                    message: Some(message("customer", "2026-12-03T17:30:00Z")),
                }),
            ),
        ]),
        // E: new and resolved the day before: only the previous volume.
        fold(vec![
            (
                "2026-12-02T09:00:00Z",
                created("E", "2026-12-02T09:00:00Z", "email", "退款", "售后组"),
            ),
            ("2026-12-02T10:00:00Z", status("resolved")),
        ]),
    ]
}

#[test]
fn a_days_figures_equal_the_ones_worked_out_by_hand() {
    let settings = settings();
    let period = Period {
        from: t("2026-12-03T00:00:00Z"),
        to: t("2026-12-04T00:00:00Z"),
    };
    let mut tally = Tally::new(period, t("2026-12-05T00:00:00Z"), "", &settings);
    for (ticket, facts) in desk_with_model_use() {
        tally.add(&ticket, &facts);
    }
    let approvals = [
        approval(
            "2026-12-03T09:10:00Z",
            "2026-12-03T09:20:00Z",
            ApprovalState::Allowed,
        ),
        approval(
            "2026-12-03T16:40:00Z",
            "2026-12-03T17:40:00Z",
            ApprovalState::Denied,
        ),
        approval(
            "2026-12-02T09:10:00Z",
            "2026-12-02T09:20:00Z",
            ApprovalState::Allowed,
        ),
    ];
    let figures = tally.finish(
        &approvals,
        Some(("E-1".into(), vec![("category".into(), 0.9)])),
        &prices(),
    );
    let row = |name: &str, new: u64, reopened: u64, previous_new: u64| json!({"name": name, "new": new, "reopened": reopened, "previousNew": previous_new, "previousReopened": 0});
    let golden = json!({
        "from": "2026-12-03T00:00:00.000Z",
        "to": "2026-12-04T00:00:00.000Z",
        "queue": "",
        "volume": {
            "new": 3, "reopened": 1, "previousNew": 2, "previousReopened": 0,
            "byCategory": [row("账户", 1, 1, 0), row("物流", 1, 0, 0), row("退款", 1, 0, 2)],
            "byQueue": [row("技术组", 1, 1, 0), row("售后组", 1, 0, 2), row("物流组", 1, 0, 0)],
            "byChannel": [row("email", 2, 1, 2), row("chat", 1, 0, 0)]
        },
        "backlog": {"open": 3, "under4h": 0, "under24h": 2, "under3d": 1, "older": 0},
        "firstResponse": {"count": 2, "medianSeconds": 3600, "p90Seconds": 18000},
        "resolution": {"count": 1, "medianSeconds": 10800, "p90Seconds": 10800},
        "sla": {
            "targets": [
                {"policy": "standard", "target": "first_response", "met": 1, "breached": 1, "metShare": 0.5},
                {"policy": "standard", "target": "resolution", "met": 1, "breached": 0, "metShare": 1.0}
            ],
            "breachedCount": 1,
            "breached": [{"ticket": "D", "target": "first_response", "dueAt": "2026-12-03T15:00:00.000Z"}],
            "dueNext4hCount": 1,
            "dueNext4h": [{"ticket": "B", "target": "first_response", "dueAt": "2026-12-04T00:30:00.000Z"}]
        },
        "escalations": [{"name": "L2", "count": 1}],
        "approvals": {"requested": 2, "decided": 2, "denied": 1, "medianWaitSeconds": 600},
        "automation": {"resolved": 1, "unchanged": 1, "share": 1.0},
        "drift": {
            "changes": [{"field": "priority", "category": "物流", "count": 1}],
            "evalId": "E-1",
            "evalAccuracy": [["category", 0.9]]
        },
        // A, B and C; E's step was the day before. The model with no price
        // leaves the total unknown; gpt-4o: (2,200 × 2.5 + 80 × 10) / 10⁶.
        "model": {
            "tickets": 3, "inputTokens": 2600, "outputTokens": 110,
            "tokensPerTicket": 2710.0 / 3.0, "cost": null, "costPerTicket": null,
            "byModel": [
                {"model": "anthropic/claude", "tickets": 1, "inputTokens": 100, "outputTokens": 10, "cost": null},
                {"model": "offline", "tickets": 1, "inputTokens": 300, "outputTokens": 20, "cost": 0.0},
                {"model": "openai/gpt-4o", "tickets": 1, "inputTokens": 2200, "outputTokens": 80, "cost": 0.0063}
            ]
        }
    });
    assert_eq!(serde_json::to_value(&figures).unwrap(), golden);
}

#[test]
fn business_hours_and_holidays_change_the_first_response_figures() {
    // The same desk counted around the clock: A's and D's replies took 1 h
    // and 5 h either way (inside business hours); a holiday on the 3rd
    // makes both zero business seconds.
    let period = Period {
        from: t("2026-12-03T00:00:00Z"),
        to: t("2026-12-04T00:00:00Z"),
    };
    let run = |settings: &SlaSettings| {
        let mut tally = Tally::new(period, t("2026-12-05T00:00:00Z"), "", settings);
        for (ticket, facts) in desk() {
            tally.add(&ticket, &facts);
        }
        tally.finish(&[], None, &prices()).first_response
    };
    let normal = run(&settings());
    assert_eq!(
        (normal.median_seconds, normal.p90_seconds),
        (Some(3600), Some(18000))
    );
    let holiday = SlaSettings::from_json(&json!({
        "businessHours": {"timeZone": "UTC", "open": "09:00", "close": "17:00", "holidays": ["2026-12-03"]}
    }))
    .unwrap();
    let off = run(&holiday);
    assert_eq!(
        (off.count, off.median_seconds, off.p90_seconds),
        (2, Some(0), Some(0))
    );
    // Opening at 12:00: A's reply at 10:00 counts nothing, D's 4 h.
    let late = SlaSettings::from_json(&json!({
        "businessHours": {"timeZone": "UTC", "open": "12:00", "close": "17:00"}
    }))
    .unwrap();
    let late = run(&late);
    assert_eq!(
        (late.median_seconds, late.p90_seconds),
        (Some(0), Some(4 * 3600))
    );
}

#[test]
fn a_range_counts_every_day_in_it_and_a_queue_only_its_tickets() {
    let settings = settings();
    let period = Period {
        from: t("2026-12-02T00:00:00Z"),
        to: t("2026-12-04T00:00:00Z"),
    };
    let mut tally = Tally::new(period, t("2026-12-05T00:00:00Z"), "售后组", &settings);
    for (ticket, facts) in desk() {
        tally.add(&ticket, &facts);
    }
    let f = tally.finish(&[], None, &prices());
    // 售后组: A, C and E, all new in the two days; A and E resolved.
    assert_eq!((f.volume.new, f.volume.reopened), (3, 0));
    assert_eq!(f.resolution.count, 2);
    assert_eq!(f.backlog.open, 1); // C
    // C's first response breached on the 2nd (due 14:00), inside the range.
    assert_eq!(f.sla.breached.len(), 1);
    assert_eq!(f.sla.breached[0].ticket, "C");
}

#[test]
fn a_day_with_more_breaches_than_a_report_lists_counts_them_all_and_names_the_first() {
    let settings = settings();
    let period = Period {
        from: t("2026-12-03T00:00:00Z"),
        to: t("2026-12-04T00:00:00Z"),
    };
    let mut tally = Tally::new(period, t("2026-12-05T00:00:00Z"), "", &settings);
    // 150 email tickets from 09:00, a minute apart: the standard policy's
    // 4 business hours run out the same day for each.
    for i in 0..150 {
        let at = tinycode_shared::render::rfc3339(t("2026-12-03T01:00:00Z") + i * 60, 0);
        let (ticket, facts) = fold(vec![(
            at.as_str(),
            created(&format!("T-{i:03}"), &at, "email", "物流", "物流组"),
        )]);
        tally.add(&ticket, &facts);
    }
    let f = tally.finish(&[], None, &prices());
    assert_eq!(f.sla.breached_count, 150);
    assert_eq!(f.sla.breached.len(), super::LIST_MAX);
    assert_eq!(f.sla.breached[0].ticket, "T-000", "the earliest due first");
    let md = super::super::render::markdown("t", &f);
    assert!(
        md.contains("Breached in the period: 150 (the first 100 by due time)"),
        "{md}"
    );
}

#[test]
fn every_model_priced_gives_the_cost_per_ticket_and_none_used_gives_none() {
    let settings = settings();
    let period = Period {
        from: t("2026-12-03T00:00:00Z"),
        to: t("2026-12-04T00:00:00Z"),
    };
    let mut prices = prices();
    prices.insert(
        "anthropic/claude".into(),
        crate::config::Price {
            input: 3.0,
            output: 15.0,
        },
    );
    let run = |desk: Vec<(Ticket, Facts)>| {
        let mut tally = Tally::new(period, t("2026-12-05T00:00:00Z"), "", &settings);
        for (ticket, facts) in desk {
            tally.add(&ticket, &facts);
        }
        tally.finish(&[], None, &prices).model
    };
    let m = run(desk_with_model_use());
    // 0.0063 (gpt-4o) + (100 × 3 + 10 × 15) / 10⁶ + 0 (offline).
    let cost = m.cost.unwrap();
    assert!((cost - 0.00675).abs() < 1e-12, "{cost}");
    assert!((m.cost_per_ticket.unwrap() - 0.00225).abs() < 1e-12);
    let none = run(desk());
    assert_eq!(
        (none.tickets, none.cost, none.tokens_per_ticket),
        (0, None, None)
    );
    assert!(none.by_model.is_empty());
}
