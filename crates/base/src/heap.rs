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
