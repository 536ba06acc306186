//! A report's figures, tallied one ticket at a time from the tickets read
//! model (each ticket with its facts) plus the approvals and the latest
//! evaluation: no scan of the log, and never more than one ticket in
//! memory at once.

use std::collections::BTreeMap;

use serde::Serialize;
use tinycode_shared::proto::{ApprovalInfo, ApprovalState, Ticket};

use crate::config::Prices;
use crate::domain::sla::{self, Facts, SlaSettings, State, facts};

const HOUR: i64 = 3600;

/// The period a report covers: `from..to`, Unix seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Period {
    pub from: i64,
    pub to: i64,
}

impl Period {
    pub(super) fn holds(&self, t: i64) -> bool {
        self.from <= t && t < self.to
    }

    /// The period of the same length just before.
    fn previous(&self) -> Self {
        Self {
            from: 2 * self.from - self.to,
            to: self.from,
        }
    }
}

#[derive(Debug, Clone, Default, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Figures {
    pub from: String,
    pub to: String,
    /// Only this queue's tickets (empty: every queue).
    pub queue: String,
    pub volume: Volume,
    pub backlog: Backlog,
    /// Business hours of the desk's calendar.
    pub first_response: Durations,
    pub resolution: Durations,
    pub sla: Sla,
    pub escalations: Vec<Count>,
    pub approvals: Approvals,
    pub automation: Automation,
    pub drift: Drift,
    pub model: ModelUse,
}

#[derive(Debug, Clone, Default, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Volume {
    pub new: u64,
    pub reopened: u64,
    pub previous_new: u64,
    pub previous_reopened: u64,
    pub by_category: Vec<Row>,
    pub by_queue: Vec<Row>,
    pub by_channel: Vec<Row>,
}

/// New and reopened tickets of one category, queue or channel, and the
/// period before.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Row {
    pub name: String,
    pub new: u64,
    pub reopened: u64,
    pub previous_new: u64,
    pub previous_reopened: u64,
}

/// Open tickets at the end of the period, by age.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Backlog {
    pub open: u64,
    pub under_4h: u64,
    pub under_24h: u64,
    pub under_3d: u64,
    pub older: u64,
}

#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Durations {
    pub count: u64,
    pub median_seconds: Option<i64>,
    pub p90_seconds: Option<i64>,
}

#[derive(Debug, Clone, Default, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Sla {
    /// Per policy and target: clocks met and breached in the period.
    pub targets: Vec<SlaTarget>,
    /// Clocks breached in the period: how many, and the first
    /// [`LIST_MAX`] by due time.
    pub breached_count: u64,
    pub breached: Vec<SlaTicket>,
    /// Running clocks due in the 4 hours after the period (or now, for a
    /// period that has not ended): how many, and the first [`LIST_MAX`].
    pub due_next_4h_count: u64,
    pub due_next_4h: Vec<SlaTicket>,
}

/// The most tickets a report names in one list (a desk that breached
/// 100,000 clocks in a day gets their count and the first ones).
pub const LIST_MAX: usize = 100;

#[derive(Debug, Clone, Default, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SlaTarget {
    pub policy: String,
    pub target: String,
    pub met: u64,
    pub breached: u64,
    /// `met / (met + breached)`.
    pub met_share: Option<f64>,
}

#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct SlaTicket {
    pub ticket: String,
    pub target: String,
    pub due_at: String,
}

#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Count {
    pub name: String,
    pub count: u64,
}

#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Approvals {
    pub requested: u64,
    pub decided: u64,
    pub denied: u64,
    pub median_wait_seconds: Option<i64>,
}

#[derive(Debug, Clone, Default, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Automation {
    /// Tickets resolved in the period.
    pub resolved: u64,
    /// … of them triaged by the agent with no person changing its decision.
    pub unchanged: u64,
    pub share: Option<f64>,
}

#[derive(Debug, Clone, Default, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Drift {
    /// A person changed the agent's decision: per field and category.
    pub changes: Vec<Change>,
    /// The latest evaluation: its id and accuracy per field.
    pub eval_id: String,
    pub eval_accuracy: Vec<(String, f64)>,
}

#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Change {
    pub field: String,
    pub category: String,
    pub count: u64,
}

/// The figures being tallied.
pub struct Tally<'a> {
    period: Period,
    previous: Period,
    /// The clocks are read as of this moment (the period's end, or now).
    at: i64,
    queue: &'a str,
    settings: &'a SlaSettings,
    volume: Volume,
    by: [BTreeMap<String, Row>; 3],
    backlog: Backlog,
    first_response: Vec<i64>,
    resolution: Vec<i64>,
    sla: BTreeMap<(String, &'static str), (u64, u64)>,
    breached: Listed,
    due_soon: Listed,
    escalations: BTreeMap<u32, u64>,
    automation: Automation,
    drift: BTreeMap<(String, String), u64>,
    model: model::Tally,
}

impl<'a> Tally<'a> {
    pub fn new(period: Period, now: i64, queue: &'a str, settings: &'a SlaSettings) -> Self {
        Self {
            period,
            previous: period.previous(),
            at: period.to.min(now),
            queue,
            settings,
            volume: Volume::default(),
            by: Default::default(),
            backlog: Backlog::default(),
            first_response: Vec::new(),
            resolution: Vec::new(),
            sla: BTreeMap::new(),
            breached: Listed::default(),
            due_soon: Listed::default(),
            escalations: BTreeMap::new(),
            automation: Automation::default(),
            drift: BTreeMap::new(),
            model: model::Tally::default(),
        }
    }

    /// Count one ticket.
    pub fn add(&mut self, t: &Ticket, f: &Facts) {
        if !self.queue.is_empty() && t.queue != self.queue {
            return;
        }
        let created = crate::clock::parse_rfc3339(&t.created_at).unwrap_or(f.entered_at);
        self.volume_of(t, f, created);
        // Backlog: open at the end of the period.
        let end = self.period.to - 1;
        if created <= end && !f.resolved_at_moment(end) && created < self.period.to {
            let age = self.period.to - created;
            self.backlog.open += 1;
            match age {
                a if a < 4 * HOUR => self.backlog.under_4h += 1,
                a if a < 24 * HOUR => self.backlog.under_24h += 1,
                a if a < 72 * HOUR => self.backlog.under_3d += 1,
                _ => self.backlog.older += 1,
            }
        }
        let hours = &self.settings.hours;
        let first_reply = t
            .messages
            .iter()
            .find(|m| m.from != "customer")
            .and_then(|m| crate::clock::parse_rfc3339(&m.at));
        if let Some(reply) = first_reply.filter(|&r| self.period.holds(r)) {
            self.first_response
                .push(hours.seconds_between(created, reply));
        }
        let resolved = f.resolved_at().filter(|&r| self.period.holds(r));
        if let Some(done) = resolved {
            self.resolution.push(hours.seconds_between(created, done));
            self.automation.resolved += 1;
            if f.agent_decided != 0 && f.person_changed_field.is_empty() {
                self.automation.unchanged += 1;
            }
        }
        self.clocks_of(t, f);
        self.model.add(self.period, f);
        for (&level, &at) in f.escalated_level.iter().zip(&f.escalated_at) {
            if self.period.holds(at) {
                *self.escalations.entry(level).or_default() += 1;
            }
        }
        for ((&field, &at), category) in f
            .person_changed_field
            .iter()
            .zip(&f.person_changed_at)
            .zip(&f.person_changed_category)
        {
            if self.period.holds(at) {
                let name = match field {
                    facts::CATEGORY => "category",
                    facts::PRIORITY => "priority",
                    _ => "queue",
                };
                *self
                    .drift
                    .entry((name.into(), category.clone()))
                    .or_default() += 1;
            }
        }
    }

    fn volume_of(&mut self, t: &Ticket, f: &Facts, created: i64) {
        let reopened = |p: Period| f.reopened().filter(|&r| p.holds(r)).count() as u64;
        let (new, prev_new) = (
            u64::from(self.period.holds(created)),
            u64::from(self.previous.holds(created)),
        );
        let (re, prev_re) = (reopened(self.period), reopened(self.previous));
        if new + prev_new + re + prev_re == 0 {
            return;
        }
        self.volume.new += new;
        self.volume.previous_new += prev_new;
        self.volume.reopened += re;
        self.volume.previous_reopened += prev_re;
        for (i, name) in [&t.category, &t.queue, &t.channel].into_iter().enumerate() {
            let name = if name.is_empty() {
                "(none)"
            } else {
                name.as_str()
            };
            // Looked up by the name first: a row is allocated once per name.
            if !self.by[i].contains_key(name) {
                let row = Row {
                    name: name.to_string(),
                    ..Row::default()
                };
                self.by[i].insert(name.to_string(), row);
            }
            if let Some(row) = self.by[i].get_mut(name) {
                row.new += new;
                row.previous_new += prev_new;
                row.reopened += re;
                row.previous_reopened += prev_re;
            }
        }
    }

    fn clocks_of(&mut self, t: &Ticket, f: &Facts) {
        for c in sla::clocks(self.settings, t, f, self.at) {
            let key = (c.policy, c.target.as_str());
            let due = c.due.unwrap_or(i64::MAX);
            match c.state {
                State::Met if c.ended.is_some_and(|e| self.period.holds(e)) => {
                    self.sla.entry(key).or_default().0 += 1;
                }
                State::Breached if self.period.holds(due) => {
                    self.sla.entry(key).or_default().1 += 1;
                    self.breached.add(due, &t.id, c.target.as_str());
                }
                State::Running if due >= self.at && due < self.at + 4 * HOUR => {
                    self.due_soon.add(due, &t.id, c.target.as_str());
                }
                _ => {}
            }
        }
    }

    /// The figures, with the approvals and the latest evaluation.
    pub fn finish(
        mut self,
        approvals: &[ApprovalInfo],
        eval: Option<(String, Vec<(String, f64)>)>,
        prices: &Prices,
    ) -> Figures {
        let model = std::mem::take(&mut self.model).finish(prices);
        let rfc = |s: i64| tinycode_shared::render::rfc3339(s, 0);
        let [category, queue, channel] = std::mem::take(&mut self.by);
        let rows = |m: BTreeMap<String, Row>| {
            let mut v: Vec<Row> = m.into_values().collect();
            v.sort_by(|a, b| {
                (b.new + b.reopened)
                    .cmp(&(a.new + a.reopened))
                    .then(a.name.cmp(&b.name))
            });
            v
        };
        self.volume.by_category = rows(category);
        self.volume.by_queue = rows(queue);
        self.volume.by_channel = rows(channel);
        self.automation.share = share(self.automation.unchanged, self.automation.resolved);
        let approval_figures = approval_figures(self.period, approvals);
        let (eval_id, eval_accuracy) = eval.unwrap_or_default();
        Figures {
            from: rfc(self.period.from),
            to: rfc(self.period.to),
            queue: self.queue.to_string(),
            first_response: durations(&mut self.first_response),
            resolution: durations(&mut self.resolution),
            sla: Sla {
                targets: self
                    .sla
                    .into_iter()
                    .map(|((policy, target), (met, breached))| SlaTarget {
                        policy,
                        target: target.to_string(),
                        met,
                        breached,
                        met_share: share(met, met + breached),
                    })
                    .collect(),
                breached_count: self.breached.count,
                breached: self.breached.first(),
                due_next_4h_count: self.due_soon.count,
                due_next_4h: self.due_soon.first(),
            },
            escalations: self
                .escalations
                .into_iter()
                .map(|(level, count)| Count {
                    name: format!("L{level}"),
                    count,
                })
                .collect(),
            approvals: approval_figures,
            drift: Drift {
                changes: self
                    .drift
                    .into_iter()
                    .map(|((field, category), count)| Change {
                        field,
                        category,
                        count,
                    })
                    .collect(),
                eval_id,
                eval_accuracy,
            },
            volume: self.volume,
            backlog: self.backlog,
            automation: self.automation,
            model,
        }
    }
}

/// Approvals requested and decided in `period`, and the median wait.
fn approval_figures(period: Period, approvals: &[ApprovalInfo]) -> Approvals {
    let mut waits = Vec::new();
    let mut figures = Approvals::default();
    let in_period = |ms: i64| ms > 0 && period.holds(ms.div_euclid(1000));
    for a in approvals {
        if in_period(a.requested_at_ms) {
            figures.requested += 1;
        }
        if in_period(a.decided_at_ms) {
            figures.decided += 1;
            if a.state == ApprovalState::Denied as i32 {
                figures.denied += 1;
            }
            waits.push((a.decided_at_ms - a.requested_at_ms).div_euclid(1000));
        }
    }
    figures.median_wait_seconds = percentile(&mut waits, 50);
    figures
}

/// Tickets of one list: all counted, the first [`LIST_MAX`] by due time
/// kept (never more than twice that in memory).
#[derive(Default)]
struct Listed {
    count: u64,
    /// Due time, ticket, target: formatted only for the kept ones.
    kept: Vec<(i64, String, &'static str)>,
    /// Once [`LIST_MAX`] are kept, the last of them: nothing after it in
    /// (due, ticket) order can be listed, and is only counted.
    last: Option<(i64, String)>,
}

impl Listed {
    fn add(&mut self, due: i64, ticket: &str, target: &'static str) {
        self.count += 1;
        if let Some((d, t)) = &self.last
            && (due, ticket) >= (*d, t.as_str())
        {
            return;
        }
        self.kept.push((due, ticket.to_string(), target));
        if self.kept.len() >= 2 * LIST_MAX {
            self.trim();
        }
    }

    /// The first [`LIST_MAX`] by due time, then ticket (a stable sort:
    /// equal ones stay in the order they came).
    fn trim(&mut self) {
        self.kept.sort_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
        self.kept.truncate(LIST_MAX);
        if self.kept.len() == LIST_MAX {
            self.last = self.kept.last().map(|(d, t, _)| (*d, t.clone()));
        }
    }

    fn first(mut self) -> Vec<SlaTicket> {
        self.trim();
        self.kept
            .into_iter()
            .map(|(due, ticket, target)| SlaTicket {
                ticket,
                target: target.into(),
                due_at: tinycode_shared::render::rfc3339(due, 0),
            })
            .collect()
    }
}

fn share(part: u64, whole: u64) -> Option<f64> {
    (whole > 0).then(|| (part as f64 / whole as f64 * 10_000.0).round() / 10_000.0)
}

/// The `p`-th percentile by nearest rank (sorts `values`).
fn percentile(values: &mut [i64], p: usize) -> Option<i64> {
    if values.is_empty() {
        return None;
    }
    values.sort_unstable();
    let rank = (p * values.len()).div_ceil(100).max(1);
    Some(values[rank - 1])
}

fn durations(values: &mut [i64]) -> Durations {
    Durations {
        count: values.len() as u64,
        median_seconds: percentile(values, 50),
        p90_seconds: percentile(values, 90),
    }
}

mod model;
pub use model::{ModelRow, ModelUse};

#[cfg(test)]
mod tests;
