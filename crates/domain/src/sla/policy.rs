//! `sla` in `.tinycode/config.json`: policies matched by a ticket's
//! priority, category, queue and channel (the first that matches wins),
//! business hours, and the at-risk share.
//!
//! ```json
//! "sla": {
//!   "atRiskPercent": 80,
//!   "businessHours": {"timeZone": "+08:00", "days": ["mon", "tue", "wed", "thu", "fri"],
//!                     "open": "09:00", "close": "18:00", "holidays": ["2026-12-25"]},
//!   "policies": [
//!     {"name": "urgent", "match": {"priority": ["P0", "P1"]}, "businessHours": false,
//!      "firstResponse": "30m", "nextResponse": "1h", "resolution": "8h"},
//!     {"name": "standard", "firstResponse": "4h", "nextResponse": "8h", "resolution": "3d"}
//!   ]
//! }
//! ```

use serde_json::{Map, Value};
use tinycode_shared::proto::Ticket;

use super::BusinessHours;
use crate::ticket::{Channel, Priority};

/// One policy: which tickets, and their targets in seconds of business
/// time (or of wall time when `business_hours` is false).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    pub name: String,
    pub priority: Vec<String>,
    pub category: Vec<String>,
    pub queue: Vec<String>,
    pub channel: Vec<String>,
    pub first_response: Option<i64>,
    pub next_response: Option<i64>,
    pub resolution: Option<i64>,
    pub business_hours: bool,
}

impl Policy {
    fn matches(&self, ticket: &Ticket) -> bool {
        let any = |want: &[String], have: &str| want.is_empty() || want.iter().any(|w| w == have);
        any(&self.priority, &ticket.priority)
            && any(&self.category, &ticket.category)
            && any(&self.queue, &ticket.queue)
            && any(&self.channel, &ticket.channel)
    }
}

/// The desk's SLA settings. The default has no policy: each ticket's own
/// `slaMinutes` is its first-response target, counted in wall time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlaSettings {
    pub policies: Vec<Policy>,
    pub hours: BusinessHours,
    /// Share of a target's time after which a running clock is at risk.
    pub at_risk_percent: u8,
}

impl Default for SlaSettings {
    fn default() -> Self {
        Self {
            policies: Vec::new(),
            hours: BusinessHours::always(),
            at_risk_percent: 80,
        }
    }
}

impl SlaSettings {
    /// The first policy `ticket` matches.
    pub fn policy_for(&self, ticket: &Ticket) -> Option<&Policy> {
        self.policies.iter().find(|p| p.matches(ticket))
    }

    /// A stable hash of the settings: the stored alert schedule was made
    /// with settings of this fingerprint.
    pub fn fingerprint(&self) -> u64 {
        crate::fnv::fnv1a(format!("{self:?}").bytes())
    }

    /// Parse the `sla` section; each problem names its key (`sla.` is
    /// added by the caller).
    pub fn from_json(v: &Value) -> Result<Self, String> {
        let obj = object(v, "`sla`")?;
        known(obj, &["atRiskPercent", "businessHours", "policies"], "")?;
        let mut s = Self::default();
        if let Some(p) = obj.get("atRiskPercent") {
            s.at_risk_percent = p.as_u64().filter(|n| (1..=99).contains(n)).ok_or_else(|| {
                format!("`atRiskPercent` must be a whole number from 1 to 99, got {p}")
            })? as u8;
        }
        if let Some(h) = obj.get("businessHours") {
            s.hours = BusinessHours::from_json(h)?;
        }
        match obj.get("policies") {
            None => {}
            Some(Value::Array(items)) => {
                for (i, item) in items.iter().enumerate() {
                    let policy =
                        parse_policy(item, i).map_err(|e| format!("`policies[{i}]` {e}"))?;
                    if s.policies.iter().any(|p| p.name == policy.name) {
                        return Err(format!(
                            "`policies[{i}].name` {:?} is used twice; each policy needs its own name",
                            policy.name
                        ));
                    }
                    s.policies.push(policy);
                }
            }
            Some(other) => return Err(format!("`policies` must be a list, got {other}")),
        }
        Ok(s)
    }
}

fn object<'a>(v: &'a Value, what: &str) -> Result<&'a Map<String, Value>, String> {
    v.as_object()
        .ok_or_else(|| format!("{what} must be an object, got {v}"))
}

fn known(obj: &Map<String, Value>, keys: &[&str], at: &str) -> Result<(), String> {
    match obj.keys().find(|k| !keys.contains(&k.as_str())) {
        Some(k) => Err(format!(
            "{at}has an unknown key `{k}` (known: {})",
            keys.join(", ")
        )),
        None => Ok(()),
    }
}

fn parse_policy(v: &Value, i: usize) -> Result<Policy, String> {
    let obj = object(v, "")?;
    known(
        obj,
        &[
            "name",
            "match",
            "firstResponse",
            "nextResponse",
            "resolution",
            "businessHours",
        ],
        "",
    )?;
    let name = match obj.get("name") {
        None => format!("policy-{}", i + 1),
        Some(Value::String(s)) if !s.trim().is_empty() && s.len() <= 64 => s.trim().to_string(),
        Some(other) => {
            return Err(format!(
                "`name` must be a short non-empty string, got {other}"
            ));
        }
    };
    let target = |key: &str| -> Result<Option<i64>, String> {
        obj.get(key)
            .map(|v| parse_duration(v).map_err(|e| format!("`{key}` {e}")))
            .transpose()
    };
    let business_hours = match obj.get("businessHours") {
        None => true,
        Some(Value::Bool(b)) => *b,
        Some(other) => {
            return Err(format!(
                "`businessHours` must be true or false, got {other}"
            ));
        }
    };
    let mut p = Policy {
        name,
        priority: Vec::new(),
        category: Vec::new(),
        queue: Vec::new(),
        channel: Vec::new(),
        first_response: target("firstResponse")?,
        next_response: target("nextResponse")?,
        resolution: target("resolution")?,
        business_hours,
    };
    if p.first_response.is_none() && p.next_response.is_none() && p.resolution.is_none() {
        return Err(
            "sets no target: give firstResponse, nextResponse or resolution (e.g. \"4h\")".into(),
        );
    }
    if let Some(m) = obj.get("match") {
        matching(&mut p, object(m, "`match`")?)?;
    }
    Ok(p)
}

/// A policy's `match`: the lists it matches on, checked.
fn matching(p: &mut Policy, m: &serde_json::Map<String, Value>) -> Result<(), String> {
    known(m, &["priority", "category", "queue", "channel"], "`match` ")?;
    let list = |key: &str| -> Result<Vec<String>, String> {
        match m.get(key) {
            None => Ok(Vec::new()),
            Some(Value::String(s)) => Ok(vec![s.trim().to_string()]),
            Some(Value::Array(items)) => items
                .iter()
                .map(|i| {
                    i.as_str().map(|s| s.trim().to_string()).ok_or_else(|| {
                        format!("`match.{key}` must be a string or a list of strings, got {i}")
                    })
                })
                .collect(),
            Some(other) => Err(format!(
                "`match.{key}` must be a string or a list of strings, got {other}"
            )),
        }
    };
    p.priority = list("priority")?;
    p.category = list("category")?;
    p.queue = list("queue")?;
    p.channel = list("channel")?;
    if let Some(bad) = p.priority.iter().find(|v| Priority::parse(v).is_none()) {
        return Err(format!(
            "`match.priority` has {bad:?}; priorities are {}",
            Priority::NAMES.join(", ")
        ));
    }
    if let Some(bad) = p.channel.iter().find(|v| Channel::parse(v).is_none()) {
        return Err(format!(
            "`match.channel` has {bad:?}; channels are {}",
            Channel::NAMES.join(", ")
        ));
    }
    Ok(())
}

/// A target's length: `"90s"`, `"30m"`, `"4h"`, `"2d"` (a day is 24 hours
/// of the clock the policy counts in), or a number of minutes.
pub fn parse_duration(v: &Value) -> Result<i64, String> {
    let bad = || {
        format!(
            "must be a duration such as \"30m\", \"4h\", \"8h30m\" or \"2d\" (or minutes), got {v}"
        )
    };
    let seconds = match v {
        Value::Number(n) => n
            .as_u64()
            .and_then(|m| i64::try_from(m).ok()?.checked_mul(60))
            .ok_or_else(bad)?,
        Value::String(s) => {
            // One or more number+unit parts: "90s", "30m", "8h30m", "1d 4h".
            let mut rest = s.trim();
            if rest.is_empty() {
                return Err(bad());
            }
            let mut total: i64 = 0;
            while !rest.is_empty() {
                let digits = rest
                    .find(|c: char| !c.is_ascii_digit())
                    .unwrap_or(rest.len());
                let n: i64 = rest[..digits].parse().map_err(|_| bad())?;
                rest = rest[digits..].trim_start();
                let unit_len = rest
                    .find(|c: char| !c.is_ascii_alphabetic())
                    .unwrap_or(rest.len());
                let scale = match &rest[..unit_len] {
                    "s" | "sec" | "seconds" => 1,
                    "m" | "min" | "minutes" | "" => 60,
                    "h" | "hours" => 3600,
                    "d" | "days" => 86_400,
                    _ => return Err(bad()),
                };
                rest = rest[unit_len..].trim_start();
                let part = n.checked_mul(scale).ok_or_else(bad)?;
                total = total.checked_add(part).ok_or_else(bad)?;
            }
            total
        }
        _ => return Err(bad()),
    };
    if seconds <= 0 || seconds > 366 * 86_400 {
        return Err(format!("{} (from 1 second to 366 days)", bad()));
    }
    Ok(seconds)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn policies_match_in_order() {
        let s = SlaSettings::from_json(&json!({
            "policies": [
                {"name": "urgent", "match": {"priority": ["P0", "P1"]}, "firstResponse": "30m"},
                {"name": "billing", "match": {"queue": "billing", "channel": ["email"]}, "resolution": "2d"},
                {"name": "standard", "firstResponse": 240, "nextResponse": "8h"}
            ]
        }))
        .unwrap();
        let ticket = |priority: &str, queue: &str| Ticket {
            priority: priority.into(),
            queue: queue.into(),
            channel: "email".into(),
            ..Ticket::default()
        };
        let name = |t: &Ticket| s.policy_for(t).map(|p| p.name.clone());
        assert_eq!(name(&ticket("P1", "billing")).as_deref(), Some("urgent"));
        assert_eq!(name(&ticket("P2", "billing")).as_deref(), Some("billing"));
        assert_eq!(name(&ticket("", "")).as_deref(), Some("standard"));
        assert_eq!(s.policies[2].first_response, Some(240 * 60));
        assert_eq!(s.policies[0].first_response, Some(1800));
    }

    #[test]
    fn bad_sections_name_their_key() {
        let bad = [
            (json!({"policies": [{"name": "a"}]}), "policies[0]"),
            (
                json!({"policies": [{"firstResponse": "soon"}]}),
                "firstResponse",
            ),
            (
                json!({"policies": [{"firstResponse": "0m"}]}),
                "firstResponse",
            ),
            (
                json!({"policies": [{"firstResponse": "1h", "match": {"priority": "urgent"}}]}),
                "match.priority",
            ),
            (
                json!({"policies": [{"firstResponse": "1h", "match": {"team": "x"}}]}),
                "team",
            ),
            (
                json!({"policies": [{"name": "a", "firstResponse": "1h"}, {"name": "a", "resolution": "1d"}]}),
                "used twice",
            ),
            (json!({"atRiskPercent": 120}), "atRiskPercent"),
            (
                json!({"businessHours": {"timeZone": "Mars/Olympus"}}),
                "timeZone",
            ),
            (json!({"clocks": []}), "clocks"),
        ];
        for (value, key) in bad {
            let err = SlaSettings::from_json(&value).unwrap_err();
            assert!(err.contains(key), "{value}: {err}");
        }
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration(&json!("90s")), Ok(90));
        assert_eq!(parse_duration(&json!("4h")), Ok(4 * 3600));
        assert_eq!(parse_duration(&json!("2d")), Ok(2 * 86_400));
        assert_eq!(parse_duration(&json!(15)), Ok(900));
        assert_eq!(parse_duration(&json!("8h30m")), Ok(8 * 3600 + 1800));
        assert_eq!(parse_duration(&json!("1d 4h")), Ok(86_400 + 4 * 3600));
        assert!(parse_duration(&json!("4x")).is_err());
        assert!(parse_duration(&json!("h")).is_err());
        assert!(parse_duration(&json!("")).is_err());
        assert!(parse_duration(&json!("-1h")).is_err());
        assert!(parse_duration(&json!("400d")).is_err());
    }
}
