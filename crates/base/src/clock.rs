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
    canonical(text.as_bytes()).or_else(|| general(text))
}

/// `YYYY-MM-DDTHH:MM:SS` then `Z` or `±HH:MM` — what tinycode writes and
/// most systems send — read at fixed places (the SLA clocks and the
/// report parse every ticket's times); anything else is [`general`]'s.
fn canonical(b: &[u8]) -> Option<i64> {
    if b.len() < 20
        || b[4] != b'-'
        || b[7] != b'-'
        || b[10] != b'T'
        || b[13] != b':'
        || b[16] != b':'
    {
        return None;
    }
    let num = |from: usize, len: usize| {
        b[from..from + len].iter().try_fold(0i64, |acc, &c| {
            c.is_ascii_digit().then(|| acc * 10 + i64::from(c - b'0'))
        })
    };
    let offset = match &b[19..] {
        b"Z" => 0,
        [sign @ (b'+' | b'-'), _, _, b':', _, _] => {
            let seconds = num(20, 2)? * 3600 + num(23, 2)? * 60;
            if *sign == b'-' { -seconds } else { seconds }
        }
        _ => return None,
    };
    let (y, m, d) = (num(0, 4)?, num(5, 2)?, num(8, 2)?);
    let (hh, mm, ss) = (num(11, 2)?, num(14, 2)?, num(17, 2)?);
    Some(days_from_civil(y, m, d) * 86_400 + hh * 3600 + mm * 60 + ss - offset)
}

/// Any RFC 3339 form: `t` or a space for `T`, fractions, lower-case `z`.
fn general(text: &str) -> Option<i64> {
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
    Some(days_from_civil(y, m, day) * 86_400 + hh * 3600 + mm * 60 + ss - offset)
}

/// Days from 1970-01-01 of a proleptic Gregorian date.
fn days_from_civil(y: i64, m: i64, day: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (m + if m > 2 { -3 } else { 9 }) + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
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

    #[test]
    fn the_fixed_place_reading_agrees_with_the_general_one() {
        let cases = [
            "1970-01-01T00:00:00Z",
            "2026-09-18T09:12:00+08:00",
            "2026-09-18T09:12:00-05:30",
            "2000-02-29T23:59:59+14:00",
            "1999-12-31T00:00:00-12:00",
            "2026-01-01T00:00:00+00:00",
            "0001-01-01T00:00:00Z",
            "2026-09-18T09:12:00.123Z",
            "2026-09-18t09:12:00z",
            "2026-09-18 09:12:00+08:00",
            "2026-09-18T09:12:00",
            "2026-09-18T09:12:00+0800",
            "2026-09-18T09:12:00+08:00 ",
            " 2026-09-18T09:12:00Z",
            "2026-9-18T09:12:00Z",
            "2026-09-18T09:1a:00Z",
            "2026-09-18T09:12:00+0a:00",
            "2026-09-18T09:12:00Zjunk",
            "２０２６-09-18T09:12:00Z",
            "",
        ];
        let mut fixed = 0;
        for text in cases {
            if let Some(at) = super::canonical(text.as_bytes()) {
                fixed += 1;
                assert_eq!(Some(at), super::general(text), "{text}");
            }
            assert_eq!(parse_rfc3339(text), super::general(text), "{text}");
        }
        assert_eq!(fixed, 7, "the canonical forms are read at fixed places");
    }
}
