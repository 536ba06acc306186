//! Replies by mail, for a desk whose tickets came by mail (a source of
//! `type: "mail"`, its mail imported with `tinycode import mbox|maildir
//! --source NAME`; docs/CONNECTORS.md).
//!
//! A reply is a plain-text mail from the source's `from` to the ticket's
//! customer, `Re: <subject>`, with `In-Reply-To` the customer's last
//! message and `References` the thread's root and that message, so the
//! customer's mail client threads it. A resolution is a short mail saying
//! so. The mail's `Message-ID` is made from the delivery's idempotency key:
//! a retry after a crash carries the same id, which mail systems use to
//! drop a duplicate. Sent through the source's relay (`deliverUrl`:
//! `smtp://host:port` plain — a local relay only —, `smtp+starttls://…` or
//! `smtps://…`), with `apiUser` and the password in `$apiTokenEnv` when set.

use std::time::Duration;

use lettre::message::Mailbox;
use lettre::message::header::ContentType;
use lettre::transport::smtp::authentication::Credentials;
use lettre::{AsyncSmtpTransport, AsyncTransport, Message, Tokio1Executor};
use tinycode_shared::proto::OutboxItem;

use crate::config::sources::SourceSpec;

/// One SMTP conversation's time limit.
const TIMEOUT: Duration = Duration::from_secs(15);

/// `<id>` as a header wants it.
fn angle(id: &str) -> String {
    format!("<{}>", id.trim_matches(|c| c == '<' || c == '>'))
}

/// The mail that delivers `item`.
pub fn message(from: &str, item: &OutboxItem) -> Result<Message, String> {
    let from: Mailbox = from
        .parse()
        .map_err(|e| format!("the source's `from` {from:?} is not an address: {e}"))?;
    let to: Mailbox = item.customer.parse().map_err(|e| {
        format!(
            "the customer {:?} of {} is not a mail address: {e}",
            item.customer, item.ticket_id
        )
    })?;
    let subject = match item.subject.trim() {
        s if s.to_ascii_lowercase().starts_with("re:") => s.to_string(),
        s => format!("Re: {s}"),
    };
    let text = match item.kind.as_str() {
        "resolved" => format!(
            "Your request {} is resolved.\n\nReply to this mail if it is not.",
            item.ticket_id
        ),
        _ => item.text.clone(),
    };
    let mut builder = Message::builder()
        .from(from)
        .to(to)
        .subject(subject)
        .message_id(Some(angle(&format!("{}@tinycode", item.idempotency_key))));
    if !item.in_reply_to.is_empty() {
        builder = builder.in_reply_to(angle(&item.in_reply_to));
        let mut references = vec![angle(&item.conversation)];
        if item.in_reply_to != item.conversation {
            references.push(angle(&item.in_reply_to));
        }
        builder = builder.references(references.join(" "));
    }
    builder
        .header(ContentType::TEXT_PLAIN)
        .body(text)
        .map_err(|e| format!("cannot write the mail: {e}"))
}

/// Send `item` through `spec`'s relay; the error and SMTP code when it
/// failed.
pub async fn send(spec: &SourceSpec, item: &OutboxItem) -> Result<(), (String, u32)> {
    let url = spec.deliver_url.as_deref().unwrap_or_default();
    let from = spec.from.as_deref().unwrap_or_default();
    let message = message(from, item).map_err(|e| (e, 0))?;
    let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
    let (host, port) = match rest.trim_end_matches('/').rsplit_once(':') {
        Some((h, p)) => (
            h,
            p.parse::<u16>()
                .map_err(|_| (format!("{url}: the port is not a number"), 0))?,
        ),
        None => (rest.trim_end_matches('/'), 0),
    };
    let refused = |e: lettre::transport::smtp::Error| (format!("{url}: {e}"), 0);
    let mut builder = match scheme {
        "smtp" => AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous(host),
        "smtps" => AsyncSmtpTransport::<Tokio1Executor>::relay(host).map_err(refused)?,
        "smtp+starttls" => {
            AsyncSmtpTransport::<Tokio1Executor>::starttls_relay(host).map_err(refused)?
        }
        other => {
            return Err((
                format!("{url}: {other:?} is not smtp, smtp+starttls or smtps"),
                0,
            ));
        }
    };
    if port != 0 {
        builder = builder.port(port);
    }
    if let (Some(user), Some(env)) = (&spec.api_user, &spec.api_token_env) {
        let password = std::env::var(env).map_err(|_| {
            (
                format!("set ${env} (the SMTP password) in tinycoded's environment"),
                0,
            )
        })?;
        builder = builder.credentials(Credentials::new(user.clone(), password));
    }
    let transport = builder.timeout(Some(TIMEOUT)).build();
    transport.send(message).await.map(|_| ()).map_err(|e| {
        let code = e
            .status()
            .and_then(|c| c.to_string().parse::<u32>().ok())
            .unwrap_or(0);
        (format!("{url}: {e}"), code)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item() -> OutboxItem {
        OutboxItem {
            ticket_id: "T-1001".into(),
            conversation: "a1@example.com".into(),
            in_reply_to: "c3@example.com".into(),
            customer: "ana@example.com".into(),
            subject: "Refund".into(),
            kind: "reply".into(),
            text: "It is on its way.".into(),
            idempotency_key: "tinycode-T-1001-42".into(),
            ..OutboxItem::default()
        }
    }

    #[test]
    fn a_reply_threads_under_the_customers_last_mail() {
        let raw = String::from_utf8(
            message("Desk <desk@acme.com>", &item())
                .unwrap()
                .formatted(),
        )
        .unwrap();
        for line in [
            "From: Desk <desk@acme.com>",
            "To: ana@example.com",
            "Subject: Re: Refund",
            "Message-ID: <tinycode-T-1001-42@tinycode>",
            "In-Reply-To: <c3@example.com>",
            "References: <a1@example.com> <c3@example.com>",
        ] {
            assert!(raw.contains(line), "{line} not in\n{raw}");
        }
        assert!(raw.contains("It is on its way."), "{raw}");
    }

    #[test]
    fn a_resolution_says_so_and_a_bad_address_is_named() {
        let resolved = OutboxItem {
            kind: "resolved".into(),
            subject: "Re: Refund".into(),
            ..item()
        };
        let raw =
            String::from_utf8(message("desk@acme.com", &resolved).unwrap().formatted()).unwrap();
        assert!(raw.contains("Subject: Re: Refund\r\n"), "{raw}");
        assert!(raw.contains("Your request T-1001 is resolved."), "{raw}");
        let e = message(
            "desk@acme.com",
            &OutboxItem {
                customer: "Ana".into(),
                ..item()
            },
        )
        .unwrap_err();
        assert!(e.contains("\"Ana\" of T-1001 is not a mail address"), "{e}");
    }
}
