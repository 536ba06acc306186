//! A stored ticket as the figures read it: the [`Ticket`]'s own field
//! numbers for what the daily report and the SLA clocks use (id, channel,
//! creation, its own SLA minutes, status, category, priority, queue,
//! escalation, each message's sender and time, version). Prost skips the
//! rest of the stored bytes — subject, customer, every message's text,
//! notes, unknown file fields — without allocating them: a report over
//! 100,000 tickets reads none of their texts.

use tinycode_shared::proto::{Ticket, TicketMessage};

/// The tags are those of `tinycode.v1.Ticket` (`proto/tinycode/v1/support.proto`).
#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct TicketHead {
    #[prost(string, tag = "1")]
    id: String,
    #[prost(string, tag = "4")]
    channel: String,
    #[prost(string, tag = "5")]
    created_at: String,
    #[prost(uint32, tag = "6")]
    sla_minutes: u32,
    #[prost(string, tag = "7")]
    status: String,
    #[prost(string, tag = "8")]
    category: String,
    #[prost(string, tag = "9")]
    priority: String,
    #[prost(string, tag = "11")]
    queue: String,
    #[prost(uint32, tag = "12")]
    escalate_level: u32,
    #[prost(message, repeated, tag = "13")]
    messages: Vec<MessageHead>,
    #[prost(uint64, tag = "15")]
    version: u64,
}

/// The tags are those of `tinycode.v1.TicketMessage`.
#[derive(Clone, PartialEq, prost::Message)]
struct MessageHead {
    #[prost(string, tag = "1")]
    from: String,
    #[prost(string, tag = "3")]
    at: String,
}

impl From<TicketHead> for Ticket {
    /// The ticket with those fields; its texts are empty.
    fn from(h: TicketHead) -> Self {
        Ticket {
            id: h.id,
            channel: h.channel,
            created_at: h.created_at,
            sla_minutes: h.sla_minutes,
            status: h.status,
            category: h.category,
            priority: h.priority,
            queue: h.queue,
            escalate_level: h.escalate_level,
            messages: h
                .messages
                .into_iter()
                .map(|m| TicketMessage {
                    from: m.from,
                    at: m.at,
                    ..TicketMessage::default()
                })
                .collect(),
            version: h.version,
            ..Ticket::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use prost::Message;
    use tinycode_shared::proto::{SlaClock, TicketNote};

    use super::*;

    #[test]
    fn a_stored_ticket_reads_as_its_head_with_the_texts_left_out() {
        let message = |from: &str, text: &str, at: &str| TicketMessage {
            from: from.into(),
            text: text.into(),
            at: at.into(),
            delivery: String::new(),
        };
        let full = Ticket {
            id: "T-1".into(),
            subject: "退款：订单 7712".into(),
            customer: "李娜".into(),
            channel: "email".into(),
            created_at: "2026-09-18T09:00:00+08:00".into(),
            sla_minutes: 240,
            status: "escalated".into(),
            category: "退款".into(),
            priority: "P1".into(),
            intent: "refund".into(),
            queue: "售后组".into(),
            escalate_level: 2,
            messages: vec![
                message("customer", "我要退款", "2026-09-18T09:00:00+08:00"),
                message("agent", "已处理", "2026-09-18T10:00:00+08:00"),
            ],
            notes: vec![TicketNote {
                text: "a note".into(),
                at: "2026-09-18T10:00:00+08:00".into(),
            }],
            version: 7,
            extra_json: r#"{"x":1}"#.into(),
            sla: vec![SlaClock::default()],
            external: Some(tinycode_shared::proto::ExternalRef {
                source: "acme".into(),
                conversation: "c-1".into(),
            }),
            ..Default::default()
        };
        let head: Ticket = TicketHead::decode(full.encode_to_vec().as_slice())
            .unwrap()
            .into();
        let expected = Ticket {
            subject: String::new(),
            customer: String::new(),
            intent: String::new(),
            notes: vec![],
            extra_json: String::new(),
            sla: vec![],
            external: None,
            messages: vec![
                message("customer", "", "2026-09-18T09:00:00+08:00"),
                message("agent", "", "2026-09-18T10:00:00+08:00"),
            ],
            ..full
        };
        assert_eq!(head, expected);
    }
}
