//! Moving a desk's log into PostgreSQL: an export file (`tinycode admin
//! export` of an embedded log) restored into an empty database, every
//! event at its own sequence and stream version, in one transaction under
//! the append lock (a daemon appending meanwhile waits, then sees it all
//! or nothing).

use std::path::Path;

use prost::Message;
use tinycode_shared::proto::Event;

use super::commit::lock_sql;
use super::{CHANNEL, StoreError, connect, failed, schema, to_i64};

/// Events per `INSERT`.
const BATCH: usize = 2_048;

/// Restore `file` into the empty log at `url`; returns the number of events.
pub(crate) async fn import(url: &str, file: &Path) -> Result<u64, StoreError> {
    let (client, target) = begin_on_empty(url).await?;
    let db = |e: tokio_postgres::Error| failed(&target, &e);
    let insert = client
        .prepare(
            "INSERT INTO tinycode_events (sequence, stream_id, stream_version, body) \
             SELECT * FROM unnest($1::bigint[], $2::text[], $3::bigint[], $4::bytea[])",
        )
        .await
        .map_err(db)?;
    let (mut rx, reading) = read_batches(file);
    let written = insert_all(&client, &insert, &mut rx, &target).await;
    drop(rx);
    let read = reading
        .await
        .map_err(|e| StoreError::Io(format!("reading {}: {e}", file.display())))
        .and_then(|r| r);
    let (n, last) = match (written, read) {
        (Ok(()), Ok(done)) => done,
        (Err(e), _) | (_, Err(e)) => {
            // Failing already: the connection goes away with the
            // transaction if the rollback fails too.
            let _ = client.batch_execute("ROLLBACK").await;
            return Err(e);
        }
    };
    client
        .execute(
            &format!("SELECT pg_notify({CHANNEL}, $1)"),
            &[&last.to_string()],
        )
        .await
        .map_err(db)?;
    client.batch_execute("COMMIT").await.map_err(db)?;
    Ok(n)
}

/// Connect to the log at `url` (its schema made current) and begin the
/// import's transaction under the append lock, once the log is found
/// empty. The client, and the target as messages name it.
async fn begin_on_empty(url: &str) -> Result<(tokio_postgres::Client, String), StoreError> {
    let (config, target) = super::conn_of(url)?;
    let client = connect(&config, &target).await?;
    schema::migrate(&client, &target).await?;
    let db = |e: tokio_postgres::Error| failed(&target, &e);
    client
        .batch_execute(&format!("BEGIN; {}", lock_sql()))
        .await
        .map_err(db)?;
    let held: i64 = client
        .query_one("SELECT count(*) FROM tinycode_events", &[])
        .await
        .map_err(db)?
        .get(0);
    if held > 0 {
        // Refusing already: the transaction ends with the connection if
        // the rollback fails.
        let _ = client.batch_execute("ROLLBACK").await;
        return Err(StoreError::Io(format!(
            "the log at {target} already holds {held} events; import restores into an empty database (or schema)"
        )));
    }
    Ok((client, target))
}

/// What reading the export file gives: the events read and the last
/// sequence.
type Read = tokio::task::JoinHandle<Result<(u64, u64), StoreError>>;

/// Read (and check) the export file on a blocking thread, sending its
/// events in batches of [`BATCH`].
fn read_batches(file: &Path) -> (tokio::sync::mpsc::Receiver<Vec<Event>>, Read) {
    let (tx, rx) = tokio::sync::mpsc::channel::<Vec<Event>>(4);
    let path = file.to_path_buf();
    let reading = tokio::task::spawn_blocking(move || {
        let mut batch = Vec::with_capacity(BATCH);
        let mut last = 0u64;
        let n = super::super::sled::read_export(&path, |event| {
            last = event.sequence;
            batch.push(event);
            if batch.len() >= BATCH {
                tx.blocking_send(std::mem::take(&mut batch))
                    .map_err(|_| StoreError::Closed)?;
            }
            Ok(())
        })?;
        if !batch.is_empty() {
            tx.blocking_send(batch).map_err(|_| StoreError::Closed)?;
        }
        Ok::<_, StoreError>((n, last))
    });
    (rx, reading)
}

/// Insert each batch received, one `INSERT` each, until the reader is done
/// or an insert fails.
async fn insert_all(
    client: &tokio_postgres::Client,
    insert: &tokio_postgres::Statement,
    rx: &mut tokio::sync::mpsc::Receiver<Vec<Event>>,
    target: &str,
) -> Result<(), StoreError> {
    while let Some(batch) = rx.recv().await {
        let sequences: Vec<i64> = batch.iter().map(|e| to_i64(e.sequence)).collect();
        let streams: Vec<&str> = batch.iter().map(|e| e.stream_id.as_str()).collect();
        let versions: Vec<i64> = batch.iter().map(|e| to_i64(e.stream_version)).collect();
        let bodies: Vec<Vec<u8>> = batch.iter().map(Message::encode_to_vec).collect();
        client
            .execute(insert, &[&sequences, &streams, &versions, &bodies])
            .await
            .map_err(|e| failed(target, &e))?;
    }
    Ok(())
}
