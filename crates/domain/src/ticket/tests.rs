use tinycode_shared::proto::event::Payload;
use tinycode_shared::proto::*;

use super::*;

pub(crate) fn fixture_dir() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/fixtures/tinycode-support-desk")
}

#[test]
fn fixture_files_parse_and_render_back_byte_for_byte() {
    for id in ["T-1001", "T-1002", "T-1003"] {
        let text =
            std::fs::read_to_string(fixture_dir().join(format!("tickets/{id}.json"))).unwrap();
        let ticket = parse_ticket_file(&text).unwrap();
        assert_eq!(ticket.id, id);
        assert_eq!(ticket.status, "open");
        assert_eq!(ticket.messages.len(), 1);
        assert_eq!(
            render_ticket_file(&ticket),
            text,
            "{id} renders as TinyCode wrote it"
        );
    }
}

#[test]
fn malformed_files_name_the_field() {
    let good = std::fs::read_to_string(fixture_dir().join("tickets/T-1001.json")).unwrap();
    let cases: &[(&str, &str, &str)] = &[
        (
            "\"channel\": \"email\"",
            "\"channel\": \"fax\"",
            "field `channel`: must be one of email, chat, phone, web",
        ),
        (
            "\"slaMinutes\": 240",
            "\"slaMinutes\": \"soon\"",
            "field `slaMinutes`",
        ),
        (
            "\"status\": \"open\"",
            "\"status\": \"closed\"",
            "field `status`",
        ),
        (
            "\"from\": \"customer\"",
            "\"from\": \"bot\"",
            "field `messages[0].from`",
        ),
        ("\"subject\":", "\"topic\":", "field `subject` is missing"),
        ("{", "[", "not valid JSON"),
    ];
    for (from, to, expected) in cases {
        let broken = good.replacen(from, to, 1);
        let err = parse_ticket_file(&broken).unwrap_err().to_string();
        assert!(err.contains(expected), "{from} → {to}: {err}");
    }
}

#[test]
fn optional_fields_get_defaults_and_only_id_and_subject_are_required() {
    let good = std::fs::read_to_string(fixture_dir().join("tickets/T-1001.json")).unwrap();
    let mut doc: serde_json::Value = serde_json::from_str(&good).unwrap();
    let obj = doc.as_object_mut().unwrap();
    for key in ["slaMinutes", "customer", "channel", "status", "createdAt"] {
        obj.remove(key);
    }
    let t = parse_ticket_file(&doc.to_string()).unwrap();
    assert_eq!(t.sla_minutes, DEFAULT_SLA_MINUTES);
    assert_eq!(
        (t.customer.as_str(), t.channel.as_str(), t.status.as_str()),
        ("", "email", "open")
    );
    assert_eq!(t.created_at, t.messages[0].at, "the first message's time");
    obj_remove(&mut doc, "messages");
    let err = parse_ticket_file(&doc.to_string()).unwrap_err().to_string();
    assert!(err.contains("field `createdAt` is missing"), "{err}");
    doc["createdAt"] = "2026-09-18T09:12:00+08:00".into();
    let t = parse_ticket_file(&doc.to_string()).unwrap();
    assert!(t.messages.is_empty());
    obj_remove(&mut doc, "subject");
    let err = parse_ticket_file(&doc.to_string()).unwrap_err().to_string();
    assert!(err.contains("field `subject` is missing"), "{err}");
}

fn obj_remove(doc: &mut serde_json::Value, key: &str) {
    doc.as_object_mut().unwrap().remove(key);
}

#[test]
fn fields_tinycode_does_not_know_survive_a_write_back() {
    let good = std::fs::read_to_string(fixture_dir().join("tickets/T-1001.json")).unwrap();
    let with_extra = good.replacen(
        "\"subject\":",
        "\"tags\": [\"vip\"],\n  \"assignee\": {\"name\": \"Lin\"},\n  \"subject\":",
        1,
    );
    let mut t = parse_ticket_file(&with_extra).unwrap();
    assert_eq!(
        t.extra_json,
        r#"{"tags":["vip"],"assignee":{"name":"Lin"}}"#
    );
    t.queue = "售后组".into();
    let written = render_ticket_file(&t);
    let doc: serde_json::Value = serde_json::from_str(&written).unwrap();
    assert_eq!(doc["tags"][0], "vip");
    assert_eq!(doc["assignee"]["name"], "Lin");
    assert_eq!(doc["queue"], "售后组");
    let keys: Vec<&str> = doc
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        &keys[keys.len() - 2..],
        ["tags", "assignee"],
        "after the known fields"
    );
    assert_eq!(
        parse_ticket_file(&written).unwrap(),
        t,
        "it reads back the same"
    );
    // A file without extra fields is written back byte for byte.
    assert_eq!(render_ticket_file(&parse_ticket_file(&good).unwrap()), good);
}

fn event(version: u64, payload: Payload) -> Event {
    Event {
        sequence: version,
        stream_id: "ticket-T-1".into(),
        stream_version: version,
        recorded_at: None,
        payload: Some(payload),
    }
}

fn base() -> Ticket {
    Ticket {
        id: "T-1".into(),
        subject: "s".into(),
        customer: "c".into(),
        channel: "chat".into(),
        created_at: "2026-01-01T00:00:00Z".into(),
        sla_minutes: 60,
        status: "open".into(),
        ..Ticket::default()
    }
}

#[test]
fn every_event_type_folds() {
    let msg = |from: &str, text: &str| TicketMessage {
        from: from.into(),
        text: text.into(),
        at: "t".into(),
        delivery: String::new(),
    };
    let mut t = Ticket::default();
    let events = vec![
        Payload::TicketImported(TicketImported {
            ticket: Some(base()),
            file: "tickets/T-1.json".into(),
        }),
        Payload::CustomerMessageAdded(CustomerMessageAdded {
            message: Some(msg("customer", "hello")),
        }),
        Payload::TicketClassified(TicketClassified {
            by: None,
            origin: None,
            category: "退款".into(),
            priority: "P1".into(),
            intent: "refund".into(),
            summary: "wants money back".into(),
            ..Default::default()
        }),
        Payload::TicketRouted(TicketRouted {
            by: None,
            origin: None,
            queue: "售后组".into(),
            reason: "refunds".into(),
            ..Default::default()
        }),
        Payload::AgentReplyAdded(AgentReplyAdded {
            by: None,
            origin: None,
            message: Some(msg("agent", "on it")),
        }),
        Payload::TicketNoteAdded(TicketNoteAdded {
            by: None,
            note: Some(TicketNote {
                text: "n".into(),
                at: "t".into(),
            }),
        }),
    ];
    let mut statuses = Vec::new();
    for (i, p) in events.into_iter().enumerate() {
        apply(&mut t, &event(i as u64 + 1, p));
        statuses.push(t.status.clone());
    }
    assert_eq!(
        statuses,
        ["open", "open", "triaged", "routed", "routed", "routed"]
    );
    assert_eq!(
        (t.category.as_str(), t.priority.as_str(), t.queue.as_str()),
        ("退款", "P1", "售后组")
    );
    assert_eq!(t.messages.len(), 2);
    assert_eq!(t.notes.len(), 1);
    assert_eq!(t.version, 6);

    apply(
        &mut t,
        &event(
            7,
            Payload::TicketEscalated(TicketEscalated {
                origin: None,
                level: 2,
                reason: "r".into(),
            }),
        ),
    );
    assert_eq!((t.status.as_str(), t.escalate_level), ("escalated", 2));
    apply(
        &mut t,
        &event(
            8,
            Payload::TicketRouted(TicketRouted {
                by: None,
                origin: None,
                queue: "技术支持".into(),
                reason: String::new(),
                ..Default::default()
            }),
        ),
    );
    assert_eq!(t.status, "escalated", "routing keeps an escalation");
    apply(
        &mut t,
        &event(
            9,
            Payload::TicketStatusChanged(TicketStatusChanged {
                by: None,
                status: "resolved".into(),
                reason: String::new(),
            }),
        ),
    );
    assert_eq!(t.status, "resolved");
    apply(
        &mut t,
        &event(
            10,
            Payload::CustomerMessageAdded(CustomerMessageAdded {
                message: Some(msg("customer", "again")),
            }),
        ),
    );
    assert_eq!(
        t.status, "open",
        "a customer message reopens a resolved ticket"
    );

    let mut edited = base();
    edited.subject = "edited by hand".into();
    apply(
        &mut t,
        &event(
            11,
            Payload::TicketUpdatedFromFile(TicketUpdatedFromFile {
                ticket: Some(edited.clone()),
                file: String::new(),
            }),
        ),
    );
    assert!(same_content(&t, &edited));
    assert_eq!(t.version, 11);
}

#[test]
fn optional_fields_render_only_when_set() {
    let mut t = base();
    let text = render_ticket_file(&t);
    assert!(
        !text.contains("category") && !text.contains("notes") && !text.contains("escalateLevel")
    );
    t.category = "物流".into();
    t.escalate_level = 1;
    t.notes.push(TicketNote {
        text: "x".into(),
        at: "y".into(),
    });
    let text = render_ticket_file(&t);
    let back = parse_ticket_file(&text).unwrap();
    assert!(same_content(&back, &t), "{text}");
}
