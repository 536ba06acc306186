use std::sync::Arc;

use proptest::prelude::*;
use tinycode_shared::proto::{DaemonStarted, DaemonStopped, Event, event::Payload};

use super::*;

fn payload(n: u32) -> Payload {
    Payload::DaemonStopped(DaemonStopped {
        pid: n,
        uptime_ms: 0,
        reason: format!("test {n}"),
    })
}

fn pid_of(e: &Event) -> u32 {
    match &e.payload {
        Some(Payload::DaemonStopped(s)) => s.pid,
        Some(Payload::DaemonStarted(s)) => s.pid,
        _ => u32::MAX,
    }
}

async fn drain(mut sub: Subscription) -> Vec<Arc<Event>> {
    let mut out = Vec::new();
    while let Some(e) = sub.recv().await {
        out.push(e.expect("subscription error"));
    }
    out
}

#[tokio::test]
async fn appends_get_gap_free_sequences_and_stream_versions() {
    let dir = tempfile::tempdir().unwrap();
    let store = EventStore::open(dir.path()).unwrap();
    let a = store
        .append("a", ExpectedVersion::NoStream, vec![payload(1), payload(2)])
        .await
        .unwrap();
    let b = store
        .append("b", ExpectedVersion::Any, vec![payload(3)])
        .await
        .unwrap();
    let a2 = store
        .append("a", ExpectedVersion::Exact(2), vec![payload(4)])
        .await
        .unwrap();
    let seqs: Vec<_> = a.iter().chain(&b).chain(&a2).map(|e| e.sequence).collect();
    assert_eq!(seqs, [1, 2, 3, 4]);
    assert_eq!(a2[0].stream_version, 3);
    assert_eq!(b[0].stream_version, 1);
    assert_eq!(store.stream_version("a").unwrap(), 3);
    let stream: Vec<_> = store
        .read_stream("a", 1, 100)
        .unwrap()
        .iter()
        .map(pid_of)
        .collect();
    assert_eq!(stream, [1, 2, 4]);
    assert_eq!(store.read_stream("a", 3, 100).unwrap().len(), 1);
    let all = store.read_range(1, u64::MAX, 100).unwrap();
    assert_eq!(all.iter().map(pid_of).collect::<Vec<_>>(), [1, 2, 3, 4]);
    assert!(all.iter().all(|e| e.recorded_at.is_some()));
}

#[tokio::test]
async fn stream_ids_that_prefix_each_other_stay_separate() {
    let dir = tempfile::tempdir().unwrap();
    let store = EventStore::open(dir.path()).unwrap();
    store
        .append("ticket-1", ExpectedVersion::NoStream, vec![payload(1)])
        .await
        .unwrap();
    store
        .append(
            "ticket-10",
            ExpectedVersion::NoStream,
            vec![payload(2), payload(3)],
        )
        .await
        .unwrap();
    assert_eq!(store.stream_version("ticket-1").unwrap(), 1);
    assert_eq!(store.stream_version("ticket-10").unwrap(), 2);
    assert_eq!(store.read_stream("ticket-1", 1, 10).unwrap().len(), 1);
}

#[tokio::test]
async fn stale_expected_version_is_a_conflict_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let store = EventStore::open(dir.path()).unwrap();
    store
        .append("t", ExpectedVersion::NoStream, vec![payload(1)])
        .await
        .unwrap();
    let err = store
        .append("t", ExpectedVersion::NoStream, vec![payload(2)])
        .await
        .unwrap_err();
    assert!(
        matches!(err, StoreError::Conflict { actual: 1, .. }),
        "{err}"
    );
    let err = store
        .append("t", ExpectedVersion::Exact(5), vec![payload(2), payload(3)])
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Conflict { .. }), "{err}");
    assert_eq!(store.last_sequence(), 1);
    // The next successful append still gets the next sequence: no gap.
    let ok = store
        .append("t", ExpectedVersion::Exact(1), vec![payload(4)])
        .await
        .unwrap();
    assert_eq!(ok[0].sequence, 2);
}

#[tokio::test]
async fn concurrent_appends_with_one_expected_version_admit_exactly_one() {
    let dir = tempfile::tempdir().unwrap();
    let store = EventStore::open(dir.path()).unwrap();
    let tasks: Vec<_> = (0..16)
        .map(|i| {
            let store = store.clone();
            tokio::spawn(async move {
                store
                    .append("race", ExpectedVersion::NoStream, vec![payload(i)])
                    .await
            })
        })
        .collect();
    let mut wins = 0;
    for t in tasks {
        match t.await.unwrap() {
            Ok(_) => wins += 1,
            Err(StoreError::Conflict { .. }) => {}
            Err(e) => panic!("unexpected {e}"),
        }
    }
    assert_eq!(wins, 1);
    assert_eq!(store.last_sequence(), 1);
}

#[tokio::test]
async fn bad_stream_ids_and_empty_appends_are_rejected() {
    let dir = tempfile::tempdir().unwrap();
    let store = EventStore::open(dir.path()).unwrap();
    for bad in ["", "a\0b", "line\nbreak", &"x".repeat(201)] {
        let err = store
            .append(bad, ExpectedVersion::Any, vec![payload(1)])
            .await
            .unwrap_err();
        assert!(matches!(err, StoreError::InvalidStream { .. }), "{bad:?}");
    }
    let err = store
        .append("ok", ExpectedVersion::Any, vec![])
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::EmptyAppend));
    assert_eq!(store.last_sequence(), 0);
}

#[tokio::test]
async fn multi_event_appends_are_atomic_and_contiguous_under_concurrency() {
    let dir = tempfile::tempdir().unwrap();
    let store = EventStore::open(dir.path()).unwrap();
    let tasks: Vec<_> = (0..8u32)
        .map(|w| {
            let store = store.clone();
            tokio::spawn(async move {
                for i in 0..10u32 {
                    let batch = (0..3).map(|k| payload(w * 1000 + i * 10 + k)).collect();
                    store
                        .append(&format!("w{w}"), ExpectedVersion::Any, batch)
                        .await
                        .unwrap();
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    let all = store.read_range(1, u64::MAX, 1000).unwrap();
    assert_eq!(all.len(), 240);
    // Each batch of three occupies three consecutive sequences.
    for chunk in all.chunks(3) {
        assert!(chunk.iter().all(|e| e.stream_id == chunk[0].stream_id));
        assert_eq!(pid_of(&chunk[1]), pid_of(&chunk[0]) + 1);
        assert_eq!(pid_of(&chunk[2]), pid_of(&chunk[0]) + 2);
    }
    // Group commit: far fewer flushes than appends.
    assert!(store.stats().fsyncs < 80, "{:?}", store.stats());
}

#[tokio::test]
async fn the_log_survives_a_restart_and_continues_without_gaps() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = EventStore::open(dir.path()).unwrap();
        store
            .append("s", ExpectedVersion::NoStream, vec![payload(1), payload(2)])
            .await
            .unwrap();
        store.close().await.unwrap();
        let err = store
            .append("s", ExpectedVersion::Any, vec![payload(9)])
            .await
            .unwrap_err();
        assert!(matches!(err, StoreError::Closed));
    }
    let store = EventStore::open(dir.path()).unwrap();
    assert_eq!(store.last_sequence(), 2);
    assert_eq!(store.stream_version("s").unwrap(), 2);
    let more = store
        .append("s", ExpectedVersion::Exact(2), vec![payload(3)])
        .await
        .unwrap();
    assert_eq!((more[0].sequence, more[0].stream_version), (3, 3));
}

#[tokio::test]
async fn subscribe_without_follow_ends_at_the_head_and_filters_by_prefix() {
    let dir = tempfile::tempdir().unwrap();
    let store = EventStore::open(dir.path()).unwrap();
    for (i, s) in ["ticket-1", "session-1", "ticket-2"].iter().enumerate() {
        store
            .append(s, ExpectedVersion::Any, vec![payload(i as u32)])
            .await
            .unwrap();
    }
    let got = drain(store.subscribe(SubscriptionOptions {
        from_sequence: 0,
        stream_prefix: "ticket-".into(),
        follow: false,
    }))
    .await;
    assert_eq!(got.iter().map(|e| e.sequence).collect::<Vec<_>>(), [1, 3]);
    let got = drain(store.subscribe(SubscriptionOptions {
        from_sequence: 2,
        ..Default::default()
    }))
    .await;
    assert_eq!(got.iter().map(|e| e.sequence).collect::<Vec<_>>(), [2, 3]);
}

#[tokio::test]
async fn a_lagging_subscriber_reads_the_store_instead_of_skipping() {
    let dir = tempfile::tempdir().unwrap();
    let store = EventStore::open(dir.path()).unwrap();
    let mut sub = store.subscribe(SubscriptionOptions {
        follow: true,
        ..Default::default()
    });
    // Far more events than the live buffer plus the channel, unread.
    let total = (StoreOptions::default().live_buffer * 3) as u64;
    for i in 0..total {
        store
            .append("bulk", ExpectedVersion::Any, vec![payload(i as u32)])
            .await
            .unwrap();
    }
    for expected in 1..=total {
        let e = sub.recv().await.unwrap().unwrap();
        assert_eq!(e.sequence, expected);
    }
}

#[tokio::test]
async fn subscriptions_end_when_the_store_closes() {
    let dir = tempfile::tempdir().unwrap();
    let store = EventStore::open(dir.path()).unwrap();
    store
        .append("x", ExpectedVersion::Any, vec![payload(1)])
        .await
        .unwrap();
    let sub = store.subscribe(SubscriptionOptions {
        follow: true,
        ..Default::default()
    });
    store.close().await.unwrap();
    let got = tokio::time::timeout(std::time::Duration::from_secs(5), drain(sub))
        .await
        .expect("subscription must end on close");
    assert_eq!(got.len(), 1);
}

#[tokio::test]
async fn lifecycle_payloads_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let store = EventStore::open(dir.path()).unwrap();
    let started = Payload::DaemonStarted(DaemonStarted {
        version: "1".into(),
        pid: 7,
        workspace: "/w".into(),
        protocol_version: 1,
        previous_run_unclean: true,
    });
    store
        .append("daemon", ExpectedVersion::Any, vec![started.clone()])
        .await
        .unwrap();
    assert_eq!(store.get(1).unwrap().unwrap().payload, Some(started));
    assert_eq!(store.get(2).unwrap(), None);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, .. ProptestConfig::default() })]

    /// N concurrent writers and M subscribers starting at random sequences
    /// (some before any write, some in the middle): every subscriber sees
    /// exactly the stored sequence from its start, in order, no gap, no
    /// duplicate.
    #[test]
    fn concurrent_writers_and_catch_up_subscribers_agree(
        writers in 1usize..6,
        per_writer in 1usize..25,
        batch in 1usize..4,
        starts in proptest::collection::vec((0u64..120, 0usize..25, 0u64..3), 1..5),
        live_buffer in 1usize..64,
    ) {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let dir = tempfile::tempdir().unwrap();
            let store = EventStore::open_with(dir.path(), StoreOptions { live_buffer, subscriber_queue: 2, ..StoreOptions::default() }).unwrap();
            let total = (writers * per_writer * batch) as u64;
            let mut subs = Vec::new();
            let mut tasks = Vec::new();
            for w in 0..writers {
                let store = store.clone();
                tasks.push(tokio::spawn(async move {
                    for i in 0..per_writer {
                        let payloads = (0..batch).map(|k| payload((w * 10_000 + i * 10 + k) as u32)).collect();
                        store.append(&format!("w-{w}"), ExpectedVersion::Any, payloads).await.unwrap();
                    }
                }));
            }
            // Subscribers join while the writers run, after a random number
            // of yields, each from its own random start sequence, and read
            // concurrently; slow ones overflow the live buffer and must fall
            // back to reading the store.
            for (from, delay, slowness) in starts {
                for _ in 0..delay {
                    tokio::task::yield_now().await;
                }
                let mut sub = store.subscribe(SubscriptionOptions { from_sequence: from, follow: true, ..Default::default() });
                subs.push(tokio::spawn(async move {
                    let mut seen = Vec::new();
                    let mut expected = from.max(1);
                    while expected <= total {
                        if slowness > 0 && expected % 7 == 0 {
                            tokio::time::sleep(std::time::Duration::from_micros(slowness * 300)).await;
                        }
                        let e = tokio::time::timeout(std::time::Duration::from_secs(10), sub.recv())
                            .await
                            .expect("subscriber stalled")
                            .expect("subscription ended early")
                            .expect("subscription error");
                        assert_eq!(e.sequence, expected, "gap or duplicate");
                        seen.push(e);
                        expected += 1;
                    }
                    assert!(sub.try_recv().is_err(), "nothing beyond the head");
                    seen
                }));
            }
            for t in tasks {
                t.await.unwrap();
            }
            assert_eq!(store.last_sequence(), total);
            for sub in subs {
                for e in sub.await.unwrap() {
                    let stored = store.get(e.sequence).unwrap().unwrap();
                    assert_eq!(&stored, e.as_ref());
                }
            }
        });
    }
}
