//! Context hygiene: tool results over the limit keep their head and tail
//! around a `[… N characters truncated …]` marker (the caller stores the
//! full text as an artifact); token estimates for text the provider has not
//! counted (chars / 4); compaction ([`compact`]).

pub mod compact;

/// Default `maxToolResultChars`.
pub const DEFAULT_MAX_TOOL_RESULT_CHARS: usize = 12_000;

/// `text` cut to about `max` characters, or `None` when it fits.
pub fn truncate(text: &str, max: usize) -> Option<String> {
    let total = text.chars().count();
    if total <= max {
        return None;
    }
    let keep = max / 2;
    let head: String = text.chars().take(keep).collect();
    let tail: String = text.chars().skip(total - keep).collect();
    Some(format!(
        "{head}\n[… {} characters truncated …]\n{tail}",
        total - 2 * keep
    ))
}

/// Save a full tool result as `<dir>/<name>.txt` (name made file-safe).
pub fn save_artifact(
    dir: &std::path::Path,
    name: &str,
    text: &str,
) -> std::io::Result<std::path::PathBuf> {
    let safe: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .take(120)
        .collect();
    std::fs::create_dir_all(dir)?;
    let path = dir.join(format!("{safe}.txt"));
    std::fs::write(&path, text)?;
    Ok(path)
}

/// Tokens of text no provider has counted yet: chars / 4, rounded up.
pub fn estimate_tokens(text: &str) -> u64 {
    (text.chars().count() as u64).div_ceil(4)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_results_keep_head_and_tail() {
        assert_eq!(truncate("short", 10), None);
        let text = format!("{}{}{}", "H".repeat(50), "m".repeat(900), "T".repeat(50));
        let cut = truncate(&text, 100).unwrap();
        assert!(cut.starts_with(&"H".repeat(50)) && cut.ends_with(&"T".repeat(50)));
        assert!(cut.contains("[… 900 characters truncated …]"), "{cut}");
        let cjk = "退".repeat(30);
        assert!(
            truncate(&cjk, 10)
                .unwrap()
                .contains("[… 20 characters truncated …]")
        );
    }

    #[test]
    fn artifacts_get_file_safe_names() {
        let tmp = tempfile::tempdir().unwrap();
        let path = save_artifact(tmp.path(), "turn1-call/../x", "full").unwrap();
        assert_eq!(path, tmp.path().join("turn1-call____x.txt"));
        assert_eq!(std::fs::read_to_string(path).unwrap(), "full");
    }

    #[test]
    fn estimates_are_chars_over_four() {
        assert_eq!(estimate_tokens(""), 0);
        assert_eq!(estimate_tokens("abcde"), 2);
    }
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
