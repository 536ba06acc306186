//! A ticket's clocks, computed from the ticket (its creation, its messages
//! with their times, its status and the fields a policy matches) and its
//! [`Facts`]: what the ticket alone does not say — when the desk first
//! heard of it, when it was resolved and reopened, which alerts are
//! recorded.

use tinycode_shared::proto::Ticket;

use super::{Alert, AlertKind, BusinessHours, Facts, SlaSettings, Target};
use crate::ticket::Status;

/// Where a clock is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    Running,
    /// Waiting on the customer (resolution only).
    Paused,
    Met,
    /// Due passed before it was met (or it is still running, overdue).
    Breached,
    /// The ticket was resolved before it was due, with no reply.
    Stopped,
}

impl State {
    pub fn as_str(self) -> &'static str {
        match self {
            State::Running => "running",
            State::Paused => "paused",
            State::Met => "met",
            State::Breached => "breached",
            State::Stopped => "stopped",
        }
    }
}

/// One clock of a ticket as of a moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Clock {
    pub target: Target,
    pub policy: String,
    pub cycle: u32,
    /// Length of the target, seconds of its calendar.
    pub seconds: i64,
    /// When it is due (`None`: paused before its time ran out).
    pub due: Option<i64>,
    /// When it crosses the at-risk share (`None` like `due`).
    pub at_risk_at: Option<i64>,
    /// When it was met or stopped.
    pub ended: Option<i64>,
    pub state: State,
}

impl Clock {
    /// Running past its at-risk share at `now`.
    pub fn at_risk(&self, now: i64) -> bool {
        matches!(self.state, State::Running | State::Breached)
            && self.ended.is_none()
            && self.at_risk_at.is_some_and(|t| t <= now)
    }

    /// Still running (overdue or not).
    pub fn is_open(&self) -> bool {
        self.ended.is_none() && self.state != State::Paused && self.due.is_some()
    }

    pub fn to_proto(&self, now: i64) -> tinycode_shared::proto::SlaClock {
        let rfc = |t: i64| tinycode_shared::render::rfc3339(t, 0);
        tinycode_shared::proto::SlaClock {
            target: self.target.as_str().into(),
            policy: self.policy.clone(),
            due_at: self
                .due
                .filter(|&t| t != i64::MAX)
                .map(rfc)
                .unwrap_or_default(),
            state: self.state.as_str().into(),
            seconds_left: match self.due {
                Some(due) if self.is_open() && due != i64::MAX => due - now,
                _ => 0,
            },
            at_risk: self.at_risk(now),
            met_at: self.ended.map(rfc).unwrap_or_default(),
            target_seconds: self.seconds,
        }
    }
}

/// The moment `seconds` of `hours` after `start` are used, with the time
/// inside `pauses` (sorted, merged) not counted; `None` when an open-ended
/// pause begins first.
fn walk(hours: &BusinessHours, start: i64, pauses: &[(i64, i64)], seconds: i64) -> Option<i64> {
    let mut left = seconds;
    let mut cursor = start;
    for &(from, to) in pauses {
        if to <= cursor {
            continue;
        }
        let run = hours.seconds_between(cursor, from.max(cursor));
        if run >= left {
            break;
        }
        left -= run;
        if to == i64::MAX {
            return None;
        }
        cursor = to.max(cursor);
    }
    Some(hours.add(cursor, left))
}

/// `intervals` sorted and merged.
fn merged(mut intervals: Vec<(i64, i64)>) -> Vec<(i64, i64)> {
    intervals.sort_unstable();
    let mut out: Vec<(i64, i64)> = Vec::with_capacity(intervals.len());
    for (a, b) in intervals {
        match out.last_mut() {
            Some(last) if a <= last.1 => last.1 = last.1.max(b),
            _ => out.push((a, b)),
        }
    }
    out
}

/// What every clock of one ticket is read against.
struct Reading<'a> {
    hours: &'a BusinessHours,
    share: i64,
    now: i64,
    /// When the ticket was resolved, if it is.
    resolved_at: Option<i64>,
}

/// One clock to read: its target and policy, cycle, start, budget, when
/// it was met, and the pauses of its budget.
struct Spec<'a> {
    target: Target,
    name: &'a str,
    cycle: u32,
    start: i64,
    seconds: i64,
    met: Option<i64>,
    pauses: &'a [(i64, i64)],
}

impl Reading<'_> {
    fn clock(&self, c: Spec<'_>) -> Clock {
        let due = walk(self.hours, c.start, c.pauses, c.seconds);
        let at_risk_at = walk(self.hours, c.start, c.pauses, c.seconds * self.share / 100);
        let breached_by = |end: i64| due.is_some_and(|d| d < end);
        let (state, ended) = match (c.met, self.resolved_at) {
            (Some(m), _) => (
                if breached_by(m) {
                    State::Breached
                } else {
                    State::Met
                },
                Some(m),
            ),
            (None, Some(r)) if c.target != Target::Resolution => (
                if breached_by(r) {
                    State::Breached
                } else {
                    State::Stopped
                },
                Some(r),
            ),
            (None, _) => match due {
                None => (State::Paused, None),
                Some(d) if d <= self.now => (State::Breached, None),
                Some(_) => (State::Running, None),
            },
        };
        Clock {
            target: c.target,
            policy: c.name.to_string(),
            cycle: c.cycle,
            seconds: c.seconds,
            due,
            at_risk_at,
            ended,
            state,
        }
    }
}

/// The next-response cycle running now: the latest customer message that
/// follows a reply (its number, when it came, the reply that met it).
fn next_response_cycle(messages: &[(bool, i64)]) -> Option<(u32, i64, Option<i64>)> {
    let mut cycle = 0u32;
    let mut current: Option<(i64, Option<i64>)> = None;
    let mut replied = false;
    let mut previous_customer = true;
    for &(customer, at) in messages {
        if customer && replied && !previous_customer {
            cycle += 1;
            current = Some((at, None));
        } else if !customer {
            replied = true;
            if let Some((_, met @ None)) = current.as_mut() {
                *met = Some(at);
            }
        }
        previous_customer = customer;
    }
    current.map(|(start, met)| (cycle, start, met))
}

/// The resolution clock's pauses: while resolved, and while waiting on the
/// customer (a reply until their next message).
fn resolution_pauses(facts: &Facts, messages: &[(bool, i64)]) -> Vec<(i64, i64)> {
    let mut pauses: Vec<(i64, i64)> = facts.resolved_periods().collect();
    let mut waiting_since: Option<i64> = None;
    for &(customer, at) in messages {
        match (customer, waiting_since) {
            (false, None) => waiting_since = Some(at),
            (true, Some(since)) => {
                pauses.push((since, at));
                waiting_since = None;
            }
            _ => {}
        }
    }
    if let Some(since) = waiting_since {
        pauses.push((since, i64::MAX));
    }
    merged(pauses)
}

/// Every clock the ticket has at `now`, in target order.
pub fn clocks(settings: &SlaSettings, ticket: &Ticket, facts: &Facts, now: i64) -> Vec<Clock> {
    let policy = settings.policy_for(ticket);
    let always = BusinessHours::always();
    let hours = match policy {
        Some(p) if !p.business_hours => &always,
        _ => &settings.hours,
    };
    let parse = |text: &str| crate::clock::parse_rfc3339(text);
    let created = parse(&ticket.created_at).unwrap_or(facts.entered_at);
    let messages: Vec<(bool, i64)> = ticket
        .messages
        .iter()
        .map(|m| (m.from == "customer", parse(&m.at).unwrap_or(created)))
        .collect();
    let reading = Reading {
        hours,
        share: i64::from(settings.at_risk_percent),
        now,
        resolved_at: (Status::of(ticket) == Some(Status::Resolved))
            .then(|| facts.resolved_from.last().copied().unwrap_or(now)),
    };
    let mut out = Vec::new();
    // First response: its policy's target, else the ticket's own.
    let first = match (
        policy.and_then(|p| p.first_response.map(|s| (p.name.as_str(), s))),
        ticket.sla_minutes,
    ) {
        (Some(by_policy), _) => Some(by_policy),
        (None, 0) => None,
        (None, m) => Some(("ticket", i64::from(m) * 60)),
    };
    if let Some((name, seconds)) = first {
        out.push(reading.clock(Spec {
            target: Target::FirstResponse,
            name,
            cycle: 0,
            start: created,
            seconds,
            met: messages.iter().find(|(customer, _)| !customer).map(|m| m.1),
            pauses: &[],
        }));
    }
    let Some(policy) = policy else {
        return out;
    };
    if let (Some(seconds), Some((cycle, start, met))) =
        (policy.next_response, next_response_cycle(&messages))
    {
        out.push(reading.clock(Spec {
            target: Target::NextResponse,
            name: &policy.name,
            cycle,
            start,
            seconds,
            met,
            pauses: &[],
        }));
    }
    if let Some(seconds) = policy.resolution {
        out.push(reading.clock(Spec {
            target: Target::Resolution,
            name: &policy.name,
            cycle: 0,
            start: created,
            seconds,
            met: reading.resolved_at,
            pauses: &resolution_pauses(facts, &messages),
        }));
    }
    out
}

/// The alerts `clocks` owe that `facts` has not recorded: a threshold
/// crossed before the clock ended, after the desk knew the ticket, with
/// its moment (which may lie in the future).
pub fn pending_alerts(clocks: &[Clock], facts: &Facts) -> Vec<Alert> {
    let mut out = Vec::new();
    for clock in clocks {
        let (Some(due), Some(risk)) = (clock.due, clock.at_risk_at) else {
            continue;
        };
        for (kind, at) in [(AlertKind::AtRisk, risk), (AlertKind::Breached, due)] {
            let before_end = clock.ended.is_none_or(|end| at < end);
            if at == i64::MAX || !before_end || at < facts.entered_at {
                continue;
            }
            let alert = Alert {
                kind,
                target: clock.target,
                cycle: clock.cycle,
                policy: clock.policy.clone(),
                at,
                due,
            };
            if !facts.alerts.contains(&alert.key()) {
                out.push(alert);
            }
        }
    }
    out.sort_by_key(|a| (a.at, a.kind));
    out
}

/// The moment and kind of the ticket's next alert, if it owes one.
pub fn next_alert(
    settings: &SlaSettings,
    ticket: &Ticket,
    facts: &Facts,
) -> Option<(i64, AlertKind)> {
    // `now` only tells running from breached; alerts do not depend on it.
    let clocks = clocks(settings, ticket, facts, i64::MIN);
    pending_alerts(&clocks, facts)
        .first()
        .map(|a| (a.at, a.kind))
}

#[cfg(test)]
mod tests;
