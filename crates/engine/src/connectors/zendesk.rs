//! Zendesk (docs/CONNECTORS.md).
//!
//! In: a webhook subscribed to the events `zen:event-type:ticket.created`
//! (the ticket's description is the customer's first message) and
//! `zen:event-type:ticket.comment_added` (a public comment by someone who
//! is not staff), signed by Zendesk: `X-Zendesk-Webhook-Signature` is the
//! base64 HMAC-SHA256 of the timestamp followed by the body, the timestamp
//! (`X-Zendesk-Webhook-Signature-Timestamp`, ISO 8601) within the window.
//! The conversation is the Zendesk ticket, the delivery the event's id; a
//! comment whose text is the ticket's description is its first message,
//! already stored with `ticket.created`.
//!
//! Out: `PUT /api/v2/tickets/<id>.json` with a public comment (a reply) or
//! `status: solved` (a resolution), as `<apiUser>/token` with the API token.

use base64::Engine as _;
use hmac::Mac;
use serde_json::{Value, json};
use tinycode_shared::proto::OutboxItem;

use super::request::{Outgoing, join};
use super::{ConnectorError, Read, text_of};
use crate::domain::desk::Inbound;

pub const SIGNATURE_HEADER: &str = "x-zendesk-webhook-signature";
pub const TIMESTAMP_HEADER: &str = "x-zendesk-webhook-signature-timestamp";

/// Zendesk's signature of `body` at `timestamp`.
pub fn sign(secret: &[u8], timestamp: &str, body: &[u8]) -> String {
    let mut mac = super::generic::mac(secret);
    mac.update(timestamp.as_bytes());
    mac.update(body);
    base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes())
}

/// Check a request's signature (in constant time) and its timestamp.
pub fn verify(
    secret: &[u8],
    header: &dyn Fn(&str) -> Option<String>,
    body: &[u8],
    now: i64,
) -> Result<(), ConnectorError> {
    let refused = |why: &str| Err(ConnectorError::BadSignature(why.to_string()));
    let Some(timestamp) = header(TIMESTAMP_HEADER) else {
        return refused("the X-Zendesk-Webhook-Signature-Timestamp header is missing");
    };
    let Some(given) = header(SIGNATURE_HEADER).and_then(|s| {
        base64::engine::general_purpose::STANDARD
            .decode(s.trim())
            .ok()
    }) else {
        return refused("X-Zendesk-Webhook-Signature is missing or not base64");
    };
    let mut mac = super::generic::mac(secret);
    mac.update(timestamp.as_bytes());
    mac.update(body);
    if mac.verify_slice(&given).is_err() {
        return refused("the signature does not match the body and the source's secret");
    }
    let Some(at) = crate::clock::parse_rfc3339(timestamp.trim()) else {
        return refused("X-Zendesk-Webhook-Signature-Timestamp is not an ISO 8601 time");
    };
    if now.abs_diff(at) > super::generic::WINDOW.unsigned_abs() {
        return refused(&format!(
            "the timestamp is {}s away from the daemon's clock (at most {}s): a replayed or delayed request",
            now.abs_diff(at),
            super::generic::WINDOW
        ));
    }
    Ok(())
}

/// Read a Zendesk event webhook of `source`.
pub fn read(source: &str, body: &[u8]) -> Result<Read, ConnectorError> {
    let v: Value = serde_json::from_slice(body).map_err(|e| {
        ConnectorError::Unreadable(format!("the body is not a Zendesk event (not JSON: {e})"))
    })?;
    let kind = text_of(&v["type"]);
    let ticket = &v["detail"];
    let (id, event_id) = (text_of(&ticket["id"]), text_of(&v["id"]));
    if kind.is_empty() || id.is_empty() || event_id.is_empty() {
        return Err(ConnectorError::Unreadable(
            "the body is not a Zendesk event: it needs `type`, `id` and the ticket's `detail.id` (subscribe the webhook to Zendesk events, not to a trigger)".into(),
        ));
    }
    let description = text_of(&ticket["description"]);
    let (text, customer) = match kind.as_str() {
        "zen:event-type:ticket.created" => (
            description,
            format!("zendesk user {}", text_of(&ticket["requester_id"])),
        ),
        "zen:event-type:ticket.comment_added" => {
            let comment = &v["event"]["comment"];
            if comment["is_public"] == json!(false) {
                return Ok(Read::Ignored("an internal note".into()));
            }
            if comment["author"]["is_staff"] == json!(true) {
                return Ok(Read::Ignored("an agent's comment".into()));
            }
            let text = text_of(&comment["body"]);
            if text.trim() == description.trim() {
                return Ok(Read::Ignored(
                    "the ticket's first comment (stored with ticket.created)".into(),
                ));
            }
            (text, text_of(&comment["author"]["name"]))
        }
        other => return Ok(Read::Ignored(format!("the event {other:?}"))),
    };
    Ok(Read::Delivery(Inbound {
        source: source.to_string(),
        delivery: event_id,
        conversation: id,
        subject: text_of(&ticket["subject"]),
        body: text,
        customer,
        channel: String::new(),
        at: text_of(&v["time"]),
        sla_minutes: 0,
    }))
}

/// The API request that delivers `item` to the Zendesk ticket.
pub fn request(base: &str, user: &str, token: &str, item: &OutboxItem) -> Result<Outgoing, String> {
    super::request::number(&item.conversation, "Zendesk ticket id")?;
    let body = match item.kind.as_str() {
        "resolved" => json!({"ticket": {"status": "solved"}}),
        _ => json!({"ticket": {"comment": {"body": item.text, "public": true}}}),
    };
    let auth = base64::engine::general_purpose::STANDARD.encode(format!("{user}/token:{token}"));
    Ok(Outgoing {
        method: reqwest::Method::PUT,
        url: join(base, &format!("api/v2/tickets/{}.json", item.conversation)),
        headers: vec![("authorization", format!("Basic {auth}"))],
        body: body.to_string().into_bytes(),
    })
}

/// The source of tickets imported from a Zendesk export (no way out:
/// `outbox.rs`).
pub const EXPORT_SOURCE: &str = "import-zendesk";

/// The deliveries of a Zendesk incremental ticket export: `{"tickets":
/// [...]}` (or one ticket object per line), each ticket's description its
/// first message (delivery `ticket-<id>`) and each of its `comments` (as
/// the ticket comments API gives them) that is public, by the requester
/// and not the description, a message of its own (`comment-<id>`).
/// Deleted tickets are left out.
pub fn export(text: &str) -> Result<Vec<Result<Inbound, String>>, String> {
    let tickets: Vec<Value> = match serde_json::from_str::<Value>(text) {
        Ok(v) => v["tickets"]
            .as_array()
            .cloned()
            .ok_or("the file is not a Zendesk export: it has no `tickets` list")?,
        Err(_) => text
            .lines()
            .filter(|l| !l.trim().is_empty())
            .enumerate()
            .map(|(i, l)| {
                serde_json::from_str(l).map_err(|e| format!("line {}: not JSON ({e})", i + 1))
            })
            .collect::<Result<_, _>>()?,
    };
    let mut out = Vec::new();
    for t in &tickets {
        let id = text_of(&t["id"]);
        if id.is_empty() {
            out.push(Err("a ticket without an `id`".to_string()));
            continue;
        }
        if text_of(&t["status"]) == "deleted" {
            continue;
        }
        let requester = text_of(&t["requester_id"]);
        let description = text_of(&t["description"]);
        let delivery = |delivery: String, body: String, at: &Value| Inbound {
            source: EXPORT_SOURCE.into(),
            delivery,
            conversation: id.clone(),
            subject: text_of(&t["subject"]),
            body,
            customer: format!("zendesk user {requester}"),
            channel: String::new(),
            at: text_of(at),
            sla_minutes: 0,
        };
        out.push(Ok(delivery(
            format!("ticket-{id}"),
            description.clone(),
            &t["created_at"],
        )));
        for c in t["comments"].as_array().into_iter().flatten() {
            let body = text_of(&c["body"]);
            let public = c["public"] != json!(false);
            if public && text_of(&c["author_id"]) == requester && body.trim() != description.trim()
            {
                out.push(Ok(delivery(
                    format!("comment-{}", text_of(&c["id"])),
                    body,
                    &c["created_at"],
                )));
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn created() -> Value {
        json!({
            "type": "zen:event-type:ticket.created", "id": "evt-1", "time": "2026-12-05T10:00:00Z",
            "detail": {"id": "35436", "subject": "Printer on fire", "description": "It is on fire", "requester_id": "77"}
        })
    }

    #[test]
    fn a_signature_is_checked_as_zendesk_makes_it_and_the_window_holds() {
        let body = created().to_string();
        let at = "2026-12-05T10:00:00Z";
        let now = crate::clock::parse_rfc3339(at).unwrap();
        let sig = sign(b"k", at, body.as_bytes());
        let headers = |ts: &'static str, sig: String| {
            move |name: &str| match name {
                TIMESTAMP_HEADER => Some(ts.to_string()),
                SIGNATURE_HEADER => Some(sig.clone()),
                _ => None,
            }
        };
        assert!(verify(b"k", &headers(at, sig.clone()), body.as_bytes(), now).is_ok());
        assert!(verify(b"other", &headers(at, sig.clone()), body.as_bytes(), now).is_err());
        assert!(verify(b"k", &headers(at, sig.clone()), b"{}", now).is_err());
        assert!(verify(b"k", &headers(at, sig.clone()), body.as_bytes(), now + 3600).is_err());
        assert!(
            verify(
                b"k",
                &headers(at, "not base64!".into()),
                body.as_bytes(),
                now
            )
            .is_err()
        );
    }

    #[test]
    fn a_new_ticket_and_a_customers_comment_are_deliveries_and_the_rest_ignored() {
        let Read::Delivery(t) = read("zd", created().to_string().as_bytes()).unwrap() else {
            panic!("ignored")
        };
        assert_eq!(
            (
                t.conversation.as_str(),
                t.subject.as_str(),
                t.body.as_str(),
                t.delivery.as_str()
            ),
            ("35436", "Printer on fire", "It is on fire", "evt-1")
        );
        let comment = |body: &str, staff: bool, public: bool| {
            json!({
                "type": "zen:event-type:ticket.comment_added", "id": "evt-2",
                "detail": {"id": "35436", "description": "It is on fire"},
                "event": {"comment": {"body": body, "is_public": public, "author": {"name": "Ana", "is_staff": staff}}}
            })
            .to_string()
        };
        let Read::Delivery(c) =
            read("zd", comment("Still burning", false, true).as_bytes()).unwrap()
        else {
            panic!("ignored")
        };
        assert_eq!(
            (c.body.as_str(), c.customer.as_str()),
            ("Still burning", "Ana")
        );
        for ignored in [
            comment("We are on it", true, true),
            comment("internal", false, false),
            comment("It is on fire", false, true),
        ] {
            assert!(matches!(
                read("zd", ignored.as_bytes()).unwrap(),
                Read::Ignored(_)
            ));
        }
        assert!(matches!(
            read("zd", br#"{"ticket": {}}"#),
            Err(ConnectorError::Unreadable(_))
        ));
    }

    #[test]
    fn a_reply_is_a_public_comment_and_a_resolution_solves_the_ticket() {
        let item = OutboxItem {
            conversation: "35436".into(),
            kind: "reply".into(),
            text: "Fire brigade called".into(),
            ..OutboxItem::default()
        };
        let out = request("https://acme.zendesk.com", "agent@acme.com", "t0k", &item).unwrap();
        assert_eq!(out.method, reqwest::Method::PUT);
        assert_eq!(
            out.url,
            "https://acme.zendesk.com/api/v2/tickets/35436.json"
        );
        let auth = base64::engine::general_purpose::STANDARD.encode("agent@acme.com/token:t0k");
        assert_eq!(
            out.headers,
            vec![("authorization", format!("Basic {auth}"))]
        );
        let body: Value = serde_json::from_slice(&out.body).unwrap();
        assert_eq!(body["ticket"]["comment"]["public"], json!(true));
        let solved = request(
            "https://acme.zendesk.com",
            "a",
            "t",
            &OutboxItem {
                kind: "resolved".into(),
                ..item
            },
        )
        .unwrap();
        let body: Value = serde_json::from_slice(&solved.body).unwrap();
        assert_eq!(body["ticket"]["status"], "solved");
    }

    #[test]
    fn an_export_gives_each_ticket_and_its_customers_comments() {
        let export_json = json!({"tickets": [
            {"id": 1, "subject": "Refund", "description": "Where is it?", "requester_id": 9,
             "created_at": "2026-11-01T10:00:00Z",
             "comments": [
                {"id": 100, "body": "Where is it?", "author_id": 9, "public": true},
                {"id": 101, "body": "We refunded", "author_id": 2, "public": true},
                {"id": 102, "body": "Thanks, got it", "author_id": 9, "public": true},
                {"id": 103, "body": "note", "author_id": 9, "public": false}
             ]},
            {"id": 2, "subject": "Gone", "description": "x", "status": "deleted"}
        ]})
        .to_string();
        let got: Vec<Inbound> = export(&export_json)
            .unwrap()
            .into_iter()
            .map(Result::unwrap)
            .collect();
        let ids: Vec<&str> = got.iter().map(|d| d.delivery.as_str()).collect();
        assert_eq!(ids, ["ticket-1", "comment-102"]);
        assert!(
            got.iter()
                .all(|d| d.conversation == "1" && d.source == EXPORT_SOURCE)
        );
        let lines = "{\"id\": 5, \"description\": \"a\"}\n{\"id\": 6, \"description\": \"b\"}\n";
        assert_eq!(export(lines).unwrap().len(), 2);
        assert!(
            export("{\"users\": []}")
                .unwrap_err()
                .contains("no `tickets`")
        );
    }
}
