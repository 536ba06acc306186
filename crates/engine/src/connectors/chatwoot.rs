//! Chatwoot (docs/CONNECTORS.md).
//!
//! In: the account webhook's `message_created` (an `incoming` message: the
//! customer's) and `conversation_created` (its first message), signed by
//! Chatwoot as tinycode's generic source is: `X-Chatwoot-Timestamp` and
//! `X-Chatwoot-Signature: sha256=<hex HMAC-SHA256 of "<timestamp>.<body>">`
//! with the webhook's secret. The delivery id is the message's id, so a
//! conversation's first message, announced by both events, is stored once.
//! An agent's message, a private note or another event is answered and
//! ignored.
//!
//! Out: a reply is `POST /api/v1/accounts/<account>/conversations/<n>/messages`
//! (`message_type: outgoing`), a resolution `POST …/conversations/<n>/toggle_status`
//! (`status: resolved`), with the agent bot's or user's `api_access_token`.

use serde_json::{Value, json};
use tinycode_shared::proto::OutboxItem;

use super::request::{Outgoing, join};
use super::{ConnectorError, Read, generic, text_of};
use crate::domain::desk::Inbound;

pub const TIMESTAMP_HEADER: &str = "x-chatwoot-timestamp";
pub const SIGNATURE_HEADER: &str = "x-chatwoot-signature";

/// Check a request's signature and timestamp.
pub fn verify(
    secret: &[u8],
    header: &dyn Fn(&str) -> Option<String>,
    body: &[u8],
    now: i64,
) -> Result<(), ConnectorError> {
    generic::verify(
        secret,
        header(TIMESTAMP_HEADER).as_deref(),
        header(SIGNATURE_HEADER).as_deref(),
        body,
        now,
    )
}

/// Who wrote: the sender's email, else its name.
fn customer(sender: &Value) -> String {
    [&sender["email"], &sender["name"]]
        .into_iter()
        .map(text_of)
        .find(|s| !s.is_empty())
        .unwrap_or_default()
}

/// Read a Chatwoot webhook of `source`.
pub fn read(source: &str, body: &[u8]) -> Result<Read, ConnectorError> {
    let v: Value = serde_json::from_slice(body).map_err(|e| {
        ConnectorError::Unreadable(format!(
            "the body is not a Chatwoot webhook (not JSON: {e})"
        ))
    })?;
    let event = text_of(&v["event"]);
    let (message, conversation, sender) = match event.as_str() {
        "message_created" => (v.clone(), &v["conversation"], &v["sender"]),
        "conversation_created" => match v["messages"].as_array().and_then(|m| m.first()) {
            Some(first) => (first.clone(), &v, &v["meta"]["sender"]),
            None => return Ok(Read::Ignored("a conversation with no message yet".into())),
        },
        "" => {
            return Err(ConnectorError::Unreadable(
                "the body is not a Chatwoot webhook: it has no `event`".into(),
            ));
        }
        other => return Ok(Read::Ignored(format!("the event {other:?}"))),
    };
    // Chatwoot numbers message types in a conversation's `messages` (0 is
    // incoming) and names them in a message event.
    let incoming = matches!(&message["message_type"], Value::String(t) if t == "incoming")
        || message["message_type"] == json!(0);
    if !incoming {
        return Ok(Read::Ignored("an agent's message".into()));
    }
    if message["private"] == json!(true) {
        return Ok(Read::Ignored("a private note".into()));
    }
    let id = text_of(&message["id"]);
    let number = [&conversation["display_id"], &conversation["id"]]
        .into_iter()
        .map(text_of)
        .find(|s| !s.is_empty())
        .unwrap_or_default();
    if id.is_empty() || number.is_empty() {
        return Err(ConnectorError::Unreadable(
            "a Chatwoot message needs its `id` and its conversation's `id`".into(),
        ));
    }
    let content = text_of(&message["content"]);
    if content.trim().is_empty() {
        return Ok(Read::Ignored(
            "a message with no text (an attachment alone)".into(),
        ));
    }
    Ok(Read::Delivery(Inbound {
        source: source.to_string(),
        delivery: format!("message-{id}"),
        conversation: number,
        subject: String::new(),
        body: content,
        customer: customer(sender),
        channel: "chat".into(),
        at: String::new(),
        sla_minutes: 0,
    }))
}

/// The API request that delivers `item` to the conversation.
pub fn request(
    base: &str,
    account: u64,
    token: &str,
    item: &OutboxItem,
) -> Result<Outgoing, String> {
    super::request::number(&item.conversation, "Chatwoot conversation number")?;
    let conversation = format!(
        "api/v1/accounts/{account}/conversations/{}",
        item.conversation
    );
    let (path, body) = match item.kind.as_str() {
        "resolved" => (
            format!("{conversation}/toggle_status"),
            json!({"status": "resolved"}),
        ),
        _ => (
            format!("{conversation}/messages"),
            json!({"content": item.text, "message_type": "outgoing", "private": false}),
        ),
    };
    Ok(Outgoing {
        method: reqwest::Method::POST,
        url: join(base, &path),
        headers: vec![("api_access_token", token.to_string())],
        body: body.to_string().into_bytes(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn delivery(read: Read) -> Inbound {
        match read {
            Read::Delivery(d) => d,
            Read::Ignored(why) => panic!("ignored: {why}"),
        }
    }

    #[test]
    fn a_customers_message_and_a_new_conversation_read_as_one_delivery() {
        let message = json!({
            "event": "message_created", "id": 901, "content": "Where is my order?",
            "message_type": "incoming", "private": false,
            "conversation": {"id": 42, "display_id": 7},
            "sender": {"name": "Ana", "email": "ana@example.com"}
        });
        let m = delivery(read("cw", message.to_string().as_bytes()).unwrap());
        assert_eq!(
            (
                m.delivery.as_str(),
                m.conversation.as_str(),
                m.customer.as_str(),
                m.body.as_str()
            ),
            ("message-901", "7", "ana@example.com", "Where is my order?")
        );
        let created = json!({
            "event": "conversation_created", "id": 7,
            "messages": [{"id": 901, "content": "Where is my order?", "message_type": 0}],
            "meta": {"sender": {"name": "Ana"}}
        });
        let c = delivery(read("cw", created.to_string().as_bytes()).unwrap());
        assert_eq!(
            (c.delivery, c.conversation, c.customer),
            (m.delivery, "7".into(), "Ana".into())
        );
    }

    #[test]
    fn agents_notes_and_other_events_are_ignored_and_junk_refused() {
        for ignored in [
            json!({"event": "message_created", "id": 1, "content": "hi", "message_type": "outgoing", "conversation": {"id": 1}}),
            json!({"event": "message_created", "id": 1, "content": "hi", "message_type": "incoming", "private": true, "conversation": {"id": 1}}),
            json!({"event": "conversation_status_changed", "id": 1}),
            json!({"event": "conversation_created", "id": 1, "messages": []}),
        ] {
            assert!(
                matches!(
                    read("cw", ignored.to_string().as_bytes()).unwrap(),
                    Read::Ignored(_)
                ),
                "{ignored}"
            );
        }
        assert!(matches!(
            read("cw", b"<html>"),
            Err(ConnectorError::Unreadable(_))
        ));
        assert!(matches!(
            read("cw", b"{}"),
            Err(ConnectorError::Unreadable(_))
        ));
        let no_id = json!({"event": "message_created", "content": "hi", "message_type": "incoming", "conversation": {}});
        assert!(matches!(
            read("cw", no_id.to_string().as_bytes()),
            Err(ConnectorError::Unreadable(_))
        ));
    }

    #[test]
    fn a_reply_and_a_resolution_go_to_the_conversation_through_the_api() {
        let item = OutboxItem {
            conversation: "7".into(),
            kind: "reply".into(),
            text: "On its way".into(),
            ..OutboxItem::default()
        };
        let out = request("https://chat.example/", 3, "tok", &item).unwrap();
        assert_eq!(
            out.url,
            "https://chat.example/api/v1/accounts/3/conversations/7/messages"
        );
        assert_eq!(out.headers, vec![("api_access_token", "tok".to_string())]);
        let body: Value = serde_json::from_slice(&out.body).unwrap();
        assert_eq!(
            (body["content"].as_str(), body["message_type"].as_str()),
            (Some("On its way"), Some("outgoing"))
        );
        let resolved = OutboxItem {
            kind: "resolved".into(),
            ..item
        };
        let out = request("https://chat.example", 3, "tok", &resolved).unwrap();
        assert!(
            out.url.ends_with("/conversations/7/toggle_status"),
            "{}",
            out.url
        );
    }
}
