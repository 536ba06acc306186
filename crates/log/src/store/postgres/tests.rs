//! The PostgreSQL backend against the real server (`TINYCODE_TEST_PG`,
//! default `postgres://postgres@127.0.0.1:5432/test`); each log is its own
//! schema, dropped at the end.

use std::sync::atomic::{AtomicU64, Ordering};

use super::super::conformance::Backing;
use super::*;
use crate::store::EventStore;
use tokio_postgres::NoTls;

/// The test database.
pub(crate) fn test_url() -> String {
    std::env::var("TINYCODE_TEST_PG")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into())
}

/// A log in its own schema, and a local projection database.
pub(crate) struct PgSchema {
    url: String,
    schema: String,
    local: tempfile::TempDir,
}

static NEXT: AtomicU64 = AtomicU64::new(0);

impl Backing for PgSchema {
    async fn fresh() -> Self {
        let schema = format!(
            "tc_test_{}_{}_{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed),
            SystemTimeNanos::now()
        );
        let base = test_url();
        let (client, connection) = tokio_postgres::connect(&base, NoTls)
            .await
            .expect("PostgreSQL for tests (set TINYCODE_TEST_PG)");
        tokio::spawn(connection);
        client
            .batch_execute(&format!("CREATE SCHEMA {schema}"))
            .await
            .unwrap();
        let sep = if base.contains('?') { '&' } else { '?' };
        Self {
            url: format!("{base}{sep}options=-csearch_path%3D{schema}"),
            schema,
            local: tempfile::tempdir().unwrap(),
        }
    }

    async fn open(&self, options: StoreOptions) -> EventStore {
        let log = PgLog::open(&self.url, options).await.unwrap();
        let local = ::sled::Config::new().path(self.local.path()).open();
        let local = match local {
            Ok(db) => db,
            Err(_) => {
                // sled releases an earlier open's lock a moment later.
                tokio::time::sleep(std::time::Duration::from_millis(200)).await;
                ::sled::Config::new()
                    .path(self.local.path())
                    .open()
                    .unwrap()
            }
        };
        EventStore::with_backend(Box::new(log), local, options)
    }
}

impl PgSchema {
    /// Two handles on this log, as two daemons have.
    async fn two_handles(&self) -> (PgLog, PgLog) {
        let open = || PgLog::open(&self.url, StoreOptions::default());
        (open().await.unwrap(), open().await.unwrap())
    }
}

impl Drop for PgSchema {
    fn drop(&mut self) {
        let schema = self.schema.clone();
        let url = test_url();
        // A plain thread: drop may run inside or outside a runtime.
        let _ = std::thread::spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            rt.block_on(async move {
                if let Ok((client, connection)) = tokio_postgres::connect(&url, NoTls).await {
                    tokio::spawn(connection);
                    let _ = client
                        .batch_execute(&format!("DROP SCHEMA {schema} CASCADE"))
                        .await;
                }
            });
        })
        .join();
    }
}

struct SystemTimeNanos;

impl SystemTimeNanos {
    fn now() -> u128 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() % 1_000_000)
            .unwrap_or(0)
    }
}

crate::store::conformance::conformance_suite!(crate::store::postgres::tests::PgSchema);

#[tokio::test]
async fn an_unreachable_database_is_named_in_one_sentence() {
    let err = PgLog::open(
        "postgres://nobody:secret@127.0.0.1:1/none",
        StoreOptions::default(),
    )
    .await
    .err()
    .unwrap();
    let text = err.to_string();
    assert!(matches!(err, StoreError::Unreachable(_)), "{text}");
    assert!(text.contains("127.0.0.1:1/none"), "{text}");
    assert!(!text.contains("secret"), "{text}");
}

#[tokio::test]
async fn a_schema_newer_than_the_code_is_refused() {
    let backing = PgSchema::fresh().await;
    drop(backing.open(StoreOptions::default()).await);
    let (client, connection) = tokio_postgres::connect(&backing.url, NoTls).await.unwrap();
    tokio::spawn(connection);
    client
        .execute(
            "INSERT INTO tinycode_schema (version) VALUES ($1)",
            &[&(schema::VERSION + 1)],
        )
        .await
        .unwrap();
    let err = PgLog::open(&backing.url, StoreOptions::default())
        .await
        .err()
        .unwrap();
    assert!(
        matches!(err, StoreError::SchemaNewer { found, known } if found == known + 1),
        "{err}"
    );
}

/// Daemons starting together on an empty schema: every one opens (the
/// schema table used to be created before the lock, and one of two racing
/// `CREATE TABLE IF NOT EXISTS` failed on its row type).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn daemons_opening_a_fresh_schema_at_once_all_open() {
    for _ in 0..10 {
        let backing = PgSchema::fresh().await;
        let opens = (0..16).map(|_| {
            let url = backing.url.clone();
            tokio::spawn(async move { PgLog::open(&url, StoreOptions::default()).await })
        });
        for open in opens.collect::<Vec<_>>() {
            let log = open.await.unwrap();
            assert!(log.is_ok(), "{:?}", log.err().map(|e| e.to_string()));
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_handles_on_one_database_see_each_others_appends_in_one_order() {
    let backing = PgSchema::fresh().await;
    let (a, b) = backing.two_handles().await;
    let mut live_b = b.live();
    let writers: Vec<_> = [a, b].into_iter().map(Arc::new).collect();
    let mut tasks = Vec::new();
    for (w, log) in writers.iter().enumerate() {
        for k in 0..8u32 {
            let log = Arc::clone(log);
            tasks.push(tokio::spawn(async move {
                for i in 0..10u32 {
                    log.append(
                        format!("w{w}-{k}"),
                        ExpectedVersion::Any,
                        vec![crate::store::conformance::payload(i)],
                    )
                    .await
                    .unwrap();
                }
            }));
        }
    }
    for t in tasks {
        t.await.unwrap();
    }
    // Every event reaches the other handle's live feed, in sequence order.
    for expected in 1..=160u64 {
        let e = tokio::time::timeout(std::time::Duration::from_secs(10), live_b.recv())
            .await
            .expect("b saw every event")
            .unwrap();
        assert_eq!(e.sequence, expected);
    }
    for log in &writers {
        tokio::time::timeout(std::time::Duration::from_secs(5), async {
            while log.last_sequence() < 160 {
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
        })
        .await
        .expect("both heads reach 160");
        let all = log.read_range(1, 160, 1000).await.unwrap();
        assert_eq!(all.len(), 160);
        assert!(all.iter().zip(1..).all(|(e, s)| e.sequence == s));
    }
}

#[tokio::test]
async fn daemons_sharing_a_log_see_each_others_heartbeats_and_leaves() {
    let backing = PgSchema::fresh().await;
    let (a, b) = backing.two_handles().await;
    let member = |id: &str| Member {
        id: id.into(),
        host: "h".into(),
        pid: 7,
        socket: format!("/run/{id}.sock"),
        workspace: "/desk".into(),
        started_at: 1_800_000_000,
        heartbeat_age_ms: 0,
    };
    a.heartbeat(member("a")).await.unwrap();
    b.heartbeat(member("b")).await.unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    a.heartbeat(member("a")).await.unwrap();
    let seen = b.members().await.unwrap();
    let ids: Vec<&str> = seen.iter().map(|m| m.id.as_str()).collect();
    assert_eq!(ids.len(), 2, "{seen:?}");
    let age = |id: &str| seen.iter().find(|m| m.id == id).unwrap().heartbeat_age_ms;
    // By the database's clock: b beat 300 ms before a did.
    assert!(age("b") >= 250 && age("a") < age("b"), "{seen:?}");
    let a_row = seen.iter().find(|m| m.id == "a").unwrap();
    assert_eq!(
        (a_row.pid, a_row.socket.as_str(), a_row.started_at),
        (7, "/run/a.sock", 1_800_000_000)
    );
    b.leave("b".into()).await.unwrap();
    let left: Vec<String> = a
        .members()
        .await
        .unwrap()
        .into_iter()
        .map(|m| m.id)
        .collect();
    assert_eq!(left, ["a"]);
}
