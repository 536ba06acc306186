//! `tinycoded` — the daemon (see `tinycoded::cli`).

/// mimalloc, tuned by `heap::tune_allocator` (why: `tinycode_base::heap`).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    tinycoded::heap::tune_allocator();
    tinycoded::cli::main()
}
