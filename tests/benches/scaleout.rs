//! Scale-out benchmark (not a test): `cargo bench -p tinycode-tests --bench scaleout`.
//!
//! Triage throughput against a mock model answering each request after
//! 300 ms (two requests per triage: route, then the summary), one daemon
//! versus three on one PostgreSQL log, each daemon with
//! `autoTriage.concurrency` 4. The work is latency-bound, so it scales
//! with daemons even on a 2-core machine. Target: three ≥ 2.5× one.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use tinycode_tests::pg::Schema;
use tinycode_tests::shared_desk::{member, router, ticket_file};
use tinycode_tests::targets::{Targets, settle_disk};
use tinycode_tests::wait_until;

const TICKETS: usize = 120;

/// Seconds for `daemons` daemons to triage `TICKETS` tickets.
fn run(daemons: usize) -> f64 {
    let schema = Schema::new(&format!("bench{daemons}"));
    let mock = router(Duration::from_millis(300));
    let desks: Vec<_> = (0..daemons).map(|_| member(&schema, &mock, 4)).collect();
    for d in &desks {
        d.ok(&["ticket", "list"]);
    }
    // The fixture's three open tickets first, out of the measurement.
    let settled = |n: u64| {
        wait_until(Duration::from_secs(600), || {
            desks[0].json(&["triage", "status"])["done"].as_u64() == Some(n)
        })
    };
    assert!(settled(3));
    let started = Instant::now();
    for n in 0..TICKETS {
        let id = format!("T-7{n:03}");
        desks[0].write(&format!("tickets/{id}.json"), &ticket_file(&id));
    }
    assert!(settled(3 + TICKETS as u64), "{}", desks[0].log());
    let took = started.elapsed().as_secs_f64();
    for d in &desks {
        d.stop();
    }
    took
}

fn main() {
    tinycode_tests::bin_dir();
    settle_disk();
    let one = run(1);
    let three = run(3);
    println!(
        "triage of {TICKETS} tickets, mock model 300 ms per request, concurrency 4 per daemon: \
         one daemon {one:.1} s ({:.1} tickets/s), three daemons {three:.1} s ({:.1} tickets/s), {:.2}×",
        TICKETS as f64 / one,
        TICKETS as f64 / three,
        one / three
    );
    let mut targets = Targets::new();
    targets.at_most(
        "three daemons' time ÷ one daemon's (≤ 0.4 is ≥ 2.5× the throughput)",
        three / one,
        0.4,
        "",
    );
    targets.finish();
}
