//! The log in PostgreSQL, for several daemons sharing one desk.
//!
//! One table, `tinycode_events (sequence, stream_id, stream_version,
//! body)`, the body an encoded `tinycode.v1.Event`. Sequences come from
//! the table itself, never from a PostgreSQL `SEQUENCE` (which leaves gaps
//! on rollback, and lets a later number commit first): every append
//! transaction takes one transaction-scoped advisory lock, reads the
//! highest sequence, inserts after it, notifies, and commits; the lock is
//! released only once the commit is visible, so sequences have no gap and
//! commit in order, across every daemon on the database.
//!
//! Per daemon: one committer task groups queued appends into one
//! transaction (`commit.rs`); one follower task publishes what is committed
//! — its own appends and, woken by `LISTEN`, other daemons' — to live
//! subscribers in sequence order (`follow.rs`). An append returns once the
//! follower has published it, so a read after a write sees it.
//!
//! Connections: one for the committer, one shared by readers (queries
//! pipeline on it), one that listens, one for the heartbeat. Each
//! reconnects on its next use after a failure; every one is made through
//! `tls.rs`. Once the daemon sets its fence (`Backend::fence`), each
//! append transaction checks, under the append lock and by the database's
//! clock, that the daemon's heartbeat is within its lease, and refuses the
//! batch otherwise.

mod commit;
mod follow;
mod import;
pub(crate) mod tls;

pub(crate) use import::import;
mod reader;
mod schema;

use reader::{Reader, decode_row};

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use futures::FutureExt;
use futures::future::BoxFuture;

use tinycode_shared::proto::{Event, event::Payload};
use tokio::sync::{Mutex, broadcast, mpsc, oneshot, watch};
use tokio_postgres::Client;

use super::backend::{Backend, Member};
use super::{ExpectedVersion, StoreError, StoreOptions, StoreStats};
use commit::Request;

/// The channel `NOTIFY` uses, as SQL: one per schema (a log), so desks
/// sharing a database never wake each other; its payload is the last
/// committed sequence.
const CHANNEL: &str = "'tinycode_' || md5(coalesce(current_schema(), ''))";

/// Events read per query while catching up.
const READ_BATCH: i64 = 512;

/// The daemon whose lease the database checks before each append, and the
/// lease (see `Backend::fence`).
type Fence = Arc<std::sync::RwLock<Option<(String, std::time::Duration)>>>;

/// A heartbeat's notification: this prefix and the daemon's id, so the
/// other daemons of the log start waking it at once.
const BEAT_PREFIX: &str = "daemon:";

/// A heartbeat with no fence set gives up after this long.
const BEAT_LIMIT: std::time::Duration = std::time::Duration::from_secs(5);

pub(crate) struct PgLog {
    target: String,
    config: tls::Conn,
    reader: Mutex<Option<Arc<Reader>>>,
    appends: mpsc::UnboundedSender<Request>,
    /// Highest sequence published to live subscribers; reads stop there.
    published: watch::Receiver<u64>,
    live: broadcast::Sender<Arc<Event>>,
    stop: watch::Sender<bool>,
    transactions: Arc<AtomicU64>,
    committer: std::sync::Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// Bytes the log's table takes in the database, as last measured.
    size: Arc<AtomicU64>,
    fence: Fence,
    /// Whether appends `NOTIFY` (another daemon listens); on until the
    /// cluster says this daemon is alone.
    notify: Arc<std::sync::atomic::AtomicBool>,
    /// The heartbeat's own connection: a slow read or a queue of appends
    /// never delays it.
    beat: Mutex<Option<Client>>,
}

impl PgLog {
    /// Connect to `url` (`postgres://user@host:port/db`), apply the schema's
    /// migrations, and start following the log.
    pub(crate) async fn open(url: &str, options: StoreOptions) -> Result<Self, StoreError> {
        let (config, target) = conn_of(url)?;
        let client = connect(&config, &target).await?;
        schema::migrate(&client, &target).await?;
        let reader = Arc::new(Reader::new(client, &target).await?);
        let head = reader.head().await?;
        let (published_tx, published) = watch::channel(head);
        let (live, _) = broadcast::channel(options.live_buffer.max(1));
        let (stop, stopping) = watch::channel(false);
        let (appends, queue) = mpsc::unbounded_channel();
        let (committed_tx, committed_rx) = mpsc::unbounded_channel();
        let transactions = Arc::new(AtomicU64::new(0));
        let fence: Fence = Arc::default();
        let notify = Arc::new(std::sync::atomic::AtomicBool::new(true));
        let committer = tokio::spawn(commit::run(commit::Committer {
            fence: Arc::clone(&fence),
            notify: Arc::clone(&notify),
            config: config.clone(),
            target: target.clone(),
            client: None,
            queue,
            stopping: stopping.clone(),
            committed: committed_tx,
            published: published.clone(),
            transactions: Arc::clone(&transactions),
        }));
        tokio::spawn(follow::run(follow::Follower {
            config: config.clone(),
            target: target.clone(),
            reader: Arc::clone(&reader),
            committed: committed_rx,
            published: published_tx,
            live: live.clone(),
            stopping,
            peers: follow::Peers {
                fence: Arc::clone(&fence),
                notify: Arc::clone(&notify),
            },
        }));
        let size = Arc::new(AtomicU64::new(0));
        tokio::spawn(measure_size(
            config.clone(),
            target.clone(),
            Arc::clone(&size),
            stop.subscribe(),
        ));
        Ok(Self {
            size,
            fence,
            notify,
            beat: Mutex::new(None),
            target,
            config,
            reader: Mutex::new(Some(reader)),
            appends,
            published,
            live,
            stop,
            transactions,
            committer: std::sync::Mutex::new(Some(committer)),
        })
    }

    /// The reading connection, reconnected when it broke.
    async fn reader(&self) -> Result<Arc<Reader>, StoreError> {
        let mut slot = self.reader.lock().await;
        if let Some(reader) = slot.as_ref()
            && !reader.client.is_closed()
        {
            return Ok(Arc::clone(reader));
        }
        let client = connect(&self.config, &self.target).await?;
        let reader = Arc::new(Reader::new(client, &self.target).await?);
        *slot = Some(Arc::clone(&reader));
        Ok(reader)
    }

    /// Upsert this daemon's row (`heartbeat_at = now()`) on the
    /// heartbeat's connection, made first when there is none.
    async fn beat_on(&self, slot: &mut Option<Client>, me: &Member) -> Result<(), StoreError> {
        if slot.as_ref().is_none_or(Client::is_closed) {
            *slot = Some(connect(&self.config, &self.target).await?);
        }
        let Some(client) = slot.as_ref() else {
            return Err(StoreError::Closed);
        };
        client
            .execute(
                "INSERT INTO tinycode_daemons \
                 (id, host, pid, socket, workspace, started_at, heartbeat_at) \
                 VALUES ($1, $2, $3, $4, $5, to_timestamp($6), now()) \
                 ON CONFLICT (id) DO UPDATE SET host = $2, pid = $3, socket = $4, \
                 workspace = $5, started_at = to_timestamp($6), heartbeat_at = now()",
                &[
                    &me.id,
                    &me.host,
                    &i32::try_from(me.pid).unwrap_or(i32::MAX),
                    &me.socket,
                    &me.workspace,
                    &(me.started_at as f64),
                ],
            )
            .await
            .map_err(|e| failed(&self.target, &e))?;
        // Daemons alone on the log do not notify of their appends; this
        // tells them another one is here.
        client
            .execute(
                &format!("SELECT pg_notify({CHANNEL}, $1)"),
                &[&format!("{BEAT_PREFIX}{}", me.id)],
            )
            .await
            .map_err(|e| failed(&self.target, &e))?;
        Ok(())
    }

    async fn read_stream_now(
        &self,
        stream: &str,
        from_version: u64,
        max: usize,
    ) -> Result<Vec<Event>, StoreError> {
        let reader = self.reader().await?;
        let rows = reader
            .client
            .query(
                &reader.stream,
                &[
                    &stream,
                    &to_i64(from_version.max(1)),
                    &to_i64(self.last_sequence()),
                    &to_i64(max as u64),
                ],
            )
            .await
            .map_err(|e| failed(&self.target, &e))?;
        rows.iter().map(decode_row).collect()
    }
}

impl Backend for PgLog {
    fn name(&self) -> &'static str {
        "postgres"
    }

    /// While no connection to PostgreSQL can be made: since when and why
    /// (`daemon status`); appends fail meanwhile and resume by themselves.
    fn writes_paused(&self) -> Option<String> {
        let (since, why) = self.config.health.unreachable()?;
        let at = tinycode_shared::render::rfc3339(since, 0);
        Some(format!(
            "store unreachable since {at}: PostgreSQL at {}: {why}; appends fail until it answers again",
            self.target
        ))
    }

    fn append(
        &self,
        stream: String,
        expected: ExpectedVersion,
        payloads: Vec<Payload>,
    ) -> BoxFuture<'_, Result<Vec<Arc<Event>>, StoreError>> {
        let (reply, answer) = oneshot::channel();
        if *self.stop.borrow() {
            return futures::future::ready(Err(StoreError::Closed)).boxed();
        }
        let sent = self.appends.send(Request {
            stream,
            expected,
            payloads,
            reply,
        });
        async move {
            if sent.is_err() {
                return Err(StoreError::Closed);
            }
            answer.await.map_err(|_| StoreError::Closed)?
        }
        .boxed()
    }

    fn stream_version(&self, stream: String) -> BoxFuture<'_, Result<u64, StoreError>> {
        async move {
            let reader = self.reader().await?;
            let row = reader
                .client
                .query_one(&reader.version, &[&stream, &to_i64(self.last_sequence())])
                .await
                .map_err(|e| failed(&self.target, &e))?;
            Ok(from_i64(row.get(0)))
        }
        .boxed()
    }

    fn read_stream(
        &self,
        stream: String,
        from_version: u64,
        max: usize,
    ) -> BoxFuture<'_, Result<Vec<Event>, StoreError>> {
        async move { self.read_stream_now(&stream, from_version, max).await }.boxed()
    }

    fn read_range(
        &self,
        from: u64,
        to: u64,
        max: usize,
    ) -> BoxFuture<'_, Result<Vec<Event>, StoreError>> {
        async move {
            let to = to.min(self.last_sequence());
            if from > to || max == 0 {
                return Ok(Vec::new());
            }
            self.reader().await?.range(from, to, max).await
        }
        .boxed()
    }

    fn last_sequence(&self) -> u64 {
        *self.published.borrow()
    }

    fn live(&self) -> broadcast::Receiver<Arc<Event>> {
        self.live.subscribe()
    }

    fn closing(&self) -> watch::Receiver<bool> {
        self.stop.subscribe()
    }

    fn stats(&self) -> StoreStats {
        StoreStats::of(
            self.last_sequence(),
            self.size.load(Ordering::Relaxed),
            self.transactions.load(Ordering::Relaxed),
        )
    }

    fn shared(&self) -> bool {
        true
    }

    fn latest(&self) -> BoxFuture<'_, Result<u64, StoreError>> {
        async move { self.reader().await?.head().await }.boxed()
    }

    fn wake_others(&self, others: bool) {
        self.notify.store(others, Ordering::Relaxed);
    }

    fn fence(&self, holder: Option<(String, std::time::Duration)>) {
        *self.fence.write().unwrap_or_else(|p| p.into_inner()) = holder;
    }

    /// On its own connection, within half a lease (a connection that
    /// hangs is dropped and made again next time).
    fn heartbeat(&self, me: Member) -> BoxFuture<'_, Result<(), StoreError>> {
        async move {
            let limit = self
                .fence
                .read()
                .ok()
                .and_then(|f| f.as_ref().map(|(_, lease)| *lease / 2))
                .unwrap_or(BEAT_LIMIT);
            let mut slot = self.beat.lock().await;
            let beat = tokio::time::timeout(limit, self.beat_on(&mut slot, &me)).await;
            match beat {
                Ok(Ok(())) => Ok(()),
                Ok(Err(e)) => {
                    *slot = None;
                    Err(e)
                }
                Err(_) => {
                    *slot = None;
                    Err(StoreError::Unreachable(format!(
                        "PostgreSQL at {}: no answer to the heartbeat within {} ms",
                        self.target,
                        limit.as_millis()
                    )))
                }
            }
        }
        .boxed()
    }

    fn members(&self) -> BoxFuture<'_, Result<Vec<Member>, StoreError>> {
        async move {
            let reader = self.reader().await?;
            let rows = reader
                .client
                .query(
                    "SELECT id, host, pid, socket, workspace, \
                     extract(epoch FROM started_at)::BIGINT, \
                     greatest(extract(epoch FROM now() - heartbeat_at) * 1000, 0)::BIGINT \
                     FROM tinycode_daemons ORDER BY started_at, id",
                    &[],
                )
                .await
                .map_err(|e| failed(&self.target, &e))?;
            Ok(rows
                .iter()
                .map(|r| Member {
                    id: r.get(0),
                    host: r.get(1),
                    pid: u32::try_from(r.get::<_, i32>(2)).unwrap_or(0),
                    socket: r.get(3),
                    workspace: r.get(4),
                    started_at: r.get(5),
                    heartbeat_age_ms: from_i64(r.get(6)),
                })
                .collect())
        }
        .boxed()
    }

    fn leave(&self, id: String) -> BoxFuture<'_, Result<(), StoreError>> {
        async move {
            let reader = self.reader().await?;
            reader
                .client
                .execute("DELETE FROM tinycode_daemons WHERE id = $1", &[&id])
                .await
                .map_err(|e| failed(&self.target, &e))?;
            Ok(())
        }
        .boxed()
    }

    fn close(&self) -> BoxFuture<'_, Result<(), StoreError>> {
        async move {
            self.stop.send_replace(true);
            // The committer commits what is queued and ends; appends after
            // that are refused.
            let committer = self.committer.lock().ok().and_then(|mut c| c.take());
            if let Some(committer) = committer {
                let _ = committer.await;
            }
            Ok(())
        }
        .boxed()
    }
}

/// Measure the log's table (with its indexes and TOAST) now and every 30 s
/// on a connection of its own, for `daemon status`, until the log closes.
async fn measure_size(
    config: tls::Conn,
    target: String,
    size: Arc<AtomicU64>,
    mut stop: watch::Receiver<bool>,
) {
    let mut client: Option<Client> = None;
    loop {
        if client.as_ref().is_none_or(Client::is_closed) {
            client = connect(&config, &target).await.ok();
        }
        if let Some(c) = &client
            && let Ok(row) = c
                .query_one(
                    "SELECT pg_total_relation_size('tinycode_events')::bigint",
                    &[],
                )
                .await
        {
            // NULL when the table went away under the query.
            let bytes = row.try_get::<_, Option<i64>>(0).ok().flatten();
            size.store(bytes.unwrap_or(0).max(0) as u64, Ordering::Relaxed);
        }
        tokio::select! {
            _ = tokio::time::sleep(std::time::Duration::from_secs(30)) => {}
            _ = stop.wait_for(|s| *s) => return,
        }
    }
}

/// The store URL read (its TLS settings included), and the target as
/// messages name it (never the password).
fn conn_of(url: &str) -> Result<(tls::Conn, String), StoreError> {
    let config = tls::Conn::parse(url).map_err(|e| {
        StoreError::Unreachable(format!("the store URL {} is not valid: {e}", redact(url)))
    })?;
    let target = describe(&config.pg);
    Ok((config, target))
}

async fn connect(config: &tls::Conn, target: &str) -> Result<Client, StoreError> {
    let connecting = config.pg.connect(config.tls.clone());
    let (client, connection) = connecting.await.map_err(|e| {
        let why = format!("{}{}", cause(&e), tls_hint(&e, &config.settings));
        config.health.failed(&why);
        StoreError::Unreachable(format!("cannot reach PostgreSQL at {target}: {why}"))
    })?;
    config.health.reached();
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            tracing::warn!(error = %e, "a PostgreSQL connection of the store closed");
        }
    });
    Ok(client)
}

/// `host:port/db` for messages (never the password).
fn describe(config: &tokio_postgres::Config) -> String {
    let ports = config.get_ports();
    let hosts: Vec<String> = config
        .get_hosts()
        .iter()
        .enumerate()
        .map(|(i, h)| {
            let host = match h {
                tokio_postgres::config::Host::Tcp(name) => name.clone(),
                tokio_postgres::config::Host::Unix(path) => path.display().to_string(),
            };
            // One port for every host, or one each (libpq's rule).
            let port = ports.get(i).or(ports.first()).copied().unwrap_or(5432);
            format!("{host}:{port}")
        })
        .collect();
    let hosts = if hosts.is_empty() {
        "localhost:5432".to_string()
    } else {
        hosts.join(",")
    };
    let db = config.get_dbname().unwrap_or("postgres");
    format!("{hosts}/{db}")
}

/// The URL without its password.
fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let userinfo = &url[scheme + 3..at];
            let user = userinfo.split(':').next().unwrap_or("");
            format!("{}{user}:***{}", &url[..scheme + 3], &url[at..])
        }
        _ => url.to_string(),
    }
}

/// What to check when a TLS handshake failed.
fn tls_hint(e: &tokio_postgres::Error, settings: &tls::Settings) -> String {
    let text = format!("{e:?}");
    if text.contains("InvalidCertificate") || text.contains("invalid peer certificate") {
        format!(
            " (sslmode={:?} checks the server's certificate against sslrootcert{}; is it the CA that signed it, and does the host name match?)",
            settings.mode,
            settings
                .root
                .as_ref()
                .map(|r| format!(" {}", r.display()))
                .unwrap_or_default()
        )
    } else {
        String::new()
    }
}

/// The database's own message, not tokio-postgres' "db error" wrapper.
fn cause(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => db.message().to_string(),
        None => {
            let mut text = e.to_string();
            let mut source = std::error::Error::source(e);
            while let Some(s) = source {
                text = format!("{text}: {s}");
                source = s.source();
            }
            text
        }
    }
}

fn failed(target: &str, e: &tokio_postgres::Error) -> StoreError {
    if e.is_closed() {
        StoreError::Unreachable(format!(
            "lost the connection to PostgreSQL at {target}: {}",
            cause(e)
        ))
    } else {
        StoreError::Database(format!("PostgreSQL at {target}: {}", cause(e)))
    }
}

fn to_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

fn from_i64(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

#[cfg(test)]
mod tests;
