//! A log that knows when it is damaged: the durable head, checksums,
//! recovery, verify, export and import.

use tinycode_shared::proto::DaemonStopped;
use tinycode_shared::proto::event::Payload;

use super::*;
use crate::store::EventStore;

fn payload(n: u32) -> Payload {
    Payload::DaemonStopped(DaemonStopped {
        pid: n,
        uptime_ms: 0,
        reason: format!("test {n}"),
    })
}

/// A log of `n` events (streams `s0`..`s4`), closed.
async fn written(dir: &std::path::Path, n: u32) {
    let store = EventStore::open(dir).unwrap();
    for i in 0..n {
        store
            .append(
                &format!("s{}", i % 5),
                ExpectedVersion::Any,
                vec![payload(i)],
            )
            .await
            .unwrap();
    }
    store.close().await.unwrap();
}

/// Retry `f` while sled still holds the directory's lock (a Db dropped a
/// moment ago releases it from its own threads).
fn retried<T>(mut f: impl FnMut() -> Result<T, StoreError>) -> Result<T, StoreError> {
    for _ in 0..200 {
        match f() {
            Err(StoreError::Io(e)) if e.contains("could not acquire lock") => {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            other => return other,
        }
    }
    f()
}

/// Change the stored log with sled directly (what a torn file does).
fn tamper(dir: &std::path::Path, f: impl FnOnce(&sled::Tree)) {
    let db = (0..200)
        .find_map(|_| {
            let db = sled::Config::new().path(dir).open();
            if db.is_err() {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            db.ok()
        })
        .expect("sled let go of the log");
    f(&db.open_tree("events").unwrap());
    db.flush().unwrap();
}

#[tokio::test]
async fn a_log_that_lost_acknowledged_events_refuses_to_open_and_names_them() {
    let dir = tempfile::tempdir().unwrap();
    written(dir.path(), 20).await;
    tamper(dir.path(), |events| {
        for seq in 18..=20u64 {
            events.remove(seq.to_be_bytes()).unwrap();
        }
    });
    let err = retried(|| EventStore::open(dir.path())).err().unwrap();
    assert!(
        matches!(
            err,
            StoreError::Damaged {
                lost_from: 18,
                lost_to: 20,
                readable: 17
            }
        ),
        "{err}"
    );
    let message = err.to_string();
    assert!(message.contains("events 18–20"), "{message}");
    assert!(message.contains("--recover"), "{message}");
    // Refusing changed nothing: it refuses again, and verify agrees.
    assert!(matches!(
        retried(|| EventStore::open(dir.path())),
        Err(StoreError::Damaged { .. })
    ));
    let report = EventStore::verify(dir.path()).unwrap();
    assert_eq!(report.events, 17);
    assert!(
        report.problems.iter().any(|p| p.contains("events 18–20")),
        "{report:?}"
    );
}

#[tokio::test]
async fn recover_records_the_loss_and_never_reuses_a_sequence() {
    let dir = tempfile::tempdir().unwrap();
    written(dir.path(), 20).await;
    tamper(dir.path(), |events| {
        for seq in 15..=20u64 {
            events.remove(seq.to_be_bytes()).unwrap();
        }
    });
    let options = StoreOptions {
        recover: true,
        ..StoreOptions::default()
    };
    let store = retried(|| EventStore::open_with(dir.path(), options)).unwrap();
    let lost = *store.recovered().unwrap();
    assert_eq!((lost.lost_from, lost.lost_to, lost.readable), (15, 20, 14));
    let recorded = store.get(21).await.unwrap().unwrap();
    assert!(matches!(recorded.payload, Some(Payload::LogRecovered(r)) if r == lost));
    let next = store
        .append("s0", ExpectedVersion::Any, vec![payload(99)])
        .await
        .unwrap();
    assert_eq!(next[0].sequence, 22, "15–20 are never used again");
    // Stream versions continue from what is left (s0 had 0, 5, 10 left).
    assert_eq!(next[0].stream_version, 4);
    store.close().await.unwrap();
    drop(store);
    let report = retried(|| EventStore::verify(dir.path())).unwrap();
    assert!(report.problems.is_empty(), "{report:?}");
    assert_eq!(report.recovered_gaps, [(15, 20)]);
    // A plain start opens it now.
    let again = retried(|| EventStore::open(dir.path())).unwrap();
    assert_eq!(again.last_sequence(), 22);
}

#[tokio::test]
async fn a_damaged_event_fails_its_checksum_on_read_and_in_verify() {
    let dir = tempfile::tempdir().unwrap();
    written(dir.path(), 10).await;
    tamper(dir.path(), |events| {
        let key = 4u64.to_be_bytes();
        let mut value = events.get(key).unwrap().unwrap().to_vec();
        let last = value.len() - 1;
        value[last] ^= 0x20;
        events.insert(key, value).unwrap();
    });
    let store = retried(|| EventStore::open(dir.path())).unwrap();
    assert!(matches!(
        store.get(4).await,
        Err(StoreError::Checksum { sequence: 4 })
    ));
    assert!(store.get(5).await.unwrap().is_some());
    store.close().await.unwrap();
    drop(store);
    let report = retried(|| EventStore::verify(dir.path())).unwrap();
    assert!(
        report.problems.iter().any(|p| p.contains("sequence 4")),
        "{report:?}"
    );
}

#[tokio::test]
async fn an_export_imports_into_an_equal_log() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    written(&db, 30).await;
    let file = dir.path().join("backup.tclog");
    assert_eq!(retried(|| EventStore::export(&db, &file)).unwrap(), 30);
    let restored = dir.path().join("restored");
    assert_eq!(EventStore::import(&restored, &file).unwrap(), 30);
    let a = retried(|| EventStore::open(&db)).unwrap();
    let b = retried(|| EventStore::open(&restored)).unwrap();
    assert_eq!(
        a.read_range(1, u64::MAX, 100).await.unwrap(),
        b.read_range(1, u64::MAX, 100).await.unwrap()
    );
    assert_eq!(b.read_stream("s3", 1, 100).await.unwrap().len(), 6);
    a.close().await.unwrap();
    b.close().await.unwrap();
    drop((a, b));
    assert!(
        retried(|| EventStore::verify(&restored))
            .unwrap()
            .problems
            .is_empty()
    );
    // A damaged export is refused, naming the record; nothing is written.
    let mut bytes = std::fs::read(&file).unwrap();
    let at = bytes.len() - 3;
    bytes[at] ^= 1;
    std::fs::write(&file, &bytes).unwrap();
    let err = EventStore::import(&dir.path().join("other"), &file).unwrap_err();
    assert!(
        err.to_string().contains("record 30 fails its checksum"),
        "{err}"
    );
    // Import only fills an empty log.
    let err = retried(|| EventStore::import(&restored, &file)).unwrap_err();
    assert!(err.to_string().contains("not empty"), "{err}");
}
