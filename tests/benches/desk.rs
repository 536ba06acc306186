//! Support-domain benchmark (not a test): `cargo bench -p tinycode-tests --bench desk`.
//!
//! 1. The first start on 50,000 generated ticket files
//!    (`TINYCODE_BENCH_TICKETS` changes it): time to the first answered
//!    `ticket list`, the store on disk and per sled tree; then a restart:
//!    time to the first answer and RSS (issue 32's targets).
//! 2. Search latency (p50/p99) over 10,000 generated articles, in process.
//! 3. `tinycode ticket list` round trip with 1,000 tickets: the whole CLI
//!    process, median of 30 runs.
//!
//! Release binaries, real processes, a temp workspace. Figures go to
//! docs/BENCHMARKS.md. Exits 1 when a target (first start, store,
//! restart, search p50, list median) is missed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use tinycode_tests::targets::{Targets, settle_disk};
use tinycode_tests::{Desk, bin, wait_until};
use tinycoded::domain::search::{Document, Kind, SearchIndex};

const ZH_SUBJECTS: [&str; 6] = [
    "退款：订单 {n} 已付款但未收到货",
    "物流：包裹 {n} 停滞 3 天未更新",
    "账户被风控冻结，订单 {n} 无法支付",
    "App 闪退，无法查看订单 {n}",
    "发票抬头错误，订单 {n} 需要重开",
    "重复扣款，订单 {n} 被扣了两次",
];
const EN_SUBJECTS: [&str; 6] = [
    "Refund for order {n} not received",
    "Parcel {n} stuck in transit for a week",
    "Locked out of my account after order {n}",
    "App crashes on checkout for order {n}",
    "Invoice for order {n} has the wrong company name",
    "Charged twice for order {n}",
];

fn ticket_json(n: usize) -> String {
    let subject = if n.is_multiple_of(2) {
        ZH_SUBJECTS[n % 6]
    } else {
        EN_SUBJECTS[n % 6]
    };
    let subject = subject.replace("{n}", &(10_000 + n).to_string());
    let channel = ["email", "chat", "phone", "web"][n % 4];
    serde_json::to_string_pretty(&serde_json::json!({
        "id": format!("T-{}", 2000 + n),
        "subject": subject,
        "customer": format!("Customer {n}"),
        "channel": channel,
        "createdAt": "2026-09-18T09:12:00+08:00",
        "slaMinutes": 240,
        "status": "open",
        "messages": [{ "from": "customer", "text": format!("{subject}. Please help, this is message {n}."), "at": "2026-09-18T09:12:00+08:00" }],
    }))
    .unwrap()
}

fn write_tickets(desk: &Desk, count: usize) {
    for n in 0..count {
        desk.write(&format!("tickets/T-{}.json", 2000 + n), &ticket_json(n));
    }
}

fn rss_kib(pid: u32) -> (u64, u64) {
    let field = |name| tinycode_tests::proc_status_kib(pid, name);
    (field("VmRSS:"), field("VmHWM:"))
}

/// Wall time from `since` until `tinycode ticket list` first answers
/// (during the start every call but `Daemon.GetStatus` is refused).
fn until_served(desk: &Desk, since: Instant) -> Duration {
    assert!(
        wait_until(Duration::from_secs(600), || {
            desk.run(&["ticket", "list", "--limit", "1"]).code == 0
        }),
        "the daemon never served\n{}",
        desk.log()
    );
    since.elapsed()
}

fn daemon(desk: &Desk) -> std::process::Child {
    desk.daemon_cmd()
        .arg("--workspace")
        .arg(desk.workspace())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// Where the daemon says its start went (its log's start-up lines).
fn stages(desk: &Desk) {
    for line in desk
        .log()
        .lines()
        .filter(|l| l.contains("start-up") || l.contains("read back"))
    {
        let from = line.find("INFO").map_or(0, |i| i + 5);
        println!("  {}", &line[from..]);
    }
}

/// Each sled tree of the stopped daemon's store: its name, keys and the
/// bytes of its keys and values (what it holds, before sled's own
/// overhead), largest first.
fn trees(desk: &Desk) -> Vec<(String, usize, u64)> {
    let db = sled::Config::new()
        .path(desk.layout().db_path())
        .open()
        .unwrap();
    let mut out: Vec<(String, usize, u64)> = db
        .tree_names()
        .into_iter()
        .map(|name| {
            let tree = db.open_tree(&name).unwrap();
            let (mut keys, mut bytes) = (0, 0u64);
            for (k, v) in tree.iter().flatten() {
                keys += 1;
                bytes += (k.len() + v.len()) as u64;
            }
            (String::from_utf8_lossy(&name).into_owned(), keys, bytes)
        })
        .filter(|(_, keys, _)| *keys > 0)
        .collect();
    out.sort_by_key(|t| std::cmp::Reverse(t.2));
    out
}

/// The first start on `count` ticket files (to the first answered `ticket
/// list`), the store it leaves (on disk, and per tree), then a restart:
/// to the first answer, and the daemon's RSS then. Issue 32's targets are
/// for 50,000 files.
fn import(count: usize, targets: &mut Targets) {
    let desk = Desk::new();
    write_tickets(&desk, count);
    settle_disk();
    let start = Instant::now();
    let mut first = daemon(&desk);
    let served = until_served(&desk, start);
    let (_, peak) = rss_kib(first.id());
    let status = desk.json(&["daemon", "status"]);
    let store = status["storeBytes"].as_u64().unwrap() as f64 / 1_048_576.0;
    println!(
        "first start on {count} ticket files: {served:.2?} to the first answer \
         ({:.0} files/s), peak RSS {:.1} MiB, store {store:.1} MiB ({:.0} bytes per ticket)",
        count as f64 / served.as_secs_f64(),
        peak as f64 / 1024.0,
        store * 1_048_576.0 / count as f64,
    );
    stages(&desk);
    desk.stop();
    let _ = first.wait();
    for (name, keys, bytes) in trees(&desk) {
        println!(
            "  tree {name}: {keys} keys, {:.1} MiB of keys and values ({:.0} bytes per ticket)",
            bytes as f64 / 1_048_576.0,
            bytes as f64 / count as f64
        );
    }
    settle_disk();
    let start = Instant::now();
    let mut again = daemon(&desk);
    let restart = until_served(&desk, start);
    let (rss, _) = rss_kib(again.id());
    println!(
        "restart: {restart:.2?} to the first answer, RSS {:.1} MiB",
        rss as f64 / 1024.0
    );
    if count == 50_000 {
        targets.at_most("first start, 50,000 files", served.as_secs_f64(), 4.0, "s");
        targets.at_most("store, 50,000 tickets", store, 60.0, "MiB");
        targets.at_most("restart, 50,000 tickets", restart.as_secs_f64(), 0.3, "s");
        targets.at_most("RSS after the restart", rss as f64 / 1024.0, 64.0, "MiB");
    }
    desk.stop();
    let _ = again.wait();
}

/// The `p` quantile of sorted durations, in milliseconds.
fn percentile_ms(sorted: &[Duration], p: f64) -> f64 {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize].as_secs_f64() * 1e3
}

fn search(count: usize, targets: &mut Targets) {
    let topics = [
        (
            "退款政策",
            "退款 售后 时效",
            "订单已支付但未发货可全额退款，款项在 7 个工作日内退回原支付渠道。",
        ),
        (
            "物流异常处理",
            "物流 SLA 补发",
            "包裹轨迹停滞超过 48 小时创建物流追踪任务，停滞 5 天可判定异常件。",
        ),
        (
            "Password reset",
            "account password login",
            "Customers reset their password from the sign-in page; links expire after 30 minutes.",
        ),
        (
            "App crashes",
            "technical app crash",
            "Ask for the app version, phone model and OS version; error E-1001 is a network timeout.",
        ),
        (
            "发票开具",
            "发票 企业 售后",
            "订单完成后 90 天内可申请电子发票，抬头错误可作废重开。",
        ),
    ];
    let mut index = SearchIndex::default();
    let start = Instant::now();
    for n in 0..count {
        let (title, tags, body) = topics[n % topics.len()];
        let tags: Vec<String> = tags.split(' ').map(String::from).collect();
        let body = format!(
            "{body} 文章编号 {n}. Article number {n} covers case {}.",
            n * 7 % 1000
        );
        index.upsert(Document {
            kind: Kind::Article,
            id: &format!("kb-{n}"),
            title: &format!("{title} {n}"),
            keywords: &tags,
            body: &body,
        });
    }
    let build = start.elapsed();
    let queries = [
        "退款 时效",
        "物流 停滞",
        "password reset link",
        "app crash E-1001",
        "发票 抬头",
        "phone model",
        "异常件 补发",
        "case 500",
    ];
    let mut times = Vec::new();
    for round in 0..50 {
        for q in queries {
            let t = Instant::now();
            let hits = index.search(q, 10, None);
            times.push(t.elapsed());
            if round == 0 {
                assert!(!hits.is_empty(), "{q}");
            }
        }
    }
    times.sort();
    let p50 = percentile_ms(&times, 0.5);
    println!(
        "search over {count} articles: index built in {build:.2?}; {} queries p50 {p50:.3} ms, p99 {:.3} ms",
        times.len(),
        percentile_ms(&times, 0.99)
    );
    targets.at_most("search p50", p50, 2.0, "ms");
}

fn list_round_trip(count: usize, targets: &mut Targets) {
    let desk = Desk::new();
    write_tickets(&desk, count);
    desk.ok(&["daemon", "start"]);
    // The target is for the default listing (the first 100 rows).
    for (args, target_ms) in [
        (&["ticket", "list"][..], Some(10.0)),
        (&["ticket", "list", "--limit", "1000"][..], None),
    ] {
        let run = || {
            let t = Instant::now();
            let out = Command::new(bin("tinycode"))
                .args(args)
                .current_dir(desk.workspace())
                .env("XDG_RUNTIME_DIR", &desk.runtime)
                .stdout(Stdio::null())
                .status()
                .unwrap();
            assert!(out.success());
            t.elapsed()
        };
        for _ in 0..3 {
            run();
        }
        let mut times: Vec<Duration> = (0..30).map(|_| run()).collect();
        times.sort();
        let median = percentile_ms(&times, 0.5);
        let command = format!("`tinycode {}`", args.join(" "));
        println!(
            "{command} with {count} tickets: median {median:.2} ms, p90 {:.2} ms (whole process)",
            percentile_ms(&times, 0.9)
        );
        if let Some(limit) = target_ms {
            targets.at_most(&format!("{command} median"), median, limit, "ms");
        }
    }
    desk.stop();
}

fn main() {
    // Build the release binaries before anything is timed.
    tinycode_tests::bin_dir();
    settle_disk();
    let mut targets = Targets::new();
    let tickets = std::env::var("TINYCODE_BENCH_TICKETS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(50_000);
    import(tickets, &mut targets);
    search(10_000, &mut targets);
    list_round_trip(1_000, &mut targets);
    targets.finish();
}
