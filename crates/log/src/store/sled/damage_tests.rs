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

/// sled without events `lost` (its stream index left as it is).
fn sled_lost(dir: &std::path::Path, lost: std::ops::RangeInclusive<u64>) {
    tamper(dir, |events| {
        for seq in lost {
            events.remove(seq.to_be_bytes()).unwrap();
        }
    });
}

/// Flip a byte inside the body of the segment record of event `seq` (one
/// record per append in these logs), leaving the records after it whole.
fn damage_copy(dir: &std::path::Path, seq: u64) {
    let (_, path) = segments::list(&segments::dir_of(dir))
        .unwrap()
        .pop()
        .unwrap();
    let mut bytes = std::fs::read(&path).unwrap();
    // Find the record whose first sequence is `seq` (header bytes 8..16).
    let mut at = 0;
    loop {
        let len = u32::from_le_bytes(bytes[at + 4..at + 8].try_into().unwrap()) as usize;
        let first = u64::from_le_bytes(bytes[at + 8..at + 16].try_into().unwrap());
        if first == seq {
            bytes[at + 40 + len / 2] ^= 0xff;
            break;
        }
        at += 40 + len;
    }
    std::fs::write(&path, &bytes).unwrap();
}

#[tokio::test]
async fn a_log_that_lost_acknowledged_events_its_copy_cannot_give_refuses_to_open() {
    let dir = tempfile::tempdir().unwrap();
    written(dir.path(), 20).await;
    sled_lost(dir.path(), 18..=20);
    damage_copy(dir.path(), 18);
    let err = retried(|| EventStore::open(dir.path())).err().unwrap();
    assert!(
        matches!(
            err,
            StoreError::Behind {
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
    assert!(message.contains("nothing was changed"), "{message}");
    // Refusing changed nothing: it refuses again, and verify agrees.
    assert!(matches!(
        retried(|| EventStore::open(dir.path())),
        Err(StoreError::Behind { .. })
    ));
    let report = retried(|| EventStore::verify(dir.path())).unwrap();
    assert_eq!(report.events, 17);
    assert!(
        report.problems.iter().any(|p| p.contains("events 18–20")),
        "{report:?}"
    );
}

/// sled is flushed later than the copy: a crash leaves it behind the copy by
/// any number of group commits, which a start writes into sled again.
#[tokio::test]
async fn sled_behind_its_whole_copy_is_written_forward_at_open() {
    let dir = tempfile::tempdir().unwrap();
    written(dir.path(), 20).await;
    sled_lost(dir.path(), 14..=20);
    let report = retried(|| EventStore::verify(dir.path())).unwrap();
    assert!(
        report.problems.is_empty(),
        "the copy gives them: {report:?}"
    );
    let store = retried(|| EventStore::open(dir.path())).unwrap();
    assert!(store.recovered().is_none(), "nothing was lost");
    assert_eq!(store.last_sequence(), 20);
    let all = store.read_range(1, u64::MAX, 100).await.unwrap();
    assert_eq!(all.len(), 20);
    assert_eq!(store.read_stream("s4", 1, 10).await.unwrap().len(), 4);
    let next = store
        .append("s0", ExpectedVersion::Any, vec![payload(99)])
        .await
        .unwrap();
    assert_eq!(next[0].sequence, 21);
    store.close().await.unwrap();
    drop(store);
    let report = retried(|| EventStore::verify(dir.path())).unwrap();
    assert!(report.problems.is_empty(), "{report:?}");
    assert_eq!(report.events, 21);
}

#[tokio::test]
async fn recover_records_the_loss_and_never_reuses_a_sequence() {
    let dir = tempfile::tempdir().unwrap();
    written(dir.path(), 20).await;
    // sled lost 15–20, and the copy's record of 15 is damaged too.
    sled_lost(dir.path(), 15..=20);
    damage_copy(dir.path(), 15);
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

#[tokio::test]
async fn a_log_without_its_head_is_refused_unless_told_to_start_as_it_is() {
    let dir = tempfile::tempdir().unwrap();
    written(dir.path(), 12).await;
    std::fs::remove_dir_all(segments::dir_of(dir.path())).unwrap();
    let err = retried(|| EventStore::open(dir.path())).err().unwrap();
    assert!(matches!(err, StoreError::NoHead { events: 12 }), "{err}");
    let message = err.to_string();
    assert!(
        message.contains("admin import") && message.contains("--recover"),
        "{message}"
    );
    let options = StoreOptions {
        recover: true,
        ..StoreOptions::default()
    };
    let store = retried(|| EventStore::open_with(dir.path(), options)).unwrap();
    assert_eq!(store.last_sequence(), 12);
    store.close().await.unwrap();
    drop(store);
    // It has a head again: a plain start opens it.
    let again = retried(|| EventStore::open(dir.path())).unwrap();
    assert_eq!(again.last_sequence(), 12);
}

#[tokio::test]
async fn a_log_written_with_a_head_file_gets_its_copy_at_the_next_start() {
    let dir = tempfile::tempdir().unwrap();
    written(dir.path(), 9).await;
    // What an older tinycoded left: the head in `tinycode.head`, no copy.
    let head = segments::for_each(dir.path(), u64::MAX, |_, _| Ok(()))
        .unwrap()
        .0;
    std::fs::remove_dir_all(segments::dir_of(dir.path())).unwrap();
    let slot = head.encode();
    std::fs::write(head::path_of(dir.path()), [slot, slot].concat()).unwrap();
    let store = retried(|| EventStore::open(dir.path())).unwrap();
    assert_eq!(store.last_sequence(), 9);
    store.close().await.unwrap();
    drop(store);
    assert!(
        !head::path_of(dir.path()).exists(),
        "the head file is retired"
    );
    let copied = segments::for_each(dir.path(), u64::MAX, |_, _| Ok(()))
        .unwrap()
        .0;
    assert_eq!(copied, head, "the copy carries the same head");
}

/// sled's own data file made unreadable in `how`.
async fn sled_file_damaged(how: impl FnOnce(&mut Vec<u8>)) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    written(dir.path(), 30).await;
    let data = dir.path().join("db");
    let mut bytes = std::fs::read(&data).unwrap();
    how(&mut bytes);
    std::fs::write(&data, &bytes).unwrap();
    dir
}

async fn recovers_every_event(dir: &std::path::Path) {
    let err = retried(|| EventStore::open(dir)).err();
    let err = err.expect("a damaged sled file is refused");
    let message = err.to_string();
    assert!(message.contains("--recover"), "{message}");
    let options = StoreOptions {
        recover: true,
        ..StoreOptions::default()
    };
    let store = retried(|| EventStore::open_with(dir, options)).unwrap();
    assert!(store.recovered().is_none(), "nothing acknowledged was lost");
    let all = store.read_range(1, u64::MAX, 100).await.unwrap();
    assert_eq!(all.len(), 30, "every acknowledged event is back");
    for (i, e) in all.iter().enumerate() {
        assert_eq!(e.sequence, i as u64 + 1);
    }
    store.close().await.unwrap();
    drop(store);
    let report = retried(|| EventStore::verify(dir)).unwrap();
    assert!(report.problems.is_empty(), "{report:?}");
}

#[tokio::test]
async fn sled_data_file_cut_to_zero_is_rebuilt_from_the_copy() {
    let dir = sled_file_damaged(|b| b.clear()).await;
    recovers_every_event(dir.path()).await;
}

#[tokio::test]
async fn sled_first_page_flipped_is_rebuilt_from_the_copy() {
    let dir = sled_file_damaged(|b| {
        for x in b.iter_mut().take(4096) {
            *x ^= 0xff;
        }
    })
    .await;
    recovers_every_event(dir.path()).await;
}

#[tokio::test]
async fn sled_first_page_zeroed_is_rebuilt_from_the_copy() {
    let dir = sled_file_damaged(|b| {
        for x in b.iter_mut().take(4096) {
            *x = 0;
        }
    })
    .await;
    recovers_every_event(dir.path()).await;
}

/// A kill -9 in a new log's first group commit, after the copy's write and
/// before sled's flush: sled reads nothing, the copy holds that one batch.
#[tokio::test]
async fn a_crash_in_a_new_logs_first_batch_rolls_it_forward() {
    let dir = tempfile::tempdir().unwrap();
    written(dir.path(), 1).await;
    sled_lost(dir.path(), 1..=1);
    let store = retried(|| EventStore::open(dir.path())).unwrap();
    assert_eq!(store.last_sequence(), 1);
    assert_eq!(store.read_range(1, u64::MAX, 10).await.unwrap().len(), 1);
    store.close().await.unwrap();
    drop(store);
    // With more than that batch in the copy, a sled reading nothing lost
    // its file: refused.
    let dir = tempfile::tempdir().unwrap();
    written(dir.path(), 3).await;
    sled_lost(dir.path(), 1..=3);
    assert!(matches!(
        retried(|| EventStore::open(dir.path())),
        Err(StoreError::Behind { lost_from: 1, .. })
    ));
    let report = retried(|| EventStore::verify(dir.path())).unwrap();
    assert!(!report.problems.is_empty(), "verify agrees with the start");
}

#[tokio::test]
async fn a_crash_between_the_copy_and_sled_rolls_the_last_batch_forward() {
    let dir = tempfile::tempdir().unwrap();
    written(dir.path(), 10).await;
    // The copy has the last group commit (event 10), sled does not: what a
    // kill -9 between the two writes leaves. Never acknowledged, but whole.
    sled_lost(dir.path(), 10..=10);
    let store = retried(|| EventStore::open(dir.path())).unwrap();
    assert!(store.recovered().is_none());
    assert_eq!(store.last_sequence(), 10);
    assert_eq!(store.read_stream("s4", 1, 10).await.unwrap().len(), 2);
    store.close().await.unwrap();
    drop(store);
    // More than the last batch: sled's background flush had not written
    // them; the copy has them whole.
    sled_lost(dir.path(), 9..=10);
    let store = retried(|| EventStore::open(dir.path())).unwrap();
    assert_eq!(store.last_sequence(), 10);
    assert_eq!(store.read_range(1, u64::MAX, 100).await.unwrap().len(), 10);
}
