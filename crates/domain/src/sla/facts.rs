//! What the log says of a ticket that the ticket itself does not hold:
//! when the desk first recorded it, when it was resolved and reopened, its
//! escalations, who decided its fields (the agent or a person), and which
//! SLA alerts are recorded. Folded from its `ticket-<id>` and `sla-<id>`
//! events by the tickets read model (stored beside the ticket); the SLA
//! clocks and the daily report read it.

use tinycode_shared::proto::event::Payload;
use tinycode_shared::proto::{Event, Ticket};

use super::{AlertKind, Target, alert_key};
use crate::ticket::Status;

/// The decided fields, as bits of [`Facts::agent_decided`] and
/// [`Facts::person_changed_field`].
pub const CATEGORY: u32 = 1;
pub const PRIORITY: u32 = 2;
pub const QUEUE: u32 = 4;

#[derive(Clone, PartialEq, prost::Message)]
pub struct Facts {
    /// When the desk first recorded the ticket (Unix seconds): a moment
    /// before it is never alerted (nobody could have acted).
    #[prost(int64, tag = "1")]
    pub entered_at: i64,
    /// Periods the ticket was resolved: starts, and ends (0: still).
    #[prost(int64, repeated, tag = "2")]
    pub resolved_from: Vec<i64>,
    #[prost(int64, repeated, tag = "3")]
    pub resolved_to: Vec<i64>,
    /// Alerts recorded (`kind/target/cycle`).
    #[prost(string, repeated, tag = "4")]
    pub alerts: Vec<String>,
    /// Version of the `sla-<id>` stream these facts fold.
    #[prost(uint64, tag = "5")]
    pub alerts_version: u64,
    /// Escalations: levels, and when.
    #[prost(uint32, repeated, tag = "6")]
    pub escalated_level: Vec<u32>,
    #[prost(int64, repeated, tag = "7")]
    pub escalated_at: Vec<i64>,
    /// Fields an agent's tool call decided (bits: [`CATEGORY`], …).
    #[prost(uint32, tag = "8")]
    pub agent_decided: u32,
    /// A person changing a field the agent had decided: which, when, and
    /// the ticket's category before the change.
    #[prost(uint32, repeated, tag = "9")]
    pub person_changed_field: Vec<u32>,
    #[prost(int64, repeated, tag = "10")]
    pub person_changed_at: Vec<i64>,
    #[prost(string, repeated, tag = "11")]
    pub person_changed_category: Vec<String>,
    /// Breaches recorded, by target (`first_response`, …), and when.
    #[prost(string, repeated, tag = "12")]
    pub breached_target: Vec<String>,
    #[prost(int64, repeated, tag = "13")]
    pub breached_at: Vec<i64>,
    /// The agent's model use on the ticket — each step of its triage
    /// sessions that reported usage: when, which model, input and output
    /// tokens.
    #[prost(int64, repeated, tag = "14")]
    pub usage_at: Vec<i64>,
    #[prost(string, repeated, tag = "15")]
    pub usage_model: Vec<String>,
    #[prost(uint64, repeated, tag = "16")]
    pub usage_input: Vec<u64>,
    #[prost(uint64, repeated, tag = "17")]
    pub usage_output: Vec<u64>,
}

/// What the fold needs of the ticket before an event.
#[derive(Debug, Clone, Default)]
pub struct Before {
    pub exists: bool,
    pub resolved: bool,
    pub category: String,
    pub priority: String,
    pub queue: String,
}

impl Before {
    pub fn of(ticket: &Ticket) -> Self {
        Self {
            exists: ticket.version > 0,
            resolved: Status::of(ticket) == Some(Status::Resolved),
            category: ticket.category.clone(),
            priority: ticket.priority.clone(),
            queue: ticket.queue.clone(),
        }
    }
}

impl Facts {
    /// Fold one event of the ticket's streams; `before` is the ticket
    /// before it, `after` after it (for an `sla-` event, both as they are).
    pub fn apply(&mut self, event: &Event, before: &Before, after: &Ticket) {
        let at = event.recorded_at.as_ref().map_or(0, |t| t.seconds);
        if self.entered_at == 0 && event.stream_id.starts_with("ticket-") {
            self.entered_at = at;
        }
        match event.payload.as_ref() {
            Some(Payload::SlaAtRisk(a)) => {
                self.record(
                    alert_key(AlertKind::AtRisk, target(&a.target), a.cycle),
                    event,
                );
            }
            Some(Payload::SlaBreached(a)) => {
                self.record(
                    alert_key(AlertKind::Breached, target(&a.target), a.cycle),
                    event,
                );
                self.breached_target.push(a.target.clone());
                self.breached_at
                    .push(crate::clock::parse_rfc3339(&a.at).unwrap_or(at));
            }
            Some(Payload::TicketEscalated(e)) => {
                self.escalated_level.push(e.level);
                self.escalated_at.push(at);
            }
            Some(Payload::TicketClassified(e)) => {
                let fields = [
                    (CATEGORY, &before.category, &e.category),
                    (PRIORITY, &before.priority, &e.priority),
                ];
                self.decided(e.origin.is_some(), e.by.is_some(), &fields, before, at);
            }
            Some(Payload::TicketRouted(e)) => {
                let fields = [(QUEUE, &before.queue, &e.queue)];
                self.decided(e.origin.is_some(), e.by.is_some(), &fields, before, at);
            }
            _ => {}
        }
        let is_resolved = Status::of(after) == Some(Status::Resolved);
        if !before.resolved && is_resolved {
            self.resolved_from.push(at);
            self.resolved_to.push(0);
        } else if before.resolved
            && !is_resolved
            && let Some(last) = self.resolved_to.last_mut()
        {
            *last = at.max(1);
        }
    }

    /// A decision on `fields` (bit, value before, value decided) by the
    /// agent or a person.
    fn decided(
        &mut self,
        agent: bool,
        person: bool,
        fields: &[(u32, &String, &String)],
        before: &Before,
        at: i64,
    ) {
        for &(bit, old, new) in fields {
            if new.is_empty() {
                continue;
            }
            if agent {
                self.agent_decided |= bit;
            } else if person && self.agent_decided & bit != 0 && old != new {
                self.person_changed_field.push(bit);
                self.person_changed_at.push(at);
                self.person_changed_category.push(before.category.clone());
            }
        }
    }

    /// A step of one of the ticket's triage sessions: its model use.
    pub fn used(&mut self, step: StepUse<'_>) {
        self.usage_at.push(step.at);
        self.usage_model.push(step.model.to_string());
        self.usage_input.push(step.input);
        self.usage_output.push(step.output);
    }

    /// The model use recorded: when, model, input and output tokens.
    pub fn usage(&self) -> impl Iterator<Item = (i64, &str, u64, u64)> + '_ {
        self.usage_at
            .iter()
            .zip(&self.usage_model)
            .zip(self.usage_input.iter().zip(&self.usage_output))
            .map(|((&at, model), (&input, &output))| (at, model.as_str(), input, output))
    }

    fn record(&mut self, key: String, event: &Event) {
        if !self.alerts.contains(&key) {
            self.alerts.push(key);
        }
        self.alerts_version = event.stream_version;
    }

    pub(crate) fn resolved_periods(&self) -> impl Iterator<Item = (i64, i64)> + '_ {
        self.resolved_from
            .iter()
            .zip(&self.resolved_to)
            .map(|(&a, &b)| (a, if b == 0 { i64::MAX } else { b }))
    }

    /// When it was last resolved, if it is resolved now.
    pub fn resolved_at(&self) -> Option<i64> {
        match (self.resolved_from.last(), self.resolved_to.last()) {
            (Some(&from), Some(0)) => Some(from),
            _ => None,
        }
    }

    /// Was it resolved at moment `t`?
    pub fn resolved_at_moment(&self, t: i64) -> bool {
        self.resolved_periods().any(|(a, b)| a <= t && t < b)
    }

    /// When it was reopened (each end of a resolved period).
    pub fn reopened(&self) -> impl Iterator<Item = i64> + '_ {
        self.resolved_to.iter().copied().filter(|&t| t != 0)
    }
}

/// One step's model use: when, which model, input and output tokens.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StepUse<'a> {
    pub at: i64,
    pub model: &'a str,
    pub input: u64,
    pub output: u64,
}

impl<'a> StepUse<'a> {
    /// The model use of an assistant step that reported tokens; `None`
    /// for any other event (nothing to count, nothing to look up).
    pub fn of(event: &'a Event) -> Option<Self> {
        let Some(Payload::AssistantMessageAdded(a)) = event.payload.as_ref() else {
            return None;
        };
        let usage = a.usage.unwrap_or_default();
        (usage.input_tokens + usage.output_tokens > 0).then(|| Self {
            at: event.recorded_at.as_ref().map_or(0, |t| t.seconds),
            model: &a.model,
            input: usage.input_tokens,
            output: usage.output_tokens,
        })
    }
}

fn target(text: &str) -> Target {
    Target::parse(text).unwrap_or(Target::Resolution)
}

#[cfg(test)]
mod tests {
    use tinycode_shared::proto::{ClientRef, TicketClassified, TicketRouted, ToolOrigin};

    use super::*;

    fn event(payload: Payload, seconds: i64) -> Event {
        Event {
            stream_id: "ticket-T-1".into(),
            stream_version: 2,
            recorded_at: Some(prost_types::Timestamp { seconds, nanos: 0 }),
            payload: Some(payload),
            ..Event::default()
        }
    }

    #[test]
    fn a_person_changing_the_agents_decision_is_drift_and_their_own_first_decision_is_not() {
        let mut f = Facts::default();
        let t = Ticket::default();
        let none = Before::default();
        // A person routes first: a decision, not a correction.
        let by_person = || Some(ClientRef::default());
        f.apply(
            &event(
                Payload::TicketRouted(TicketRouted {
                    queue: "售后组".into(),
                    by: by_person(),
                    ..Default::default()
                }),
                10,
            ),
            &none,
            &t,
        );
        assert!(f.person_changed_field.is_empty());
        // The agent classifies; a person then changes the priority only.
        f.apply(
            &event(
                Payload::TicketClassified(TicketClassified {
                    category: "退款".into(),
                    priority: "P2".into(),
                    origin: Some(ToolOrigin::default()),
                    ..Default::default()
                }),
                20,
            ),
            &none,
            &t,
        );
        assert_eq!(f.agent_decided, CATEGORY | PRIORITY);
        let before = Before {
            exists: true,
            category: "退款".into(),
            priority: "P2".into(),
            ..Before::default()
        };
        f.apply(
            &event(
                Payload::TicketClassified(TicketClassified {
                    category: "退款".into(),
                    priority: "P1".into(),
                    by: by_person(),
                    ..Default::default()
                }),
                30,
            ),
            &before,
            &t,
        );
        assert_eq!(f.person_changed_field, vec![PRIORITY]);
        assert_eq!(
            (
                f.person_changed_at[0],
                f.person_changed_category[0].as_str()
            ),
            (30, "退款")
        );
    }
}
