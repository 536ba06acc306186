//! Background triage benchmark (not a test): `cargo bench -p tinycode-tests --bench triage`.
//!
//! 1,000 generated tickets (`BENCH_TICKETS=n`) are dropped into a fresh
//! desk's `tickets/`; the daemon starts with auto-triage on
//! (`BENCH_CONCURRENCY` slots, else the desk's default) and the offline model, imports them and
//! triages each in its own session. Reports tickets per second (first
//! `TriageQueued` to last `TriageFinished`, from the log's timestamps), the
//! daemon's CPU a ticket while it triages (from its start being answered
//! to the last ticket finished, the bench's status polls included) and
//! its peak RSS. Release binaries; figures go to docs/BENCHMARKS.md.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use serde_json::json;
use tinycode_shared::client::{ClientName, connect};
use tinycode_shared::proto::event::Payload;
use tinycode_shared::proto::events_client::EventsClient;
use tinycode_shared::proto::triage_client::TriageClient;
use tinycode_shared::proto::{SubscribeRequest, TriageStatusRequest};
use tinycode_tests::{Desk, proc_cpu_seconds, proc_status_kib as kib};

fn env_or(key: &str, default: usize) -> usize {
    std::env::var(key)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The n-th generated ticket: refunds, parcels, frozen accounts (L2
/// escalations), app errors, in Chinese and English.
fn ticket(n: usize) -> String {
    let (subject, body) = match n % 5 {
        0 => (
            "申请退款",
            format!("订单 {n} 未收到货，申请退款，已经等了 7 天。"),
        ),
        1 => (
            "物流没有更新",
            format!("快递 {n} 的物流信息三天没有更新，包裹到哪了？"),
        ),
        2 => (
            "投诉：企业账户被风控冻结",
            format!("企业账户 {n} 被风控冻结，影响结算，请立刻处理。"),
        ),
        3 => (
            "App 登录报错",
            format!("App 登录时报错 500，无法打开订单 {n}。"),
        ),
        _ => (
            "Refund not received",
            format!("My refund for order {n} has not arrived after two weeks."),
        ),
    };
    json!({
        "id": format!("T-{}", 5000 + n), "subject": subject, "customer": format!("Customer {n}"),
        "channel": "email", "createdAt": "2026-11-30T08:00:00Z", "slaMinutes": 480, "status": "open",
        "messages": [{"from": "customer", "text": body, "at": "2026-11-30T08:00:00Z"}]
    })
    .to_string()
}

fn micros(e: &tinycode_shared::proto::Event) -> i64 {
    e.recorded_at
        .as_ref()
        .map(|t| t.seconds * 1_000_000 + i64::from(t.nanos) / 1000)
        .unwrap_or(0)
}

fn main() {
    tinycode_tests::bin_dir();
    let tickets = env_or("BENCH_TICKETS", 1000);
    // Unset: the desk's default (`autoTriage.concurrency` unset: 16 with
    // the offline model), read back from the status below.
    let concurrency = std::env::var("BENCH_CONCURRENCY")
        .ok()
        .and_then(|v| v.parse::<usize>().ok());
    let desk = Desk::new();
    desk.ok(&["init", "--demo", desk.workspace().to_str().unwrap()]);
    desk.edit_config(|config| {
        // Escalations run without a human here: the bench measures the worker.
        config["permissionMode"] = json!("auto");
        config["autoTriage"] = json!({"enabled": true});
        if let Some(n) = concurrency {
            config["autoTriage"]["concurrency"] = json!(n);
        }
    });
    for f in std::fs::read_dir(desk.workspace().join("tickets")).unwrap() {
        std::fs::remove_file(f.unwrap().path()).unwrap();
    }
    for n in 0..tickets {
        desk.write(&format!("tickets/T-{}.json", 5000 + n), &ticket(n));
    }
    let started = Instant::now();
    desk.ok(&["daemon", "start"]);
    let pid = desk.daemon_pid().unwrap();
    let cpu_before = proc_cpu_seconds(pid);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let channel = connect(&desk.socket(), &ClientName::new("bench").unwrap())
            .await
            .unwrap();
        let mut triage = TriageClient::new(channel.clone());
        let slots = loop {
            let s = triage
                .get_status(TriageStatusRequest {
                    ticket_ids: vec![],
                    counts_only: true,
                    ..Default::default()
                })
                .await
                .unwrap()
                .into_inner();
            if (s.done + s.failed + s.skipped + s.waiting_for_approval) as usize >= tickets {
                assert_eq!(s.done as usize, tickets, "{s:?}");
                break s.concurrency;
            }
            // As often as `tinycode triage`'s watch gets a status (200 ms):
            // the rate is read from the events' times, and each status
            // reads the whole board (at 50 ms, 9-14 % of the daemon's CPU).
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        let wall = started.elapsed();
        let cpu = proc_cpu_seconds(pid) - cpu_before;
        let mut events = EventsClient::new(channel)
            .subscribe(SubscribeRequest {
                from_sequence: 1,
                stream_prefix: "triage-".into(),
                follow: false,
            })
            .await
            .unwrap()
            .into_inner();
        let (mut first, mut last, mut count) = (i64::MAX, 0i64, 0usize);
        while let Some(e) = events.message().await.unwrap() {
            match &e.payload {
                Some(Payload::TriageQueued(_)) => first = first.min(micros(&e)),
                Some(Payload::TriageFinished(_)) => {
                    last = last.max(micros(&e));
                    count += 1;
                }
                _ => {}
            }
        }
        assert_eq!(count, tickets);
        let secs = (last - first) as f64 / 1e6;
        println!(
            "background triage: {tickets} tickets, concurrency {slots}, offline model: \
             {:.1} s from the first queued to the last finished = {:.0} tickets/s \
             (wall {:.1} s including daemon start and import)",
            secs,
            tickets as f64 / secs,
            wall.as_secs_f64()
        );
        println!(
            "daemon CPU while it triaged: {cpu:.1} s = {:.2} ms a ticket (target <= 4 ms)",
            cpu * 1000.0 / tickets as f64
        );
    });
    println!(
        "daemon RSS: {:.1} MiB after, peak {:.1} MiB",
        kib(pid, "VmRSS:") as f64 / 1024.0,
        kib(pid, "VmHWM:") as f64 / 1024.0
    );
    desk.stop();
}
