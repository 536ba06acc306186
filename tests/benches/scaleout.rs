//! Scale-out benchmark (not a test): `cargo bench -p tinycode-tests --bench scaleout`.
//!
//! Triage throughput against a mock model answering each request after
//! 300 ms (two requests per triage: route, then the summary), one daemon
//! versus three on one PostgreSQL log, each daemon with
//! `autoTriage.concurrency` 4. The work is latency-bound, so it scales
//! with daemons even on a 2-core machine. Target: three ≥ 2.5× one.
//!
//! Then attach through another daemon: a gRPC client of daemon B follows
//! a session whose turns run on daemon A (the offline model, 100 turns);
//! the delay of each event from its append on A (`recorded_at`, stamped
//! as the transaction is built) to its arrival at the client. Target: p99
//! ≤ 50 ms.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant, SystemTime};

use tinycode_shared::client::{ClientName, connect};
use tinycode_shared::proto::AttachRequest;
use tinycode_shared::proto::session_update::Update;
use tinycode_shared::proto::sessions_client::SessionsClient;
use tinycode_tests::Desk;

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

const TURNS: usize = 100;

/// Milliseconds from append on one daemon to a client of another, per
/// event of `TURNS` turns, sorted.
fn remote_attach() -> Vec<f64> {
    let schema = Schema::new("attach");
    let on = || Desk::fixture().with_env("TINYCODE_STORE_URL", &schema.url());
    let (a, b) = (on(), on());
    b.ok(&["ticket", "list"]);
    let session = a.new_session(&[]);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    let socket = b.socket();
    let id = session.clone();
    runtime.spawn(async move {
        let channel = connect(&socket, &ClientName::new("bench").unwrap())
            .await
            .unwrap();
        let mut updates = SessionsClient::new(channel)
            .attach(AttachRequest {
                session_id: id,
                from_sequence: 0,
            })
            .await
            .unwrap()
            .into_inner();
        let mut delays = Vec::new();
        let mut replayed = true;
        while let Some(update) = updates.message().await.unwrap() {
            let Some(Update::Event(e)) = update.update else {
                continue;
            };
            if replayed {
                // The session's creation is replayed, not live.
                replayed = false;
                continue;
            }
            let at = e.recorded_at.unwrap();
            let recorded =
                SystemTime::UNIX_EPOCH + Duration::new(at.seconds as u64, at.nanos as u32);
            let delay = SystemTime::now()
                .duration_since(recorded)
                .unwrap_or_default();
            delays.push(delay.as_secs_f64() * 1000.0);
            if let Some(tinycode_shared::proto::event::Payload::TurnCompleted(c)) = &e.payload
                && c.turn == TURNS as u64
            {
                break;
            }
        }
        let _ = done_tx.send(delays);
    });
    std::thread::sleep(Duration::from_millis(500));
    for _ in 0..TURNS {
        a.ok(&["session", "send", &session, "hello"]);
    }
    let mut delays = done_rx.recv_timeout(Duration::from_secs(300)).unwrap();
    a.stop();
    b.stop();
    delays.sort_by(f64::total_cmp);
    delays
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
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
    let delays = remote_attach();
    let (p50, p99) = (percentile(&delays, 0.5), percentile(&delays, 0.99));
    println!(
        "attach through another daemon: {} events of {TURNS} turns, append → remote client p50 {p50:.1} ms, p99 {p99:.1} ms, max {:.1} ms",
        delays.len(),
        delays.last().copied().unwrap_or_default()
    );
    let mut targets = Targets::new();
    targets.at_most("append → client of another daemon, p99", p99, 50.0, "ms");
    targets.at_most(
        "three daemons' time ÷ one daemon's (≤ 0.4 is ≥ 2.5× the throughput)",
        three / one,
        0.4,
        "",
    );
    targets.finish();
}
