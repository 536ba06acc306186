//! The daemons sharing one log: who this daemon is, its heartbeat, and
//! whether another daemon is still alive.
//!
//! A daemon's identity is stable per state dir (`<state dir>/daemon-id`),
//! so a restarted daemon picks up its own work. It tells the store it is
//! alive every quarter lease; the store keeps one row per daemon and
//! answers with how long ago each was heard from by the *store's* clock,
//! so the machines' clocks never decide who is dead. A daemon unheard for
//! a lease is taken for dead: its work (triage records it holds) goes to
//! whoever claims it first, through the claimed stream's expected version.
//! A daemon that stops cleanly leaves at once. On the embedded log the
//! daemon is alone and all of this is a no-op.
//!
//! Self-fencing: the lease is held from the moment the last acknowledged
//! heartbeat was *sent* (by this machine's monotonic clock, so earlier than
//! the store recorded it). Half a lease after that with no renewal the
//! daemon is fenced ([`Cluster::fenced`]): no tool call and no turn starts
//! ([`Cluster::hold`] waits), while the store itself refuses its appends
//! once the lease has lapsed by the store's clock (`EventStore::fence`).
//! A renewal that comes a full lease or more after the previous one counts
//! a lapse ([`Cluster::lapses`]): work paused across it may have been taken
//! over, and is checked before it goes on.

use std::collections::HashSet;
use std::path::Path;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::watch;

use crate::store::{EventStore, Member, StoreError};

pub struct Cluster {
    me: Member,
    lease: Duration,
    store: EventStore,
    /// The last answer of the store, for status.
    seen: RwLock<Vec<Member>>,
    /// Left: no heartbeat any more.
    left: std::sync::atomic::AtomicBool,
    renewal: std::sync::Mutex<Renewal>,
    /// Counts renewals, for [`Cluster::hold`]'s waiters.
    renewed: watch::Sender<u64>,
}

/// The last acknowledged heartbeat: when it was sent (monotonic, and the
/// wall clock for status), and how many times the lease lapsed.
struct Renewal {
    sent: Instant,
    at: SystemTime,
    lapses: u64,
}

impl Cluster {
    /// Join: the first heartbeat is stored before anything is claimed, then
    /// one every quarter `lease` in the background.
    pub async fn join(
        store: EventStore,
        me: Member,
        lease: Duration,
    ) -> Result<Arc<Self>, StoreError> {
        let cluster = Arc::new(Self {
            me,
            lease,
            store,
            seen: RwLock::new(Vec::new()),
            left: std::sync::atomic::AtomicBool::new(false),
            renewal: std::sync::Mutex::new(Renewal {
                sent: Instant::now(),
                at: SystemTime::now(),
                lapses: 0,
            }),
            renewed: watch::Sender::new(0),
        });
        if cluster.store.shared() {
            cluster
                .store
                .fence(Some((cluster.me.id.clone(), cluster.lease)));
        }
        cluster.beat().await?;
        let weak = Arc::downgrade(&cluster);
        tokio::spawn(async move {
            let every = lease / 4;
            let mut wait = every;
            loop {
                tokio::time::sleep(wait).await;
                let Some(cluster) = weak.upgrade() else {
                    return;
                };
                if cluster.left.load(std::sync::atomic::Ordering::Acquire) {
                    return;
                }
                wait = every;
                if let Err(e) = cluster.beat().await {
                    // Sooner again: the lease is running out.
                    wait = every / 2;
                    crate::warn_limited!("heartbeat", error = %e, "the heartbeat to the shared log failed");
                }
            }
        });
        Ok(cluster)
    }

    async fn beat(&self) -> Result<(), StoreError> {
        if self.left.load(std::sync::atomic::Ordering::Acquire) {
            return Ok(());
        }
        let (sent, at) = (Instant::now(), SystemTime::now());
        self.store.heartbeat(self.me.clone()).await?;
        self.renew(sent, at);
        let members = self.store.members().await?;
        // Alone on the log: nobody to wake (a daemon joining wakes this one
        // by its own appends, and this one learns of it at its next beat).
        let others = members
            .iter()
            .any(|m| m.id != self.me.id && Duration::from_millis(m.heartbeat_age_ms) < self.lease);
        self.store.wake_others(others);
        *self.seen.write().unwrap_or_else(|p| p.into_inner()) = members;
        Ok(())
    }

    /// The lease is held again from `sent`; a renewal a lease or more
    /// after the previous one's sending is a lapse.
    fn renew(&self, sent: Instant, at: SystemTime) {
        let mut r = crate::sync::lock(&self.renewal);
        let gap = Instant::now().saturating_duration_since(r.sent);
        if gap >= self.lease {
            r.lapses += 1;
            tracing::warn!(
                gap_ms = gap.as_millis() as u64,
                lease_ms = self.lease.as_millis() as u64,
                "the lease on the shared log had lapsed and is renewed; paused work checks whether it was taken over"
            );
        }
        if sent > r.sent {
            r.sent = sent;
            r.at = at;
        }
        drop(r);
        self.renewed.send_modify(|n| *n += 1);
    }

    /// Why this daemon must not start a tool call or a turn now: its lease
    /// was last renewed half a lease ago or more (`None` on a log nobody
    /// shares, or once it left).
    pub fn fenced(&self) -> Option<String> {
        if !self.store.shared() || self.left.load(std::sync::atomic::Ordering::Acquire) {
            return None;
        }
        let r = crate::sync::lock(&self.renewal);
        let age = r.sent.elapsed();
        if age < self.lease / 2 {
            return None;
        }
        let since = r.at + self.lease / 2;
        let since = since
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as i64);
        Some(format!(
            "fenced since {}: the lease on the shared log was last renewed {:.1} s ago (lease {} s); no tool call or turn starts until it is renewed",
            tinycode_shared::render::rfc3339(since, 0),
            age.as_secs_f64(),
            self.lease.as_secs_f64()
        ))
    }

    /// How many times the lease lapsed so far.
    pub fn lapses(&self) -> u64 {
        crate::sync::lock(&self.renewal).lapses
    }

    /// Wait while fenced; returns [`Self::lapses`] once it may act (a
    /// number above one read before means the lease lapsed meanwhile).
    pub async fn hold(&self) -> u64 {
        let mut renewed = self.renewed.subscribe();
        let poll = (self.lease / 8).max(Duration::from_millis(50));
        while self.fenced().is_some() {
            tokio::select! {
                _ = renewed.changed() => {}
                () = tokio::time::sleep(poll) => {}
            }
        }
        self.lapses()
    }

    /// This daemon's id.
    pub fn id(&self) -> &str {
        &self.me.id
    }

    pub fn lease(&self) -> Duration {
        self.lease
    }

    /// Wait half a lease (the pace of looking for dead daemons' work);
    /// `false` once the store is closing.
    pub async fn half_lease(&self, closing: &mut tokio::sync::watch::Receiver<bool>) -> bool {
        let every = (self.lease / 2).max(Duration::from_millis(200));
        tokio::select! {
            () = tokio::time::sleep(every) => !*closing.borrow(),
            _ = closing.changed() => false,
        }
    }

    /// Whether `id` was heard from within the lease (see [`Self::live_ids`]).
    pub async fn alive(&self, id: &str) -> Result<bool, StoreError> {
        Ok(self.live_ids().await?.contains(id))
    }

    /// The daemons heard from within the lease, this one always among
    /// them, asked of the store now (never from a cached answer: a daemon
    /// that started a moment ago must not look dead).
    pub async fn live_ids(&self) -> Result<HashSet<String>, StoreError> {
        let members = self.store.members().await?;
        let mut live: HashSet<String> = members
            .iter()
            .filter(|m| Duration::from_millis(m.heartbeat_age_ms) < self.lease)
            .map(|m| m.id.clone())
            .collect();
        live.insert(self.me.id.clone());
        *self.seen.write().unwrap_or_else(|p| p.into_inner()) = members;
        Ok(live)
    }

    /// The daemons sharing the log as the store has them now (as last
    /// heard, when it cannot answer), this one included also on a log
    /// nobody else shares, and whether each is alive.
    pub async fn members(&self) -> Vec<(Member, bool)> {
        // Within half a lease: status answers while the store does not.
        match tokio::time::timeout(self.lease / 2, self.store.members()).await {
            Ok(Ok(members)) => *self.seen.write().unwrap_or_else(|p| p.into_inner()) = members,
            Ok(Err(e)) => tracing::warn!(error = %e, "cannot list the daemons sharing the log"),
            Err(_) => {
                tracing::warn!("the daemons sharing the log were not listed within half a lease")
            }
        }
        let mut all = self.seen.read().unwrap_or_else(|p| p.into_inner()).clone();
        if !all.iter().any(|m| m.id == self.me.id) {
            all.insert(0, self.me.clone());
        }
        all.into_iter()
            .map(|m| {
                let alive =
                    m.id == self.me.id || Duration::from_millis(m.heartbeat_age_ms) < self.lease;
                (m, alive)
            })
            .collect()
    }

    /// Stopping cleanly: leave at once, so others take over without
    /// waiting out the lease.
    pub async fn leave(&self) {
        self.left.store(true, std::sync::atomic::Ordering::Release);
        self.store.fence(None);
        if let Err(e) = self.store.leave(&self.me.id).await {
            tracing::warn!(error = %e, "could not leave the shared log's daemon list");
        }
    }
}

/// This state dir's daemon id: `<host>-<8 hex>`, made once and kept in
/// `<state dir>/daemon-id`.
pub fn daemon_id(state_dir: &Path) -> std::io::Result<String> {
    let file = state_dir.join("daemon-id");
    match std::fs::read_to_string(&file) {
        Ok(id) if !id.trim().is_empty() => return Ok(id.trim().to_string()),
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let seed = format!("{nanos}-{}-{}", std::process::id(), state_dir.display());
    let id = format!(
        "{}-{:08x}",
        host_name(),
        crate::fnv::fnv1a(seed.bytes()) as u32
    );
    std::fs::write(&file, format!("{id}\n"))?;
    Ok(id)
}

/// The machine's name (`/proc/sys/kernel/hostname`, else `$HOSTNAME`).
pub fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_state_dir_keeps_its_daemon_id() {
        let dir = tempfile::tempdir().unwrap();
        let first = daemon_id(dir.path()).unwrap();
        assert!(first.starts_with(&host_name()), "{first}");
        assert_eq!(daemon_id(dir.path()).unwrap(), first);
        let other = tempfile::tempdir().unwrap();
        assert_ne!(daemon_id(other.path()).unwrap(), first);
    }

    #[tokio::test]
    async fn alone_on_the_embedded_log_it_is_the_only_member() {
        let dir = tempfile::tempdir().unwrap();
        let store = EventStore::open(&dir.path().join("db")).unwrap();
        let me = Member {
            id: "me".into(),
            ..Member::default()
        };
        let cluster = Cluster::join(store, me, Duration::from_secs(8))
            .await
            .unwrap();
        assert!(cluster.alive("me").await.unwrap());
        assert!(!cluster.alive("someone-else").await.unwrap());
        let members = cluster.members().await;
        assert_eq!(members.len(), 1);
        assert_eq!((members[0].0.id.as_str(), members[0].1), ("me", true));
    }
}
