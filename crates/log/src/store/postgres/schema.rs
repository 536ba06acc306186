//! Versioned migrations of the PostgreSQL schema, applied at start.
//!
//! `tinycode_schema` records each applied version. Daemons starting
//! together serialize on an advisory lock; a database whose schema is newer
//! than this code is refused (an older daemon must not write to it).

use tokio_postgres::Client;

use super::{StoreError, cause};

/// Serializes migrations (any value distinct from the append lock).
const MIGRATION_LOCK: i64 = 0x7469_6e79_0001;

/// Each migration, in order; version = index + 1. Never edit one that has
/// shipped: add the next.
const MIGRATIONS: [&str; 2] = [
    // 1: the log.
    "CREATE TABLE tinycode_events (
         sequence       BIGINT PRIMARY KEY,
         stream_id      TEXT   NOT NULL,
         stream_version BIGINT NOT NULL,
         body           BYTEA  NOT NULL,
         UNIQUE (stream_id, stream_version)
     )",
    // 2: the daemons sharing the log and their heartbeats (liveness, not
    // history: a row per daemon, updated in place).
    "CREATE TABLE tinycode_daemons (
         id           TEXT        PRIMARY KEY,
         host         TEXT        NOT NULL,
         pid          INT         NOT NULL,
         socket       TEXT        NOT NULL,
         workspace    TEXT        NOT NULL,
         started_at   TIMESTAMPTZ NOT NULL,
         heartbeat_at TIMESTAMPTZ NOT NULL
     )",
];

/// The schema version this code writes.
pub(super) const VERSION: i32 = MIGRATIONS.len() as i32;

pub(super) async fn migrate(client: &Client, target: &str) -> Result<(), StoreError> {
    let db = |e: tokio_postgres::Error| {
        StoreError::Database(format!("migrating the schema at {target}: {}", cause(&e)))
    };
    // The lock comes first: two sessions racing through `CREATE TABLE IF
    // NOT EXISTS` can both miss the table and one then fails on its row
    // type ("type tinycode_schema already exists").
    client
        .execute("SELECT pg_advisory_lock($1)", &[&MIGRATION_LOCK])
        .await
        .map_err(db)?;
    let applied = apply(client).await;
    let unlocked = client
        .execute("SELECT pg_advisory_unlock($1)", &[&MIGRATION_LOCK])
        .await;
    let found = applied.map_err(db)?;
    unlocked.map_err(db)?;
    if found > VERSION {
        return Err(StoreError::SchemaNewer {
            found,
            known: VERSION,
        });
    }
    Ok(())
}

/// Apply what is missing; returns the version found before.
async fn apply(client: &Client) -> Result<i32, tokio_postgres::Error> {
    client
        .batch_execute(
            "CREATE TABLE IF NOT EXISTS tinycode_schema (
                 version    INT PRIMARY KEY,
                 applied_at TIMESTAMPTZ NOT NULL DEFAULT now()
             )",
        )
        .await?;
    let found: i32 = client
        .query_one("SELECT coalesce(max(version), 0) FROM tinycode_schema", &[])
        .await?
        .get(0);
    for (i, sql) in MIGRATIONS.iter().enumerate().skip(found.max(0) as usize) {
        let version = i as i32 + 1;
        client.batch_execute("BEGIN").await?;
        let done = async {
            client.batch_execute(sql).await?;
            client
                .execute(
                    "INSERT INTO tinycode_schema (version) VALUES ($1)",
                    &[&version],
                )
                .await?;
            client.batch_execute("COMMIT").await
        }
        .await;
        if let Err(e) = done {
            let _ = client.batch_execute("ROLLBACK").await;
            return Err(e);
        }
        tracing::info!(
            version,
            "applied a schema migration to the PostgreSQL store"
        );
    }
    Ok(found)
}
