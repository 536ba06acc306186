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
    let parsed = parse_rfc3339(&text);
    if parsed.is_none() {
        tracing::warn!(value = %text, "TINYCODE_NOW is not an RFC 3339 time; using the system clock");
    }
    parsed
}

/// Seconds since the Unix epoch of an RFC 3339 timestamp such as
/// `2026-09-18T09:12:00+08:00` or `2026-11-29T23:16:50.844Z`.
pub fn parse_rfc3339(text: &str) -> Option<i64> {
    let t = text.trim();
    let num = |s: &str| s.parse::<i64>().ok();
    let (date, rest) = t.split_once(['T', 't', ' '])?;
    let mut d = date.splitn(3, '-');
    let (y, m, day) = (num(d.next()?)?, num(d.next()?)?, num(d.next()?)?);
    let time_end = rest.find(['Z', 'z', '+', '-']).unwrap_or(rest.len());
    let (clock, zone) = rest.split_at(time_end);
    let clock = clock.split('.').next()?;
    let mut c = clock.splitn(3, ':');
    let (hh, mm, ss) = (
        num(c.next()?)?,
        num(c.next()?)?,
        num(c.next().unwrap_or("0"))?,
    );
    let offset = match zone {
        "" | "Z" | "z" => 0,
        z => {
            let sign = if z.starts_with('-') { -1 } else { 1 };
            let (oh, om) = z[1..].split_once(':').unwrap_or((&z[1..], "0"));
            sign * (num(oh)? * 3600 + num(om)? * 60)
        }
    };
    // Days from civil (proleptic Gregorian).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (m + if m > 2 { -3 } else { 9 }) + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(days * 86_400 + hh * 3600 + mm * 60 + ss - offset)
}

#[cfg(test)]
mod time_tests {
    use super::parse_rfc3339;

    #[test]
    fn rfc3339_with_offsets_and_fractions() {
        assert_eq!(parse_rfc3339("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(
            parse_rfc3339("2026-09-18T09:12:00+08:00"),
            Some(1_789_693_920)
        );
        assert_eq!(
            parse_rfc3339("2026-09-18T01:12:00.500Z"),
            Some(1_789_693_920)
        );
        assert_eq!(
            parse_rfc3339("2000-03-01T00:00:00-01:00"),
            Some(951_872_400)
        );
        assert_eq!(parse_rfc3339("not a date"), None);
    }
}
