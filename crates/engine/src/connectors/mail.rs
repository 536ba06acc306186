//! Mail as deliveries: `tinycode import mbox FILE` and `import maildir DIR`.
//!
//! Each message is a delivery of the source `import-mail`, its Message-ID
//! the delivery id (a message without one: a hash of its bytes), so the
//! same mailbox twice adds nothing. A thread is one ticket: a message joins
//! the conversation of the first message it names (In-Reply-To, then
//! References, newest first) that the import has seen, else the thread's
//! root (the first of its References), else it starts its own. MIME is
//! decoded by `mail-parser`. The thread's first sender is the customer: a
//! message from anyone else (the desk's own replies in a shared mailbox)
//! is skipped with the reason. A mail with only an HTML body is stored as its
//! text (`text.rs`), and attachments are recorded by name, type and size
//! at the end of the message — never stored.

use std::collections::HashMap;
use std::path::Path;

use mail_parser::{HeaderValue, MessageParser, MimeHeaders};

use crate::domain::desk::Inbound;

/// The source of imported mail (no way out: `outbox.rs`).
pub const MAIL_SOURCE: &str = "import-mail";

/// Message ids a header names, in its order.
fn ids(value: &HeaderValue<'_>) -> Vec<String> {
    match value {
        HeaderValue::Text(t) => vec![t.to_string()],
        HeaderValue::TextList(list) => list.iter().map(|t| t.to_string()).collect(),
        _ => Vec::new(),
    }
}

/// Threads messages into conversations as they are read.
#[derive(Default)]
pub struct Threads {
    /// Message-ID → its conversation.
    known: HashMap<String, String>,
    /// Conversation → the address that started it (the customer).
    started_by: HashMap<String, String>,
}

impl Threads {
    /// One message as a delivery, or why it is not one.
    pub fn delivery(&mut self, raw: &[u8]) -> Result<Inbound, String> {
        let message = MessageParser::default()
            .parse(raw)
            .ok_or_else(|| "not a mail message".to_string())?;
        let id = match message.message_id() {
            Some(id) => id.to_string(),
            None => format!(
                "{:016x}@no-message-id",
                crate::fnv::fnv1a(raw.iter().copied())
            ),
        };
        let mut named = ids(message.in_reply_to());
        let mut references = ids(message.references());
        let root = references.first().cloned();
        references.reverse();
        named.extend(references);
        let conversation = named
            .iter()
            .find_map(|n| self.known.get(n).cloned())
            .or(root)
            .unwrap_or_else(|| id.clone());
        self.known.insert(id.clone(), conversation.clone());
        let mut body = match (message.body_text(0), message.body_html(0)) {
            (Some(text), _) if !text.trim().is_empty() => text.to_string(),
            (_, Some(html)) => super::text::html_to_text(&html),
            _ => String::new(),
        };
        for part in message.attachments() {
            let name = part.attachment_name().unwrap_or("(no name)");
            let kind = part
                .content_type()
                .map(|t| match t.subtype() {
                    Some(sub) => format!("{}/{sub}", t.ctype()),
                    None => t.ctype().to_string(),
                })
                .unwrap_or_else(|| "application/octet-stream".into());
            body.push_str(&format!(
                "\n[attachment: {name} ({kind}, {} bytes)]",
                part.contents().len()
            ));
        }
        let body = body.trim().to_string();
        if body.is_empty() {
            return Err(format!("{id}: the message has no text"));
        }
        let customer = message
            .from()
            .and_then(|a| a.first())
            .and_then(|a| a.address().or(a.name()))
            .unwrap_or_default()
            .to_string();
        let starter = self
            .started_by
            .entry(conversation.clone())
            .or_insert_with(|| customer.clone());
        if !starter.eq_ignore_ascii_case(&customer) {
            return Err(format!(
                "{id} is from {customer}, not {starter} who started the thread (the desk's own mail is not a customer's message)"
            ));
        }
        Ok(Inbound {
            source: MAIL_SOURCE.into(),
            delivery: id,
            conversation,
            subject: message.subject().unwrap_or_default().to_string(),
            body,
            customer,
            channel: "email".into(),
            at: message
                .date()
                .map(|d| tinycode_shared::render::rfc3339(d.to_timestamp(), 0))
                .unwrap_or_default(),
            sla_minutes: 0,
        })
    }
}

/// The messages of an mbox file, in order.
pub fn mbox(path: &Path) -> Result<Vec<Vec<u8>>, String> {
    let file = std::fs::File::open(path).map_err(|e| e.to_string())?;
    mail_parser::mailbox::mbox::MessageIterator::new(std::io::BufReader::new(file))
        .map(|m| {
            m.map(|m| m.contents().to_vec()).map_err(|_| {
                "the file is not an mbox (a message's `From ` line is broken)".to_string()
            })
        })
        .collect()
}

/// The messages of a maildir (`cur/` and `new/`), oldest file first.
pub fn maildir(path: &Path) -> Result<Vec<Vec<u8>>, String> {
    let mut files = Vec::new();
    for sub in ["cur", "new"] {
        let dir = path.join(sub);
        let entries = std::fs::read_dir(&dir).map_err(|e| {
            format!(
                "{} is not a maildir ({}: {e})",
                path.display(),
                dir.display()
            )
        })?;
        for entry in entries {
            let entry = entry.map_err(|e| e.to_string())?;
            if entry.file_type().map_err(|e| e.to_string())?.is_file() {
                files.push(entry.path());
            }
        }
    }
    // Maildir names start with the delivery time: name order is time order.
    files.sort();
    files
        .iter()
        .map(|f| std::fs::read(f).map_err(|e| format!("{}: {e}", f.display())))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const THREAD: &str = "From ana@example.com Mon Dec  1 10:00:00 2026\n\
From: Ana <ana@example.com>\n\
Subject: Refund\n\
Message-ID: <a1@example.com>\n\
Date: Mon, 1 Dec 2026 10:00:00 +0000\n\
\n\
Where is my refund?\n\
\n\
From desk@example.com Mon Dec  1 11:00:00 2026\n\
From: Desk <desk@example.com>\n\
Subject: Re: Refund\n\
Message-ID: <b2@example.com>\n\
In-Reply-To: <a1@example.com>\n\
References: <a1@example.com>\n\
\n\
We are on it.\n\
\n\
From ana@example.com Mon Dec  1 12:00:00 2026\n\
From: Ana <ana@example.com>\n\
Subject: Re: Refund\n\
Message-ID: <c3@example.com>\n\
References: <a1@example.com> <b2@example.com>\n\
MIME-Version: 1.0\n\
Content-Type: multipart/mixed; boundary=\"XX\"\n\
\n\
--XX\n\
Content-Type: text/html; charset=utf-8\n\
\n\
<p>Thanks &amp; <b>still</b> waiting</p>\n\
--XX\n\
Content-Type: application/pdf; name=\"receipt.pdf\"\n\
Content-Disposition: attachment; filename=\"receipt.pdf\"\n\
Content-Transfer-Encoding: base64\n\
\n\
JVBERi0xLjQK\n\
--XX--\n";

    #[test]
    fn a_three_message_thread_is_one_conversation_with_its_attachment_named() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("box.mbox");
        std::fs::write(&file, THREAD).unwrap();
        let messages = mbox(&file).unwrap();
        assert_eq!(messages.len(), 3);
        let mut threads = Threads::default();
        let got: Vec<Result<Inbound, String>> =
            messages.iter().map(|m| threads.delivery(m)).collect();
        let skipped = got[1].as_ref().unwrap_err();
        assert!(
            skipped.contains("desk@example.com, not ana@example.com"),
            "{skipped}"
        );
        let got: Vec<Inbound> = got.into_iter().filter_map(Result::ok).collect();
        assert!(
            got.iter().all(|d| d.conversation == "a1@example.com"),
            "{got:?}"
        );
        assert_eq!(got[0].customer, "ana@example.com");
        assert_eq!(got[0].subject, "Refund");
        assert_eq!(got[0].at, "2026-12-01T10:00:00.000Z");
        assert_eq!(got[1].delivery, "c3@example.com");
        assert!(
            got[1].body.starts_with("Thanks & still waiting"),
            "{}",
            got[1].body
        );
        assert!(
            got[1]
                .body
                .contains("[attachment: receipt.pdf (application/pdf, 9 bytes)]"),
            "{}",
            got[1].body
        );
    }

    #[test]
    fn a_maildir_reads_cur_and_new_and_something_else_is_named() {
        let dir = tempfile::tempdir().unwrap();
        for sub in ["cur", "new", "tmp"] {
            std::fs::create_dir(dir.path().join(sub)).unwrap();
        }
        std::fs::write(
            dir.path().join("new/2.x"),
            "Subject: b\nMessage-ID: <2@x>\n\nsecond\n",
        )
        .unwrap();
        std::fs::write(
            dir.path().join("cur/1.x:2,S"),
            "Subject: a\nMessage-ID: <1@x>\n\nfirst\n",
        )
        .unwrap();
        assert_eq!(maildir(dir.path()).unwrap().len(), 2);
        let e = maildir(&dir.path().join("cur")).unwrap_err();
        assert!(e.contains("is not a maildir"), "{e}");
        let mut threads = Threads::default();
        assert!(threads.delivery(b"Subject: empty\n\n").is_err());
    }
}
