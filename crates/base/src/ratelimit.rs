//! Warnings that repeat: one line per kind per interval, with how many were
//! held back since the last one. A loop that meets the same failure every
//! few milliseconds (a full disk, a lost database) must not fill the disk
//! with its own log.

use std::collections::HashMap;
use std::sync::{LazyLock, Mutex};
use std::time::{Duration, Instant};

/// At most one line per kind in this long.
pub const INTERVAL: Duration = Duration::from_secs(30);

static LAST: LazyLock<Mutex<HashMap<&'static str, (Instant, u64)>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));

/// May a line of `kind` be written now? `Some(n)`: yes, and `n` lines of
/// this kind were held back since the last one; `None`: hold it back.
pub fn allow(kind: &'static str) -> Option<u64> {
    allow_at(kind, Instant::now(), INTERVAL)
}

fn allow_at(kind: &'static str, now: Instant, interval: Duration) -> Option<u64> {
    let mut last = crate::sync::lock(&LAST);
    match last.get_mut(kind) {
        Some((at, held)) if now.saturating_duration_since(*at) < interval => {
            *held += 1;
            None
        }
        Some((at, held)) => {
            *at = now;
            Some(std::mem::take(held))
        }
        None => {
            last.insert(kind, (now, 0));
            Some(0)
        }
    }
}

/// `tracing::warn!` at most once per [`INTERVAL`] for `$kind`, with the
/// count of lines held back (`held_back`).
#[macro_export]
macro_rules! warn_limited {
    ($kind:expr, $($arg:tt)+) => {
        if let Some(held_back) = $crate::ratelimit::allow($kind) {
            tracing::warn!(held_back, $($arg)+);
        }
    };
}

/// `tracing::error!`, limited like [`warn_limited!`].
#[macro_export]
macro_rules! error_limited {
    ($kind:expr, $($arg:tt)+) => {
        if let Some(held_back) = $crate::ratelimit::allow($kind) {
            tracing::error!(held_back, $($arg)+);
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_per_interval_with_the_count_held_back() {
        let t0 = Instant::now();
        let i = Duration::from_secs(30);
        assert_eq!(allow_at("test-kind", t0, i), Some(0));
        for s in 1..=5 {
            assert_eq!(allow_at("test-kind", t0 + Duration::from_secs(s), i), None);
        }
        assert_eq!(allow_at("other-kind", t0, i), Some(0), "kinds are apart");
        assert_eq!(
            allow_at("test-kind", t0 + Duration::from_secs(31), i),
            Some(5)
        );
        assert_eq!(allow_at("test-kind", t0 + Duration::from_secs(32), i), None);
    }
}
