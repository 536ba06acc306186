//! Sends what the outbox owes, until the store closes.
//!
//! Each attempt is claimed by appending `DeliveryAttempted` at the version
//! of its `outbox-<sequence>` stream the outbox model shows: of several
//! daemons on one log, one makes each attempt. The request carries the
//! item's idempotency key; its outcome is `DeliveryFinished` (sent, or the
//! error and when the next attempt is due, or parked after the last). An
//! attempt whose outcome never came (the daemon died meanwhile) is tried
//! again after [`IN_FLIGHT`] — at once by the daemon that made it when it
//! starts again — with the same key: the receiver recognises it. A
//! ticket's deliveries go out in order: one waiting for a retry holds back
//! the ticket's later ones. Each source has its own task: a source that
//! hangs or keeps failing never holds up the others.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tinycode_shared::proto::event::Payload;
use tinycode_shared::proto::{DeliveryAttempted, DeliveryFinished, OutboxItem};

use super::outbox::{Reader, state, stream};
use super::{Connectors, request};
use crate::store::{ExpectedVersion, StoreError};

/// An attempt with no outcome after this long is taken for lost.
const IN_FLIGHT: i64 = 60;
/// Look again at least this often (a retry falling due).
const LOOK_EVERY: Duration = Duration::from_secs(1);
/// The longest wait between two attempts.
const MAX_BACKOFF: u64 = 3600;

/// Deliver until the store closes.
pub async fn run(connectors: Arc<Connectors>) {
    let mut closing = connectors.store.closing();
    let mut changed = connectors.changed.subscribe();
    let busy = Arc::new(Mutex::new(BTreeSet::new()));
    loop {
        if *closing.borrow() {
            return;
        }
        if let Err(e) = round(&connectors, &busy) {
            crate::error_limited!("outbox-read", error = %e, "cannot read the outbox; trying again");
        }
        tokio::select! {
            () = tokio::time::sleep(LOOK_EVERY) => {}
            _ = changed.changed() => {}
            _ = closing.changed() => {}
        }
    }
}

/// Send every item that is due, oldest first: a task per source, unless
/// the source's task of an earlier round still runs (`busy`).
fn round(
    connectors: &Arc<Connectors>,
    busy: &Arc<Mutex<BTreeSet<String>>>,
) -> Result<(), crate::projection::ProjectionError> {
    let now = super::real_now();
    let reader = Reader(connectors.outbox.tree());
    // A parked delivery holds back its ticket's later ones, as a waiting
    // one does: a resolution never overtakes the reply before it.
    let mut held: BTreeSet<String> = reader.parked()?.into_iter().map(|i| i.ticket_id).collect();
    let mut due_by_source: BTreeMap<String, Vec<OutboxItem>> = BTreeMap::new();
    let mut cannot = Vec::new();
    for item in reader.pending()? {
        if held.contains(&item.ticket_id) {
            continue;
        }
        let due = match item.state.as_str() {
            // A source's deliveries go one at a time (its task is `busy`):
            // an attempt of this daemon's still `sending` when a round
            // begins was made before it started again (or its outcome is
            // not folded yet: then the claim at the old version conflicts
            // and nothing is sent).
            state::SENDING => {
                item.attempt_daemon == connectors.daemon
                    || since(&item.attempt_at, now) >= IN_FLIGHT
            }
            _ => item.next_at.is_empty() || since(&item.next_at, now) >= 0,
        };
        held.insert(item.ticket_id.clone());
        if !due {
            continue;
        }
        match connectors.why_not_sent(&item.source) {
            None => due_by_source
                .entry(item.source.clone())
                .or_default()
                .push(item),
            Some(why) => cannot.push((item, why)),
        }
    }
    if !cannot.is_empty() {
        let connectors = Arc::clone(connectors);
        tokio::spawn(async move {
            for (item, why) in cannot {
                park(&connectors, item, why).await;
            }
        });
    }
    for (source, items) in due_by_source {
        if !crate::sync::lock(busy).insert(source.clone()) {
            continue;
        }
        let connectors = Arc::clone(connectors);
        let busy = Arc::clone(busy);
        tokio::spawn(async move {
            for item in items {
                attempt(&connectors, item).await;
            }
            crate::sync::lock(&busy).remove(&source);
        });
    }
    Ok(())
}

/// Seconds from `at` (RFC 3339) to `now`; a time that does not read is
/// long past.
fn since(at: &str, now: i64) -> i64 {
    crate::clock::parse_rfc3339(at).map_or(i64::MAX, |t| now - t)
}

/// A delivery its source cannot make (no longer configured, or no
/// `deliverUrl`): parked at once with the reason, visible and retried by a
/// person once the source can send — not kept waiting to go out months
/// later.
async fn park(connectors: &Connectors, item: OutboxItem, why: String) {
    let Some(claimed) = claim(connectors, &item).await else {
        return;
    };
    let finished = DeliveryFinished {
        sequence: item.sequence,
        attempt: item.attempts + 1,
        error: why,
        parked: true,
        at: tinycode_shared::render::rfc3339(super::real_now(), 0),
        ..DeliveryFinished::default()
    };
    record(connectors, &item, claimed, finished).await;
}

/// Claim the next attempt of `item`: the stream's version after the claim,
/// or `None` when another daemon took it or the model was behind.
async fn claim(connectors: &Connectors, item: &OutboxItem) -> Option<u64> {
    let expected = match item.version {
        0 => ExpectedVersion::NoStream,
        v => ExpectedVersion::Exact(v),
    };
    let claim = Payload::DeliveryAttempted(DeliveryAttempted {
        sequence: item.sequence,
        attempt: item.attempts + 1,
        daemon: connectors.daemon.clone(),
        at: tinycode_shared::render::rfc3339(super::real_now(), 0),
    });
    let stream = stream(item.sequence);
    match connectors
        .store
        .append(&stream, expected, vec![claim])
        .await
    {
        Ok(events) => Some(events.last().map_or(0, |e| e.stream_version)),
        Err(StoreError::Conflict { .. }) => None,
        Err(e) => {
            crate::error_limited!("outbox-claim", stream = %stream, error = %e, "cannot claim a delivery");
            None
        }
    }
}

/// Record an attempt's outcome after the claim at `claimed`.
async fn record(
    connectors: &Connectors,
    item: &OutboxItem,
    claimed: u64,
    finished: DeliveryFinished,
) {
    let (sent, attempt) = (finished.sent, finished.attempt);
    let stream = stream(item.sequence);
    let payload = Payload::DeliveryFinished(finished);
    match connectors
        .store
        .append(&stream, ExpectedVersion::Exact(claimed), vec![payload])
        .await
    {
        Ok(_) if sent => {
            tracing::info!(delivery = item.sequence, ticket = %item.ticket_id, attempt, "delivered")
        }
        Ok(_) => {}
        Err(e) => {
            crate::error_limited!("outbox-outcome", stream = %stream, error = %e, "cannot record a delivery's outcome; it is tried again with the same key")
        }
    }
}

async fn attempt(connectors: &Connectors, item: OutboxItem) {
    let Some(claimed) = claim(connectors, &item).await else {
        return;
    };
    let attempt = item.attempts + 1;
    let outcome = send(connectors, &item).await;
    let now = super::real_now();
    let at = tinycode_shared::render::rfc3339(now, 0);
    let finished = match outcome {
        Ok(()) => DeliveryFinished {
            sequence: item.sequence,
            attempt,
            sent: true,
            at,
            ..DeliveryFinished::default()
        },
        Err((error, http_status)) => {
            let parked = attempt >= connectors.max_attempts(&item.source);
            let wait = connectors
                .retry_seconds(&item.source)
                .saturating_mul(1 << (attempt - 1).min(16))
                .min(MAX_BACKOFF);
            tracing::warn!(delivery = item.sequence, ticket = %item.ticket_id, attempt, parked, %error, "a delivery failed");
            DeliveryFinished {
                sequence: item.sequence,
                attempt,
                sent: false,
                error,
                http_status,
                parked,
                at,
                next_at: if parked {
                    String::new()
                } else {
                    tinycode_shared::render::rfc3339(now + wait as i64, 0)
                },
            }
        }
    };
    record(connectors, &item, claimed, finished).await;
}

/// One request to the source; the error and HTTP status when it failed.
async fn send(connectors: &Connectors, item: &OutboxItem) -> Result<(), (String, u32)> {
    let spec = connectors.source(&item.source).ok_or_else(|| {
        (
            format!("the source {:?} is no longer configured", item.source),
            0,
        )
    })?;
    if spec.kind == crate::config::sources::SourceKind::Mail {
        return super::smtp::send(&spec, item).await;
    }
    let out = super::outgoing(&spec, item, super::real_now()).map_err(|e| (e, 0))?;
    request::send(&connectors.http, out, &item.idempotency_key).await
}
