//! The review queue end to end: with `triage.reviewBelow`, a decision the
//! offline model is unsure of is held (not routed) and listed by
//! `tinycode triage review`; a person's correction is recorded as theirs,
//! the learner learns from it, and the next similar ticket is decided the
//! person's way.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use serde_json::{Value, json};
use tinycode_tests::{Desk, wait_until};

use tinycode_tests::decided_ticket as history;

/// Sixty decided tickets (enough to calibrate): refunds people sent to
/// 售后组 three times in five and to 技术支持 otherwise — a queue the
/// history cannot be sure of — and parcels to 物流组.
fn mixed_history(desk: &Desk) {
    for i in 0..40 {
        let queue = if i % 5 < 3 {
            "售后组"
        } else {
            "技术支持"
        };
        history(
            desk,
            &format!("H-{:03}", 100 + i),
            &format!("退款：订单 {} 申请退款", 5000 + i),
            "东西坏了，我要求退款，钱请退回原卡。",
            "退款",
            queue,
        );
    }
    for i in 0..20 {
        history(
            desk,
            &format!("H-{:03}", 200 + i),
            &format!("物流：包裹 {} 停滞", 6000 + i),
            "快递好几天没有更新，包裹停在转运中心。",
            "物流",
            "物流组",
        );
    }
}

/// A refund about a device that will not activate: words the history
/// never saw, beside its refund words.
fn activation_refund(desk: &Desk, n: u32) -> String {
    let created = desk.json(&[
        "ticket",
        "create",
        "--subject",
        &format!("设备激活：序列号 SN-{n} 激活失败，申请退款"),
        "--customer",
        "王芳",
        "--channel",
        "email",
        "--body",
        "序列号激活失败，设备绑定异常，固件升级卡住，蓝牙配对报错。我要求退款。",
    ]);
    created["id"].as_str().unwrap().to_string()
}

fn show(desk: &Desk, id: &str) -> Value {
    desk.json(&["ticket", "show", id])
}

fn learned_examples(desk: &Desk, n: usize) -> bool {
    desk.log()
        .contains(&format!("learned from the desk's history examples={n} "))
}

#[test]
fn an_unsure_decision_waits_for_a_person_whose_correction_teaches_the_next_one() {
    let desk = Desk::fixture();
    desk.edit_config(|c| c["triage"] = json!({"reviewBelow": {"queue": 0.8}}));
    mixed_history(&desk);
    desk.ok(&["ticket", "list"]); // starts the daemon
    assert!(
        wait_until(Duration::from_secs(60), || learned_examples(&desk, 60)),
        "{}",
        desk.log()
    );

    // Three such tickets: the history's queue is unsure, so each is held.
    let held: Vec<String> = (1..=3).map(|n| activation_refund(&desk, n)).collect();
    for id in &held {
        desk.ok(&["run", &format!("triage {id}"), "--approve", "auto"]);
        let t = show(&desk, id);
        let s = &t["suggestion"];
        assert!(s.is_object(), "not held: {t:#}");
        assert_eq!(s["below"], json!(["queue"]), "{t:#}");
        let queue = s["queue"].as_str().unwrap();
        assert!(["售后组", "技术支持"].contains(&queue), "{t:#}");
        let confidence = s["confidence"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["field"] == "queue")
            .unwrap()["value"]
            .as_f64()
            .unwrap();
        assert!(confidence < 0.8, "{t:#}");
        assert_eq!(
            t.get("queue").and_then(Value::as_str).unwrap_or(""),
            "",
            "routed anyway: {t:#}"
        );
        // The category was sure enough: it stands, with its confidence.
        assert_eq!(t["category"], "退款", "{t:#}");
        let text = desk.ok(&["ticket", "show", id]);
        assert!(
            text.contains("REVIEW") && text.contains("queue low"),
            "{text}"
        );
    }
    let listed = desk.ok(&["triage", "review"]);
    for id in &held {
        assert!(listed.contains(id.as_str()), "{listed}");
    }
    // Nothing waits on a ticket that was not held.
    let out = desk.run(&["triage", "review", "accept", "T-1001"]);
    assert_ne!(out.code, 0);
    assert!(
        out.stderr.contains("no decision waiting for review"),
        "{out:?}"
    );

    // A person decides otherwise: these go to 物流组.
    for id in &held {
        desk.ok(&["triage", "review", "correct", id, "--queue", "物流组"]);
        let t = show(&desk, id);
        assert_eq!(t["queue"], "物流组", "{t:#}");
        assert!(t.get("suggestion").is_none(), "{t:#}");
        assert_eq!(t["status"], "routed");
    }
    assert!(
        desk.ok(&["triage", "review"])
            .contains("nothing waits for review")
    );
    // The learner takes the corrections as a person's decisions.
    assert!(
        wait_until(Duration::from_secs(60), || learned_examples(&desk, 63)),
        "{}",
        desk.log()
    );
    let next = activation_refund(&desk, 4);
    desk.ok(&["run", &format!("triage {next}"), "--approve", "auto"]);
    let t = show(&desk, &next);
    let decided = t
        .get("suggestion")
        .map_or(&t["queue"], |s| &s["queue"])
        .clone();
    assert_eq!(decided, "物流组", "{t:#}");
    desk.stop();
}
