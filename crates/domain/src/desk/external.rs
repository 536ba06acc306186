//! The tickets model's indexes of connector tickets (`intake.rs` reads
//! them): `e/c/<source>\0<conversation>` → the ticket,
//! `e/d/<source>\0<delivery>` → the ticket the delivery went to.

use tinycode_shared::proto::event::Payload;
use tinycode_shared::proto::{Event, Ticket, TicketMessage};

use crate::projection::Writes;

const CONVERSATION_PREFIX: &[u8] = b"e/c/";
const DELIVERY_PREFIX: &[u8] = b"e/d/";

pub(super) fn conversation_key(source: &str, conversation: &str) -> Vec<u8> {
    [
        CONVERSATION_PREFIX,
        source.as_bytes(),
        b"\0",
        conversation.as_bytes(),
    ]
    .concat()
}

pub(super) fn delivery_key(source: &str, delivery: &str) -> Vec<u8> {
    [
        DELIVERY_PREFIX,
        source.as_bytes(),
        b"\0",
        delivery.as_bytes(),
    ]
    .concat()
}

/// Fold the connector indexes of one ticket event (`ticket` as folded
/// after it).
pub(super) fn index(writes: &mut Writes<'_>, ticket: &Ticket, event: &Event) {
    let Some(external) = &ticket.external else {
        return;
    };
    let messages: &[TicketMessage] = match event.payload.as_ref() {
        Some(Payload::TicketCreated(_) | Payload::TicketImported(_)) => {
            writes.put(
                conversation_key(&external.source, &external.conversation),
                ticket.id.clone().into_bytes(),
            );
            &ticket.messages
        }
        Some(Payload::CustomerMessageAdded(e)) => e.message.as_slice(),
        _ => return,
    };
    for m in messages.iter().filter(|m| !m.delivery.is_empty()) {
        writes.put(
            delivery_key(&external.source, &m.delivery),
            ticket.id.clone().into_bytes(),
        );
    }
}
