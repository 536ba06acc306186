//! `sanitize_id`: every id that reaches the domain — from a client, a file
//! name or a model — passes through here before it names a stream or a file.
//! An id can never name a path outside its directory.

/// Longest id accepted, in bytes.
pub const MAX_ID_LEN: usize = 64;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdError {
    #[error("the id is empty")]
    Empty,
    #[error("the id is longer than {MAX_ID_LEN} bytes")]
    TooLong,
    #[error("the id {0:?} contains {1:?}; ids may contain only letters, digits, '-', '_' and '.'")]
    BadChar(String, char),
    #[error("the id {0:?} may not start with '.' or contain '..'")]
    Dots(String),
}

/// `value` as it may appear in a message: quoted, control characters
/// escaped, at most 64 characters (then `…`). A name or id a client sent is
/// never echoed raw or whole.
pub fn quoted(value: &str) -> String {
    const MAX: usize = 64;
    let mut cut: String = value.chars().take(MAX).collect();
    if value.chars().nth(MAX).is_some() {
        cut.push('…');
    }
    format!("{cut:?}")
}

/// Normalise (trim surrounding whitespace) and check an id.
///
/// Allowed: letters and digits (any script), `-`, `_`, `.`; not starting
/// with `.`, no `..`; 1 to 64 bytes. So no `/`, `\`, NUL, control
/// characters, absolute paths or parent references.
pub fn sanitize_id(raw: &str) -> Result<String, IdError> {
    let id = raw.trim();
    if id.is_empty() {
        return Err(IdError::Empty);
    }
    if id.len() > MAX_ID_LEN {
        return Err(IdError::TooLong);
    }
    if let Some(c) = id
        .chars()
        .find(|c| !(c.is_alphanumeric() || matches!(c, '-' | '_' | '.')))
    {
        return Err(IdError::BadChar(shown(id), c));
    }
    if id.starts_with('.') || id.contains("..") {
        return Err(IdError::Dots(shown(id)));
    }
    Ok(id.to_string())
}

fn shown(id: &str) -> String {
    id.chars().take(MAX_ID_LEN).collect()
}

/// The number of `T-<n>`, if the id has that form.
pub fn ticket_number(id: &str) -> Option<u64> {
    id.strip_prefix("T-").and_then(|n| n.parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoted_values_are_escaped_and_cut() {
        assert_eq!(quoted("a\u{0}b\u{1b}"), "\"a\\0b\\u{1b}\"");
        let long = quoted(&"x".repeat(100_000));
        assert!(long.len() < 80 && long.ends_with("…\""), "{long}");
    }

    #[test]
    fn ordinary_ids_pass_and_are_trimmed() {
        for ok in ["T-1001", "refund-policy", "kb_2.v1", "退款政策", "  T-7  "] {
            let id = sanitize_id(ok).unwrap();
            assert_eq!(id, ok.trim());
        }
    }

    #[test]
    fn hostile_ids_are_refused() {
        let long = "a".repeat(65);
        type Expect = fn(&IdError) -> bool;
        let table: &[(&str, Expect)] = &[
            ("", |e| *e == IdError::Empty),
            ("   ", |e| *e == IdError::Empty),
            ("../etc/passwd", |e| matches!(e, IdError::BadChar(_, '/'))),
            ("..", |e| matches!(e, IdError::Dots(_))),
            ("a..b", |e| matches!(e, IdError::Dots(_))),
            (".hidden", |e| matches!(e, IdError::Dots(_))),
            ("/etc/passwd", |e| matches!(e, IdError::BadChar(_, '/'))),
            ("T-1\\..\\x", |e| matches!(e, IdError::BadChar(_, '\\'))),
            ("T-1\0", |e| matches!(e, IdError::BadChar(_, '\0'))),
            ("T-1\r\nX", |e| matches!(e, IdError::BadChar(_, '\r'))),
            ("a b", |e| matches!(e, IdError::BadChar(_, ' '))),
            ("T-1;rm", |e| matches!(e, IdError::BadChar(_, ';'))),
            ("%2e%2e", |e| matches!(e, IdError::BadChar(_, '%'))),
            ("C:evil", |e| matches!(e, IdError::BadChar(_, ':'))),
            (&long, |e| *e == IdError::TooLong),
        ];
        for (raw, expected) in table {
            match sanitize_id(raw) {
                Ok(id) => panic!("{raw:?} accepted as {id:?}"),
                Err(e) => assert!(expected(&e), "{raw:?}: unexpected {e}"),
            }
        }
    }

    #[test]
    fn accepted_ids_stay_inside_their_directory() {
        let base = std::path::Path::new("/ws/tickets");
        for raw in ["T-1", "a.b", "x_y-z", "票-1"] {
            let id = sanitize_id(raw).unwrap();
            let path = base.join(format!("{id}.json"));
            assert_eq!(path.parent(), Some(base), "{raw}");
        }
    }
}
