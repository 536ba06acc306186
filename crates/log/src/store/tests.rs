//! The sled backend: the conformance suite, and what only sled promises.

use super::conformance::{Backing, payload};
use super::*;

/// A sled log in a temporary directory.
pub(crate) struct SledDir(tempfile::TempDir);

impl Backing for SledDir {
    async fn fresh() -> Self {
        Self(tempfile::tempdir().unwrap())
    }

    async fn open(&self, options: StoreOptions) -> EventStore {
        // sled releases its lock a moment after the last handle of an
        // earlier open in this process is dropped.
        for _ in 0..100 {
            match EventStore::open_with(self.0.path(), options) {
                Ok(store) => return store,
                Err(StoreError::Io(_)) => {
                    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                }
                Err(e) => panic!("{e}"),
            }
        }
        panic!("the sled log did not reopen")
    }
}

super::conformance::conformance_suite!(crate::store::tests::SledDir);

#[tokio::test]
async fn concurrent_appends_share_flushes() {
    let backing = SledDir::fresh().await;
    let store = backing.open(StoreOptions::default()).await;
    let tasks: Vec<_> = (0..8u32)
        .map(|w| {
            let store = store.clone();
            tokio::spawn(async move {
                for i in 0..10u32 {
                    store
                        .append(&format!("w{w}"), ExpectedVersion::Any, vec![payload(i)])
                        .await
                        .unwrap();
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    // Group commit: fewer flushes than appends.
    assert!(store.stats().fsyncs < 80, "{:?}", store.stats());
}
