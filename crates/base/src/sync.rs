//! One way to take a `std::sync::Mutex` across the daemon.

use std::sync::{Mutex, MutexGuard};

/// Lock `m`, carrying on after a panic in another holder: every state
/// guarded this way stays consistent between statements, and a daemon that
/// stopped serving over a poisoned lock would lose more than it protects.
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// `N` async locks striped by key: work on one key takes turns, work on
/// keys of different stripes runs at once.
pub struct Striped<const N: usize>([tokio::sync::Mutex<()>; N]);

impl<const N: usize> Default for Striped<N> {
    fn default() -> Self {
        Self(std::array::from_fn(|_| tokio::sync::Mutex::new(())))
    }
}

impl<const N: usize> Striped<N> {
    /// Take the lock of `key`'s stripe.
    pub async fn lock(&self, key: &str) -> tokio::sync::MutexGuard<'_, ()> {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        key.hash(&mut h);
        self.0[(h.finish() as usize) % N].lock().await
    }
}
