//! End-to-end on PostgreSQL: the real daemon with its log in the real
//! server (`TINYCODE_TEST_PG`, default the CI database), each test in its
//! own schema.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use tinycode_tests::Desk;
use tinycode_tests::pg::Schema;

fn ids(list: &serde_json::Value) -> Vec<String> {
    list["tickets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn the_desk_runs_on_postgres_and_a_second_daemon_shares_its_log() {
    let schema = Schema::new("share");
    let a = Desk::fixture().with_env("TINYCODE_STORE_URL", &schema.url());
    assert_eq!(
        ids(&a.json(&["ticket", "list"])),
        ["T-1001", "T-1002", "T-1003"]
    );
    a.ok(&["ticket", "message", "T-1002", "还没到，请尽快处理"]);
    let stored = schema.events();
    assert!(
        stored >= 7,
        "the imports, the message and the start: {stored}"
    );

    // A restart resumes from the local projections and the same log: no
    // import repeated, the message still there.
    a.stop();
    let t = a.json(&["ticket", "show", "T-1002"]);
    assert_eq!(t["messages"].as_array().unwrap().len(), 2, "{t}");
    assert!(
        a.read("tickets/T-1002.json").contains("还没到，请尽快处理"),
        "the file follows the log"
    );
    assert_eq!(
        schema.events(),
        stored + 2,
        "a restart adds only its stop and start"
    );

    // A second daemon (its own workspace copy and state) on the same log
    // sees what the first appended.
    let b = Desk::fixture().with_env("TINYCODE_STORE_URL", &schema.url());
    let t = b.json(&["ticket", "show", "T-1002"]);
    assert_eq!(t["messages"].as_array().unwrap().len(), 2, "{t}");
    a.stop();
    b.stop();
}

#[test]
fn an_unreachable_store_stops_the_daemon_with_one_sentence() {
    let desk = Desk::fixture().with_env(
        "TINYCODE_STORE_URL",
        "postgres://postgres:hunter2@127.0.0.1:1/test",
    );
    let out = desk.daemon_cmd().output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("cannot reach PostgreSQL at 127.0.0.1:1/test"),
        "{err}"
    );
    assert!(!err.contains("hunter2"), "{err}");
}

#[test]
fn an_embedded_desk_moves_to_postgres_by_export_and_import() {
    let embedded = Desk::fixture();
    embedded.ok(&["ticket", "message", "T-1002", "搬家前的留言"]);
    let before = embedded.json(&["ticket", "show", "T-1002"]);
    embedded.stop();
    let file = embedded.state_dir().join("desk.tclog");
    let exported = embedded.ok(&["admin", "export", file.to_str().unwrap()]);
    assert!(exported.contains("exported"), "{exported}");

    let schema = Schema::new("move");
    let moved = Desk::fixture().with_env("TINYCODE_STORE_URL", &schema.url());
    // A damaged export (one byte flipped near its end) is refused whole:
    // nothing of it reaches the database.
    let damaged = embedded.state_dir().join("damaged.tclog");
    let mut bytes = std::fs::read(&file).unwrap();
    let at = bytes.len() - 10;
    bytes[at] ^= 0xff;
    std::fs::write(&damaged, bytes).unwrap();
    let refused = moved.run(&["admin", "import", damaged.to_str().unwrap()]);
    assert_ne!(refused.code, 0, "{refused:?}");
    assert!(
        refused.stderr.contains("not a sound export"),
        "{}",
        refused.stderr
    );
    assert_eq!(schema.events(), 0);
    let imported = moved.ok(&["admin", "import", file.to_str().unwrap()]);
    assert!(imported.contains("into PostgreSQL"), "{imported}");
    let n: u64 = imported
        .split_whitespace()
        .nth(1)
        .and_then(|w| w.parse().ok())
        .unwrap();
    assert_eq!(schema.events(), n);
    // The desk on PostgreSQL is the same desk (its SLA clocks read a
    // moment later: the same due time, fewer seconds left).
    let without_seconds = |mut t: serde_json::Value| {
        for clock in t["sla"].as_array_mut().unwrap() {
            clock.as_object_mut().unwrap().remove("secondsLeft");
        }
        t
    };
    assert_eq!(
        without_seconds(moved.json(&["ticket", "show", "T-1002"])),
        without_seconds(before)
    );
    // A second import would mix two logs: refused, nothing changed.
    moved.stop();
    let held = schema.events();
    let again = moved.run(&["admin", "import", file.to_str().unwrap()]);
    assert_ne!(again.code, 0);
    assert!(again.stderr.contains("already holds"), "{}", again.stderr);
    assert_eq!(schema.events(), held);
}
