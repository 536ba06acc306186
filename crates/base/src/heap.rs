//! Hand freed heap back to the operating system.
//!
//! Start-up on a large log allocates and frees a lot at once (sled reads
//! its page-table snapshot, the mirror stamps every workspace file); glibc
//! keeps what was freed in its arenas, so the daemon's resident size would
//! stay at the start-up peak for its whole life. One `malloc_trim` after
//! start-up returns it (measured in docs/BENCHMARKS.md).

/// Return free heap pages to the OS (glibc on Linux; elsewhere nothing).
#[allow(unsafe_code)]
pub fn release_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: `malloc_trim` takes no pointers and only walks the
    // allocator's own free lists, under the allocator's locks.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(all(test, target_os = "linux", target_env = "gnu"))]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn rss_kib() -> u64 {
        std::fs::read_to_string("/proc/self/status")
            .unwrap()
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap()
    }

    #[test]
    fn trimming_gives_freed_heap_back_that_freeing_alone_keeps() {
        // 64 MiB in small blocks (from the allocator's arenas, not mmap),
        // then every 256th kept: what is freed lies between blocks that
        // stay, so the allocator cannot simply shrink its heap. (One block
        // allocated after them is not enough: with tests running beside
        // this one it may land in a hole another test freed, below them.)
        let mut blocks: Vec<Vec<u8>> = (0..131_072).map(|i| vec![i as u8; 512]).collect();
        let full = rss_kib();
        let kept: Vec<Vec<u8>> = blocks.iter_mut().step_by(256).map(std::mem::take).collect();
        drop(blocks);
        let freed = rss_kib();
        release_free_memory();
        let trimmed = rss_kib();
        eprintln!("RSS: {full} KiB full, {freed} KiB freed, {trimmed} KiB trimmed");
        assert!(
            freed + 16 * 1024 > full,
            "freeing alone gave most of it back ({full} → {freed} KiB): the test proves nothing here"
        );
        assert!(
            trimmed + 32 * 1024 < freed,
            "malloc_trim gave back less than 32 MiB ({freed} → {trimmed} KiB)"
        );
        assert_eq!(kept.len(), 512);
        assert!(kept.iter().all(|b| b.len() == 512));
    }
}
