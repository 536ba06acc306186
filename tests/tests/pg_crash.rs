//! PostgreSQL itself failing under load: `kill -9` of the postmaster of the
//! test's own instance while three daemons on its log take tickets and
//! triage them, then either PostgreSQL started again (crash recovery) or
//! its synchronous standby promoted (failover; the daemons' URL names both
//! hosts with `target_session_attrs=read-write`). Nothing acknowledged is
//! lost, nothing is stored twice, every daemon appends again within 10 s
//! of the database's return, and no ticket is routed twice.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tinycode_tests::pg_tls::{TlsServer, server_bin};
use tinycode_tests::shared_desk::{member_at, router};
use tinycode_tests::{Desk, wait_until};

/// What one client of one daemon saw: the subjects acknowledged, and when
/// each create answered (ok or not).
#[derive(Default)]
struct Seen {
    acked: Vec<String>,
    answers: Vec<(Instant, bool)>,
}

/// Create tickets through `desk` until `stop`, one at a time.
fn load(desk: &Desk, tag: usize, stop: &AtomicBool, seen: &Mutex<Seen>) {
    let mut n = 0;
    while !stop.load(Ordering::Acquire) {
        let subject = format!("load {tag}-{n}");
        let ok = desk.create_ticket(&subject).code == 0;
        let mut seen = seen.lock().unwrap();
        seen.answers.push((Instant::now(), ok));
        if ok {
            seen.acked.push(subject);
        }
        n += 1;
        drop(seen);
        std::thread::sleep(Duration::from_millis(100));
    }
}

struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Release);
    }
}

fn available() -> bool {
    if server_bin().is_some() {
        return true;
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "PostgreSQL's server binaries must be installed in CI"
    );
    false
}

/// Three daemons on the log at `url` create tickets (one client each) and
/// triage them; after 4 s `fault` runs, which returns once the database
/// takes writes again; the load goes on for 12 s after. What each client
/// saw, and when the database was back.
fn under_load(desks: &[Desk], fault: impl FnOnce()) -> (Vec<Seen>, Instant) {
    for d in desks {
        d.ok(&["ticket", "list"]);
    }
    let stop = Arc::new(AtomicBool::new(false));
    let seen: Vec<Arc<Mutex<Seen>>> = desks.iter().map(|_| Arc::default()).collect();
    let back = std::thread::scope(|scope| {
        for (i, d) in desks.iter().enumerate() {
            let (stop, seen) = (Arc::clone(&stop), Arc::clone(&seen[i]));
            scope.spawn(move || load(d, i, &stop, &seen));
        }
        // The load ends also when this thread panics (else the scope
        // would wait for it forever).
        let _stop = StopOnDrop(&stop);
        std::thread::sleep(Duration::from_secs(4));
        fault();
        let back = Instant::now();
        std::thread::sleep(Duration::from_secs(12));
        back
    });
    let seen = seen
        .into_iter()
        .map(|s| std::mem::take(&mut *s.lock().unwrap()))
        .collect();
    (seen, back)
}

/// Every daemon had a create acknowledged within 10 s of `back`.
fn each_appends_again(desks: &[Desk], seen: &[Seen], back: Instant) {
    for (i, s) in seen.iter().enumerate() {
        let failed = s.answers.iter().filter(|(_, ok)| !ok).count();
        let first = s
            .answers
            .iter()
            .find(|(at, ok)| *ok && *at > back)
            .map(|(at, _)| at.duration_since(back));
        assert!(
            first.is_some_and(|b| b < Duration::from_secs(10)),
            "daemon {i}: first acknowledged create {first:?} after the database was back \
             ({failed} refused)\n{}",
            desks[i].log()
        );
    }
}

/// The tickets of the log by subject: their ids.
fn subjects(d: &Desk) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for e in d.events(&["--stream", "ticket-"]) {
        if let Some(t) = e["ticketCreated"]["ticket"].as_object() {
            let subject = t["subject"].as_str().unwrap_or_default().to_string();
            out.entry(subject)
                .or_default()
                .push(t["id"].as_str().unwrap_or_default().to_string());
        }
    }
    out
}

/// Each acknowledged ticket is in the log once; none is there twice.
/// The ids of the load's tickets.
fn each_acknowledged_stored_once(reader: &Desk, seen: &[Seen]) -> Vec<String> {
    let acked: Vec<&String> = seen.iter().flat_map(|s| &s.acked).collect();
    let all_there = wait_until(Duration::from_secs(30), || {
        let stored = subjects(reader);
        acked.iter().all(|s| stored.contains_key(*s))
    });
    let stored = subjects(reader);
    let missing: Vec<_> = acked.iter().filter(|s| !stored.contains_key(**s)).collect();
    assert!(all_there, "acknowledged but missing: {missing:?}");
    let twice: Vec<_> = stored.iter().filter(|(_, ids)| ids.len() > 1).collect();
    assert!(twice.is_empty(), "stored twice: {twice:?}");
    assert!(
        acked.len() > 30,
        "only {} creates were acknowledged",
        acked.len()
    );
    stored
        .iter()
        .filter(|(s, _)| s.starts_with("load "))
        .map(|(_, ids)| ids[0].clone())
        .collect()
}

/// How many times each ticket was routed.
fn routes(d: &Desk) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for e in d.events(&["--stream", "ticket-"]) {
        if e.get("ticketRouted").is_some() {
            let t = e["streamId"].as_str().unwrap()["ticket-".len()..].to_string();
            *out.entry(t).or_default() += 1;
        }
    }
    out
}

/// Triage goes on: every ticket of `ids` routed, none twice.
fn each_routed_once(desks: &[Desk], ids: &[String]) {
    let reader = &desks[0];
    let mut routed = BTreeMap::new();
    let all_routed = wait_until(Duration::from_secs(120), || {
        routed = routes(reader);
        ids.iter().all(|id| routed.contains_key(id))
    });
    let unrouted: Vec<&String> = ids.iter().filter(|id| !routed.contains_key(*id)).collect();
    let trouble = || {
        desks
            .iter()
            .flat_map(|d| {
                d.log()
                    .lines()
                    .filter(|l| {
                        !l.contains(" INFO ") || unrouted.iter().any(|id| l.contains(id.as_str()))
                    })
                    .filter(|l| !l.contains("unreachable") && !l.contains("cannot reach"))
                    .map(str::to_string)
                    .collect::<Vec<_>>()
            })
            .collect::<Vec<_>>()
            .join("\n")
    };
    assert!(
        all_routed,
        "{} of {} routed; not: {unrouted:?}\n{:#?}\n{}",
        ids.len() - unrouted.len(),
        ids.len(),
        unrouted
            .iter()
            .map(|id| reader.events(&["--stream", &format!("triage-{id}")]))
            .collect::<Vec<_>>(),
        trouble(),
    );
    let doubled: Vec<_> = routed.iter().filter(|(_, n)| **n > 1).collect();
    assert!(doubled.is_empty(), "routed twice: {doubled:?}");
}

/// The whole check after a fault: back within 10 s, nothing lost or
/// doubled, every ticket routed once.
fn nothing_lost_or_doubled(desks: &[Desk], seen: &[Seen], back: Instant) {
    each_appends_again(desks, seen, back);
    let ids = each_acknowledged_stored_once(&desks[0], seen);
    each_routed_once(desks, &ids);
    for d in desks {
        d.stop();
    }
}

#[test]
fn postgres_killed_under_load_loses_and_doubles_nothing_and_every_daemon_appends_again() {
    if !available() {
        return;
    }
    let pg = TlsServer::start();
    let url = pg.url("postgres", "localhost", "sslmode=require");
    let mock = router(Duration::from_millis(50));
    let desks: Vec<Desk> = (0..3).map(|_| member_at(&url, &mock, 2)).collect();
    let (seen, back) = under_load(&desks, || {
        pg.crash();
        std::thread::sleep(Duration::from_secs(1));
        pg.start_again();
    });
    nothing_lost_or_doubled(&desks, &seen, back);
}

/// The primary dies (`kill -9`) and its synchronous standby is promoted,
/// as an operator or a failover manager does: the daemons find the new
/// primary among the URL's hosts.
#[test]
fn a_primary_killed_under_load_and_its_standby_promoted_loses_and_doubles_nothing() {
    if !available() {
        return;
    }
    let primary = TlsServer::start();
    let standby = primary.standby();
    let url = format!(
        "postgres://postgres@localhost:{},localhost:{}/postgres?hostaddr=127.0.0.1,127.0.0.1\
         &sslmode=verify-full&sslrootcert={}&target_session_attrs=read-write",
        primary.port,
        standby.port,
        primary.ca.display()
    );
    let mock = router(Duration::from_millis(50));
    let desks: Vec<Desk> = (0..3).map(|_| member_at(&url, &mock, 2)).collect();
    let (seen, back) = under_load(&desks, || {
        primary.crash();
        std::thread::sleep(Duration::from_secs(1));
        standby.promote();
    });
    nothing_lost_or_doubled(&desks, &seen, back);
    // The log is the promoted standby's: the old primary is gone.
    let stored: usize = standby
        .query("SELECT count(*) FROM tinycode_events")
        .parse()
        .unwrap();
    assert!(stored > 30, "{stored} events on the promoted standby");
}
