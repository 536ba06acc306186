//! The desk's clock: the time a ticket's SLA is judged by and notes are
//! stamped with. `$TINYCODE_NOW` (RFC 3339, read at each use) fixes it, for
//! reproducible runs, evaluations and tests; otherwise the system clock.
//! Models are told the time in the system prompt (`Current time: …`), so
//! the offline model, like any model, takes its clock from its request.

use std::time::{SystemTime, UNIX_EPOCH};

/// Seconds since the Unix epoch.
pub fn now_unix() -> i64 {
    fixed().unwrap_or_else(|| {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as i64)
    })
}

/// Now, as RFC 3339 UTC with milliseconds.
pub fn now_rfc3339() -> String {
    match fixed() {
        Some(seconds) => tinycode_shared::render::rfc3339(seconds, 0),
        None => {
            let now = prost_types::Timestamp::from(SystemTime::now());
            tinycode_shared::render::rfc3339(now.seconds, now.nanos)
        }
    }
}

fn fixed() -> Option<i64> {
    let text = std::env::var("TINYCODE_NOW").ok()?;
    let parsed = crate::context::parse_rfc3339(&text);
    if parsed.is_none() {
        tracing::warn!(value = %text, "TINYCODE_NOW is not an RFC 3339 time; using the system clock");
    }
    parsed
}
