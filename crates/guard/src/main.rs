//! `tinycode-guard`: the cost guard (issue 32). Fixed scenarios of the hot
//! paths run in one process on a one-thread runtime, counted in
//! instructions under callgrind — not in seconds, so a loaded machine
//! changes nothing — and compared with `crates/guard/baseline.json`.
//!
//! - `tinycode-guard check`: every scenario under callgrind; exit 1 when one
//!   costs more than 10 % over its baseline (or the import's store bytes per
//!   ticket or peak RSS grew as much). CI runs it.
//! - `tinycode-guard record`: write the baseline from this build (a commit of
//!   its own that says why).
//! - `tinycode-guard run SCENARIO [--setup-only]`: what callgrind counts.
//!
//! A scenario's cost is the instructions of a run with its measured part
//! minus those of a run that only sets it up, divided by how many times the
//! part ran: process start, runtime and store opening are not counted.

mod scenarios;

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use anyhow::{Context, bail};
use serde_json::{Value, json};

/// A scenario's instructions may grow this much before the guard fails.
const TOLERANCE: f64 = 0.10;
/// Figures measured outside valgrind (store bytes on disk, peak RSS) vary
/// from run to run (sled's segment boundaries, threads' timing: ±8 % seen);
/// the least of three runs is kept, and may grow this much.
const FIGURE_TOLERANCE: f64 = 0.20;

fn baseline_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("baseline.json")
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("run") => run(&args[1..]),
        Some("check") => check(false),
        Some("record") => check(true),
        Some("list") => {
            for s in scenarios::ALL {
                println!("{:<8} {}", s.name, s.what);
            }
            Ok(true)
        }
        _ => {
            eprintln!("usage: tinycode-guard check | record | list | run SCENARIO [--setup-only]");
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("tinycode-guard: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Run one scenario in this process (what callgrind counts).
fn run(args: &[String]) -> anyhow::Result<bool> {
    let name = args
        .first()
        .context("name a scenario (`tinycode-guard list`)")?;
    let setup_only = args.iter().any(|a| a == "--setup-only");
    let scenario = scenarios::find(name)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let extra = runtime.block_on((scenario.run)(setup_only))?;
    println!("{extra}");
    Ok(true)
}

/// Functions whose cost is a thread waiting for another, not work: under
/// valgrind threads run one at a time, so a spin-wait (sled's lazy
/// statics) runs for however long the scheduler lets it — the same run
/// counted 0.23 or 0.60 G instructions. Their cost is left out.
const SPIN_WAITS: &[&str] = &["sled::lazy::Lazy<"];

/// What callgrind counted for one run of `scenario` (spin-waits left out).
fn counted(scenario: &str, setup_only: bool) -> anyhow::Result<u64> {
    let me = std::env::current_exe()?;
    let out_file = tempfile::NamedTempFile::new()?;
    let mut cmd = Command::new("valgrind");
    cmd.arg("--tool=callgrind").arg(format!(
        "--callgrind-out-file={}",
        out_file.path().display()
    ));
    cmd.arg(&me).arg("run").arg(scenario);
    if setup_only {
        cmd.arg("--setup-only");
    }
    let out = cmd.output().context("run valgrind (is it installed?)")?;
    if !out.status.success() {
        bail!(
            "{scenario} failed under callgrind:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let annotated = Command::new("callgrind_annotate")
        .args(["--threshold=100", "--inclusive=no", "--auto=no"])
        .arg(out_file.path())
        .output()
        .context("run callgrind_annotate")?;
    let text = String::from_utf8_lossy(&annotated.stdout);
    let number =
        |l: &str| -> Option<u64> { l.split_whitespace().next()?.replace(',', "").parse().ok() };
    let total = text
        .lines()
        .find(|l| l.contains("PROGRAM TOTALS"))
        .and_then(number)
        .with_context(|| format!("callgrind printed no total for {scenario}:\n{text}"))?;
    let spinning: u64 = text
        .lines()
        .filter(|l| SPIN_WAITS.iter().any(|s| l.contains(s)))
        .filter_map(number)
        .sum();
    Ok(total.saturating_sub(spinning))
}

/// What plain runs of `scenario` print (figures besides instructions,
/// measured outside valgrind: under it the memory is valgrind's own): the
/// least of three runs of each figure.
fn figures(scenario: &str) -> anyhow::Result<serde_json::Map<String, Value>> {
    let mut least = serde_json::Map::new();
    for _ in 0..3 {
        let out = Command::new(std::env::current_exe()?)
            .arg("run")
            .arg(scenario)
            .output()?;
        if !out.status.success() {
            bail!(
                "{scenario} failed:\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let printed = String::from_utf8_lossy(&out.stdout);
        let run: Value = printed
            .lines()
            .last()
            .and_then(|l| serde_json::from_str(l).ok())
            .unwrap_or(Value::Null);
        for (k, v) in run.as_object().into_iter().flatten() {
            let n = v.as_f64().unwrap_or(f64::MAX);
            let keep = least
                .get(k)
                .and_then(Value::as_f64)
                .is_none_or(|old| n < old);
            if keep {
                least.insert(k.clone(), v.clone());
            }
        }
    }
    Ok(least)
}

/// Every scenario counted; compared with the baseline (or written to it).
fn check(record: bool) -> anyhow::Result<bool> {
    let path = baseline_path();
    let baseline: Value = if record {
        Value::Null
    } else {
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("read the baseline {}", path.display()))?;
        serde_json::from_str(&text)?
    };
    let mut measured = serde_json::Map::new();
    let mut ok = true;
    println!(
        "{:<8} {:>14} {:>14} {:>8}",
        "scenario", "instructions", "baseline", "change"
    );
    for s in scenarios::ALL {
        let setup = counted(s.name, true)?;
        let full = counted(s.name, false)?;
        let extra = figures(s.name)?;
        let per_op = full.saturating_sub(setup) / s.repeats;
        let mut entry = json!({ "instructions": per_op });
        let mut figures = vec![("instructions", per_op as f64, TOLERANCE)];
        for (k, v) in &extra {
            entry[k] = v.clone();
            if let Some(n) = v.as_f64() {
                figures.push((k.as_str(), n, FIGURE_TOLERANCE));
            }
        }
        for (figure, value, tolerance) in figures {
            let base = baseline[s.name][figure].as_f64();
            let change = base.map(|b| (value - b) / b.max(1.0));
            let verdict = if base.is_some_and(|b| grew(value, b, tolerance)) {
                ok = false;
                "✗"
            } else {
                "✓"
            };
            println!(
                "{:<8} {:>14} {:>14} {:>8} {verdict} {figure}",
                s.name,
                value as u64,
                base.map_or("—".into(), |b| (b as u64).to_string()),
                change.map_or("new".into(), |c| format!("{:+.1}%", c * 100.0)),
            );
        }
        measured.insert(s.name.into(), entry);
    }
    if record {
        let text = serde_json::to_string_pretty(&Value::Object(measured))? + "\n";
        std::fs::write(&path, text)?;
        println!("baseline written to {}", path.display());
        return Ok(true);
    }
    if !ok {
        eprintln!(
            "a scenario grew by more than {:.0} % ({:.0} % for store bytes and RSS; ✗ above): make it cheaper, or — when the cost is worth it — record a new baseline (`tinycode-guard record`) in a commit of its own that says why",
            TOLERANCE * 100.0,
            FIGURE_TOLERANCE * 100.0
        );
    }
    Ok(ok)
}

/// Whether `value` exceeds `base` by more than `tolerance` (a share).
fn grew(value: f64, base: f64, tolerance: f64) -> bool {
    (value - base) / base.max(1.0) > tolerance
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scenario_fails_past_its_tolerance_and_never_for_getting_cheaper() {
        assert!(!grew(1_099.0, 1_000.0, TOLERANCE));
        assert!(grew(1_101.0, 1_000.0, TOLERANCE));
        assert!(!grew(10.0, 1_000.0, TOLERANCE));
        assert!(grew(1_250.0, 1_000.0, FIGURE_TOLERANCE));
    }

    #[test]
    fn every_scenario_has_a_baseline() {
        let baseline: Value =
            serde_json::from_str(&std::fs::read_to_string(baseline_path()).unwrap()).unwrap();
        for s in scenarios::ALL {
            assert!(
                baseline[s.name]["instructions"]
                    .as_u64()
                    .is_some_and(|n| n > 0),
                "{} has no baseline: run `tinycode-guard record`",
                s.name
            );
        }
    }
}
