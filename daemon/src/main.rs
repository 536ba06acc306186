//! `tinycoded` — the daemon (see `tinycoded::cli`).

fn main() -> std::process::ExitCode {
    tinycoded::cli::main()
}
