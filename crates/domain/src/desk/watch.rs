//! `Tickets.Watch`: each ticket change as it happens, with the ticket as of
//! that change. A follower of the log's `ticket-` events that folds, per
//! watcher, the tickets it has seen (a ticket first met mid-stream is read
//! from its stream first); a store error ends the follow with the error,
//! never with a ticket silently folded from nothing.

use std::collections::HashMap;
use std::sync::Arc;

use tinycode_shared::proto::{Event, Ticket};

use super::{Desk, DomainError, ticket_id, ticket_stream};
use crate::store::{Subscription, SubscriptionOptions};
use crate::ticket::apply;

/// One watcher's follow of the tickets (or of one ticket).
pub struct TicketWatch {
    desk: Arc<Desk>,
    subscription: Subscription,
    /// Only this ticket's stream (`ticket-T-1` also prefixes `ticket-T-10`).
    only: Option<String>,
    /// The tickets as of the last event seen of each.
    states: HashMap<String, Ticket>,
}

impl Desk {
    /// Follow ticket changes from `from` on; `id` narrows it to one ticket.
    pub fn watch(
        self: &Arc<Self>,
        id: Option<&str>,
        from: u64,
    ) -> Result<TicketWatch, DomainError> {
        let only = id.map(ticket_id).transpose()?.map(|id| ticket_stream(&id));
        let subscription = self.store.subscribe(SubscriptionOptions {
            from_sequence: from,
            stream_prefix: only.clone().unwrap_or_else(|| "ticket-".into()),
            follow: true,
        });
        Ok(TicketWatch {
            desk: Arc::clone(self),
            subscription,
            only,
            states: HashMap::new(),
        })
    }
}

impl TicketWatch {
    /// The next change and the ticket after it; `None` when the log
    /// closes; an error ends the watch.
    pub async fn next(&mut self) -> Option<Result<(Arc<Event>, Ticket), DomainError>> {
        loop {
            let event = match self.subscription.recv().await? {
                Ok(event) => event,
                Err(e) => return Some(Err(e.into())),
            };
            if self.only.as_ref().is_some_and(|s| *s != event.stream_id) {
                continue;
            }
            return Some(self.fold(event).await);
        }
    }

    async fn fold(&mut self, event: Arc<Event>) -> Result<(Arc<Event>, Ticket), DomainError> {
        let state = self.states.entry(event.stream_id.clone()).or_default();
        if state.version + 1 != event.stream_version {
            // Joined mid-stream: fold the ticket's history first.
            let history = self
                .desk
                .store
                .read_stream(&event.stream_id, 1, (event.stream_version - 1) as usize)
                .await?;
            *state = Ticket::default();
            for e in &history {
                apply(state, e);
            }
        }
        apply(state, &event);
        Ok((event, state.clone()))
    }
}
