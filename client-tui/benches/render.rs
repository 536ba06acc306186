//! Redraw cost and input-to-screen latency on a long transcript.
//!
//! `cargo bench -p tinycode-tui --bench render` (env BENCH_LINES, default
//! 10000): builds a transcript of that many lines from session events
//! (user messages, tool lines with Chinese, assistant text, outcomes), then
//! times on ratatui's `TestBackend` at 120×40:
//! - a key typed into the editor until its frame is drawn,
//! - a streamed delta until its frame is drawn,
//! - a frame with nothing new, scrolled to the end and to the middle,
//! - the first frame after a resize (every line wrapped again).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use ratatui::Terminal;
use ratatui::backend::TestBackend;
use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use tinycode_shared::proto::TurnOutcome;
use tinycode_tui::app::App;
use tinycode_tui::fixtures::*;
use tinycode_tui::ui;

fn long_app(lines: usize) -> App {
    let mut app = attached_app();
    let mut seq = 10;
    let mut turn = 1;
    while app.transcript.entries().len() < lines {
        let ticket = serde_json::json!({"ticket": {"category": "退款", "priority": "P1", "status": "triaged"}});
        for payload in [
            user(&format!("triage T-{}", 1000 + turn), turn),
            started(turn),
            tool(
                "classify_ticket",
                serde_json::json!({"ticket_id": format!("T-{}", 1000 + turn)}),
                ticket,
            ),
            said(
                "您好！您的订单已确认未发货，退款将在 1 个工作日内原路退回到您的支付账户，请留意银行通知。 The refund goes back to the original payment method.",
                turn,
            ),
            completed(turn, TurnOutcome::Completed),
        ] {
            app.on_net(session_event(seq, payload));
            seq += 1;
        }
        turn += 1;
    }
    app.take_rpcs();
    app
}

fn stats(name: &str, mut samples: Vec<Duration>) {
    samples.sort();
    let at = |q: f64| samples[((samples.len() - 1) as f64 * q) as usize];
    println!(
        "{name:<44} median {:>8.1} µs   p99 {:>8.1} µs   ({} runs)",
        at(0.5).as_secs_f64() * 1e6,
        at(0.99).as_secs_f64() * 1e6,
        samples.len()
    );
}

fn main() {
    let lines: usize = std::env::var("BENCH_LINES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000);
    let runs = 300;
    let mut app = long_app(lines);
    let mut terminal = Terminal::new(TestBackend::new(120, 40)).unwrap();
    let build = Instant::now();
    terminal.draw(|f| ui::draw(f, &mut app)).unwrap();
    println!(
        "transcript: {} entries ({} rows at 120 columns); first frame (wraps all) {:.2} ms",
        app.transcript.entries().len(),
        app.transcript.height(120),
        build.elapsed().as_secs_f64() * 1e3
    );

    let mut key = Vec::new();
    for i in 0..runs {
        let c = char::from(b'a' + (i % 26) as u8);
        let t = Instant::now();
        app.on_key(KeyEvent::new(KeyCode::Char(c), KeyModifiers::NONE));
        terminal.draw(|f| ui::draw(f, &mut app)).unwrap();
        key.push(t.elapsed());
    }
    stats("key → frame (editor)", key);

    let mut delta_samples = Vec::new();
    for _ in 0..runs {
        let t = Instant::now();
        app.on_net(delta(9_999, "退款将在 1 个工作日内原路退回。"));
        terminal.draw(|f| ui::draw(f, &mut app)).unwrap();
        delta_samples.push(t.elapsed());
    }
    stats("streamed delta → frame", delta_samples);

    let mut idle = Vec::new();
    for _ in 0..runs {
        let t = Instant::now();
        terminal.draw(|f| ui::draw(f, &mut app)).unwrap();
        idle.push(t.elapsed());
    }
    stats("redraw, nothing new (at the end)", idle);

    app.transcript.scroll = app.transcript.height(120) / 2;
    let mut middle = Vec::new();
    for _ in 0..runs {
        let t = Instant::now();
        terminal.draw(|f| ui::draw(f, &mut app)).unwrap();
        middle.push(t.elapsed());
    }
    stats("redraw, scrolled to the middle", middle);

    let mut resize = Vec::new();
    for i in 0..20u16 {
        let width = 100 + i % 2 * 20;
        terminal.backend_mut().resize(width, 40);
        terminal
            .resize(ratatui::layout::Rect::new(0, 0, width, 40))
            .unwrap();
        let t = Instant::now();
        terminal.draw(|f| ui::draw(f, &mut app)).unwrap();
        resize.push(t.elapsed());
    }
    stats("first frame after a resize (rewrap all)", resize);
}
