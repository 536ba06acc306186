//! One way to take a `std::sync::Mutex` across the daemon.

use std::sync::{Mutex, MutexGuard};

/// Lock `m`, carrying on after a panic in another holder: every state
/// guarded this way stays consistent between statements, and a daemon that
/// stopped serving over a poisoned lock would lose more than it protects.
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
