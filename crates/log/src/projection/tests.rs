use std::sync::atomic::{AtomicUsize, Ordering};

use tinycode_shared::proto::event::Payload;
use tinycode_shared::proto::{TicketNote, TicketNoteAdded};

use super::*;
use crate::store::ExpectedVersion;

/// Counts notes per stream; counts the events it applied, in memory.
struct Counter {
    version: u32,
    applied: AtomicUsize,
}

impl Projection for Counter {
    fn name(&self) -> &'static str {
        "counter"
    }
    fn version(&self) -> u32 {
        self.version
    }
    fn apply(&self, writes: &mut Writes<'_>, event: &Event) -> Result<(), ProjectionError> {
        self.applied.fetch_add(1, Ordering::SeqCst);
        let key = event.stream_id.as_bytes().to_vec();
        let n = writes.get(&key)?.map_or(0, |v| decode_u64(&v));
        writes.put(key, (n + 1).to_be_bytes().to_vec());
        Ok(())
    }
}

fn counter(version: u32) -> Arc<Counter> {
    Arc::new(Counter {
        version,
        applied: AtomicUsize::new(0),
    })
}

fn note(i: usize) -> Payload {
    Payload::TicketNoteAdded(TicketNoteAdded {
        by: None,
        note: Some(TicketNote {
            text: format!("n{i}"),
            at: String::new(),
        }),
    })
}

async fn append(store: &EventStore, stream: &str, n: usize) -> u64 {
    let mut last = 0;
    for i in 0..n {
        last = store
            .append(stream, ExpectedVersion::Any, vec![note(i)])
            .await
            .unwrap()[0]
            .sequence;
    }
    last
}

/// Open again once the previous handle's tasks have let go of the database.
async fn reopen(path: &std::path::Path) -> EventStore {
    for _ in 0..500 {
        if let Ok(store) = EventStore::open(path) {
            return store;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    panic!("the store stayed locked")
}

fn count(handle: &ProjectorHandle, stream: &str) -> u64 {
    handle
        .tree()
        .get(stream.as_bytes())
        .unwrap()
        .map_or(0, |v| decode_u64(&v))
}

#[tokio::test]
async fn follows_the_log_resumes_from_its_checkpoint_and_rebuilds() {
    let dir = tempfile::tempdir().unwrap();
    let store = EventStore::open(dir.path()).unwrap();
    append(&store, "a", 5).await;
    let first = counter(1);
    let handle = Projector::spawn(&store, Arc::clone(&first)).unwrap();
    let last = append(&store, "b", 3).await;
    handle.wait_for(last).await.unwrap();
    assert_eq!((count(&handle, "a"), count(&handle, "b")), (5, 3));
    assert_eq!(first.applied.load(Ordering::SeqCst), 8);
    store.close().await.unwrap();
    drop((handle, store));

    // Restart: resumes after the checkpoint, applies only what is new.
    let store = reopen(dir.path()).await;
    let second = counter(1);
    let handle = Projector::spawn(&store, Arc::clone(&second)).unwrap();
    assert_eq!(handle.applied(), 8, "the checkpoint was stored");
    let last = append(&store, "a", 2).await;
    handle.wait_for(last).await.unwrap();
    assert_eq!(second.applied.load(Ordering::SeqCst), 2, "no replay");
    assert_eq!(count(&handle, "a"), 7);

    // On demand: the same state from scratch.
    assert_eq!(handle.rebuild().await.unwrap(), 10);
    assert_eq!((count(&handle, "a"), count(&handle, "b")), (7, 3));
    assert_eq!(second.applied.load(Ordering::SeqCst), 12);
    store.close().await.unwrap();
    drop((handle, store));

    // A new code version rebuilds by itself.
    let store = reopen(dir.path()).await;
    let third = counter(2);
    let handle = Projector::spawn(&store, Arc::clone(&third)).unwrap();
    handle.wait_for(10).await.unwrap();
    assert_eq!(third.applied.load(Ordering::SeqCst), 10);
    assert_eq!((count(&handle, "a"), count(&handle, "b")), (7, 3));
    store.close().await.unwrap();
}

#[tokio::test]
async fn many_writers_every_event_counted_once() {
    let dir = tempfile::tempdir().unwrap();
    let store = EventStore::open(dir.path()).unwrap();
    let model = counter(1);
    let handle = Projector::spawn(&store, Arc::clone(&model)).unwrap();
    let tasks: Vec<_> = (0..16)
        .map(|w| {
            let store = store.clone();
            let handle = handle.clone();
            tokio::spawn(async move {
                for i in 0..10 {
                    let seq = store
                        .append(&format!("s{}", w % 4), ExpectedVersion::Any, vec![note(i)])
                        .await
                        .unwrap()[0]
                        .sequence;
                    // Read-your-writes: the model has the event once waited.
                    handle.wait_for(seq).await.unwrap();
                    assert!(handle.applied() >= seq);
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    let total: u64 = (0..4).map(|s| count(&handle, &format!("s{s}"))).sum();
    assert_eq!(total, 160);
    assert_eq!(model.applied.load(Ordering::SeqCst), 160);
    store.close().await.unwrap();
}

/// Fails on its third event.
struct Failing;

impl Projection for Failing {
    fn name(&self) -> &'static str {
        "failing"
    }
    fn version(&self) -> u32 {
        1
    }
    fn apply(&self, _: &mut Writes<'_>, event: &Event) -> Result<(), ProjectionError> {
        if event.sequence == 3 {
            return Err(ProjectionError::Corrupt("event 3 is bad".into()));
        }
        Ok(())
    }
}

#[tokio::test]
async fn a_failed_projector_fails_its_waiters_instead_of_hanging() {
    let dir = tempfile::tempdir().unwrap();
    let store = EventStore::open(dir.path()).unwrap();
    let handle = Projector::spawn(&store, Arc::new(Failing)).unwrap();
    let last = append(&store, "x", 4).await;
    let err = handle.wait_for(last).await.unwrap_err().to_string();
    assert!(err.contains("the failing projection stopped"), "{err}");
    assert!(err.contains("event 3 is bad"), "{err}");
    assert!(
        handle.applied() < 3,
        "nothing past the bad event is committed"
    );
    store.close().await.unwrap();
}

/// Applies nothing: every event belongs to another model.
struct Ignoring;

impl Projection for Ignoring {
    fn name(&self) -> &'static str {
        "ignoring"
    }
    fn version(&self) -> u32 {
        1
    }
    fn apply(&self, _: &mut Writes<'_>, _: &Event) -> Result<(), ProjectionError> {
        Ok(())
    }
}

#[tokio::test]
async fn other_models_events_cost_no_checkpoint_write_per_batch() {
    let dir = tempfile::tempdir().unwrap();
    let store = EventStore::open(dir.path()).unwrap();
    let handle = Projector::spawn(&store, Arc::new(Ignoring)).unwrap();
    let stored = |h: &ProjectorHandle| {
        h.tree()
            .get(CHECKPOINT_KEY)
            .unwrap()
            .map_or(0, |v| decode_u64(&v))
    };
    let last = append(&store, "x", 10).await;
    handle.wait_for(last).await.unwrap();
    assert_eq!(handle.applied(), last, "applied in memory");
    assert_eq!(stored(&handle), 0, "nothing written for events it ignores");
    let many: Vec<Payload> = (0..CHECKPOINT_EVERY as usize).map(note).collect();
    let last = store
        .append("x", ExpectedVersion::Any, many)
        .await
        .unwrap()
        .last()
        .unwrap()
        .sequence;
    handle.wait_for(last).await.unwrap();
    assert!(
        stored(&handle) >= CHECKPOINT_EVERY,
        "written once it lags by {CHECKPOINT_EVERY}: {}",
        stored(&handle)
    );
    store.close().await.unwrap();
}
