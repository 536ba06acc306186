//! The heap: the daemon's allocator, and freed heap handed back to the
//! operating system.
//!
//! The daemon allocates through mimalloc (its `#[global_allocator]`): an
//! offline triage allocates and frees thousands of small blocks a ticket
//! (events, sled's nodes, JSON), and glibc's malloc spent ~14 % of the
//! machine's CPU on them (`_int_malloc`, `malloc_consolidate`, `free`).
//! Measured in docs/BENCHMARKS.md (the fourteenth sitting). With its
//! defaults mimalloc nearly doubled the daemon's resident size in that
//! triage: it advises its arenas for transparent huge pages and keeps freed
//! pages for a second. It is built without the advice (the crate's
//! `no_thp` feature; a host whose transparent huge pages are `always`, not
//! `madvise`, may still back its arenas with huge pages), and
//! [`tune_allocator`] purges freed pages at once.
//!
//! Start-up on a large log allocates and frees a lot at once (sled reads
//! its page-table snapshot, the mirror stamps every workspace file); glibc
//! keeps what was freed in its arenas, so a process's resident size would
//! stay at the start-up peak for its whole life. [`release_free_memory`]
//! after start-up gives it back (mimalloc purges as pages empty).
//!
//! This is the one module allowed `unsafe`: both allocators are reached
//! through their C interfaces.

use libmimalloc_sys as mi;

/// mimalloc's `mi_option_purge_delay` (`mi_option_e` in the mimalloc.h
/// that libmimalloc-sys 0.1.49 builds, version 3.3.2, pinned in the
/// workspace's Cargo.toml; the crate does not export the numbers). A test
/// checks it against the option's default.
const MI_PURGE_DELAY: mi::mi_option_t = 15;

/// Set mimalloc's options for the daemon, first thing in `main`, before
/// any other thread starts: freed pages purged at once rather than after
/// 1 s.
#[allow(unsafe_code)]
pub fn tune_allocator() {
    // SAFETY: setting an option takes no pointers. mimalloc writes the
    // option's fields without a lock, so this runs before the daemon starts
    // a thread (first thing in `main`).
    unsafe {
        mi::mi_option_set(MI_PURGE_DELAY, 0);
    }
}

/// Return free heap pages to the OS: what the calling thread's mimalloc
/// heap holds unused (the daemon's allocator; other threads' heaps are
/// collected as they allocate), and glibc's free lists on Linux (where a
/// process allocates through glibc, as the tests do).
#[allow(unsafe_code)]
pub fn release_free_memory() {
    // SAFETY: `mi_collect` takes no pointers; it collects only the calling
    // thread's heap, and does nothing on a thread that never used mimalloc.
    unsafe {
        mi::mi_collect(true);
    }
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: `malloc_trim` takes no pointers and only walks the
    // allocator's own free lists, under the allocator's locks.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(test)]
mod mimalloc_tests {
    use super::*;

    #[test]
    #[allow(unsafe_code)]
    fn the_option_number_is_mimallocs_and_tuning_sets_it() {
        // The option's default, unless the environment sets it (under
        // either of its names): a renumbered enum in a newer mimalloc reads
        // another option's value here.
        // SAFETY: reading an option takes no pointers.
        let delay = unsafe { mi::mi_option_get(MI_PURGE_DELAY) };
        let set = ["MIMALLOC_PURGE_DELAY", "MIMALLOC_RESET_DELAY"]
            .iter()
            .any(|name| std::env::var_os(name).is_some());
        if !set {
            assert_eq!(delay, 1000, "purge_delay's default is 1000 ms");
        }
        // In this one test: it changes the option the check above reads.
        // This test binary allocates through glibc, so no mimalloc heap is
        // in use while it is set.
        tune_allocator();
        // SAFETY: as above.
        assert_eq!(unsafe { mi::mi_option_get(MI_PURGE_DELAY) }, 0);
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
