//! What queues tickets automatically: the ticket events of the log (a file
//! imported — the desk's mirror polls `tickets/` —, `Tickets.Create`, a
//! ticket reopened), whoever caused them.

use std::sync::Arc;

use tinycode_shared::proto::Event;
use tinycode_shared::proto::event::Payload;

use super::{Triage, worker_client};
use crate::domain::ticket::Status;
use crate::store::ExpectedVersion;

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
        if !self.config().enabled {
            return;
        }
        let mut feed = self.store.follow_forever("ticket-", from, "triage intake");
        while let Some(event) = feed.recv().await {
            let (Some(source), Some(id)) =
                (source_of(&event), event.stream_id.strip_prefix("ticket-"))
            else {
                continue;
            };
            let known = self.records().contains(id).unwrap_or_else(|e| {
                crate::error_limited!("intake-board", ticket = id, error = %e, "cannot read the triage board");
                true
            });
            if known || !self.is_open(id, event.sequence).await {
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
            match queued {
                Ok(_) => {}
                Err(e) => {
                    // The sweep (every half lease) queues it later.
                    self.intake_missed
                        .store(true, std::sync::atomic::Ordering::Release);
                    crate::error_limited!("intake-queue", ticket = id, error = %e, "cannot queue a ticket for triage; it is queued once the store answers");
                }
            }
        }
    }

    /// Is the ticket open, as the tickets projection has it once it has
    /// applied every event up to `sequence`?
    pub(super) async fn is_open(&self, id: &str, sequence: u64) -> bool {
        if let Err(e) = self.desk.tickets_at(sequence).await {
            crate::error_limited!("intake-ticket", ticket = id, error = %e, "cannot read the ticket");
            return false;
        }
        self.desk
            .with_ticket(id, |t| Status::of(t) == Some(Status::Open))
            .unwrap_or(false)
    }
}
