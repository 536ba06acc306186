//! The real PostgreSQL of the tests (`TINYCODE_TEST_PG`, default the CI
//! database), each test in a schema of its own.

use std::process::Command;

pub fn base_url() -> String {
    std::env::var("TINYCODE_TEST_PG")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into())
}

/// Run `sql` with `psql`; its unaligned output.
pub fn psql(sql: &str) -> String {
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
pub struct Schema(pub String);

impl Schema {
    pub fn new(tag: &str) -> Self {
        let name = format!("tc_e2e_{tag}_{}", std::process::id());
        psql(&format!(
            "DROP SCHEMA IF EXISTS {name} CASCADE; CREATE SCHEMA {name}"
        ));
        Self(name)
    }

    /// The store URL of a daemon working in this schema.
    pub fn url(&self) -> String {
        format!("{}?options=-csearch_path%3D{}", base_url(), self.0)
    }

    /// Events in the log.
    pub fn events(&self) -> u64 {
        psql(&format!("SELECT count(*) FROM {}.tinycode_events", self.0))
            .parse()
            .expect("a count")
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
