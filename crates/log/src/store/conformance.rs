//! The conformance suite: what every log backend must do, written once
//! against [`EventStore`] and instantiated per backend with
//! [`conformance_suite!`] (sled: `store/tests.rs`).

use std::future::Future;
use std::sync::Arc;

use tinycode_shared::proto::{DaemonStarted, DaemonStopped, Event, event::Payload};

use super::*;

/// A place a backend keeps one log, for the suite.
pub(crate) trait Backing: Sized + Send + Sync + 'static {
    /// A new, empty log.
    fn fresh() -> impl Future<Output = Self> + Send;
    /// Open it (again, after a close) with these options.
    fn open(&self, options: StoreOptions) -> impl Future<Output = EventStore> + Send;
}

pub(crate) fn payload(n: u32) -> Payload {
    Payload::DaemonStopped(DaemonStopped {
        pid: n,
        uptime_ms: 0,
        reason: format!("test {n}"),
    })
}

pub(crate) fn pid_of(e: &Event) -> u32 {
    match &e.payload {
        Some(Payload::DaemonStopped(s)) => s.pid,
        Some(Payload::DaemonStarted(s)) => s.pid,
        _ => u32::MAX,
    }
}

pub(crate) async fn drain(mut sub: Subscription) -> Vec<Arc<Event>> {
    let mut out = Vec::new();
    while let Some(e) = sub.recv().await {
        out.push(e.expect("subscription error"));
    }
    out
}

pub(crate) async fn appends_get_gap_free_sequences_and_stream_versions<B: Backing>() {
    let backing = B::fresh().await;
    let store = backing.open(StoreOptions::default()).await;
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
    assert_eq!(store.stream_version("a").await.unwrap(), 3);
    let stream: Vec<_> = store
        .read_stream("a", 1, 100)
        .await
        .unwrap()
        .iter()
        .map(pid_of)
        .collect();
    assert_eq!(stream, [1, 2, 4]);
    assert_eq!(store.read_stream("a", 3, 100).await.unwrap().len(), 1);
    let all = store.read_range(1, u64::MAX, 100).await.unwrap();
    assert_eq!(all.iter().map(pid_of).collect::<Vec<_>>(), [1, 2, 3, 4]);
    assert!(all.iter().all(|e| e.recorded_at.is_some()));
}

pub(crate) async fn stream_ids_that_prefix_each_other_stay_separate<B: Backing>() {
    let backing = B::fresh().await;
    let store = backing.open(StoreOptions::default()).await;
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
    assert_eq!(store.stream_version("ticket-1").await.unwrap(), 1);
    assert_eq!(store.stream_version("ticket-10").await.unwrap(), 2);
    assert_eq!(store.read_stream("ticket-1", 1, 10).await.unwrap().len(), 1);
}

pub(crate) async fn stale_expected_version_is_a_conflict_and_writes_nothing<B: Backing>() {
    let backing = B::fresh().await;
    let store = backing.open(StoreOptions::default()).await;
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

pub(crate) async fn concurrent_appends_with_one_expected_version_admit_exactly_one<B: Backing>() {
    let backing = B::fresh().await;
    let store = backing.open(StoreOptions::default()).await;
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

pub(crate) async fn bad_stream_ids_and_empty_appends_are_rejected<B: Backing>() {
    let backing = B::fresh().await;
    let store = backing.open(StoreOptions::default()).await;
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

pub(crate) async fn multi_event_appends_are_atomic_and_contiguous_under_concurrency<B: Backing>() {
    let backing = B::fresh().await;
    let store = backing.open(StoreOptions::default()).await;
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
    let all = store.read_range(1, u64::MAX, 1000).await.unwrap();
    assert_eq!(all.len(), 240);
    // Each batch of three occupies three consecutive sequences.
    for chunk in all.chunks(3) {
        assert!(chunk.iter().all(|e| e.stream_id == chunk[0].stream_id));
        assert_eq!(pid_of(&chunk[1]), pid_of(&chunk[0]) + 1);
        assert_eq!(pid_of(&chunk[2]), pid_of(&chunk[0]) + 2);
    }
}

pub(crate) async fn the_log_survives_a_restart_and_continues_without_gaps<B: Backing>() {
    let backing = B::fresh().await;
    {
        let store = backing.open(StoreOptions::default()).await;
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
    let store = backing.open(StoreOptions::default()).await;
    assert_eq!(store.last_sequence(), 2);
    assert_eq!(store.stream_version("s").await.unwrap(), 2);
    let more = store
        .append("s", ExpectedVersion::Exact(2), vec![payload(3)])
        .await
        .unwrap();
    assert_eq!((more[0].sequence, more[0].stream_version), (3, 3));
}

pub(crate) async fn subscribe_without_follow_ends_at_the_head_and_filters_by_prefix<B: Backing>() {
    let backing = B::fresh().await;
    let store = backing.open(StoreOptions::default()).await;
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

pub(crate) async fn a_lagging_subscriber_reads_the_store_instead_of_skipping<B: Backing>() {
    let backing = B::fresh().await;
    let store = backing.open(StoreOptions::default()).await;
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

pub(crate) async fn subscriptions_end_when_the_store_closes<B: Backing>() {
    let backing = B::fresh().await;
    let store = backing.open(StoreOptions::default()).await;
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

pub(crate) async fn lifecycle_payloads_round_trip<B: Backing>() {
    let backing = B::fresh().await;
    let store = backing.open(StoreOptions::default()).await;
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
    assert_eq!(store.get(1).await.unwrap().unwrap().payload, Some(started));
    assert_eq!(store.get(2).await.unwrap(), None);
}

/// Writers, appends per writer, events per append, subscribers (start
/// sequence, yields before joining, slowness) and the live buffer.
pub(crate) type Mixed = (usize, usize, usize, Vec<(u64, usize, u64)>, usize);

/// The strategy for [`concurrent_writers_and_catch_up_subscribers_agree`].
pub(crate) fn mixed() -> impl proptest::strategy::Strategy<Value = Mixed> {
    (
        1usize..6,
        1usize..25,
        1usize..4,
        proptest::collection::vec((0u64..120, 0usize..25, 0u64..3), 1..5),
        1usize..64,
    )
}

/// N concurrent writers and M subscribers starting at random sequences
/// (some before any write, some in the middle): every subscriber sees
/// exactly the stored sequence from its start, in order, no gap, no
/// duplicate.
pub(crate) fn concurrent_writers_and_catch_up_subscribers_agree<B: Backing>(
    (writers, per_writer, batch, starts, live_buffer): Mixed,
) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let options = StoreOptions {
            live_buffer,
            subscriber_queue: 2,
            ..StoreOptions::default()
        };
        let backing = B::fresh().await;
        let store = backing.open(options).await;
        let total = (writers * per_writer * batch) as u64;
        let mut subs = Vec::new();
        let mut tasks = Vec::new();
        for w in 0..writers {
            let store = store.clone();
            tasks.push(tokio::spawn(async move {
                for i in 0..per_writer {
                    let payloads = (0..batch)
                        .map(|k| payload((w * 10_000 + i * 10 + k) as u32))
                        .collect();
                    store
                        .append(&format!("w-{w}"), ExpectedVersion::Any, payloads)
                        .await
                        .unwrap();
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
            let mut sub = store.subscribe(SubscriptionOptions {
                from_sequence: from,
                follow: true,
                ..Default::default()
            });
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
                let stored = store.get(e.sequence).await.unwrap().unwrap();
                assert_eq!(&stored, e.as_ref());
            }
        }
    });
}

pub(crate) async fn projection_trees_survive_a_reopen<B: Backing>() {
    let backing = B::fresh().await;
    {
        let store = backing.open(StoreOptions::default()).await;
        let tree = store.projection_tree("proj-conformance").unwrap();
        tree.insert("checkpoint", &7u64.to_be_bytes()).unwrap();
        store.close().await.unwrap();
    }
    let store = backing.open(StoreOptions::default()).await;
    let tree = store.projection_tree("proj-conformance").unwrap();
    assert_eq!(
        tree.get("checkpoint").unwrap().as_deref(),
        Some(&7u64.to_be_bytes()[..])
    );
}

pub(crate) async fn reads_respect_bounds_and_the_head<B: Backing>() {
    let backing = B::fresh().await;
    let store = backing.open(StoreOptions::default()).await;
    let batch = (0..10).map(payload).collect();
    store
        .append("s", ExpectedVersion::NoStream, batch)
        .await
        .unwrap();
    let versions = |events: Vec<Event>| events.iter().map(|e| e.stream_version).collect::<Vec<_>>();
    assert_eq!(
        versions(store.read_stream("s", 4, 3).await.unwrap()),
        [4, 5, 6]
    );
    assert_eq!(
        versions(store.read_stream("s", 0, 2).await.unwrap()),
        [1, 2]
    );
    assert!(store.read_stream("s", 11, 5).await.unwrap().is_empty());
    assert!(store.read_stream("none", 1, 5).await.unwrap().is_empty());
    assert_eq!(store.stream_version("none").await.unwrap(), 0);
    let range = store.read_range(3, 5, 100).await.unwrap();
    assert_eq!(
        range.iter().map(|e| e.sequence).collect::<Vec<_>>(),
        [3, 4, 5]
    );
    assert_eq!(store.read_range(9, 100, 100).await.unwrap().len(), 2);
    assert!(store.read_range(11, 100, 100).await.unwrap().is_empty());
    assert!(store.read_range(5, 4, 100).await.unwrap().is_empty());
    assert_eq!(store.read_range(1, 10, 4).await.unwrap().len(), 4);
}

pub(crate) async fn an_event_over_the_size_limit_is_refused<B: Backing>() {
    let backing = B::fresh().await;
    let store = backing.open(StoreOptions::default()).await;
    let big = Payload::DaemonStopped(DaemonStopped {
        pid: 1,
        uptime_ms: 0,
        reason: "x".repeat(MAX_EVENT_BYTES),
    });
    let err = store
        .append("big", ExpectedVersion::Any, vec![payload(1), big])
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::TooLarge { .. }), "{err}");
    assert_eq!(store.last_sequence(), 0);
    assert_eq!(store.stream_version("big").await.unwrap(), 0);
}

/// One test per case of the suite, for the backend `$backing`, in a
/// module `conformance`.
macro_rules! conformance_suite {
    ($backing:ty) => {
        $crate::store::conformance::conformance_suite!(@module $backing;
            appends_get_gap_free_sequences_and_stream_versions,
            stream_ids_that_prefix_each_other_stay_separate,
            stale_expected_version_is_a_conflict_and_writes_nothing,
            concurrent_appends_with_one_expected_version_admit_exactly_one,
            bad_stream_ids_and_empty_appends_are_rejected,
            multi_event_appends_are_atomic_and_contiguous_under_concurrency,
            the_log_survives_a_restart_and_continues_without_gaps,
            subscribe_without_follow_ends_at_the_head_and_filters_by_prefix,
            a_lagging_subscriber_reads_the_store_instead_of_skipping,
            subscriptions_end_when_the_store_closes,
            lifecycle_payloads_round_trip,
            projection_trees_survive_a_reopen,
            reads_respect_bounds_and_the_head,
            an_event_over_the_size_limit_is_refused,
        );
    };
    (@module $backing:ty; $($name:ident),* $(,)?) => {
        mod conformance {
            use $crate::store::conformance as suite;

            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    suite::$name::<$backing>().await;
                }
            )*

            proptest::proptest! {
                #![proptest_config(proptest::prelude::ProptestConfig {
                    cases: 12,
                    ..proptest::prelude::ProptestConfig::default()
                })]

                /// N concurrent writers and M subscribers starting at random
                /// sequences: every subscriber sees exactly the stored
                /// sequence from its start, in order, no gap, no duplicate.
                #[test]
                fn concurrent_writers_and_catch_up_subscribers_agree(mixed in suite::mixed()) {
                    suite::concurrent_writers_and_catch_up_subscribers_agree::<$backing>(mixed);
                }
            }
        }
    };
}
pub(crate) use conformance_suite;
