//! Business hours: when an SLA clock runs. Times are Unix seconds; a day is
//! a day of the desk's time zone (a fixed offset from UTC), with one open
//! window on each working day that is not a holiday.

use std::collections::BTreeSet;

const DAY: i64 = 86_400;
/// Days a clock looks ahead for an open window before it gives up (ten
/// years: a calendar with no working day left never comes due).
const HORIZON_DAYS: i64 = 3_660;
const DAY_NAMES: [&str; 7] = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"];

/// The desk's working calendar.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BusinessHours {
    /// Seconds east of UTC.
    offset: i64,
    /// Monday first.
    days: [bool; 7],
    /// Seconds after local midnight: the window is `open..close`.
    open: i64,
    close: i64,
    /// Local day numbers (days since 1970-01-01) that are holidays.
    holidays: BTreeSet<i64>,
}

impl BusinessHours {
    /// Every day, all day, in UTC: a clock that never stops.
    pub fn always() -> Self {
        Self {
            offset: 0,
            days: [true; 7],
            open: 0,
            close: DAY,
            holidays: BTreeSet::new(),
        }
    }

    /// `sla.businessHours`: `{"timeZone": "+08:00", "days": ["mon", …],
    /// "open": "09:00", "close": "18:00", "holidays": ["2026-12-25"]}`.
    /// Each problem names its key.
    pub fn from_json(v: &serde_json::Value) -> Result<Self, String> {
        let obj = v
            .as_object()
            .ok_or_else(|| format!("`businessHours` must be an object, got {v}"))?;
        if let Some(k) = obj
            .keys()
            .find(|k| !["timeZone", "days", "open", "close", "holidays"].contains(&k.as_str()))
        {
            return Err(format!(
                "`businessHours` has an unknown key `{k}` (known: timeZone, days, open, close, holidays)"
            ));
        }
        let text = |key: &str, default: &str| text_of(obj, key, default);
        let zone = text("timeZone", "UTC")?;
        let offset = parse_offset(&zone).ok_or_else(|| {
            format!(
                "`businessHours.timeZone` must be UTC or an offset such as +08:00 or -05:00, got {zone:?} (named zones with daylight saving are not supported yet)"
            )
        })?;
        let open_text = text("open", "09:00")?;
        let open = parse_clock(&open_text).ok_or_else(|| {
            format!("`businessHours.open` must be a time such as 09:00, got {open_text:?}")
        })?;
        let close_text = text("close", "17:00")?;
        let close = parse_clock(&close_text)
            .or((close_text == "24:00").then_some(DAY))
            .ok_or_else(|| {
                format!("`businessHours.close` must be a time such as 18:00, got {close_text:?}")
            })?;
        if close <= open {
            return Err(format!(
                "`businessHours.close` ({close_text}) must be after `open` ({open_text})"
            ));
        }
        let days = days_of(strings_of(obj, "days")?)?;
        let holidays = holidays_of(strings_of(obj, "holidays")?.unwrap_or_default())?;
        Ok(Self {
            offset,
            days,
            open,
            close,
            holidays,
        })
    }

    /// The desk's time zone: seconds east of UTC.
    pub fn offset(&self) -> i64 {
        self.offset
    }

    /// The open window of local day `day`, in Unix seconds.
    fn window(&self, day: i64) -> Option<(i64, i64)> {
        let weekday = (day + 3).rem_euclid(7) as usize; // 1970-01-01 was a Thursday
        if !self.days[weekday] || self.holidays.contains(&day) {
            return None;
        }
        let midnight = day * DAY - self.offset;
        Some((midnight + self.open, midnight + self.close))
    }

    fn day_of(&self, t: i64) -> i64 {
        (t + self.offset).div_euclid(DAY)
    }

    /// Business seconds in `from..to` (0 when `to <= from`).
    pub fn seconds_between(&self, from: i64, to: i64) -> i64 {
        if to <= from {
            return 0;
        }
        if self.is_always() {
            return to - from;
        }
        let mut total = 0;
        for day in self.day_of(from)..=self.day_of(to) {
            if let Some((open, close)) = self.window(day) {
                total += (close.min(to) - open.max(from)).max(0);
            }
        }
        total
    }

    /// The moment `seconds` business seconds after `from` are used up
    /// (`from` itself for 0; `i64::MAX` when the calendar has no time left
    /// within ten years).
    pub fn add(&self, from: i64, seconds: i64) -> i64 {
        if seconds <= 0 {
            return from;
        }
        if self.is_always() {
            return from.saturating_add(seconds);
        }
        let mut left = seconds;
        let first = self.day_of(from);
        for day in first..first + HORIZON_DAYS {
            if let Some((open, close)) = self.window(day) {
                let start = open.max(from);
                let available = (close - start).max(0);
                if available >= left {
                    return start + left;
                }
                left -= available;
            }
        }
        i64::MAX
    }

    fn is_always(&self) -> bool {
        self.open == 0 && self.close == DAY && self.days == [true; 7] && self.holidays.is_empty()
    }
}

type Object = serde_json::Map<String, serde_json::Value>;

/// `businessHours.<key>` as a string, `default` when absent.
fn text_of(obj: &Object, key: &str, default: &str) -> Result<String, String> {
    match obj.get(key) {
        None => Ok(default.to_string()),
        Some(serde_json::Value::String(s)) => Ok(s.trim().to_string()),
        Some(other) => Err(format!(
            "`businessHours.{key}` must be a string, got {other}"
        )),
    }
}

/// `businessHours.<key>` as a list of lower-case strings, if given.
fn strings_of(obj: &Object, key: &str) -> Result<Option<Vec<String>>, String> {
    match obj.get(key) {
        None => Ok(None),
        Some(serde_json::Value::Array(items)) => items
            .iter()
            .map(|i| {
                i.as_str().map(|s| s.trim().to_lowercase()).ok_or_else(|| {
                    format!("`businessHours.{key}` must be a list of strings, got {i}")
                })
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Some),
        Some(other) => Err(format!(
            "`businessHours.{key}` must be a list of strings, got {other}"
        )),
    }
}

/// `businessHours.days` (default Monday to Friday) as working-day flags.
fn days_of(names: Option<Vec<String>>) -> Result<[bool; 7], String> {
    let mut days = [false; 7];
    let names = names.unwrap_or_else(|| DAY_NAMES[..5].iter().map(|d| d.to_string()).collect());
    for name in &names {
        let i = DAY_NAMES
            .iter()
            .position(|d| name.starts_with(d))
            .ok_or_else(|| {
                format!(
                    "`businessHours.days` has {name:?}; days are {}",
                    DAY_NAMES.join(", ")
                )
            })?;
        days[i] = true;
    }
    if !days.contains(&true) {
        return Err("`businessHours.days` must name at least one day".into());
    }
    Ok(days)
}

/// `businessHours.holidays` as day numbers since 1970-01-01.
fn holidays_of(days: Vec<String>) -> Result<BTreeSet<i64>, String> {
    let mut holidays = BTreeSet::new();
    for day in days {
        let n = crate::clock::parse_rfc3339(&format!("{day}T00:00:00Z"))
            .filter(|_| day.len() == 10)
            .ok_or_else(|| {
                format!("`businessHours.holidays` has {day:?}; write a date as 2026-12-25")
            })?;
        holidays.insert(n.div_euclid(DAY));
    }
    Ok(holidays)
}

/// `UTC`, `Z`, `+08:00`, `-0530`, `+8`: seconds east of UTC.
fn parse_offset(text: &str) -> Option<i64> {
    let t = text.trim();
    if t.eq_ignore_ascii_case("utc") || t.eq_ignore_ascii_case("z") || t == "GMT" {
        return Some(0);
    }
    let t = t.strip_prefix("UTC").unwrap_or(t);
    let sign = match t.chars().next()? {
        '+' => 1,
        '-' => -1,
        _ => return None,
    };
    let rest = &t[1..];
    let (h, m) = match rest.split_once(':') {
        Some((h, m)) => (h, m),
        None if rest.len() == 4 && rest.is_ascii() => rest.split_at(2),
        None => (rest, "0"),
    };
    let (h, m): (i64, i64) = (h.parse().ok()?, m.parse().ok()?);
    (h <= 14 && m < 60).then_some(sign * (h * 3600 + m * 60))
}

/// `09:00` → seconds after midnight.
fn parse_clock(text: &str) -> Option<i64> {
    let (h, m) = text.split_once(':')?;
    let (h, m): (i64, i64) = (h.parse().ok()?, m.parse().ok()?);
    (h < 24 && m < 60).then_some(h * 3600 + m * 60)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn t(text: &str) -> i64 {
        crate::clock::parse_rfc3339(text).unwrap()
    }

    fn shanghai() -> BusinessHours {
        BusinessHours::from_json(&json!({
            "timeZone": "+08:00",
            "days": ["mon", "tue", "wed", "thu", "fri"],
            "open": "09:00",
            "close": "18:00",
            "holidays": ["2026-12-25"]
        }))
        .unwrap()
    }

    #[test]
    fn always_is_wall_time() {
        let h = BusinessHours::always();
        assert_eq!(h.seconds_between(100, 400), 300);
        assert_eq!(h.add(100, 300), 400);
    }

    #[test]
    fn a_friday_evening_ticket_is_due_on_monday() {
        let h = shanghai();
        // Friday 2026-12-04 17:00 +08:00, four business hours: one on
        // Friday, three from Monday 09:00.
        let from = t("2026-12-04T17:00:00+08:00");
        assert_eq!(h.add(from, 4 * 3600), t("2026-12-07T12:00:00+08:00"));
        assert_eq!(
            h.seconds_between(from, t("2026-12-07T12:00:00+08:00")),
            4 * 3600
        );
        // Saturday counts nothing.
        assert_eq!(
            h.seconds_between(
                t("2026-12-05T10:00:00+08:00"),
                t("2026-12-05T16:00:00+08:00")
            ),
            0
        );
    }

    #[test]
    fn before_opening_starts_at_opening_and_holidays_are_skipped() {
        let h = shanghai();
        assert_eq!(
            h.add(t("2026-12-01T07:00:00+08:00"), 1800),
            t("2026-12-01T09:30:00+08:00")
        );
        // Thursday 24th 17:30: half an hour that day, then Christmas
        // (Friday) is a holiday, then Monday 28th.
        assert_eq!(
            h.add(t("2026-12-24T17:30:00+08:00"), 3600),
            t("2026-12-28T09:30:00+08:00")
        );
    }

    #[test]
    fn add_and_between_agree() {
        let h = shanghai();
        let from = t("2026-11-30T20:13:00+08:00");
        for seconds in [1, 59, 3600, 9 * 3600, 9 * 3600 + 1, 100_000, 400_000] {
            let due = h.add(from, seconds);
            assert_eq!(h.seconds_between(from, due), seconds, "{seconds}");
        }
    }

    #[test]
    fn bad_calendars_name_their_key() {
        let bad = [
            (json!({"timeZone": "Europe/Berlin"}), "timeZone"),
            (json!({"timeZone": "+€0"}), "timeZone"),
            (json!({"open": "9am"}), "open"),
            (json!({"open": "18:00", "close": "09:00"}), "close"),
            (json!({"days": ["funday"]}), "days"),
            (json!({"days": []}), "days"),
            (json!({"holidays": ["25/12/2026"]}), "holidays"),
            (json!({"weekends": true}), "weekends"),
        ];
        for (value, key) in bad {
            let err = BusinessHours::from_json(&value).unwrap_err();
            assert!(err.contains(key), "{err}");
        }
        assert_eq!(parse_offset("-05:30"), Some(-(5 * 3600 + 1800)));
        assert_eq!(parse_offset("+0800"), Some(8 * 3600));
    }
}
