//! Evaluation benchmark (not a test): `cargo bench -p tinycode-tests --bench eval`.
//!
//! `tinycode eval` over 1,000 labelled tickets with the offline model, on
//! the fixture desk: the real daemon builds the scratch desk, starts its
//! own daemon, triages every ticket (concurrency 4) and reads them back.
//! The rows are the first 1,000 of the Bitext train split (their
//! categories are not the desk's, so accuracy is not the point here: the
//! time is). Target: ≤ 30 s.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Instant;

use tinycode_tests::Desk;
use tinycode_tests::targets::{Targets, settle_disk};

fn main() {
    tinycode_tests::bin_dir();
    settle_disk();
    let source = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../shared/datasets/bitext-customer-support/train.csv");
    let text = std::fs::read_to_string(&source).unwrap();
    let mut lines = text.lines();
    let header = lines.next().unwrap();
    assert_eq!(header, "text,intent,category");
    let rows: Vec<&str> = lines.take(1_000).collect();
    let dir = tempfile::tempdir().unwrap();
    let set = dir.path().join("labels.csv");
    std::fs::write(&set, format!("{header}\n{}\n", rows.join("\n"))).unwrap();

    let desk = Desk::fixture();
    desk.ok(&["ticket", "list"]); // starts the daemon
    let started = Instant::now();
    let report = desk.json(&["eval", set.to_str().unwrap(), "--concurrency", "4"]);
    let took = started.elapsed().as_secs_f64();
    desk.stop();
    println!(
        "eval of {} tickets with the offline model: {took:.1} s ({} failed turns; per ticket p50 {:.0} ms, p95 {:.0} ms)",
        report["measured"], report["failed"], report["latencyP50Ms"], report["latencyP95Ms"]
    );
    let mut targets = Targets::new();
    targets.at_most("eval over 1,000 tickets (offline model)", took, 30.0, "s");
    targets.finish();
}
