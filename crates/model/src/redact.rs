//! Secrets never leave the process: every provider error is passed through
//! [`redact`] before it is stored in the log, returned to a client or
//! written to the log file.

/// What replaces a secret.
pub use tinycode_shared::secrets::REDACTED;

/// Shortest value treated as a secret when given explicitly (shorter values
/// would blank out ordinary words).
const MIN_SECRET: usize = 8;

/// `text` without any of `secrets` and without anything shaped like a
/// credential: the token after `Bearer `, and `sk-…`-style API keys.
pub fn redact(text: &str, secrets: &[&str]) -> String {
    // Every secret the process knows, by value (`tinycode_shared::secrets`).
    let mut out = tinycode_shared::secrets::redact(text).into_owned();
    for secret in secrets.iter().map(|s| s.trim()) {
        if secret.len() >= MIN_SECRET {
            out = out.replace(secret, REDACTED);
        }
    }
    let out = after_word(&out, "Bearer ");
    let out = after_word(&out, "bearer ");
    key_shaped(&out)
}

fn is_token_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || "-_.~+/=".contains(c)
}

/// Replace the token that follows each `word`.
fn after_word(text: &str, word: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(word) {
        let (before, after) = rest.split_at(at + word.len());
        out.push_str(before);
        let end = after
            .char_indices()
            .find(|(_, c)| !is_token_char(*c))
            .map_or(after.len(), |(i, _)| i);
        if end > 0 {
            out.push_str(REDACTED);
        }
        rest = &after[end..];
    }
    out.push_str(rest);
    out
}

/// Replace `sk-…` / `sk_…` keys (OpenAI, Anthropic and many proxies).
fn key_shaped(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("sk-").or_else(|| rest.find("sk_")) {
        let starts_word = rest[..at]
            .chars()
            .next_back()
            .is_none_or(|c| !is_token_char(c));
        let (before, after) = rest.split_at(at);
        out.push_str(before);
        let end = after
            .char_indices()
            .find(|(_, c)| !is_token_char(*c))
            .map_or(after.len(), |(i, _)| i);
        if starts_word && end >= MIN_SECRET {
            out.push_str(REDACTED);
        } else {
            out.push_str(&after[..end.max(3)]);
        }
        rest = &after[end.max(3)..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_and_bearer_tokens_are_removed() {
        let key = "sk-test-0123456789abcdef";
        let body = format!(
            "invalid credentials; request had Authorization: Bearer {key} (x-api-key: {key})"
        );
        let out = redact(&body, &[key]);
        assert!(!out.contains("0123456789"), "{out}");
        assert_eq!(
            out,
            "invalid credentials; request had Authorization: Bearer [redacted] (x-api-key: [redacted])"
        );
        // Shaped like a key, even when not configured.
        assert_eq!(
            redact("bad key sk-proj-ABCDEFGHIJKL, see the docs", &[]),
            "bad key [redacted], see the docs"
        );
        assert_eq!(
            redact("authorization: bearer abc.def", &[]),
            "authorization: bearer [redacted]"
        );
        // Ordinary text is left alone.
        assert_eq!(
            redact("task-sk-1 and desk-top, sk-1", &[]),
            "task-sk-1 and desk-top, sk-1"
        );
        assert_eq!(redact("short secret ab", &["ab"]), "short secret ab");
    }
}
