//! What queues tickets automatically: the ticket events of the log (a file
//! imported, `Tickets.Create`, a ticket reopened), whoever caused them, and
//! a short poll of `tickets/` that imports files dropped or edited while the
//! daemon runs (which then show up here as events).

use std::sync::Arc;
use std::time::Duration;

use tinycode_shared::proto::Event;
use tinycode_shared::proto::event::Payload;

use super::{Triage, worker_client};
use crate::domain::desk::{FileStamps, ticket_stream};
use crate::store::{ExpectedVersion, SubscriptionOptions};
use crate::sync::lock;

/// Why a ticket event may have made a ticket open.
fn source_of(event: &Event) -> Option<&'static str> {
    match event.payload.as_ref()? {
        Payload::TicketCreated(_) => Some("created"),
        Payload::TicketImported(_) | Payload::TicketUpdatedFromFile(_) => Some("file"),
        Payload::TicketStatusChanged(_) | Payload::CustomerMessageAdded(_) => Some("reopened"),
        _ => None,
    }
}

impl Triage {
    /// Follow ticket events from `from` on; queue each ticket that is open
    /// and has never been triaged (when `autoTriage.enabled`).
    pub(super) async fn follow_tickets(self: Arc<Self>, from: u64) {
        if !self.config.enabled {
            return;
        }
        let mut sub = self.store.subscribe(SubscriptionOptions {
            from_sequence: from,
            stream_prefix: "ticket-".into(),
            follow: true,
        });
        while let Some(event) = sub.recv().await {
            let event = match event {
                Ok(e) => e,
                Err(e) => {
                    tracing::error!(error = %e, "the triage worker lost the ticket feed");
                    return;
                }
            };
            let (Some(source), Some(id)) =
                (source_of(&event), event.stream_id.strip_prefix("ticket-"))
            else {
                continue;
            };
            if lock(&self.board).records.contains_key(id) || !self.is_open(id) {
                continue;
            }
            let queued = self
                .queue(
                    id,
                    source,
                    "",
                    "",
                    worker_client(),
                    ExpectedVersion::NoStream,
                )
                .await;
            if let Err(e) = queued {
                tracing::error!(ticket = id, error = %e, "cannot queue a ticket for triage");
            }
        }
    }

    /// The ticket's status as the log has it now (the desk's projection may
    /// be a moment behind the feed).
    pub(super) fn is_open(&self, id: &str) -> bool {
        let Ok(events) = self.store.read_stream(&ticket_stream(id), 1, usize::MAX) else {
            return false;
        };
        let mut ticket = tinycode_shared::proto::Ticket::default();
        for e in &events {
            crate::domain::ticket::apply(&mut ticket, e);
        }
        ticket.status == "open"
    }

    /// Import new and edited ticket files every `pollIntervalMs`.
    pub(super) async fn poll_ticket_files(self: Arc<Self>) {
        let mut seen = FileStamps::new();
        let every = Duration::from_millis(self.config.poll_interval_ms);
        // The first scan only learns the files start-up imported.
        let _ = self.desk.rescan_ticket_files(&mut seen).await;
        loop {
            tokio::time::sleep(every).await;
            match self.desk.rescan_ticket_files(&mut seen).await {
                Ok(r) if r.imported + r.updated > 0 => {
                    tracing::info!(
                        imported = r.imported,
                        updated = r.updated,
                        "picked up ticket files"
                    );
                }
                Ok(_) => {}
                Err(e) => tracing::error!(error = %e, "cannot scan the ticket files"),
            }
        }
    }
}
