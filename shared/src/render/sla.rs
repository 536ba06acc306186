//! How a ticket's SLA clocks read, the same in every client: the nearest
//! running clock's time left, and the worst state.

use crate::proto::{SlaClock, Ticket};

/// `2h05m`, `45m`, `30s`, `3d04h` (the sign dropped).
pub fn span(seconds: i64) -> String {
    let s = seconds.unsigned_abs();
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m", s / 60),
        3600..86_400 => format!("{}h{:02}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d{:02}h", s / 86_400, s % 86_400 / 3600),
    }
}

fn running(c: &SlaClock) -> bool {
    c.state == "running" || (c.state == "breached" && c.met_at.is_empty())
}

/// The nearest running clock: `in 2h05m`, or `-15m` when overdue; `-`
/// when none runs.
pub fn due(t: &Ticket) -> String {
    match t
        .sla
        .iter()
        .filter(|c| running(c))
        .min_by_key(|c| c.seconds_left)
    {
        Some(c) if c.seconds_left < 0 => format!("-{}", span(c.seconds_left)),
        Some(c) => format!("in {}", span(c.seconds_left)),
        None => "-".into(),
    }
}

/// A target's short name: `first`, `next`, `resolve`.
pub fn short_target(target: &str) -> &str {
    match target {
        "first_response" => "first",
        "next_response" => "next",
        "resolution" => "resolve",
        other => other,
    }
}

/// The worst of the ticket's clocks, as a kind (`breached`, `at-risk`,
/// `ok`, `paused`, `met`, `none`) and a label (`breached (first)`).
pub fn state(t: &Ticket) -> (&'static str, String) {
    if let Some(c) = t.sla.iter().find(|c| c.state == "breached") {
        return (
            "breached",
            format!("breached ({})", short_target(&c.target)),
        );
    }
    if let Some(c) = t.sla.iter().find(|c| c.at_risk) {
        return ("at-risk", format!("at risk ({})", short_target(&c.target)));
    }
    if t.sla.iter().any(|c| c.state == "running") {
        return ("ok", "ok".into());
    }
    if t.sla.iter().any(|c| c.state == "paused") {
        return ("paused", "paused".into());
    }
    if t.sla.is_empty() {
        ("none", "-".into())
    } else {
        ("met", "met".into())
    }
}

/// One clock in a sentence: `first_response · 4h00m (standard): due … (in
/// 2h05m, at risk)`.
pub fn line(c: &SlaClock) -> String {
    let when = match c.state.as_str() {
        "running" if c.at_risk => {
            format!("due {} (in {}, at risk)", c.due_at, span(c.seconds_left))
        }
        "running" => format!("due {} (in {})", c.due_at, span(c.seconds_left)),
        "breached" if c.met_at.is_empty() => {
            format!(
                "BREACHED: was due {} ({} ago)",
                c.due_at,
                span(c.seconds_left)
            )
        }
        "breached" => format!("BREACHED: was due {}, answered {}", c.due_at, c.met_at),
        "paused" => "paused: waiting on the customer".into(),
        "met" => format!("met {}", c.met_at),
        "stopped" => format!("stopped {} (resolved with no reply)", c.met_at),
        other => other.to_string(),
    };
    format!(
        "{} · {} ({}): {when}",
        c.target,
        span(c.target_seconds),
        c.policy
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn clock(target: &str, state: &str, left: i64, at_risk: bool) -> SlaClock {
        SlaClock {
            target: target.into(),
            state: state.into(),
            seconds_left: left,
            at_risk,
            ..SlaClock::default()
        }
    }

    #[test]
    fn the_nearest_running_clock_and_the_worst_state() {
        let mut t = Ticket::default();
        assert_eq!((due(&t), state(&t).0), ("-".to_string(), "none"));
        t.sla = vec![
            clock("first_response", "running", 7500, false),
            clock("resolution", "running", 90_000, false),
        ];
        assert_eq!(due(&t), "in 2h05m");
        assert_eq!(state(&t).1, "ok");
        t.sla[0].at_risk = true;
        assert_eq!(state(&t).1, "at risk (first)");
        t.sla[1] = clock("resolution", "breached", -900, true);
        assert_eq!(
            (due(&t), state(&t).1),
            ("-15m".to_string(), "breached (resolve)".to_string())
        );
    }
}
