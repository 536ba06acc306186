//! The desk in a browser, measured (not a test): `cargo bench -p
//! tinycode-tests --bench web`.
//!
//! 1. `/` on a desk of 10,000 tickets: time to the first byte and to the
//!    whole page, over HTTP/1.1 on loopback with a session cookie,
//!    200 loads (the page's script and style are two more small requests, 304
//!    never: they are embedded and measured too).
//! 2. 50 concurrent server-sent-event clients on `/live`: from the start
//!    of each append (a note added over gRPC) to its delivery in every
//!    client, p50/p99/max over 200 appends × 50 clients.
//! 3. The bridge's RSS idle (after the page loads) and with 50 clients.
//!
//! Release binaries, real processes, a temp workspace. Exits 1 when a
//! target is missed. Figures go to docs/BENCHMARKS.md.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::sync::{Arc, Barrier, Mutex};
use std::time::{Duration, Instant};

use tinycode_shared::client::{self, ClientName};
use tinycode_shared::proto::TicketTextRequest;
use tinycode_shared::proto::tickets_client::TicketsClient;
use tinycode_tests::targets::Targets;
use tinycode_tests::{Desk, LineReader, proc_status_kib, wait_until};

const TICKETS: usize = 10_000;
const LOADS: usize = 200;
const CLIENTS: usize = 50;
const APPENDS: usize = 200;

fn write_tickets(desk: &Desk) {
    for n in 0..TICKETS {
        let status = ["open", "triaged", "routed", "escalated", "resolved"][n % 5];
        let ticket = serde_json::json!({
            "id": format!("T-{}", 10_000 + n),
            "subject": format!("Order {n}: parcel stuck in transit / 订单 {n} 物流停滞"),
            "customer": format!("Customer {n}"),
            "channel": (["email", "chat", "phone", "web"][n % 4]),
            "createdAt": format!("2026-09-{:02}T09:{:02}:00+08:00", 1 + n % 28, n % 60),
            "slaMinutes": 240,
            "status": status,
            "priority": (["P0", "P1", "P2", "P3"][n % 4]),
            "messages": [{ "from": "customer", "text": format!("My parcel {n} has not moved for three days. 包裹三天没有更新。{}", "Please help. ".repeat(20)), "at": "2026-09-18T09:12:00+08:00" }],
        });
        desk.write(
            &format!("tickets/T-{}.json", 10_000 + n),
            &ticket.to_string(),
        );
    }
}

/// One HTTP/1.1 exchange: (status, time to first byte, time to the end,
/// headers, body).
fn get(addr: &str, path: &str, cookie: &str) -> (u16, Duration, Duration, String, String) {
    let start = Instant::now();
    let mut stream = TcpStream::connect(addr).unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nCookie: {cookie}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut first = [0u8; 1];
    stream.read_exact(&mut first).unwrap();
    let first_byte = start.elapsed();
    let mut rest = Vec::new();
    stream.read_to_end(&mut rest).unwrap();
    let all = start.elapsed();
    let text = String::from_utf8_lossy(&[&first[..], &rest].concat()).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .unwrap_or("0")
        .parse()
        .unwrap_or(0);
    (status, first_byte, all, head.to_string(), body.to_string())
}

fn post(addr: &str, path: &str, cookie: &str, body: &str) -> String {
    let mut stream = TcpStream::connect(addr).unwrap();
    write!(
        stream,
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nCookie: {cookie}\r\nOrigin: http://{addr}\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut out = String::new();
    stream.read_to_string(&mut out).unwrap();
    out
}

/// A named session's cookie from a one-time link.
fn sign_in(link: &str) -> (String, String) {
    let rest = link.strip_prefix("http://").unwrap();
    let (addr, path) = rest.split_once('/').unwrap();
    let (_, _, _, head, _) = get(addr, &format!("/{path}"), "");
    let cookie = head
        .lines()
        .find_map(|l| l.strip_prefix("set-cookie: "))
        .and_then(|c| c.split(';').next())
        .unwrap()
        .to_string();
    let (_, _, _, _, page) = get(addr, "/whoami", &cookie);
    let csrf = page
        .split("name=\"csrf\" value=\"")
        .nth(1)
        .and_then(|s| s.split('"').next())
        .unwrap()
        .to_string();
    post(
        addr,
        "/whoami",
        &cookie,
        &format!("csrf={csrf}&name=Bench&next=/"),
    );
    (addr.to_string(), cookie)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

/// Median milliseconds to the end of `path`, over 20 requests.
fn median_ms(addr: &str, path: &str, cookie: &str) -> f64 {
    let mut all: Vec<f64> = (0..20)
        .map(|_| {
            let (status, _, all, _, _) = get(addr, path, cookie);
            assert_eq!(status, 200, "{path}");
            std::thread::sleep(Duration::from_millis(35));
            ms(all)
        })
        .collect();
    all.sort_by(f64::total_cmp);
    percentile(&all, 0.5)
}

fn page_loads(addr: &str, cookie: &str, targets: &mut Targets) -> u64 {
    // Where a page's time goes: the HTTP round trip alone (a static
    // asset), one daemon call (`/settings`: GetStatus), the board's rows.
    println!(
        "medians: /assets/app.css {:.1} ms, /settings {:.1} ms, /?part=live {:.1} ms",
        median_ms(addr, "/assets/app.css", cookie),
        median_ms(addr, "/settings", cookie),
        median_ms(addr, "/?part=live", cookie)
    );
    let mut first = Vec::new();
    let mut whole = Vec::new();
    let mut after = 0;
    for _ in 0..LOADS {
        let (status, fb, all, _, body) = get(addr, "/", cookie);
        assert_eq!(status, 200, "{body}");
        assert!(
            body.contains("10000 tickets"),
            "the board counts every ticket"
        );
        let assets = Instant::now();
        for asset in ["/assets/app.css", "/assets/app.js"] {
            assert_eq!(get(addr, asset, cookie).0, 200);
        }
        first.push(ms(fb));
        whole.push(ms(all) + ms(assets.elapsed()));
        after = body
            .split("data-after=\"")
            .nth(1)
            .and_then(|s| s.split('"').next())
            .and_then(|s| s.parse().ok())
            .unwrap();
        // Within the page's rate limit (a burst of 120, then 30 a second:
        // three requests a load).
        std::thread::sleep(Duration::from_millis(110));
    }
    first.sort_by(f64::total_cmp);
    whole.sort_by(f64::total_cmp);
    println!(
        "/ on {TICKETS} tickets, {LOADS} loads: first byte p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms; loaded (page + script + style) p50 {:.1} ms, p99 {:.1} ms",
        percentile(&first, 0.5),
        percentile(&first, 0.99),
        first[first.len() - 1],
        percentile(&whole, 0.5),
        percentile(&whole, 0.99)
    );
    targets.at_most("/ first byte p99", percentile(&first, 0.99), 50.0, "ms");
    targets.at_most("/ loaded p99", percentile(&whole, 0.99), 300.0, "ms");
    after
}

type Seen = Arc<Mutex<HashMap<u64, Vec<Instant>>>>;

/// A browser's `/live` connection that notes when each event id arrives.
fn sse_client(addr: String, cookie: String, after: u64, seen: Seen, ready: Arc<Barrier>) {
    let mut stream = TcpStream::connect(&addr).unwrap();
    write!(
        stream,
        "GET /live?p=ticket-&after={after} HTTP/1.1\r\nHost: {addr}\r\nCookie: {cookie}\r\nAccept: text/event-stream\r\n\r\n"
    )
    .unwrap();
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    // The response head.
    loop {
        line.clear();
        reader.read_line(&mut line).unwrap();
        if line == "\r\n" {
            break;
        }
    }
    ready.wait();
    loop {
        line.clear();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        if let Some(id) = line.trim().strip_prefix("id:") {
            let id: u64 = id.trim().parse().unwrap();
            seen.lock()
                .unwrap()
                .entry(id)
                .or_default()
                .push(Instant::now());
        }
    }
}

fn main() {
    let mut targets = Targets::new();
    let desk = Desk::new();
    write_tickets(&desk);
    desk.ok(&["daemon", "start"]);
    let mut web = LineReader::spawn({
        let mut cmd = desk.cli();
        cmd.args(["web", "--no-open"]);
        cmd
    });
    let link = web.until(Duration::from_secs(60), |l| !l.is_empty())[0].clone();
    let web_pid = web.child.id();
    let (addr, cookie) = sign_in(&link);
    // A desk at work, not one starting: the learner trains on the new
    // history in the background right after a start.
    std::thread::sleep(Duration::from_secs(10));
    let after = page_loads(&addr, &cookie, &mut targets);
    let idle = proc_status_kib(web_pid, "VmRSS:");

    // The live clients use a session of their own (the rate limit is per
    // session).
    let (_, cookie) = sign_in(desk.ok(&["web", "--url"]).trim());
    let seen: Seen = Arc::default();
    let ready = Arc::new(Barrier::new(CLIENTS + 1));
    for _ in 0..CLIENTS {
        let (addr, cookie, seen, ready) = (
            addr.clone(),
            cookie.clone(),
            Arc::clone(&seen),
            Arc::clone(&ready),
        );
        std::thread::spawn(move || sse_client(addr, cookie, after, seen, ready));
    }
    ready.wait();
    std::thread::sleep(Duration::from_millis(300));

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let name = ClientName::new("bench-web/0").unwrap();
    let channel = runtime
        .block_on(client::connect(&desk.socket(), &name))
        .unwrap();
    let mut tickets = TicketsClient::new(channel);
    let mut started = HashMap::new();
    for n in 0..APPENDS {
        let at = Instant::now();
        runtime
            .block_on(tickets.add_note(TicketTextRequest {
                ticket_id: format!("T-{}", 10_000 + n % 100),
                text: format!("note {n}"),
            }))
            .unwrap();
        // The note's sequence: the last one now (one writer).
        let sequence = after + 1 + n as u64;
        started.insert(sequence, at);
        std::thread::sleep(Duration::from_millis(5));
    }
    let last = desk.json(&["daemon", "status"])["lastSequence"]
        .as_u64()
        .unwrap();
    assert_eq!(
        last,
        after + APPENDS as u64,
        "one event per note, nothing else appended"
    );
    let complete = wait_until(Duration::from_secs(30), || {
        let seen = seen.lock().unwrap();
        started
            .keys()
            .all(|s| seen.get(s).is_some_and(|v| v.len() == CLIENTS))
    });
    assert!(complete, "not every client saw every event");
    let with_clients = proc_status_kib(web_pid, "VmRSS:");
    let mut latencies: Vec<f64> = {
        let seen = seen.lock().unwrap();
        started
            .iter()
            .flat_map(|(s, at)| seen[s].iter().map(move |t| ms(t.duration_since(*at))))
            .collect()
    };
    latencies.sort_by(f64::total_cmp);
    println!(
        "{CLIENTS} SSE clients × {APPENDS} appends: append → delivered p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        percentile(&latencies, 0.5),
        percentile(&latencies, 0.99),
        latencies[latencies.len() - 1]
    );
    println!(
        "tinycode-web RSS: idle {:.1} MiB, with {CLIENTS} live clients {:.1} MiB",
        idle as f64 / 1024.0,
        with_clients as f64 / 1024.0
    );
    targets.at_most(
        "append → delivered p99, 50 clients",
        percentile(&latencies, 0.99),
        50.0,
        "ms",
    );
    targets.at_most("bridge RSS idle", idle as f64 / 1024.0, 30.0, "MiB");
    targets.at_most(
        "bridge RSS with 50 clients",
        with_clients as f64 / 1024.0,
        60.0,
        "MiB",
    );
    drop(web);
    desk.stop();
    targets.finish();
}
