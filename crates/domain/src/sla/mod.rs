//! SLA clocks: the desk's policies (`sla` in the config, handed to the desk
//! as values), its business hours, and the clocks of a ticket computed from
//! what the log says about it.
//!
//! Three targets, each met by the desk's reply (a person's, or an approved
//! agent reply) or stopped by the ticket being resolved:
//! - **first response**: from the ticket's creation to the first reply;
//!   the matching policy's target, else the ticket's own `slaMinutes`
//!   (every TinyCode ticket has one: a day when its file names none, 480
//!   minutes when created without one);
//! - **next response**: from a customer's message that follows a reply to
//!   the next reply (cycle n: the n-th such message);
//! - **resolution**: from the creation until resolved, paused while the
//!   ticket waits on the customer (from a reply until the customer writes
//!   again) and while it is resolved (until reopened).
//!
//! The clocks are computed when read, from the ticket and its [`Facts`]
//! (kept by the tickets read model); nothing computed is stored but the
//! next alert's moment (the [`Schedule`] the desk's SLA watch follows).

mod clocks;
pub mod facts;
mod hours;
mod policy;
mod schedule;

pub use clocks::{Clock, State, clocks, next_alert, pending_alerts};
pub use facts::{Before, Facts, StepUse};
pub use hours::BusinessHours;
pub use policy::{Policy, SlaSettings, parse_duration};
pub use schedule::Schedule;

/// Stream of a ticket's SLA alerts.
pub fn sla_stream(ticket_id: &str) -> String {
    format!("sla-{ticket_id}")
}

/// What an SLA clock measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Target {
    FirstResponse,
    NextResponse,
    Resolution,
}

impl Target {
    pub const ALL: [Target; 3] = [
        Target::FirstResponse,
        Target::NextResponse,
        Target::Resolution,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Target::FirstResponse => "first_response",
            Target::NextResponse => "next_response",
            Target::Resolution => "resolution",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.as_str() == text)
    }
}

/// An alert of a clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum AlertKind {
    AtRisk,
    Breached,
}

impl AlertKind {
    pub fn as_str(self) -> &'static str {
        match self {
            AlertKind::AtRisk => "at_risk",
            AlertKind::Breached => "breached",
        }
    }
}

/// One alert a clock owes: recorded exactly once per ticket, kind, target
/// and cycle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Alert {
    pub kind: AlertKind,
    pub target: Target,
    pub cycle: u32,
    pub policy: String,
    /// The moment it happened (the at-risk threshold, or the due time).
    pub at: i64,
    pub due: i64,
}

impl Alert {
    /// Its identity in [`Facts::alerts`].
    pub fn key(&self) -> String {
        alert_key(self.kind, self.target, self.cycle)
    }
}

pub(crate) fn alert_key(kind: AlertKind, target: Target, cycle: u32) -> String {
    format!("{}/{}/{cycle}", kind.as_str(), target.as_str())
}
