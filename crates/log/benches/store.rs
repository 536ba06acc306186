//! Event-store benchmark (not a test): `cargo bench -p tinycode-log --bench store`.
//!
//! - durable append throughput, 1 writer and 64 concurrent writers
//!   (events/s and fsyncs per event: group commit shares flushes);
//! - catch-up replay of a 100k-event log to one subscriber;
//! - `verify`, `export` and `import` of a 1,000,000-event log
//!   (`TINYCODE_BENCH_EVENTS` changes the size);
//! - durable appends on PostgreSQL, 1 and 64 writers, each run in a schema
//!   of its own (`TINYCODE_BENCH_PG`, default the CI database; `off`
//!   skips it).
//!
//! The store lives under `$TINYCODE_BENCH_DIR` or Cargo's target tmp dir
//! (a real disk, so fsync costs what it costs). Figures go to
//! docs/BENCHMARKS.md.

// A benchmark binary: any failure aborts the run with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use tinycode_log::store::{EventStore, ExpectedVersion, SubscriptionOptions};
use tinycode_shared::proto::{DaemonStopped, event::Payload};

fn payload(i: u64) -> Payload {
    Payload::DaemonStopped(DaemonStopped {
        pid: i as u32,
        uptime_ms: i,
        reason: "benchmark event with a realistic few dozen bytes of text".into(),
    })
}

fn bench_dir() -> tempfile::TempDir {
    let base = std::env::var_os("TINYCODE_BENCH_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")));
    std::fs::create_dir_all(&base).expect("bench dir");
    tempfile::tempdir_in(base).expect("temp dir")
}

struct Throughput {
    events: u64,
    elapsed: Duration,
    fsyncs: u64,
}

impl Throughput {
    fn rate(&self) -> f64 {
        self.events as f64 / self.elapsed.as_secs_f64()
    }
}

/// Where a benchmark's log lives.
#[derive(Clone)]
enum Backend {
    Sled,
    /// The server's URL.
    Postgres(String),
}

/// A schema of its own on the server, dropped after the run.
async fn pg_schema(url: &str) -> (String, tokio_postgres::Client) {
    // This side connection needs no TLS (a `require` URL would refuse it).
    let url = url.replace("sslmode=require", "sslmode=prefer");
    let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .expect("PostgreSQL for the benchmark (TINYCODE_BENCH_PG=off skips it)");
    tokio::spawn(connection);
    let schema = format!(
        "tc_bench_{}_{}",
        std::process::id(),
        Instant::now().elapsed().subsec_nanos()
    );
    client
        .batch_execute(&format!("CREATE SCHEMA {schema}"))
        .await
        .expect("create schema");
    (schema, client)
}

/// `writers` tasks, each appending `per_writer` single-event appends to its
/// own stream with an exact expected version, each awaited (durable).
async fn appends(backend: Backend, writers: u64, per_writer: u64) -> Throughput {
    let dir = bench_dir();
    let mut cleanup = None;
    let store = match &backend {
        Backend::Sled => EventStore::open(dir.path()).expect("open"),
        Backend::Postgres(url) => {
            let (schema, client) = pg_schema(url).await;
            let sep = if url.contains('?') { '&' } else { '?' };
            let url = format!("{url}{sep}options=-csearch_path%3D{schema}");
            cleanup = Some((schema, client));
            EventStore::open_postgres(&url, &dir.path().join("projections"), Default::default())
                .await
                .expect("open on PostgreSQL")
        }
    };
    let fsyncs_before = store.stats().fsyncs;
    let start = Instant::now();
    let tasks: Vec<_> = (0..writers)
        .map(|w| {
            let store = store.clone();
            tokio::spawn(async move {
                for i in 0..per_writer {
                    store
                        .append(
                            &format!("ticket-{w}"),
                            ExpectedVersion::Exact(i),
                            vec![payload(i)],
                        )
                        .await
                        .expect("append");
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.expect("writer");
    }
    let result = Throughput {
        events: writers * per_writer,
        elapsed: start.elapsed(),
        fsyncs: store.stats().fsyncs - fsyncs_before,
    };
    store.close().await.expect("close");
    if let Some((schema, client)) = cleanup {
        client
            .batch_execute(&format!("DROP SCHEMA {schema} CASCADE"))
            .await
            .expect("drop schema");
    }
    result
}

/// 64 writers in clear and over TLS (`sslmode=require`, a server with
/// `ssl = on`), alternated, three runs each: what TLS costs.
async fn tls_cost(url: &str) -> Vec<(&'static str, Vec<f64>)> {
    let with = |mode: &str| {
        let sep = if url.contains('?') { '&' } else { '?' };
        format!("{url}{sep}sslmode={mode}")
    };
    let mut out = vec![("disable", Vec::new()), ("require", Vec::new())];
    for _ in 0..3 {
        for (mode, rates) in &mut out {
            let t = appends(Backend::Postgres(with(mode)), 64, 500).await;
            rates.push(t.rate());
        }
    }
    out
}

/// A log of `total` events (20 writers, 100 events per append).
async fn filled(dir: &std::path::Path, total: u64) -> EventStore {
    const WRITERS: u64 = 20;
    const BATCH: u64 = 100;
    let store = EventStore::open(dir).expect("open");
    let tasks: Vec<_> = (0..WRITERS)
        .map(|w| {
            let store = store.clone();
            tokio::spawn(async move {
                for b in 0..total / (WRITERS * BATCH) {
                    let batch = (0..BATCH).map(|k| payload(b * BATCH + k)).collect();
                    store
                        .append(&format!("session-{w}"), ExpectedVersion::Any, batch)
                        .await
                        .expect("append");
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.expect("filler");
    }
    assert_eq!(store.last_sequence(), total);
    store
}

/// Fill a log with `total` events, then time one subscriber replaying it.
async fn replay(total: u64) -> (Duration, u64) {
    let dir = bench_dir();
    let store = filled(dir.path(), total).await;
    let start = Instant::now();
    let mut sub = store.subscribe(SubscriptionOptions {
        from_sequence: 1,
        follow: false,
        ..Default::default()
    });
    let mut seen = 0u64;
    while let Some(event) = sub.recv().await {
        let event = event.expect("replay");
        seen += 1;
        assert_eq!(event.sequence, seen, "replay out of order");
    }
    let elapsed = start.elapsed();
    store.close().await.expect("close");
    (elapsed, seen)
}

/// Time `verify`, `export` and `import` of a `total`-event log.
async fn integrity(total: u64) -> [Duration; 3] {
    let dir = bench_dir();
    let db = dir.path().join("db");
    let store = filled(&db, total).await;
    store.close().await.expect("close");
    drop(store);
    // sled lets go of its lock from its own threads a moment after close.
    std::thread::sleep(Duration::from_millis(500));
    let t = Instant::now();
    let report = EventStore::verify(&db).expect("verify");
    let verify = t.elapsed();
    assert!(report.problems.is_empty(), "{report:?}");
    assert_eq!(report.events, total);
    let file = dir.path().join("log.tclog");
    std::thread::sleep(Duration::from_millis(500));
    let t = Instant::now();
    assert_eq!(EventStore::export(&db, &file).expect("export"), total);
    let export = t.elapsed();
    let t = Instant::now();
    assert_eq!(
        EventStore::import(&dir.path().join("restored"), &file).expect("import"),
        total
    );
    [verify, export, t.elapsed()]
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let one = appends(Backend::Sled, 1, 2_000).await;
        let many = appends(Backend::Sled, 64, 500).await;
        let pg = match std::env::var("TINYCODE_BENCH_PG").as_deref() {
            Ok("off") => None,
            Ok(url) => Some(url.to_string()),
            Err(_) => Some("postgres://postgres@127.0.0.1:5432/test".to_string()),
        };
        let pg = match pg {
            Some(url) => Some((
                appends(Backend::Postgres(url.clone()), 1, 2_000).await,
                appends(Backend::Postgres(url.clone()), 64, 500).await,
                tls_cost(&url).await,
            )),
            None => None,
        };
        let (replay_time, replayed) = replay(100_000).await;
        let total: u64 = std::env::var("TINYCODE_BENCH_EVENTS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(1_000_000);
        let integrity = if total > 0 {
            Some(integrity(total).await)
        } else {
            None
        };
        println!("durable appends (flush before ack)");
        for (name, t) in [("1 writer", &one), ("64 writers", &many)] {
            println!(
                "  {name:<11} {:>7} events in {:>8.2?}  {:>9.0} events/s  {:.3} fsyncs/event",
                t.events,
                t.elapsed,
                t.rate(),
                t.fsyncs as f64 / t.events as f64
            );
        }
        println!(
            "  speed-up    {:.1}x (target >= 20x and >= 30k events/s)",
            many.rate() / one.rate()
        );
        if let Some((one, many, tls)) = &pg {
            println!("durable appends on PostgreSQL (commit before ack)");
            for (name, t) in [("1 writer", one), ("64 writers", many)] {
                println!(
                    "  {name:<11} {:>7} events in {:>8.2?}  {:>9.0} events/s  {:.3} transactions/event",
                    t.events,
                    t.elapsed,
                    t.rate(),
                    t.fsyncs as f64 / t.events as f64
                );
            }
            println!("  64 writers target >= 10,000 events/s");
            println!("PostgreSQL over TLS, 64 writers, 3 runs each, alternated (events/s):");
            for (mode, rates) in tls {
                let shown: Vec<String> = rates.iter().map(|r| format!("{r:.0}")).collect();
                println!("  sslmode={mode:<8} {}", shown.join(" / "));
            }
        }
        println!(
            "catch-up replay: {replayed} events in {replay_time:.2?} ({:.0} events/s; target <= 0.5 s)",
            replayed as f64 / replay_time.as_secs_f64()
        );
        if let Some([verify, export, import]) = integrity {
            println!(
                "{total} events: verify {verify:.2?} (target <= 5 s); export {export:.2?} + import {import:.2?} = {:.2?} (target <= 20 s)",
                export + import
            );
        }
    });
}
