//! Work shared between daemons on one log: every daemon lines up every
//! queued record (whoever queued it), so the first free slot anywhere
//! claims it; and records held by a daemon that stopped being heard from
//! are lined up again here, to be claimed after the lease.

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
        }
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
