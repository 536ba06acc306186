//! Secrets by value: every credential the process knows (provider keys from
//! the environment or the credential store, connector secrets, a database
//! password) is registered here once, and removed — whatever its shape —
//! from anything stored or logged: the daemon's log lines (the log writer
//! passes each line through [`redact`]) and every event it appends (the
//! store scrubs a payload that holds one, see [`scrub`]).
//!
//! One registry per process, like the log writer it serves: a secret must
//! be known to every writer of the process, however far from where the
//! secret was read.

use std::borrow::Cow;
use std::sync::RwLock;

use prost::Message;

/// What replaces a secret.
pub const REDACTED: &str = "[redacted]";

/// Shortest value treated as a secret (shorter ones would blank out
/// ordinary words).
pub const MIN_SECRET: usize = 8;

static SECRETS: RwLock<Vec<String>> = RwLock::new(Vec::new());

fn read() -> std::sync::RwLockReadGuard<'static, Vec<String>> {
    SECRETS.read().unwrap_or_else(|p| p.into_inner())
}

/// Remember `value` as a secret (surrounding whitespace ignored; values
/// shorter than [`MIN_SECRET`] are not secrets).
pub fn register(value: &str) {
    let value = value.trim();
    if value.len() < MIN_SECRET {
        return;
    }
    let mut all = SECRETS.write().unwrap_or_else(|p| p.into_inner());
    if !all.iter().any(|s| s == value) {
        all.push(value.to_string());
        // Longest first: a secret that contains another goes whole.
        all.sort_by_key(|s| std::cmp::Reverse(s.len()));
    }
}

/// Whether any secret is known (nothing to scrub otherwise).
pub fn any() -> bool {
    !read().is_empty()
}

/// `text` with every known secret replaced by [`REDACTED`].
pub fn redact(text: &str) -> Cow<'_, str> {
    let all = read();
    if !all.iter().any(|s| text.contains(s.as_str())) {
        return Cow::Borrowed(text);
    }
    let mut out = text.to_string();
    for s in all.iter() {
        if out.contains(s.as_str()) {
            out = out.replace(s.as_str(), REDACTED);
        }
    }
    Cow::Owned(out)
}

/// Whether `bytes` hold a known secret.
pub fn found_in(bytes: &[u8]) -> bool {
    read()
        .iter()
        .any(|s| memchr::memmem::find(bytes, s.as_bytes()).is_some())
}

/// `msg` (a message of the protocol named `full_name`) with every string
/// field, however deep, redacted — `None` when it holds no secret (the
/// common case costs one encode and a search).
pub fn scrub<M: Message + Default>(full_name: &str, msg: &M) -> Option<M> {
    if !any() {
        return None;
    }
    let bytes = msg.encode_to_vec();
    if !found_in(&bytes) {
        return None;
    }
    let descriptor = crate::render::descriptor(full_name)?;
    let mut dynamic = prost_reflect::DynamicMessage::decode(descriptor, bytes.as_slice()).ok()?;
    scrub_dynamic(&mut dynamic);
    M::decode(dynamic.encode_to_vec().as_slice()).ok()
}

fn scrub_dynamic(msg: &mut prost_reflect::DynamicMessage) {
    for (_, value) in msg.fields_mut() {
        scrub_value(value);
    }
}

fn scrub_value(value: &mut prost_reflect::Value) {
    use prost_reflect::Value;
    match value {
        Value::String(s) => {
            if let Cow::Owned(clean) = redact(s) {
                *s = clean;
            }
        }
        Value::Bytes(b) if found_in(b) => {
            let text = String::from_utf8_lossy(b).into_owned();
            *b = redact(&text).into_owned().into_bytes().into();
        }
        Value::Message(m) => scrub_dynamic(m),
        Value::List(items) => items.iter_mut().for_each(scrub_value),
        Value::Map(map) => map.values_mut().for_each(scrub_value),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::{Event, TicketNote, TicketNoteAdded, event::Payload};

    #[test]
    fn a_secret_of_any_shape_is_removed_from_text_and_messages() {
        let key = "Zq8-plain-looking-value-42";
        assert_eq!(
            redact(&format!("error: {key} is wrong")),
            format!("error: {key} is wrong")
        );
        register(key);
        register("short");
        assert_eq!(
            redact(&format!("error: {key} is wrong")),
            "error: [redacted] is wrong"
        );
        assert_eq!(redact("short stays"), "short stays");
        let event = Event {
            sequence: 1,
            stream_id: "ticket-T-1".into(),
            payload: Some(Payload::TicketNoteAdded(TicketNoteAdded {
                by: None,
                note: Some(TicketNote {
                    text: format!("gave up: provider said \"{key}\""),
                    at: "now".into(),
                }),
            })),
            ..Default::default()
        };
        let clean = scrub("tinycode.v1.Event", &event).unwrap();
        let Some(Payload::TicketNoteAdded(n)) = &clean.payload else {
            panic!("{clean:?}")
        };
        assert_eq!(
            n.note.as_ref().unwrap().text,
            "gave up: provider said \"[redacted]\""
        );
        assert_eq!(clean.sequence, 1);
        assert!(!found_in(&clean.encode_to_vec()));
        // Nothing to scrub: None, and the caller keeps its message.
        assert!(scrub("tinycode.v1.Event", &Event::default()).is_none());
    }
}
