//! End-to-end on PostgreSQL: the real daemon with its log in the real
//! server (`TINYCODE_TEST_PG`, default the CI database), each test in its
//! own schema.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

use tinycode_tests::Desk;

fn base_url() -> String {
    std::env::var("TINYCODE_TEST_PG")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into())
}

fn psql(sql: &str) -> String {
    let out = Command::new("psql")
        .args([&base_url(), "-Atc", sql])
        .output()
        .expect("psql (PostgreSQL's client) runs");
    assert!(
        out.status.success(),
        "psql {sql}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// A schema of its own, dropped at the end.
struct Schema(String);

impl Schema {
    fn new(tag: &str) -> Self {
        let name = format!("tc_e2e_{tag}_{}", std::process::id());
        psql(&format!(
            "DROP SCHEMA IF EXISTS {name} CASCADE; CREATE SCHEMA {name}"
        ));
        Self(name)
    }

    fn url(&self) -> String {
        format!("{}?options=-csearch_path%3D{}", base_url(), self.0)
    }

    fn events(&self) -> u64 {
        psql(&format!("SELECT count(*) FROM {}.tinycode_events", self.0))
            .parse()
            .unwrap()
    }
}

impl Drop for Schema {
    fn drop(&mut self) {
        let _ = Command::new("psql")
            .args([
                &base_url(),
                "-Atc",
                &format!("DROP SCHEMA {} CASCADE", self.0),
            ])
            .output();
    }
}

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
