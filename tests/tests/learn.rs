//! The offline model learns from the desk's own history: routed tickets
//! teach it where tickets like them go, even against TINY.md's rules; with
//! no such history the rules decide. The classification note says which.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use tinycode_tests::{Desk, wait_until};

use tinycode_tests::decided_ticket as history;

/// Six refunds a person routed to 技术支持 (the rules would say 售后组),
/// and six parcels to 物流组.
fn refunds_to_tech_support(desk: &Desk) {
    for i in 0..6 {
        history(
            desk,
            &format!("H-{:03}", 10 + i),
            &format!("退款：订单 {} 申请退款", 5000 + i),
            "东西坏了，我要求退款，钱请退回原卡。",
            "退款",
            "技术支持",
        );
        history(
            desk,
            &format!("H-{:03}", 20 + i),
            &format!("物流：包裹 {} 停滞", 6000 + i),
            "快递好几天没有更新，包裹停在转运中心。",
            "物流",
            "物流组",
        );
    }
}

fn new_refund_ticket(desk: &Desk) -> String {
    let created = desk.json(&[
        "ticket",
        "create",
        "--subject",
        "退款：订单 7712 申请退款",
        "--customer",
        "李娜",
        "--channel",
        "email",
        "--body",
        "上周买的耳机有质量问题，我想申请退款，请尽快处理。",
    ]);
    created["id"].as_str().unwrap().to_string()
}

fn triage(desk: &Desk, id: &str) -> serde_json::Value {
    let out = desk.run(&["run", &format!("triage {id}"), "--approve", "auto"]);
    assert_eq!(out.code, 0, "{}\n{}", out.stdout, out.stderr);
    desk.mirror_settled();
    desk.ticket_file(id)
}

#[test]
fn refunds_go_where_the_history_sent_them_and_without_history_the_rules_decide() {
    // This desk has always sent refunds to 技术支持 (the rules would say
    // 售后组), and parcels to 物流组.
    let desk = Desk::fixture();
    refunds_to_tech_support(&desk);
    desk.ok(&["ticket", "list"]); // starts the daemon
    let learned = wait_until(Duration::from_secs(30), || {
        desk.log()
            .contains("learned from the desk's history examples=12")
    });
    assert!(learned, "{}", desk.log());
    let id = new_refund_ticket(&desk);
    let ticket = triage(&desk, &id);
    assert_eq!(ticket["category"], "退款", "{ticket:#}");
    assert_eq!(ticket["queue"], "技术支持", "{ticket:#}");
    let notes = ticket["notes"].to_string();
    assert!(
        notes.contains("learned from history: category (6 tickets), queue (6 tickets)")
            && notes.contains("rules: priority"),
        "{notes}"
    );
    desk.stop();

    // The same desk without that history: the rules route it.
    let fresh = Desk::fixture();
    let id = new_refund_ticket(&fresh);
    let ticket = triage(&fresh, &id);
    assert_eq!(ticket["queue"], "售后组", "{ticket:#}");
    let notes = ticket["notes"].to_string();
    assert!(
        notes.contains("rules: category, priority, queue"),
        "{notes}"
    );
    fresh.stop();
}

#[test]
fn decisions_made_while_the_daemon_runs_retrain_it() {
    let desk = Desk::fixture();
    desk.ok(&["ticket", "list"]); // starts the daemon, with no history
    assert!(
        wait_until(Duration::from_secs(30), || desk
            .log()
            .contains("learned from the desk's history examples=0")),
        "{}",
        desk.log()
    );
    let before = new_refund_ticket(&desk);
    assert_eq!(
        triage(&desk, &before)["queue"],
        "售后组",
        "the rules decide"
    );

    // People route tickets by hand (edited files the daemon reads back)
    // while it runs: it learns from them without a restart.
    refunds_to_tech_support(&desk);
    let relearned = wait_until(Duration::from_secs(60), || {
        desk.log()
            .contains("learned from the desk's history examples=12")
    });
    assert!(relearned, "{}", desk.log());
    let after = new_refund_ticket(&desk);
    let ticket = triage(&desk, &after);
    assert_eq!(ticket["queue"], "技术支持", "{ticket:#}");
    assert!(
        ticket["notes"]
            .to_string()
            .contains("learned from history: category (6 tickets), queue (6 tickets)"),
        "{ticket:#}"
    );
    // The earlier decision stays as it was made.
    assert_eq!(desk.ticket_file(&before)["queue"], "售后组");
    desk.stop();
}

#[test]
fn a_restart_reads_the_learned_model_back_and_trains_only_when_the_history_moved() {
    let desk = Desk::fixture();
    refunds_to_tech_support(&desk);
    desk.ok(&["ticket", "list"]); // starts the daemon: it trains
    let trained = |log: &str| log.matches("learned from the desk's history").count();
    assert!(
        wait_until(Duration::from_secs(30), || desk
            .log()
            .contains("learned from the desk's history examples=12")),
        "{}",
        desk.log()
    );
    let kept = desk.state_dir().join("offline-model.bin");
    assert!(kept.exists(), "the trained model is kept");
    desk.stop();

    // The same history: read back, not trained again, and it decides.
    desk.ok(&["ticket", "list"]);
    assert!(
        wait_until(Duration::from_secs(30), || desk
            .log()
            .contains("the offline model was read back examples=12")),
        "{}",
        desk.log()
    );
    let id = new_refund_ticket(&desk);
    let ticket = triage(&desk, &id);
    assert_eq!(ticket["queue"], "技术支持", "{ticket:#}");
    assert_eq!(trained(&desk.log()), 1, "{}", desk.log());
    desk.stop();

    // A damaged kept model is named, not used, and trained again (the
    // agent's own triage above taught nothing: the history did not move).
    let mut bytes = std::fs::read(&kept).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x40;
    std::fs::write(&kept, &bytes).unwrap();
    desk.ok(&["ticket", "list"]);
    assert!(
        wait_until(Duration::from_secs(30), || trained(&desk.log()) == 2),
        "{}",
        desk.log()
    );
    let log = desk.log();
    assert!(
        log.contains("offline-model.bin is damaged (its checksum does not match)"),
        "{log}"
    );
    desk.stop();

    // A person's decision while it was down moves the history: the kept
    // model is used at once and trained again.
    history(
        &desk,
        "H-099",
        "退款：订单 9999",
        "我要退款。",
        "退款",
        "技术支持",
    );
    desk.ok(&["ticket", "list"]);
    assert!(
        wait_until(Duration::from_secs(30), || desk
            .log()
            .contains("learned from the desk's history examples=13")),
        "{}",
        desk.log()
    );
    let log = desk.log();
    assert_eq!(trained(&log), 3, "{log}");
    assert_eq!(
        log.matches("the offline model was read back").count(),
        2,
        "{log}"
    );
    desk.stop();
}
