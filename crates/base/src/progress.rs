//! How far a long start-up is, for whoever asks while it runs (`Daemon.
//! GetStatus` answers from the daemon's first moment): the stage, and what
//! it has done of how much. A stage either counts (`advance`) or follows a
//! counter kept elsewhere (a read model's applied sequence).

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// What someone asking sees.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Snapshot {
    /// Empty once the start is over.
    pub stage: String,
    /// What `done` and `total` count (`files`, `events`); empty when the
    /// stage has no count.
    pub unit: String,
    pub done: u64,
    pub total: u64,
    /// Since the start began.
    pub elapsed_ms: u64,
}

type Source = Box<dyn Fn() -> u64 + Send + Sync>;

struct Stage {
    name: &'static str,
    unit: &'static str,
    total: u64,
    /// Where `done` comes from, when it is kept elsewhere.
    source: Option<Source>,
}

pub struct Progress {
    stage: Mutex<Stage>,
    done: AtomicU64,
    started: Instant,
}

impl Default for Progress {
    fn default() -> Self {
        Self {
            stage: Mutex::new(Stage {
                name: "starting",
                unit: "",
                total: 0,
                source: None,
            }),
            done: AtomicU64::new(0),
            started: Instant::now(),
        }
    }
}

impl std::fmt::Debug for Progress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Progress").field(&self.snapshot()).finish()
    }
}

impl Progress {
    /// A stage without a count.
    pub fn stage(&self, name: &'static str) {
        self.counted(name, "", 0);
    }

    /// A stage counting `total` of `unit` by [`Self::advance`].
    pub fn counted(&self, name: &'static str, unit: &'static str, total: u64) {
        *crate::sync::lock(&self.stage) = Stage {
            name,
            unit,
            total,
            source: None,
        };
        self.done.store(0, Ordering::Relaxed);
    }

    /// A stage whose count is `done()`, read when someone asks.
    pub fn following(
        &self,
        name: &'static str,
        unit: &'static str,
        total: u64,
        done: impl Fn() -> u64 + Send + Sync + 'static,
    ) {
        *crate::sync::lock(&self.stage) = Stage {
            name,
            unit,
            total,
            source: Some(Box::new(done)),
        };
    }

    pub fn advance(&self, n: u64) {
        self.done.fetch_add(n, Ordering::Relaxed);
    }

    /// The start is over.
    pub fn finish(&self) {
        self.stage("");
    }

    pub fn snapshot(&self) -> Snapshot {
        let stage = crate::sync::lock(&self.stage);
        let done = match &stage.source {
            Some(source) => source(),
            None => self.done.load(Ordering::Relaxed),
        };
        Snapshot {
            stage: stage.name.to_string(),
            unit: stage.unit.to_string(),
            done,
            total: stage.total,
            elapsed_ms: self.started.elapsed().as_millis() as u64,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stages_count_or_follow_and_finish_empty() {
        let p = Progress::default();
        assert_eq!(p.snapshot().stage, "starting");
        p.counted("reading the workspace", "files", 10);
        p.advance(3);
        p.advance(4);
        let s = p.snapshot();
        assert_eq!(
            (s.stage.as_str(), s.unit.as_str(), s.done, s.total),
            ("reading the workspace", "files", 7, 10)
        );
        p.following("indexing", "events", 100, || 42);
        assert_eq!(p.snapshot().done, 42);
        p.finish();
        assert_eq!(p.snapshot().stage, "");
    }
}
