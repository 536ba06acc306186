//! Free disk space as a state of the embedded log, not a wedge.
//!
//! sled makes any write error sticky: once its data file cannot grow, every
//! later write of that database fails until it is opened again. So the log
//! never lets sled meet a full disk: before each group commit the committer
//! asks the file system how much is free (`statvfs`, about a microsecond)
//! and refuses the whole batch while less than the reserve is left — sled
//! is not touched, reads go on, and the next batch after space returns is
//! written as usual. The reserve leaves room for what follows an accepted
//! batch (the read models' writes, the workspace files, the daemon's log).

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use super::StoreError;

const MIB: u64 = 1024 * 1024;

/// Bytes free for an unprivileged writer, and the file system's size.
pub type Probe = fn(&Path) -> std::io::Result<(u64, u64)>;

fn statvfs(path: &Path) -> std::io::Result<(u64, u64)> {
    let s = rustix::fs::statvfs(path)?;
    Ok((
        s.f_bavail.saturating_mul(s.f_frsize),
        s.f_blocks.saturating_mul(s.f_frsize),
    ))
}

/// The reserve when none is configured: a twentieth of the file system,
/// at least 4 MiB and at most 64 MiB.
pub fn default_reserve(total: u64) -> u64 {
    (total / 20).clamp(4 * MIB, 64 * MIB)
}

pub struct DiskSpace {
    dir: PathBuf,
    reserve: Option<u64>,
    probe: Probe,
    /// Why writes are paused now (`None`: they are not).
    paused: Mutex<Option<String>>,
    /// Batches refused while paused (for the resume line).
    refused: AtomicU64,
}

impl DiskSpace {
    /// Watch the file system holding `dir`; `reserve` bytes must stay free
    /// (`None`: [`default_reserve`]).
    pub fn new(dir: &Path, reserve: Option<u64>) -> Self {
        Self::with_probe(dir, reserve, statvfs)
    }

    pub fn with_probe(dir: &Path, reserve: Option<u64>, probe: Probe) -> Self {
        Self {
            dir: dir.to_path_buf(),
            reserve,
            probe,
            paused: Mutex::new(None),
            refused: AtomicU64::new(0),
        }
    }

    /// May a batch of about `bytes` be written now? A refusal pauses
    /// writes (said once in the log); the first check that passes resumes
    /// them (said once too).
    pub fn check(&self, bytes: u64) -> Result<(), StoreError> {
        let Ok((free, total)) = (self.probe)(&self.dir) else {
            // A file system that cannot say is not stopped by this guard.
            return Ok(());
        };
        let reserve = self.reserve.unwrap_or_else(|| default_reserve(total));
        let needed = reserve.saturating_add(bytes);
        let mut paused = crate::sync::lock(&self.paused);
        if free >= needed {
            if let Some(why) = paused.take() {
                let refused = self.refused.swap(0, Ordering::Relaxed);
                tracing::warn!(was = %why, refused, "writes resumed: disk space is back");
            }
            return Ok(());
        }
        let error = StoreError::DiskFull {
            free_mib: free / MIB,
            needed_mib: needed.div_ceil(MIB),
            dir: self.dir.display().to_string(),
        };
        if paused.is_none() {
            tracing::error!(error = %error, "writes paused");
        }
        self.refused.fetch_add(1, Ordering::Relaxed);
        *paused = Some(why_paused(free, needed, &self.dir));
        Err(error)
    }

    /// Why writes are paused right now, if they are: checked afresh, so
    /// a status shows "resumed" as soon as space is back.
    pub fn paused(&self) -> Option<String> {
        if crate::sync::lock(&self.paused).is_none() {
            return None;
        }
        match self.check(0) {
            Ok(()) => None,
            Err(_) => crate::sync::lock(&self.paused).clone(),
        }
    }
}

fn why_paused(free: u64, needed: u64, dir: &Path) -> String {
    format!(
        "disk full ({} MiB free on {}, {} MiB needed); they resume by themselves once space is freed",
        free / MIB,
        dir.display(),
        needed.div_ceil(MIB)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    static FREE: AtomicU64 = AtomicU64::new(0);

    fn probe(_: &Path) -> std::io::Result<(u64, u64)> {
        Ok((FREE.load(Ordering::Relaxed), 100 * MIB))
    }

    #[test]
    fn writes_pause_below_the_reserve_and_resume_by_themselves() {
        let space = DiskSpace::with_probe(Path::new("/x"), Some(8 * MIB), probe);
        FREE.store(100 * MIB, Ordering::Relaxed);
        assert!(space.check(MIB).is_ok());
        assert_eq!(space.paused(), None);
        FREE.store(3 * MIB, Ordering::Relaxed);
        let refused = space.check(MIB).unwrap_err();
        assert_eq!(
            refused.to_string(),
            "writes paused: disk full (3 MiB free on /x, 9 MiB needed); they resume by themselves once space is freed"
        );
        assert!(space.paused().unwrap().starts_with("disk full (3 MiB free"));
        FREE.store(20 * MIB, Ordering::Relaxed);
        assert_eq!(space.paused(), None, "the status sees space come back");
        assert!(space.check(MIB).is_ok());
    }

    #[test]
    fn the_default_reserve_scales_with_the_file_system() {
        assert_eq!(default_reserve(24 * MIB), 4 * MIB);
        assert_eq!(default_reserve(400 * MIB), 20 * MIB);
        assert_eq!(default_reserve(250_000 * MIB), 64 * MIB);
    }
}
