//! The daily report (issue 34) through the real binaries: `tinycode
//! report` makes one from the read models and stores it under the state
//! directory (announced by `ReportGenerated` with relative paths only);
//! `report list|show` serve it; a bad day is refused naming the flag; with
//! `reports.daily` the daemon makes the previous day's report once, also
//! across restarts around its time.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use tinycode_tests::{Desk, wait_until};

/// The fixture desk on the morning after its three tickets came in
/// (2026-09-18, all open, every first response breached that day).
fn morning_after() -> Desk {
    Desk::fixture().with_env("TINYCODE_NOW", "2026-09-19T09:00:00Z")
}

#[test]
fn a_report_is_made_stored_listed_and_shown() {
    let desk = morning_after();
    let out = desk.state_dir().parent().unwrap().join("copied");
    let made = desk.json(&[
        "report",
        "--day",
        "2026-09-18",
        "--out",
        out.to_str().unwrap(),
    ]);
    let info = &made["report"];
    let figures = &made["figures"];
    let id = info["reportId"].as_str().unwrap();
    assert_eq!(info["day"], "2026-09-18");
    assert_eq!(figures["volume"]["new"], 3, "{figures}");
    let channels: Vec<&str> = figures["volume"]["byChannel"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert_eq!(channels, ["chat", "email", "phone"]);
    assert_eq!(figures["backlog"]["open"], 3);
    assert_eq!(figures["backlog"]["under24h"], 3, "{figures}");
    let breached = figures["sla"]["breached"].as_array().unwrap();
    assert_eq!(breached.len(), 3, "{figures}");

    // Stored under the state directory, copied where asked.
    let files: Vec<&str> = info["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f.as_str().unwrap())
        .collect();
    assert_eq!(files.len(), 6, "{info}");
    for f in &files {
        assert!(f.starts_with(&format!("reports/{id}/")), "{f}");
        let stored = desk.state_dir().join(f);
        assert!(stored.is_file(), "{}", stored.display());
        let name = stored.file_name().unwrap();
        assert_eq!(
            std::fs::read(&stored).unwrap(),
            std::fs::read(out.join(name)).unwrap()
        );
    }
    let svg =
        std::fs::read_to_string(desk.state_dir().join(format!("reports/{id}/volume.svg"))).unwrap();
    // The PNG copy: a PNG twice the SVG's size (its header says).
    let png = std::fs::read(desk.state_dir().join(format!("reports/{id}/volume.png"))).unwrap();
    assert_eq!(&png[1..4], b"PNG");
    let width = u32::from_be_bytes(png[16..20].try_into().unwrap());
    assert_eq!(width, 2 * 640);
    // Not triaged yet: one bar for tickets without a category.
    assert!(
        svg.contains(">Volume by category<") && svg.contains(">(none)<"),
        "{svg}"
    );
    assert!(
        !desk
            .state_dir()
            .join("reports")
            .read_dir()
            .unwrap()
            .any(|e| e.unwrap().file_name().to_string_lossy().starts_with(".tmp")),
        "no temp folder is left"
    );

    // Announced once, with relative paths and no file body.
    let events = desk.events(&["--stream", "reports"]);
    assert_eq!(events.len(), 1);
    let announced = &events[0]["reportGenerated"]["report"];
    assert_eq!(announced["reportId"], id);
    assert_eq!(announced["directory"], format!("reports/{id}"));
    let text = events[0].to_string();
    assert!(!text.contains(desk.state_dir().to_str().unwrap()), "{text}");
    assert!(!text.contains("# Daily triage report"), "{text}");

    // Listed and shown.
    let list = desk.json(&["report", "list"]);
    assert_eq!(list[0]["reportId"], id);
    let shown = desk.ok(&["report", "show", id]);
    assert!(
        shown.starts_with("# Daily triage report — 2026-09-18"),
        "{shown}"
    );
    assert!(shown.contains("| chat |"), "{shown}");
    let shown_json = desk.json(&["report", "show", id]);
    assert_eq!(&shown_json, figures);

    // A second report of the same day is another artifact, not a change.
    let again = desk.json(&["report", "--day", "2026-09-18"]);
    let second = again["report"]["reportId"].as_str().unwrap();
    assert_ne!(second, id);
    assert_eq!(desk.json(&["report", "list"]).as_array().unwrap().len(), 2);
    // Its folder gone (or made by another daemon on the log): said so.
    std::fs::remove_dir_all(desk.state_dir().join(format!("reports/{second}"))).unwrap();
    let gone = desk.run(&["report", "show", second]);
    assert_ne!(gone.code, 0);
    assert!(
        gone.stderr
            .contains("is on the log but its files are not in this daemon's state directory"),
        "{}",
        gone.stderr
    );
}

#[test]
fn bad_days_and_unknown_reports_are_refused_with_what_to_do() {
    let desk = morning_after();
    let bad = desk.run(&["report", "--day", "2026-13-01"]);
    assert_ne!(bad.code, 0);
    assert!(
        bad.stderr
            .contains("`day` must be a day such as 2026-12-03, got \"2026-13-01\""),
        "{}",
        bad.stderr
    );
    let backwards = desk.run(&["report", "--from", "2026-09-18", "--to", "2026-09-10"]);
    assert!(
        backwards.stderr.contains("`to` must not be before `from`"),
        "{}",
        backwards.stderr
    );
    let missing = desk.run(&["report", "show", "R-nothing"]);
    assert!(
        missing.stderr.contains("report R-nothing does not exist"),
        "{}",
        missing.stderr
    );
    assert!(desk.events(&["--stream", "reports"]).is_empty());
}

#[test]
fn the_scheduled_report_is_made_once_across_restarts() {
    let desk = morning_after();
    desk.edit_config(|c| c["reports"] = serde_json::json!({"daily": "08:00"}));
    // 09:00 is past 08:00: the daemon makes yesterday's report as it
    // starts, once, however often it restarts.
    let scheduled = |desk: &Desk| {
        desk.json(&["report", "list"])
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["scheduled"] == true)
            .map(|r| r["day"].as_str().unwrap().to_string())
            .collect::<Vec<_>>()
    };
    desk.ok(&["daemon", "start"]);
    assert!(
        wait_until(Duration::from_secs(30), || !scheduled(&desk).is_empty()),
        "{}",
        desk.log()
    );
    for _ in 0..2 {
        desk.stop();
        desk.ok(&["daemon", "start"]);
        desk.ok(&["ticket", "list"]);
        std::thread::sleep(Duration::from_millis(500));
    }
    assert_eq!(scheduled(&desk), ["2026-09-18"]);
    assert_eq!(desk.events(&["--stream", "reports"]).len(), 1);
}

#[test]
fn two_daemons_on_one_postgres_log_make_the_scheduled_report_once() {
    let schema = tinycode_tests::pg::Schema::new("daily");
    let desks: Vec<Desk> = (0..2)
        .map(|_| {
            let desk = morning_after().with_env("TINYCODE_STORE_URL", &schema.url());
            desk.edit_config(|c| c["reports"] = serde_json::json!({"daily": "08:00"}));
            desk
        })
        .collect();
    // Both start at once, both past 08:00: each checks for yesterday's
    // report and tries to make it; the append at the stream's version
    // lets one through.
    std::thread::scope(|s| {
        for d in &desks {
            s.spawn(|| d.ok(&["daemon", "start"]));
        }
    });
    let reports = |d: &Desk| d.events(&["--stream", "reports"]).len();
    for d in &desks {
        assert!(
            wait_until(Duration::from_secs(30), || reports(d) >= 1),
            "{}",
            d.log()
        );
    }
    // A restart of each, one after the other, makes none either.
    for d in &desks {
        d.stop();
        d.ok(&["daemon", "start"]);
        d.ok(&["ticket", "list"]);
    }
    std::thread::sleep(Duration::from_secs(2));
    for d in &desks {
        assert_eq!(reports(d), 1, "{}", d.log());
        let listed = d.json(&["report", "list"]);
        let days: Vec<&str> = listed
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["day"].as_str().unwrap())
            .collect();
        assert_eq!(days, ["2026-09-18"], "{listed}");
    }
}

#[test]
fn a_scheduled_time_still_ahead_makes_nothing_yet() {
    let desk = morning_after();
    desk.edit_config(|c| c["reports"] = serde_json::json!({"daily": "23:30"}));
    desk.ok(&["daemon", "start"]);
    desk.ok(&["ticket", "list"]);
    std::thread::sleep(Duration::from_secs(1));
    assert!(desk.events(&["--stream", "reports"]).is_empty());
    let bad = morning_after();
    bad.edit_config(|c| c["reports"] = serde_json::json!({"daily": "25:00"}));
    let refused = bad.run(&["daemon", "start"]);
    assert_ne!(refused.code, 0);
    assert!(
        refused.stderr.contains("reports.daily"),
        "{}",
        refused.stderr
    );
}

/// The demo desk's `/daily-report` skill, copied into the fixture desk.
fn with_report_skill(desk: &Desk) {
    let skill = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../client-cli/demo/.tinycode/skills/daily-report/SKILL.md");
    desk.write(
        ".tinycode/skills/daily-report/SKILL.md",
        &std::fs::read_to_string(skill).unwrap(),
    );
}

#[test]
fn the_daily_report_skill_renders_through_the_read_only_tool_and_stores_nothing() {
    let desk = morning_after();
    with_report_skill(&desk);
    // Deny: a read-only tool never asks, so nothing waits on a person.
    let out = desk.run(&["run", "--approve", "deny", "/daily-report 2026-09-18"]);
    assert_eq!(out.code, 0, "{out:?}");
    assert!(
        out.stdout.contains("# Daily triage report — 2026-09-18"),
        "{}",
        out.stdout
    );
    assert!(out.stdout.contains("3 new"), "{}", out.stdout);
    let calls: Vec<_> = desk
        .events(&["--stream", "session-"])
        .into_iter()
        .filter_map(|e| e.get("toolCallFinished").cloned())
        .collect();
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert_eq!(calls[0]["call"]["name"], "render_report");
    assert!(
        calls[0]["call"]["argumentsJson"]
            .as_str()
            .unwrap()
            .contains("2026-09-18")
    );
    // Read-only: no report stored, no approval asked.
    assert!(desk.events(&["--stream", "reports"]).is_empty());
    assert!(desk.events(&["--stream", "approval-"]).is_empty());

    // A figure that cannot be read: no report, and no made-up figures.
    let refused = desk.run(&["run", "--approve", "deny", "/daily-report 2026-02-30"]);
    assert_eq!(refused.code, 0, "{refused:?}");
    assert!(
        refused.stdout.contains("no report was made")
            && refused.stdout.contains("`day` must be a day"),
        "{}",
        refused.stdout
    );
    assert!(!refused.stdout.contains("new,"), "{}", refused.stdout);
}

/// A day `days` from today (UTC), `YYYY-MM-DD`.
fn day_from_today(days: i64) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let out = std::process::Command::new("date")
        .args(["-u", "-d", &format!("@{}", now + days * 86_400), "+%F"])
        .output()
        .unwrap();
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

#[test]
fn the_report_counts_the_triage_models_tokens_and_cost_per_ticket() {
    use tinycode_tests::mock_llm::MockLlm;
    // Each request: route the ticket, then a final text; the mock reports
    // 100 input and 10 output tokens per request.
    let mock = MockLlm::respond(tinycode_tests::shared_desk::route_reply);
    let desk = Desk::fixture()
        .with_env("OPENAI_BASE_URL", &mock.base_url)
        .with_env("OPENAI_API_KEY", "sk-test")
        .with_env("TINYCODE_MODEL", "openai/gpt-test");
    desk.edit_config(|c| {
        c["reports"] =
            serde_json::json!({"prices": {"openai/gpt-test": {"input": 2.0, "output": 8.0}}});
    });
    desk.ok(&["triage", "T-1001", "T-1002", "--approve", "auto"]);
    let requests = mock.requests().len() as u64;
    assert!(
        requests >= 4,
        "two requests per ticket at least: {requests}"
    );
    let made = desk.json(&[
        "report",
        "--from",
        &day_from_today(-1),
        "--to",
        &day_from_today(1),
    ]);
    let model = &made["figures"]["model"];
    assert_eq!(model["tickets"], 2, "{model}");
    assert_eq!(model["inputTokens"], 100 * requests, "{model}");
    assert_eq!(model["outputTokens"], 10 * requests, "{model}");
    let rows = model["byModel"].as_array().unwrap();
    assert_eq!(rows.len(), 1, "{model}");
    assert_eq!(rows[0]["model"], "openai/gpt-test");
    // (100 × 2 + 10 × 8) per request, per million tokens, per ticket.
    let expected = (requests * 280) as f64 / 1e6 / 2.0;
    let per_ticket = model["costPerTicket"].as_f64().unwrap();
    assert!((per_ticket - expected).abs() < 1e-12, "{model}");
    let md = desk.ok(&[
        "report",
        "show",
        made["report"]["reportId"].as_str().unwrap(),
    ]);
    assert!(md.contains("## Model use"), "{md}");
    assert!(md.contains("| openai/gpt-test | 2 |"), "{md}");
    // An unknown model in the prices is fine; a bad price names its key.
    let bad = Desk::fixture();
    bad.edit_config(|c| {
        c["reports"] =
            serde_json::json!({"prices": {"openai/gpt-test": {"input": -1, "output": 8}}});
    });
    let refused = bad.run(&["daemon", "start"]);
    assert_ne!(refused.code, 0);
    assert!(
        refused
            .stderr
            .contains("reports.prices.openai/gpt-test.input"),
        "{}",
        refused.stderr
    );
}
