//! PostgreSQL itself crashing under load: `kill -9` of the postmaster of
//! the test's own instance while three daemons on its log take tickets and
//! triage them, then PostgreSQL started again (crash recovery). Nothing
//! acknowledged is lost, nothing is stored twice, every daemon appends
//! again within 10 s of the restart, and no ticket is routed twice.
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

#[test]
fn postgres_killed_under_load_loses_and_doubles_nothing_and_every_daemon_appends_again() {
    if server_bin().is_none() {
        assert!(
            std::env::var_os("CI").is_none(),
            "PostgreSQL's server binaries must be installed in CI"
        );
        return;
    }
    let pg = TlsServer::start();
    let url = pg.url("postgres", "localhost", "sslmode=require");
    let mock = router(Duration::from_millis(50));
    let desks: Vec<Desk> = (0..3).map(|_| member_at(&url, &mock, 2)).collect();
    for d in &desks {
        d.ok(&["ticket", "list"]);
    }
    let stop = Arc::new(AtomicBool::new(false));
    let seen: Vec<Arc<Mutex<Seen>>> = (0..3).map(|_| Arc::default()).collect();
    let restarted = std::thread::scope(|scope| {
        for (i, d) in desks.iter().enumerate() {
            let (stop, seen) = (Arc::clone(&stop), Arc::clone(&seen[i]));
            scope.spawn(move || load(d, i, &stop, &seen));
        }
        // The load ends also when this thread panics (else the scope
        // would wait for it forever).
        let _stop = StopOnDrop(&stop);
        std::thread::sleep(Duration::from_secs(4));
        pg.crash();
        std::thread::sleep(Duration::from_secs(1));
        pg.start_again();
        let restarted = Instant::now();
        std::thread::sleep(Duration::from_secs(12));
        stop.store(true, Ordering::Release);
        restarted
    });

    // Every daemon appended again within 10 s of the restart.
    for (i, s) in seen.iter().enumerate() {
        let s = s.lock().unwrap();
        let failed = s.answers.iter().filter(|(_, ok)| !ok).count();
        let back = s
            .answers
            .iter()
            .find(|(at, ok)| *ok && *at > restarted)
            .map(|(at, _)| at.duration_since(restarted));
        assert!(
            back.is_some_and(|b| b < Duration::from_secs(10)),
            "daemon {i}: first acknowledged create {back:?} after the restart ({failed} refused)\n{}",
            desks[i].log()
        );
    }

    // Each acknowledged ticket is in the log once; none is there twice.
    let reader = &desks[0];
    let acked: Vec<String> = seen
        .iter()
        .flat_map(|s| s.lock().unwrap().acked.clone())
        .collect();
    let subjects = |d: &Desk| -> BTreeMap<String, Vec<String>> {
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
    };
    let all_there = wait_until(Duration::from_secs(30), || {
        let stored = subjects(reader);
        acked.iter().all(|s| stored.contains_key(s))
    });
    let stored = subjects(reader);
    assert!(
        all_there,
        "acknowledged but missing: {:?}",
        acked
            .iter()
            .filter(|s| !stored.contains_key(*s))
            .collect::<Vec<_>>()
    );
    let twice: Vec<_> = stored.iter().filter(|(_, ids)| ids.len() > 1).collect();
    assert!(twice.is_empty(), "stored twice: {twice:?}");
    assert!(
        acked.len() > 30,
        "only {} creates were acknowledged",
        acked.len()
    );

    // Triage goes on: every load ticket routed, none twice.
    let ids: Vec<String> = stored
        .iter()
        .filter(|(s, _)| s.starts_with("load "))
        .map(|(_, ids)| ids[0].clone())
        .collect();
    let routes = |d: &Desk| -> BTreeMap<String, usize> {
        let mut out = BTreeMap::new();
        for e in d.events(&["--stream", "ticket-"]) {
            if e.get("ticketRouted").is_some() {
                let t = e["streamId"].as_str().unwrap()["ticket-".len()..].to_string();
                *out.entry(t).or_default() += 1;
            }
        }
        out
    };
    let mut routed = BTreeMap::new();
    let all_routed = wait_until(Duration::from_secs(120), || {
        routed = routes(reader);
        ids.iter().all(|id| routed.contains_key(id))
    });
    let unrouted: Vec<&String> = ids.iter().filter(|id| !routed.contains_key(*id)).collect();
    assert!(
        all_routed,
        "{} of {} routed; not: {unrouted:?}\n{:#?}\n{:#?}\n{}",
        ids.len() - unrouted.len(),
        ids.len(),
        unrouted
            .iter()
            .map(|id| reader.events(&["--stream", &format!("triage-{id}")]))
            .collect::<Vec<_>>(),
        unrouted
            .iter()
            .map(|id| reader.events(&["--stream", &format!("ticket-{id}")]))
            .collect::<Vec<_>>(),
        desks
            .iter()
            .flat_map(|d| {
                let log = d.log();
                let sessions: Vec<String> = Vec::new();
                let _ = sessions;
                log.lines()
                    .filter(|l| {
                        !l.contains(" INFO ") || unrouted.iter().any(|id| l.contains(id.as_str()))
                    })
                    .filter(|l| !l.contains("unreachable") && !l.contains("cannot reach"))
                    .map(str::to_string)
                    .collect::<Vec<_>>()
            })
            .collect::<Vec<_>>()
            .join("\n"),
    );
    let doubled: Vec<_> = routed.iter().filter(|(_, n)| **n > 1).collect();
    assert!(doubled.is_empty(), "routed twice: {doubled:?}");
    for d in &desks {
        d.stop();
    }
}
