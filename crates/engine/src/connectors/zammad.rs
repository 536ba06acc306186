//! Zammad (docs/CONNECTORS.md).
//!
//! In: a trigger's webhook with Zammad's default payload (`ticket` and
//! `article`), signed by Zammad: `X-Hub-Signature: sha1=<hex HMAC-SHA1 of
//! the body>` with the webhook's signature token. Zammad sends no
//! timestamp, so a replayed request is recognised by its article id (the
//! delivery): it stores nothing new. An agent's article or an internal one
//! is ignored; an HTML article is stored as text.
//!
//! Out: a reply is `POST /api/v1/ticket_articles` (a public `web` article
//! from the agent), a resolution `PUT /api/v1/tickets/<id>` with `state:
//! closed`, with `Authorization: Token token=<API token>`.

use hmac::{Hmac, KeyInit, Mac};
use serde_json::{Value, json};
use sha1::Sha1;
use tinycode_shared::proto::OutboxItem;

use super::request::{Outgoing, join};
use super::{ConnectorError, Read, text_of};
use crate::domain::desk::Inbound;

pub const SIGNATURE_HEADER: &str = "x-hub-signature";

fn mac(secret: &[u8]) -> Hmac<Sha1> {
    <Hmac<Sha1> as KeyInit>::new_from_slice(secret)
        .unwrap_or_else(|_| unreachable!("HMAC takes a key of any length"))
}

/// `sha1=<hex>` of `body`, as Zammad signs it.
pub fn sign(secret: &[u8], body: &[u8]) -> String {
    let mut mac = mac(secret);
    mac.update(body);
    format!("sha1={}", super::generic::hex(&mac.finalize().into_bytes()))
}

/// Check a request's signature, in constant time.
pub fn verify(
    secret: &[u8],
    header: &dyn Fn(&str) -> Option<String>,
    body: &[u8],
) -> Result<(), ConnectorError> {
    let given = header(SIGNATURE_HEADER)
        .and_then(|s| s.trim().strip_prefix("sha1=").map(str::to_string))
        .and_then(|hex| super::generic::hex_value(&hex))
        .ok_or_else(|| {
            ConnectorError::BadSignature("X-Hub-Signature is missing or not `sha1=<hex>`".into())
        })?;
    let mut mac = mac(secret);
    mac.update(body);
    mac.verify_slice(&given).map_err(|_| {
        ConnectorError::BadSignature(
            "the signature does not match the body and the source's secret".into(),
        )
    })
}

/// Read a Zammad trigger webhook of `source`.
pub fn read(source: &str, body: &[u8]) -> Result<Read, ConnectorError> {
    let v: Value = serde_json::from_slice(body).map_err(|e| {
        ConnectorError::Unreadable(format!("the body is not a Zammad webhook (not JSON: {e})"))
    })?;
    let (ticket, article) = (&v["ticket"], &v["article"]);
    let (id, article_id) = (text_of(&ticket["id"]), text_of(&article["id"]));
    if id.is_empty() {
        return Err(ConnectorError::Unreadable(
            "the body is not a Zammad webhook: it has no `ticket.id` (use the trigger webhook's default payload)".into(),
        ));
    }
    if article_id.is_empty() {
        return Ok(Read::Ignored("a ticket change with no article".into()));
    }
    if article["internal"] == json!(true) {
        return Ok(Read::Ignored("an internal article".into()));
    }
    if text_of(&article["sender"]) != "Customer" {
        return Ok(Read::Ignored("an agent's or the system's article".into()));
    }
    let raw = text_of(&article["body"]);
    let text = if text_of(&article["content_type"]).eq_ignore_ascii_case("text/html") {
        super::text::html_to_text(&raw)
    } else {
        raw
    };
    let customer = &ticket["customer"];
    let name = [&customer["email"], &article["from"]]
        .into_iter()
        .map(text_of)
        .find(|s| !s.is_empty())
        .unwrap_or_default();
    Ok(Read::Delivery(Inbound {
        source: source.to_string(),
        delivery: format!("article-{article_id}"),
        conversation: id,
        subject: text_of(&ticket["title"]),
        body: text,
        customer: name,
        channel: String::new(),
        at: text_of(&article["created_at"]),
        sla_minutes: 0,
    }))
}

/// The API request that delivers `item` to the Zammad ticket.
pub fn request(base: &str, token: &str, item: &OutboxItem) -> Result<Outgoing, String> {
    let ticket: u64 = item
        .conversation
        .parse()
        .map_err(|_| format!("{:?} is not a Zammad ticket id", item.conversation))?;
    let (method, path, body) = match item.kind.as_str() {
        "resolved" => (
            reqwest::Method::PUT,
            format!("api/v1/tickets/{ticket}"),
            json!({"state": "closed"}),
        ),
        _ => (
            reqwest::Method::POST,
            "api/v1/ticket_articles".to_string(),
            json!({"ticket_id": ticket, "body": item.text, "content_type": "text/plain",
                   "type": "web", "internal": false, "sender": "Agent"}),
        ),
    };
    Ok(Outgoing {
        method,
        url: join(base, &path),
        headers: vec![("authorization", format!("Token token={token}"))],
        body: body.to_string().into_bytes(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn payload(sender: &str, internal: bool) -> String {
        json!({
            "ticket": {"id": 12, "number": "31012", "title": "Login broken", "customer": {"email": "li@example.com"}},
            "article": {"id": 55, "sender": sender, "internal": internal, "content_type": "text/html",
                        "body": "<p>I cannot log in</p><p>since <b>Monday</b></p>"}
        })
        .to_string()
    }

    #[test]
    fn the_signature_is_zammads_hmac_sha1_of_the_body() {
        let body = payload("Customer", false);
        let sig = sign(b"token", body.as_bytes());
        let header =
            |sig: String| move |name: &str| (name == SIGNATURE_HEADER).then(|| sig.clone());
        assert!(verify(b"token", &header(sig.clone()), body.as_bytes()).is_ok());
        assert!(verify(b"other", &header(sig.clone()), body.as_bytes()).is_err());
        assert!(verify(b"token", &header(sig), b"{}").is_err());
        assert!(verify(b"token", &header("sha256=00".into()), body.as_bytes()).is_err());
        // RFC 2202, test case 2.
        let mut m = mac(b"Jefe");
        m.update(b"what do ya want for nothing?");
        assert_eq!(
            super::super::generic::hex(&m.finalize().into_bytes()),
            "effcdf6ae5eb2fa2d27416d5f184df9c259a7c79"
        );
    }

    #[test]
    fn a_customers_article_is_a_delivery_as_text_and_the_rest_ignored() {
        let Read::Delivery(d) = read("zm", payload("Customer", false).as_bytes()).unwrap() else {
            panic!("ignored")
        };
        assert_eq!(
            (
                d.conversation.as_str(),
                d.delivery.as_str(),
                d.body.as_str(),
                d.customer.as_str()
            ),
            (
                "12",
                "article-55",
                "I cannot log in\nsince Monday",
                "li@example.com"
            )
        );
        for ignored in [payload("Agent", false), payload("Customer", true)] {
            assert!(matches!(
                read("zm", ignored.as_bytes()).unwrap(),
                Read::Ignored(_)
            ));
        }
        assert!(matches!(
            read("zm", b"{}"),
            Err(ConnectorError::Unreadable(_))
        ));
    }

    #[test]
    fn a_reply_is_a_public_article_and_a_resolution_closes_the_ticket() {
        let item = OutboxItem {
            conversation: "12".into(),
            kind: "reply".into(),
            text: "Reset done".into(),
            ..OutboxItem::default()
        };
        let out = request("https://zammad.example", "tok", &item).unwrap();
        assert_eq!(out.url, "https://zammad.example/api/v1/ticket_articles");
        let body: Value = serde_json::from_slice(&out.body).unwrap();
        assert_eq!(
            (body["ticket_id"].clone(), body["internal"].clone()),
            (json!(12), json!(false))
        );
        let closed = request(
            "https://zammad.example",
            "tok",
            &OutboxItem {
                kind: "resolved".into(),
                ..item
            },
        )
        .unwrap();
        assert_eq!(
            (closed.method, closed.url.as_str()),
            (
                reqwest::Method::PUT,
                "https://zammad.example/api/v1/tickets/12"
            )
        );
        assert!(
            request(
                "https://z",
                "t",
                &OutboxItem {
                    conversation: "x".into(),
                    ..OutboxItem::default()
                }
            )
            .is_err()
        );
    }
}
