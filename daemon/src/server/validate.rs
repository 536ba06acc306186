//! Request limits and checks shared by the services. Every failure is an
//! `INVALID_ARGUMENT` naming the field and saying what is allowed.

use tonic::Status;

pub use crate::domain::limits::{MAX_NAME, MAX_SUBJECT, MAX_TEXT};
pub const MAX_QUERY: usize = 1_000;
pub const MAX_SLA_MINUTES: u32 = 60 * 24 * 30;
pub const MAX_LIST: u32 = 10_000;

/// `value` must be at most `max` bytes.
pub fn max_len(field: &str, value: &str, max: usize) -> Result<(), Status> {
    if value.len() > max {
        return Err(Status::invalid_argument(format!(
            "`{field}` is {} bytes; at most {max} are allowed",
            value.len()
        )));
    }
    Ok(())
}

/// `value` must be an id (`sanitize_id`: letters, digits, `-`, `_`, `.`,
/// at most 64 bytes); returns it trimmed. The message never echoes a long
/// or control-character value back.
pub fn id(field: &str, value: &str) -> Result<String, Status> {
    crate::domain::ids::sanitize_id(value)
        .map_err(|e| Status::invalid_argument(format!("`{field}` is not a valid id: {e}")))
}

/// Like [`id`], but empty means "any" and is allowed.
pub fn optional_id(field: &str, value: &str) -> Result<String, Status> {
    if value.trim().is_empty() {
        Ok(String::new())
    } else {
        id(field, value)
    }
}

/// `value` must be empty or one of `allowed`.
pub fn one_of_or_empty(field: &str, value: &str, allowed: &[&str]) -> Result<(), Status> {
    if value.is_empty() || allowed.contains(&value) {
        return Ok(());
    }
    Err(Status::invalid_argument(format!(
        "`{field}` must be one of {} (or empty for any), got {value:?}",
        allowed.join(", ")
    )))
}

/// A limit with a default for 0 and a ceiling.
pub fn limit(field: &str, value: u32, default: u32, max: u32) -> Result<usize, Status> {
    match value {
        0 => Ok(default as usize),
        v if v <= max => Ok(v as usize),
        v => Err(Status::invalid_argument(format!(
            "`{field}` is {v}; at most {max} are allowed"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_name_the_field() {
        assert_eq!(limit("limit", 0, 100, 500).unwrap(), 100);
        assert_eq!(limit("limit", 7, 100, 500).unwrap(), 7);
        let err = limit("limit", 501, 100, 500).unwrap_err();
        assert_eq!(err.code(), tonic::Code::InvalidArgument);
        assert!(err.message().contains("`limit`"));
        assert!(
            max_len("subject", &"x".repeat(11), 10)
                .unwrap_err()
                .message()
                .contains("`subject` is 11 bytes")
        );
        assert!(one_of_or_empty("status", "", &["open"]).is_ok());
        assert!(
            one_of_or_empty("status", "gone", &["open"])
                .unwrap_err()
                .message()
                .contains("`status` must be one of open")
        );
    }
}
