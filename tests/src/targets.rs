//! Benchmark targets: each bench records what it measured against the
//! issue's limit and, at the end, prints a verdict and exits non-zero when
//! a figure is over its limit, so a regression fails the bench run.

/// The limits a bench run is checked against.
#[derive(Default)]
pub struct Targets {
    checks: Vec<Check>,
}

struct Check {
    what: String,
    measured: f64,
    limit: f64,
    unit: &'static str,
}

impl Check {
    fn met(&self) -> bool {
        self.measured <= self.limit
    }
}

impl Targets {
    pub fn new() -> Self {
        Self::default()
    }

    /// `measured` must be at most `limit` (both in `unit`).
    pub fn at_most(&mut self, what: &str, measured: f64, limit: f64, unit: &'static str) {
        self.checks.push(Check {
            what: what.to_string(),
            measured,
            limit,
            unit,
        });
    }

    /// One line per target; `Err` lists those missed.
    pub fn verdict(&self) -> Result<Vec<String>, Vec<String>> {
        let lines: Vec<String> = self
            .checks
            .iter()
            .map(|c| {
                format!(
                    "{} {}: {:.2} {} (target <= {} {})",
                    if c.met() { "✓" } else { "✗" },
                    c.what,
                    c.measured,
                    c.unit,
                    c.limit,
                    c.unit
                )
            })
            .collect();
        if self.checks.iter().all(Check::met) {
            Ok(lines)
        } else {
            Err(lines)
        }
    }

    /// Print the verdict; exit 1 when a target was missed.
    pub fn finish(self) {
        let verdict = self.verdict();
        let (Ok(lines) | Err(lines)) = &verdict;
        lines.iter().for_each(|l| println!("{l}"));
        if verdict.is_err() {
            eprintln!("a benchmark target was missed (see the ✗ lines above)");
            std::process::exit(1);
        }
    }
}

/// Write dirty pages back before timing, so a bench started right after a
/// build does not time its flushes queued behind the build's writeback.
pub fn settle_disk() {
    let _ = std::process::Command::new("sync").status();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_figure_over_its_limit_fails_the_verdict() {
        let mut t = Targets::new();
        t.at_most("median", 4.2, 5.0, "ms");
        let lines = t.verdict().unwrap();
        assert_eq!(lines, ["✓ median: 4.20 ms (target <= 5 ms)"]);
        t.at_most("peak RSS", 22.4, 22.0, "MiB");
        let lines = t.verdict().unwrap_err();
        assert_eq!(lines[1], "✗ peak RSS: 22.40 MiB (target <= 22 MiB)");
        t.at_most("exactly", 5.0, 5.0, "ms");
        assert!(t.verdict().is_err());
    }
}
