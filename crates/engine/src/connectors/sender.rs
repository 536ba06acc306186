//! Sends what the outbox owes, until the store closes.
//!
//! Each attempt is claimed by appending `DeliveryAttempted` at the version
//! of its `outbox-<sequence>` stream the outbox model shows: of several
//! daemons on one log, one makes each attempt. The request carries the
//! item's idempotency key; its outcome is `DeliveryFinished` (sent, or the
//! error and when the next attempt is due, or parked after the last). An
//! attempt whose outcome never came (the daemon died meanwhile) is tried
//! again after [`IN_FLIGHT`] — at once by the daemon that made it when it
//! starts again — with the same key: the receiver recognises it. A ticket's deliveries go out in order: one waiting for a retry
//! holds back the ticket's later ones.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use tinycode_shared::proto::event::Payload;
use tinycode_shared::proto::{DeliveryAttempted, DeliveryFinished, OutboxItem};

use super::outbox::{Reader, state, stream};
use super::{Connectors, generic};
use crate::store::{ExpectedVersion, StoreError};

/// An attempt with no outcome after this long is taken for lost.
const IN_FLIGHT: i64 = 60;
/// One request's time limit.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(15);
/// Look again at least this often (a retry falling due).
const LOOK_EVERY: Duration = Duration::from_secs(1);
/// The longest wait between two attempts.
const MAX_BACKOFF: u64 = 3600;

/// Deliver until the store closes.
pub async fn run(connectors: Arc<Connectors>) {
    let mut closing = connectors.store.closing();
    let mut changed = connectors.changed.subscribe();
    loop {
        if *closing.borrow() {
            return;
        }
        if let Err(e) = round(&connectors).await {
            crate::error_limited!("outbox-read", error = %e, "cannot read the outbox; trying again");
        }
        tokio::select! {
            () = tokio::time::sleep(LOOK_EVERY) => {}
            _ = changed.changed() => {}
            _ = closing.changed() => {}
        }
    }
}

/// Send every item that is due, oldest first.
async fn round(connectors: &Connectors) -> Result<(), crate::projection::ProjectionError> {
    let now = super::real_now();
    let pending = Reader(connectors.outbox.tree()).pending()?;
    let mut held: BTreeSet<String> = BTreeSet::new();
    for item in pending {
        if held.contains(&item.ticket_id) {
            continue;
        }
        let due = match item.state.as_str() {
            // This daemon sends one delivery at a time: an attempt of its
            // own still `sending` when a round begins was made before it
            // started again (or its outcome is not folded yet: then the
            // claim at the old version conflicts and nothing is sent).
            state::SENDING => {
                item.attempt_daemon == connectors.daemon
                    || since(&item.attempt_at, now) >= IN_FLIGHT
            }
            _ => item.next_at.is_empty() || since(&item.next_at, now) >= 0,
        };
        held.insert(item.ticket_id.clone());
        if due && connectors.sends_to(&item.source) {
            attempt(connectors, item).await;
        }
    }
    Ok(())
}

/// Seconds from `at` (RFC 3339) to `now`; a time that does not read is
/// long past.
fn since(at: &str, now: i64) -> i64 {
    crate::clock::parse_rfc3339(at).map_or(i64::MAX, |t| now - t)
}

async fn attempt(connectors: &Connectors, item: OutboxItem) {
    let attempt = item.attempts + 1;
    let expected = match item.version {
        0 => ExpectedVersion::NoStream,
        v => ExpectedVersion::Exact(v),
    };
    let claim = Payload::DeliveryAttempted(DeliveryAttempted {
        sequence: item.sequence,
        attempt,
        daemon: connectors.daemon.clone(),
        at: tinycode_shared::render::rfc3339(super::real_now(), 0),
    });
    let stream = stream(item.sequence);
    let claimed = match connectors
        .store
        .append(&stream, expected, vec![claim])
        .await
    {
        Ok(events) => events.last().map_or(0, |e| e.stream_version),
        // Another daemon took this attempt, or the model was behind.
        Err(StoreError::Conflict { .. }) => return,
        Err(e) => {
            crate::error_limited!("outbox-claim", stream = %stream, error = %e, "cannot claim a delivery");
            return;
        }
    };
    let outcome = send(connectors, &item).await;
    let max = connectors.max_attempts(&item.source);
    let now = super::real_now();
    let finished = match outcome {
        Ok(()) => DeliveryFinished {
            sequence: item.sequence,
            attempt,
            sent: true,
            at: tinycode_shared::render::rfc3339(super::real_now(), 0),
            ..DeliveryFinished::default()
        },
        Err((error, http_status)) => {
            let parked = attempt >= max;
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
                at: tinycode_shared::render::rfc3339(super::real_now(), 0),
                next_at: if parked {
                    String::new()
                } else {
                    tinycode_shared::render::rfc3339(now + wait as i64, 0)
                },
            }
        }
    };
    let sent = finished.sent;
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

/// One request to the source; the error and HTTP status when it failed.
async fn send(connectors: &Connectors, item: &OutboxItem) -> Result<(), (String, u32)> {
    let spec = connectors.source(&item.source).ok_or_else(|| {
        (
            format!("the source {:?} is no longer configured", item.source),
            0,
        )
    })?;
    let url = spec
        .deliver_url
        .as_deref()
        .ok_or_else(|| (format!("the source {:?} has no deliverUrl", item.source), 0))?;
    let secret = super::secret(&spec).map_err(|e| (e.to_string(), 0))?;
    let body = serde_json::to_vec(&generic::Outgoing {
        idempotency_key: &item.idempotency_key,
        kind: &item.kind,
        ticket_id: &item.ticket_id,
        conversation_id: &item.conversation,
        text: &item.text,
        at: &item.decided_at,
    })
    .map_err(|e| (e.to_string(), 0))?;
    let timestamp = super::real_now();
    let response = connectors
        .http
        .post(url)
        .timeout(REQUEST_TIMEOUT)
        .header("content-type", "application/json")
        .header("idempotency-key", &item.idempotency_key)
        .header(generic::TIMESTAMP_HEADER, timestamp.to_string())
        .header(
            generic::SIGNATURE_HEADER,
            generic::sign(secret.as_bytes(), timestamp, &body),
        )
        .body(body)
        .send()
        .await
        .map_err(|e| (format!("cannot reach {url}: {e}"), 0))?;
    let status = response.status();
    if status.is_success() {
        return Ok(());
    }
    let text = response.text().await.unwrap_or_default();
    let text: String = text.chars().take(200).collect();
    Err((
        format!("{url} answered {status}: {}", text.trim()),
        u32::from(status.as_u16()),
    ))
}
