//! When each ticket owes its next SLA alert, in memory: loaded from the
//! tickets read model at start, kept in step after each committed batch,
//! followed by the desk's SLA watch.

use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;

use super::AlertKind;
use crate::sync::lock;

#[derive(Default)]
pub struct Schedule {
    inner: Mutex<Inner>,
    wake: tokio::sync::Notify,
}

#[derive(Default)]
struct Inner {
    by_time: BTreeSet<(i64, String)>,
    by_id: HashMap<String, (i64, AlertKind)>,
}

impl Schedule {
    /// Ticket `id` owes its next alert at `at` (`None`: owes none).
    pub fn set(&self, id: &str, next: Option<(i64, AlertKind)>) {
        let mut inner = lock(&self.inner);
        if let Some((old, _)) = inner.by_id.remove(id) {
            inner.by_time.remove(&(old, id.to_string()));
        }
        if let Some((at, kind)) = next {
            inner.by_id.insert(id.to_string(), (at, kind));
            inner.by_time.insert((at, id.to_string()));
        }
    }

    /// When ticket `id` is at risk at `now` — its next alert is due, or is
    /// a breach (its at-risk moment has passed) — the moment of that
    /// alert, the sooner the more urgent; `None` when it is not.
    pub fn at_risk(&self, id: &str, now: i64) -> Option<i64> {
        lock(&self.inner)
            .by_id
            .get(id)
            .filter(|(at, kind)| *at <= now || *kind == AlertKind::Breached)
            .map(|(at, _)| *at)
    }

    pub fn clear(&self) {
        *lock(&self.inner) = Inner::default();
    }

    /// The earliest alert's moment.
    pub fn next(&self) -> Option<i64> {
        lock(&self.inner).by_time.first().map(|(at, _)| *at)
    }

    /// Tickets whose alert is due at `now`, earliest first.
    pub fn due(&self, now: i64) -> Vec<String> {
        lock(&self.inner)
            .by_time
            .iter()
            .take_while(|(at, _)| *at <= now)
            .map(|(_, id)| id.clone())
            .collect()
    }

    pub fn len(&self) -> usize {
        lock(&self.inner).by_id.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Tell the watch the schedule changed.
    pub fn wake(&self) {
        self.wake.notify_one();
    }

    /// Wait for [`Schedule::wake`].
    pub async fn changed(&self) {
        self.wake.notified().await;
    }
}

#[cfg(test)]
mod tests {
    use super::{AlertKind, Schedule};

    #[test]
    fn earliest_first_and_moved_entries_replace_their_old_time() {
        let s = Schedule::default();
        s.set("T-2", Some((20, AlertKind::AtRisk)));
        s.set("T-1", Some((30, AlertKind::AtRisk)));
        s.set("T-1", Some((10, AlertKind::AtRisk)));
        assert_eq!(s.next(), Some(10));
        assert_eq!(s.due(20), vec!["T-1".to_string(), "T-2".to_string()]);
        s.set("T-1", None);
        assert_eq!((s.next(), s.len()), (Some(20), 1));
    }

    #[test]
    fn at_risk_once_its_moment_passed_or_only_the_breach_is_left() {
        let s = Schedule::default();
        s.set("T-1", Some((100, AlertKind::AtRisk)));
        s.set("T-2", Some((500, AlertKind::Breached)));
        assert_eq!(s.at_risk("T-1", 99), None);
        assert_eq!(s.at_risk("T-1", 100), Some(100));
        assert_eq!(s.at_risk("T-2", 0), Some(500));
        assert_eq!(s.at_risk("T-3", 0), None);
    }
}
