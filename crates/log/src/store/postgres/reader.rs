//! The reading connection of a PostgreSQL log: its statements, prepared
//! once per connection, and the rows they return decoded.

use prost::Message;
use tinycode_shared::proto::Event;
use tokio_postgres::{Client, Statement};

use super::{StoreError, failed, from_i64, to_i64};

/// A reading connection and its statements, prepared once.
pub(super) struct Reader {
    pub(super) client: Client,
    pub(super) target: String,
    pub(super) head: Statement,
    pub(super) range: Statement,
    pub(super) stream: Statement,
    pub(super) version: Statement,
}

impl Reader {
    pub(super) async fn new(client: Client, target: &str) -> Result<Self, StoreError> {
        let prepare = async |sql: &str| client.prepare(sql).await.map_err(|e| failed(target, &e));
        let head = prepare("SELECT coalesce(max(sequence), 0) FROM tinycode_events").await?;
        let range = prepare(
            "SELECT sequence, body FROM tinycode_events \
             WHERE sequence BETWEEN $1 AND $2 ORDER BY sequence LIMIT $3",
        )
        .await?;
        let stream = prepare(
            "SELECT sequence, body FROM tinycode_events \
             WHERE stream_id = $1 AND stream_version >= $2 AND sequence <= $3 \
             ORDER BY stream_version LIMIT $4",
        )
        .await?;
        let version = prepare(
            "SELECT coalesce(max(stream_version), 0) FROM tinycode_events \
             WHERE stream_id = $1 AND sequence <= $2",
        )
        .await?;
        Ok(Self {
            client,
            target: target.to_string(),
            head,
            range,
            stream,
            version,
        })
    }

    pub(super) fn is_closed(&self) -> bool {
        self.client.is_closed()
    }

    /// The highest committed sequence.
    pub(super) async fn head(&self) -> Result<u64, StoreError> {
        let row = self
            .client
            .query_one(&self.head, &[])
            .await
            .map_err(|e| failed(&self.target, &e))?;
        Ok(from_i64(row.get(0)))
    }

    /// Events `from..=to`, at most `max`, in order.
    pub(super) async fn range(
        &self,
        from: u64,
        to: u64,
        max: usize,
    ) -> Result<Vec<Event>, StoreError> {
        let rows = self
            .client
            .query(
                &self.range,
                &[&to_i64(from), &to_i64(to), &to_i64(max as u64)],
            )
            .await
            .map_err(|e| failed(&self.target, &e))?;
        rows.iter().map(decode_row).collect()
    }
}

pub(super) fn decode_row(row: &tokio_postgres::Row) -> Result<Event, StoreError> {
    let sequence = from_i64(row.get(0));
    let body: &[u8] = row.get(1);
    Event::decode(body).map_err(|source| StoreError::Corrupt { sequence, source })
}
