//! A session's history kept between its turns, so that a turn reads only
//! the events stored since the last one instead of its whole stream
//! (at prompt 100 of a session, 600 events read and decoded per turn). It
//! is a cache of the log, not a truth of its own: what it holds is the
//! fold of the stream from `from` up to `next`, the same fold a full read
//! makes (`History::fold`), so extending it with the events from `next` on
//! gives what a full read would. A compaction moves `from` and drops it.
//! A few dozen sessions are kept; past that the least recently used goes.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use super::state::TurnMessages;
use crate::sync::lock;

/// Sessions whose history is kept at most.
const KEPT: usize = 64;

pub(crate) type Turns = Arc<BTreeMap<u64, TurnMessages>>;

struct Kept {
    /// The stream version the history starts at.
    from: u64,
    /// The turn before which it left turns out (the compaction boundary
    /// it was folded with; a smaller one later is a miss).
    cut: u64,
    /// The next stream version to read.
    next: u64,
    turns: Turns,
    /// When it was last used (a counter).
    used: u64,
}

#[derive(Default)]
pub(crate) struct Recall {
    kept: Mutex<(HashMap<String, Kept>, u64)>,
}

impl Recall {
    /// What is kept of `id`'s history from stream version `from`, folded
    /// with a boundary at or below `cut`: its turns and the next version
    /// to read; else nothing, read from `from`.
    pub(crate) fn take(&self, id: &str, from: u64, cut: u64) -> (Turns, u64) {
        match lock(&self.kept).0.remove(id) {
            Some(k) if k.from == from && k.cut <= cut => (k.turns, k.next),
            _ => (Turns::default(), from),
        }
    }

    /// Keep `turns`, the fold of `id`'s stream from `from` to `next - 1`
    /// leaving out the turns before `cut`.
    pub(crate) fn keep(&self, id: &str, (from, cut): (u64, u64), next: u64, turns: Turns) {
        let mut guard = lock(&self.kept);
        let (kept, clock) = &mut *guard;
        *clock += 1;
        let used = *clock;
        if let Some(k) = kept.get(id)
            && (k.from, k.next) >= (from, next)
        {
            return; // a read that ran beside this one kept as much or more
        }
        kept.insert(
            id.to_string(),
            Kept {
                from,
                cut,
                next,
                turns,
                used,
            },
        );
        if kept.len() > KEPT
            && let Some(oldest) = kept
                .iter()
                .min_by_key(|(_, k)| k.used)
                .map(|(id, _)| id.clone())
        {
            kept.remove(&oldest);
        }
    }

    /// Drop what is kept of `id` (deleted).
    pub(crate) fn forget(&self, id: &str) {
        lock(&self.kept).0.remove(id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kept_history_is_given_back_once_and_only_from_the_same_start() {
        let recall = Recall::default();
        let turns: Turns = Arc::new(BTreeMap::from([(1, TurnMessages::default())]));
        recall.keep("s", (1, 0), 7, turns.clone());
        let (back, next) = recall.take("s", 1, 0);
        assert_eq!((back.len(), next), (1, 7));
        assert!(Arc::ptr_eq(&back, &turns), "not copied");
        assert_eq!(
            recall.take("s", 1, 0).1,
            1,
            "taken: read again from the start"
        );
        recall.keep("s", (1, 0), 7, turns.clone());
        let (back, next) = recall.take("s", 5, 0);
        assert_eq!((back.len(), next), (0, 5), "a compaction moved the start");
        recall.keep("s", (1, 3), 7, turns.clone());
        assert_eq!(recall.take("s", 1, 2).1, 1, "folded with a later boundary");
        recall.keep("s", (1, 0), 7, turns.clone());
        recall.forget("s");
        assert_eq!(recall.take("s", 1, 0).1, 1);
    }

    #[test]
    fn the_least_recently_used_goes_past_the_bound() {
        let recall = Recall::default();
        for i in 0..=KEPT {
            recall.keep(&format!("s{i}"), (1, 0), 2, Turns::default());
        }
        assert_eq!(recall.take("s0", 1, 0).1, 1, "the oldest went");
        assert_eq!(recall.take(&format!("s{KEPT}"), 1, 0).1, 2);
        assert_eq!(recall.take("s1", 1, 0).1, 2);
    }

    #[test]
    fn an_older_read_does_not_replace_a_newer_one() {
        let recall = Recall::default();
        recall.keep("s", (1, 0), 9, Turns::default());
        recall.keep("s", (1, 0), 4, Turns::default());
        assert_eq!(recall.take("s", 1, 0).1, 9);
    }
}
