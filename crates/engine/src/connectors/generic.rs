//! tinycode's own webhook shape, both ways (docs/CONNECTORS.md).
//!
//! In: `POST /hooks/<source>` with a JSON body
//! `{"event_id", "conversation_id", "subject", "body", "customer",
//! "channel", "time"}` and two headers: `X-Tinycode-Timestamp` (Unix
//! seconds) and `X-Tinycode-Signature: sha256=<hex>`, the HMAC-SHA256 of
//! `<timestamp>.<body>` with the source's secret. A timestamp more than
//! [`WINDOW`] away from the daemon's clock is refused (a replayed request).
//!
//! Out: the same two headers over a JSON body `{"idempotency_key", "kind",
//! "ticket_id", "conversation_id", "text", "at"}`, and `Idempotency-Key`.

use hmac::{Hmac, KeyInit, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;

use tinycode_shared::proto::OutboxItem;

use super::ConnectorError;
use super::request::Outgoing;
use crate::domain::desk::Inbound;

/// How far a request's timestamp may be from now, seconds.
pub const WINDOW: i64 = 300;
pub const TIMESTAMP_HEADER: &str = "x-tinycode-timestamp";
pub const SIGNATURE_HEADER: &str = "x-tinycode-signature";

/// `sha256=<hex>` of `<timestamp>.<body>`.
pub fn sign(secret: &[u8], timestamp: i64, body: &[u8]) -> String {
    let mut mac = mac(secret);
    mac.update(format!("{timestamp}.").as_bytes());
    mac.update(body);
    format!("sha256={}", hex(&mac.finalize().into_bytes()))
}

/// Lower-case hex of `bytes` (signatures are written so).
pub(super) use tinycode_base::hex::encode as hex;

/// HMAC-SHA256 keyed with `secret` (tinycode's, Chatwoot's and Zendesk's
/// signatures).
pub(super) fn mac(secret: &[u8]) -> Hmac<Sha256> {
    // HMAC takes a key of any length.
    match Hmac::<Sha256>::new_from_slice(secret) {
        Ok(mac) => mac,
        Err(_) => unreachable_mac(),
    }
}

#[cold]
fn unreachable_mac() -> ! {
    panic!("HMAC-SHA256 refused a key: it accepts keys of any length")
}

pub(super) use tinycode_base::hex::decode as hex_value;

/// Check a request's signature (in constant time) and its timestamp.
pub fn verify(
    secret: &[u8],
    timestamp: Option<&str>,
    signature: Option<&str>,
    body: &[u8],
    now: i64,
) -> Result<(), ConnectorError> {
    let refused = |why: &str| Err(ConnectorError::BadSignature(why.to_string()));
    let Some(timestamp) = timestamp else {
        return refused("the X-Tinycode-Timestamp header is missing");
    };
    let Ok(at) = timestamp.trim().parse::<i64>() else {
        return refused("X-Tinycode-Timestamp is not Unix seconds");
    };
    let Some(given) = signature
        .and_then(|s| s.trim().strip_prefix("sha256="))
        .and_then(hex_value)
    else {
        return refused("X-Tinycode-Signature is missing or not `sha256=<hex>`");
    };
    let mut mac = mac(secret);
    mac.update(format!("{at}.").as_bytes());
    mac.update(body);
    if mac.verify_slice(&given).is_err() {
        return refused("the signature does not match the body and the source's secret");
    }
    if now.abs_diff(at) > WINDOW.unsigned_abs() {
        return refused(&format!(
            "the timestamp is {}s away from the daemon's clock (at most {WINDOW}s): a replayed or delayed request",
            now.abs_diff(at)
        ));
    }
    Ok(())
}

/// The body of a generic delivery.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Delivery {
    event_id: String,
    conversation_id: String,
    #[serde(default)]
    subject: String,
    body: String,
    #[serde(default)]
    customer: String,
    #[serde(default)]
    channel: String,
    #[serde(default)]
    time: String,
}

/// Read a generic delivery of `source`.
pub fn read(source: &str, body: &[u8]) -> Result<Inbound, ConnectorError> {
    let d: Delivery = serde_json::from_slice(body).map_err(|e| {
        ConnectorError::Unreadable(format!(
            "the body is not a tinycode delivery ({e}); it is a JSON object with event_id, conversation_id, body and optionally subject, customer, channel, time"
        ))
    })?;
    if !d.time.is_empty() && crate::clock::parse_rfc3339(&d.time).is_none() {
        return Err(ConnectorError::Unreadable(format!(
            "`time` must be an RFC 3339 time such as 2026-12-05T10:00:00Z, got {:?}",
            d.time
        )));
    }
    Ok(Inbound {
        source: source.to_string(),
        delivery: d.event_id,
        conversation: d.conversation_id,
        subject: d.subject,
        body: d.body,
        customer: d.customer,
        channel: d.channel,
        at: d.time,
        sla_minutes: 0,
    })
}

/// The body of what goes out for one delivery.
#[derive(Debug, Serialize)]
struct Reply<'a> {
    idempotency_key: &'a str,
    kind: &'a str,
    ticket_id: &'a str,
    conversation_id: &'a str,
    text: &'a str,
    at: &'a str,
}

/// The signed request that delivers `item` to the source's receiver.
pub fn request(url: &str, secret: &[u8], item: &OutboxItem, now: i64) -> Result<Outgoing, String> {
    let body = serde_json::to_vec(&Reply {
        idempotency_key: &item.idempotency_key,
        kind: &item.kind,
        ticket_id: &item.ticket_id,
        conversation_id: &item.conversation,
        text: &item.text,
        at: &item.decided_at,
    })
    .map_err(|e| e.to_string())?;
    Ok(Outgoing {
        method: reqwest::Method::POST,
        url: url.to_string(),
        headers: vec![
            (TIMESTAMP_HEADER, now.to_string()),
            (SIGNATURE_HEADER, sign(secret, now, &body)),
        ],
        body,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &[u8] = b"s3cret";

    #[test]
    fn a_signature_made_with_the_secret_verifies_and_any_change_is_refused() {
        let body = br#"{"event_id":"1"}"#;
        let sig = sign(SECRET, 1000, body);
        assert!(verify(SECRET, Some("1000"), Some(&sig), body, 1000).is_ok());
        assert!(verify(SECRET, Some("1000"), Some(&sig), body, 1000 + WINDOW).is_ok());
        let refused =
            |r: Result<(), ConnectorError>| matches!(r, Err(ConnectorError::BadSignature(_)));
        assert!(refused(verify(
            b"other",
            Some("1000"),
            Some(&sig),
            body,
            1000
        )));
        assert!(refused(verify(
            SECRET,
            Some("1001"),
            Some(&sig),
            body,
            1000
        )));
        assert!(refused(verify(
            SECRET,
            Some("1000"),
            Some(&sig),
            b"{}",
            1000
        )));
        assert!(refused(verify(
            SECRET,
            Some("1000"),
            Some(&sig),
            body,
            1001 + WINDOW
        )));
        assert!(refused(verify(SECRET, None, Some(&sig), body, 1000)));
        assert!(refused(verify(SECRET, Some("1000"), None, body, 1000)));
        assert!(refused(verify(
            SECRET,
            Some("1000"),
            Some("sha256=zz"),
            body,
            1000
        )));
    }

    #[test]
    fn a_known_vector_signs_as_any_hmac_sha256_library_does() {
        // RFC 4231, test case 2: key "Jefe", data "what do ya want for nothing?".
        let mut mac = mac(b"Jefe");
        mac.update(b"what do ya want for nothing?");
        assert_eq!(
            hex(&mac.finalize().into_bytes()),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn a_body_that_is_not_a_delivery_names_what_one_holds() {
        for bad in [
            &b"not json"[..],
            br#"{"event_id":"1"}"#,
            br#"{"event_id":"1","conversation_id":"c","body":"x","extra":1}"#,
        ] {
            match read("acme", bad) {
                Err(ConnectorError::Unreadable(m)) => assert!(m.contains("event_id"), "{m}"),
                other => panic!("{other:?}"),
            }
        }
        let bad_time = br#"{"event_id":"1","conversation_id":"c","body":"x","time":"yesterday"}"#;
        assert!(matches!(
            read("acme", bad_time),
            Err(ConnectorError::Unreadable(_))
        ));
        let ok = read(
            "acme",
            br#"{"event_id":"1","conversation_id":"c","body":"<b>hi</b>"}"#,
        )
        .unwrap();
        assert_eq!((ok.delivery.as_str(), ok.body.as_str()), ("1", "<b>hi</b>"));
    }
}
