//! The desk's SLA clocks: each ticket's clocks as served, the list filters
//! on them, and the watch that records `SlaAtRisk` / `SlaBreached` exactly
//! once per ticket, target and cycle — appended to `sla-<id>` at the
//! version the read model has, so a second daemon (or this one again after
//! a crash) that saw the same moment finds the stream moved and records
//! nothing.

use std::sync::Arc;
use std::time::Duration;

use tinycode_shared::proto::event::Payload;
use tinycode_shared::proto::{SlaAlert, Ticket};

use super::models::{facts_key, facts_or_default};
use super::{Desk, DomainError, TicketFilter};
use crate::sla::{self, AlertKind, Clock, Facts};
use crate::store::{ExpectedVersion, StoreError};

/// An alert recorded this long after its moment says it was late (no
/// daemon ran then).
const LATE_AFTER_SECONDS: i64 = 5;
/// The watch looks again at least this often (a settings-free safety net:
/// the schedule wakes it on every change).
const IDLE: Duration = Duration::from_secs(60);

impl Desk {
    /// The ticket's SLA facts as the read model has them.
    fn sla_facts(&self, id: &str) -> Result<Facts, DomainError> {
        let stored = self
            .tickets
            .tree()
            .get(facts_key(id))
            .map_err(crate::projection::ProjectionError::from)?;
        Ok(facts_or_default(stored)?)
    }

    /// The SLA settings the desk was opened with.
    pub fn sla_settings(&self) -> &sla::SlaSettings {
        &self.sla
    }

    /// Every stored ticket with its facts, one at a time (a report's
    /// tally); the tickets come without their texts (subject, customer,
    /// messages' texts, notes). Returns how many.
    pub fn each_ticket_with_facts(
        &self,
        mut f: impl FnMut(&Ticket, &Facts),
    ) -> Result<usize, DomainError> {
        let mut n = 0;
        for ticket in self.all_ticket_heads() {
            let ticket = ticket?;
            if ticket.version == 0 {
                continue;
            }
            f(&ticket, &self.sla_facts(&ticket.id)?);
            n += 1;
        }
        Ok(n)
    }

    /// The clocks of a stored ticket at `now`.
    pub fn sla_clocks(&self, ticket: &Ticket, now: i64) -> Vec<Clock> {
        let facts = self.sla_facts(&ticket.id).unwrap_or_else(|e| {
            tracing::error!(ticket = %ticket.id, error = %e, "cannot read a ticket's SLA facts");
            Facts::default()
        });
        sla::clocks(&self.sla, ticket, &facts, now)
    }

    /// `ticket` with its clocks as of now, to be served.
    pub fn with_sla(&self, mut ticket: Ticket) -> Ticket {
        let now = crate::clock::now_unix();
        ticket.sla = self
            .sla_clocks(&ticket, now)
            .iter()
            .map(|c| c.to_proto(now))
            .collect();
        ticket
    }

    /// Does the filter's SLA part keep `ticket` (its clocks at `now`)?
    pub(super) fn sla_matches(&self, filter: &TicketFilter, ticket: &Ticket, now: i64) -> bool {
        if filter.due_within.is_none() && !filter.breached {
            return true;
        }
        let clocks = self.sla_clocks(ticket, now);
        let due_soon = |c: &Clock| {
            filter
                .due_within
                .is_none_or(|within| c.is_open() && c.due.is_some_and(|d| d <= now + within))
        };
        let breached = |c: &Clock| !filter.breached || c.state == sla::State::Breached;
        clocks.iter().any(|c| due_soon(c) && breached(c))
    }

    /// How many tickets owe an SLA alert later (the schedule's size).
    pub fn sla_scheduled(&self) -> usize {
        self.schedule.len()
    }

    /// When ticket `id`'s soonest running SLA clock is due (RFC 3339 UTC);
    /// `None` for no such ticket or no clock running.
    pub fn ticket_due(&self, id: &str) -> Option<String> {
        let ticket = self.stored_ticket(id).ok().flatten()?;
        let now = crate::clock::now_unix();
        self.sla_clocks(&ticket, now)
            .iter()
            .filter(|c| c.is_open())
            .filter_map(|c| c.due)
            .min()
            .map(|t| tinycode_shared::render::rfc3339(t, 0))
    }

    /// When ticket `id` is at risk now, the moment of its next alert (the
    /// sooner the more urgent); read from the schedule, no ticket read.
    pub fn sla_at_risk(&self, id: &str) -> Option<i64> {
        self.schedule.at_risk(id, crate::clock::now_unix())
    }

    /// Record the alerts ticket `id` owes at `now`; returns how many were
    /// recorded (0 when another daemon recorded them first).
    async fn record_alerts(&self, id: &str, now: i64) -> Result<usize, DomainError> {
        for _ in 0..3 {
            let Some(ticket) = self.stored_ticket(id)? else {
                return Ok(0);
            };
            let facts = self.sla_facts(id)?;
            let clocks = sla::clocks(&self.sla, &ticket, &facts, now);
            let owed: Vec<Payload> = sla::pending_alerts(&clocks, &facts)
                .into_iter()
                .filter(|a| a.at <= now)
                .map(|a| {
                    let rfc = |t: i64| tinycode_shared::render::rfc3339(t, 0);
                    let alert = SlaAlert {
                        ticket_id: id.to_string(),
                        target: a.target.as_str().into(),
                        cycle: a.cycle,
                        policy: a.policy.clone(),
                        due_at: rfc(a.due),
                        at: rfc(a.at),
                        late: now - a.at > LATE_AFTER_SECONDS,
                    };
                    match a.kind {
                        AlertKind::AtRisk => Payload::SlaAtRisk(alert),
                        AlertKind::Breached => Payload::SlaBreached(alert),
                    }
                })
                .collect();
            if owed.is_empty() {
                return Ok(0);
            }
            let stream = sla::sla_stream(id);
            let count = owed.len();
            match self
                .store
                .append(&stream, ExpectedVersion::Exact(facts.alerts_version), owed)
                .await
            {
                Ok(events) => {
                    if let Some(last) = events.last() {
                        self.tickets.wait_indexed(last.sequence).await?;
                    }
                    tracing::info!(ticket = %id, alerts = count, "SLA alerts recorded");
                    return Ok(count);
                }
                Err(StoreError::Conflict { .. }) => {
                    // Another daemon recorded them: read what it did.
                    self.tickets
                        .wait_indexed(self.store.last_sequence())
                        .await?;
                }
                Err(e) => return Err(e.into()),
            }
        }
        Ok(0)
    }

    /// Follow the schedule and record each alert at its moment, until the
    /// daemon stops. Started with the desk.
    /// Record due SLA alerts until the store closes or the desk is
    /// dropped (the task holds the desk only while it works).
    pub(super) fn watch_sla(self: &Arc<Self>) {
        let desk = Arc::downgrade(self);
        let schedule = Arc::clone(&self.schedule);
        let mut closing = self.store.closing();
        tokio::spawn(async move {
            let mut backoff = Duration::from_millis(200);
            loop {
                if *closing.borrow() {
                    return;
                }
                let Some(this) = desk.upgrade() else { return };
                let wait = this.record_due(&mut backoff).await;
                drop(this);
                tokio::select! {
                    () = schedule.changed() => {}
                    () = tokio::time::sleep(wait) => {}
                    _ = closing.changed() => {}
                }
            }
        });
    }

    /// Record what is due now; how long to wait before looking again.
    async fn record_due(&self, backoff: &mut Duration) -> Duration {
        let now = crate::clock::now_unix();
        let mut failed = false;
        let mut recorded = 0;
        for id in self.schedule.due(now) {
            match self.record_alerts(&id, now).await {
                Ok(n) => recorded += n,
                Err(e) => {
                    failed = true;
                    crate::error_limited!("sla-alert", ticket = %id, error = %e, "cannot record an SLA alert; trying again");
                }
            }
        }
        if failed {
            *backoff = (*backoff * 2).min(Duration::from_secs(30));
            return *backoff;
        }
        *backoff = Duration::from_millis(200);
        match self.schedule.next() {
            Some(at) if at > now => until(at, now).min(IDLE),
            // Still due: what was owed moved under us, or another daemon
            // is recording it; look again shortly.
            Some(_) if recorded == 0 => Duration::from_millis(200),
            Some(_) => Duration::ZERO,
            None => IDLE,
        }
    }
}

/// Time until the Unix second `at` begins, `now` being the desk's clock:
/// by the wall clock (to the millisecond), or — when the desk's clock is
/// fixed (`$TINYCODE_NOW`) and the wall clock is past `at` — by the desk's
/// clock in whole seconds, so a fixed clock never spins the watch.
fn until(at: i64, now: i64) -> Duration {
    let wall = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let left = Duration::from_secs(at.max(0) as u64).saturating_sub(wall);
    if left.is_zero() {
        Duration::from_secs((at - now).max(1) as u64)
    } else {
        left
    }
}
