//! Many desks on one PostgreSQL (not a test):
//! `cargo bench -p tinycode-tests --bench desks`.
//!
//! 100 desks, a schema each, on one PostgreSQL instance of the benchmark's
//! own (`initdb` into a temp dir; `fsync` on, `max_connections` 800, so the
//! machine's shared server is not touched), over TLS (`sslmode=require`:
//! the instance takes only TLS on TCP). Each desk is the store layer a
//! daemon opens (`EventStore::open_postgres`: its committer, reader,
//! listener and size connections), heartbeating and fenced like a daemon,
//! appending 10 events/s, one event per append, awaited (durable) — 1,000
//! appends/s in all — for `TINYCODE_BENCH_SECONDS` (default 30). Reports
//! the append latency (p50/p99/max), the connections the server holds and
//! its CPU. Target: p99 ≤ 20 ms.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tinycode_shared::proto::DaemonStopped;
use tinycode_shared::proto::event::Payload;
use tinycode_tests::pg_tls::TlsServer;
use tinycode_tests::targets::Targets;
use tinycode_tests::{proc_cpu_seconds, proc_parent};
use tinycoded::store::{EventStore, ExpectedVersion, Member};

const DESKS: usize = 100;
const LEASE: Duration = Duration::from_secs(15);

fn payload(i: u64) -> Payload {
    Payload::DaemonStopped(DaemonStopped {
        pid: i as u32,
        uptime_ms: i,
        reason: "benchmark event with a realistic few dozen bytes of text".into(),
    })
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i]
}

/// How one run loads the server.
#[derive(Clone, Copy)]
struct Load {
    per_second: u64,
    /// As if a second daemon shared each desk: every append notifies
    /// (no cluster joined, so nothing turns notifications off).
    shared: bool,
}

/// One desk: open, join (heartbeat, fence — alone, so no `NOTIFY`), append
/// at its pace until `until`; its latencies into `all`.
async fn desk(
    url: String,
    dir: std::path::PathBuf,
    until: Instant,
    load: Load,
    all: Arc<Mutex<Vec<Duration>>>,
) {
    let store = EventStore::open_postgres(&url, &dir, Default::default())
        .await
        .expect("open a desk");
    let me = Member {
        id: format!("bench-{}", dir.display()),
        ..Member::default()
    };
    let cluster = if load.shared {
        None
    } else {
        let joined = tinycoded::cluster::Cluster::join(store.clone(), me, LEASE).await;
        Some(joined.expect("join"))
    };
    // Each desk starts at its own phase in the first second.
    let phase = Duration::from_millis(fastrand_ms(&url));
    tokio::time::sleep(phase).await;
    let mut tick = tokio::time::interval(Duration::from_millis(1000 / load.per_second));
    let mut mine = Vec::new();
    let mut i = 0u64;
    while Instant::now() < until {
        tick.tick().await;
        let started = Instant::now();
        store
            .append(
                &format!("ticket-{}", i % 50),
                ExpectedVersion::Any,
                vec![payload(i)],
            )
            .await
            .expect("append");
        mine.push(started.elapsed());
        i += 1;
    }
    all.lock().unwrap().extend(mine);
    if let Some(cluster) = cluster {
        cluster.leave().await;
    }
    store.close().await.expect("close");
}

/// A phase in 0..1000 ms from the desk's name (no randomness crate).
fn fastrand_ms(seed: &str) -> u64 {
    seed.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    }) % 1000
}

/// CPU seconds (user + system) of the server's processes alive now: the
/// postmaster (the checkpointer's parent) and its children.
fn server_cpu_seconds(server: &TlsServer) -> f64 {
    let checkpointer: u32 = server
        .query("SELECT pid FROM pg_stat_activity WHERE backend_type = 'checkpointer'")
        .parse()
        .unwrap();
    let postmaster = proc_parent(checkpointer).unwrap();
    let mut total = proc_cpu_seconds(postmaster);
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        if proc_parent(pid) == Some(postmaster) {
            total += proc_cpu_seconds(pid);
        }
    }
    total
}

/// What one run measured.
struct Measured {
    latencies: Vec<Duration>,
    elapsed: Duration,
    connections: i64,
    /// The server's share of one core under steady load.
    server_cpu: f64,
    /// The desks' process, share of one core.
    own_cpu: f64,
}

fn own_cpu_seconds() -> f64 {
    proc_cpu_seconds(std::process::id())
}

/// Every desk under `load` for `seconds` (plus 5 s to open them all).
fn run(server: &Arc<TlsServer>, schemas: &[String], seconds: u64, load: Load) -> Measured {
    let dirs = tempfile::tempdir().unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let all = Arc::new(Mutex::new(Vec::new()));
    let own_before = own_cpu_seconds();
    let (elapsed, connections, server_cpu) = runtime.block_on(async {
        let start = Instant::now();
        let until = start + Duration::from_secs(seconds) + Duration::from_secs(5);
        let tasks: Vec<_> = schemas
            .iter()
            .map(|s| {
                let url = server.url(
                    "postgres",
                    "localhost",
                    &format!("sslmode=require&options=-csearch_path%3D{s}"),
                );
                let dir = dirs.path().join(s);
                tokio::spawn(desk(url, dir, until, load, Arc::clone(&all)))
            })
            .collect();
        // The server's CPU over 10 s of steady load, and its connections.
        tokio::time::sleep(Duration::from_secs(seconds / 2 + 3)).await;
        let s = Arc::clone(server);
        let before = tokio::task::spawn_blocking(move || server_cpu_seconds(&s));
        let before = before.await.unwrap();
        tokio::time::sleep(Duration::from_secs(10)).await;
        let s = Arc::clone(server);
        let (after, connections) = tokio::task::spawn_blocking(move || {
            let connections: i64 = s
                .query(
                    "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend'",
                )
                .parse()
                .unwrap();
            (server_cpu_seconds(&s), connections)
        })
        .await
        .unwrap();
        for t in tasks {
            t.await.unwrap();
        }
        (start.elapsed(), connections, (after - before) / 10.0)
    });
    let mut latencies = all.lock().unwrap().clone();
    latencies.sort_unstable();
    Measured {
        latencies,
        elapsed,
        connections,
        server_cpu,
        own_cpu: (own_cpu_seconds() - own_before) / elapsed.as_secs_f64(),
    }
}

fn report(what: &str, m: &Measured) -> f64 {
    let l = &m.latencies;
    let (p50, p99, max) = (percentile(l, 0.50), percentile(l, 0.99), *l.last().unwrap());
    println!("{what}: {} appends in {:.1?}", l.len(), m.elapsed);
    println!("  append latency p50 {p50:.2?}  p99 {p99:.2?}  max {max:.2?}");
    println!(
        "  server {} client connections ({:.1} per desk), {:.0} % of one core; the desks' process {:.0} %",
        m.connections,
        m.connections as f64 / DESKS as f64,
        m.server_cpu * 100.0,
        m.own_cpu * 100.0
    );
    p99.as_secs_f64() * 1000.0
}

fn main() {
    let seconds: u64 = std::env::var("TINYCODE_BENCH_SECONDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(30);
    let server = Arc::new(TlsServer::start());
    server.psql("ALTER SYSTEM SET max_connections = 800");
    server.psql("ALTER SYSTEM SET fsync = on");
    server.stop();
    server.start_again();
    let schemas: Vec<String> = (0..DESKS).map(|i| format!("desk_{i:03}")).collect();
    for s in &schemas {
        server.psql(&format!("CREATE SCHEMA {s}"));
    }
    let alone = Load {
        per_second: 10,
        shared: false,
    };
    let p99 = report(
        &format!("{DESKS} desks on one PostgreSQL, one daemon each, 10 appends/s each"),
        &run(&server, &schemas, seconds, alone),
    );
    for per_second in [10, 2] {
        let shared = Load {
            per_second,
            shared: true,
        };
        report(
            &format!(
                "{DESKS} desks, each as if shared by a second daemon (every append NOTIFYs), {per_second} appends/s each"
            ),
            &run(&server, &schemas, seconds, shared),
        );
    }
    // `finish` may exit the process: the instance is stopped first.
    drop(server);
    let mut targets = Targets::new();
    targets.at_most(
        "p99 append latency, 100 desks at 10 events/s",
        p99,
        20.0,
        "ms",
    );
    targets.finish();
}
