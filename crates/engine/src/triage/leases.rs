//! Work shared between daemons on one log: every daemon lines up every
//! queued record (whoever queued it), so the first free slot anywhere
//! claims it; and records held by a daemon that stopped being heard from
//! are lined up again here, to be claimed after the lease. The same sweep
//! picks up this daemon's own work an outage of the store stranded: a
//! record it holds with no job and no turn here (its settling append
//! failed), and tickets the intake could not queue.

use std::sync::Arc;

use tinycode_shared::proto::event::Payload;

use super::Triage;
use super::board::{Job, Start};

impl Triage {
    /// Follow the triage streams from `from` on: line up each ticket queued
    /// by any daemon.
    pub(super) async fn follow_queued(self: Arc<Self>, from: u64) {
        let mut feed = self.store.follow_forever("triage-", from, "queued triage");
        while let Some(event) = feed.recv().await {
            if let Some(Payload::TriageQueued(q)) = &event.payload {
                self.line_up(Job {
                    ticket: q.ticket_id.clone(),
                    start: Start::Fresh,
                });
            }
        }
    }

    /// Every half lease: line up the records held by daemons the store has
    /// not heard from within the lease (the claim decides who takes each).
    pub(super) async fn watch_leases(self: Arc<Self>) {
        let mut closing = self.store.closing();
        while self.cluster.half_lease(&mut closing).await {
            if let Err(e) = self.line_up_orphans().await {
                tracing::warn!(error = %e, "cannot look for triage held by dead daemons");
            }
            if let Err(e) = self.line_up_stranded() {
                tracing::warn!(error = %e, "cannot look for stranded triage");
            }
            if self
                .intake_missed
                .swap(false, std::sync::atomic::Ordering::AcqRel)
                && let Err(e) = self.queue_untriaged().await
            {
                self.intake_missed
                    .store(true, std::sync::atomic::Ordering::Release);
                tracing::warn!(error = %e, "cannot queue the tickets the intake missed");
            }
        }
    }

    /// This daemon's unfinished records with no job here and no turn
    /// running here: an append that would have settled or retried them
    /// failed (the store was away). Lined up as after a restart.
    fn line_up_stranded(&self) -> Result<(), super::TriageError> {
        let me = self.cluster.id();
        for r in self.records().unfinished()? {
            let mine = r.owner.is_empty() || r.owner == me;
            if !mine || self.is_local(&r.ticket) || self.sessions.working(&r.session) {
                continue;
            }
            let start = match r.phase {
                super::board::Phase::Queued | super::board::Phase::Retrying => Start::Fresh,
                _ => Start::Again,
            };
            if self.line_up(Job {
                ticket: r.ticket.clone(),
                start,
            }) {
                tracing::warn!(ticket = %r.ticket, "lined up a triage left unsettled (the store was unreachable)");
            }
        }
        Ok(())
    }

    async fn line_up_orphans(&self) -> Result<(), super::TriageError> {
        let held: Vec<_> = self
            .records()
            .unfinished()?
            .into_iter()
            .filter(|r| !r.owner.is_empty() && r.owner != self.cluster.id())
            .collect();
        if held.is_empty() {
            return Ok(());
        }
        let live = self.cluster.live_ids().await?;
        for r in held {
            if !live.contains(&r.owner)
                && self.line_up(Job {
                    ticket: r.ticket.clone(),
                    start: Start::Again,
                })
            {
                tracing::info!(ticket = %r.ticket, owner = %r.owner, "lined up the triage of a daemon not heard from");
            }
        }
        Ok(())
    }
}
