//! Logs go to a file under the state dir (`<state>/logs/<program>.log`);
//! `RUST_LOG` selects what (default `info`). Nothing goes to the terminal.
//!
//! `RUST_LOG` is a comma-separated list of `level` and `target=level`
//! directives (`debug`, `info,tinycoded::agent=trace,sled=warn`): the
//! `Targets` filter, not `EnvFilter`, whose span and field filters would
//! link a regex engine into every binary (about 0.4 MiB of resident code
//! in the daemon). A value that does not parse is reported in the log and
//! the default is used.

use std::path::Path;
use std::sync::Mutex;

use tracing_subscriber::filter::{LevelFilter, Targets};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

/// The filter `RUST_LOG` asks for, or the default and the reason it was
/// not used.
fn filter(value: Option<&str>) -> (Targets, Option<String>) {
    let default = Targets::new().with_default(LevelFilter::INFO);
    match value.map(str::trim) {
        None | Some("") => (default, None),
        Some(text) => match text.parse::<Targets>() {
            Ok(targets) => (targets, None),
            Err(e) => (
                default,
                Some(format!(
                    "RUST_LOG={text:?} is not a list of `level` or `target=level` directives ({e}); logging at info"
                )),
            ),
        },
    }
}

/// Log to `log_path` (created private: directory 0700, file 0600, whoever's
/// process creates it first).
pub fn init(log_path: &Path) -> std::io::Result<()> {
    if let Some(dir) = log_path.parent() {
        if let Some(state) = dir.parent() {
            crate::paths::create_private_dir(state)?;
        }
        crate::paths::create_private_dir(dir)?;
    }
    let file = crate::paths::open_private_append(log_path)?;
    let value = std::env::var("RUST_LOG").ok();
    let (targets, problem) = filter(value.as_deref());
    let layer = tracing_subscriber::fmt::layer()
        .with_ansi(false)
        .with_writer(Redacting(Mutex::new(file)));
    // A second init (tests in one process) keeps the first subscriber.
    if tracing_subscriber::registry()
        .with(targets)
        .with(layer)
        .try_init()
        .is_ok()
        && let Some(problem) = problem
    {
        tracing::warn!("{problem}");
    }
    Ok(())
}

/// The log file, each line passed through [`crate::secrets::redact`]
/// before it is written: a key a provider echoed never reaches the disk.
struct Redacting(Mutex<std::fs::File>);

struct Line<'a>(std::sync::MutexGuard<'a, std::fs::File>);

impl std::io::Write for Line<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if crate::secrets::any() && crate::secrets::found_in(buf) {
            let text = String::from_utf8_lossy(buf);
            self.0.write_all(crate::secrets::redact(&text).as_bytes())?;
        } else {
            self.0.write_all(buf)?;
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Redacting {
    type Writer = Line<'a>;

    fn make_writer(&'a self) -> Self::Writer {
        Line(self.0.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracing::Level;

    #[test]
    fn default_is_info() {
        let (t, problem) = filter(None);
        assert!(problem.is_none());
        assert!(t.would_enable("tinycoded::agent", &Level::INFO));
        assert!(!t.would_enable("tinycoded::agent", &Level::DEBUG));
        assert!(filter(Some("  ")).1.is_none());
    }

    #[test]
    fn levels_and_targets() {
        let (t, problem) = filter(Some("warn,tinycoded::agent=trace"));
        assert!(problem.is_none());
        assert!(t.would_enable("tinycoded::agent::turn", &Level::TRACE));
        assert!(!t.would_enable("sled::tree", &Level::INFO));
        assert!(t.would_enable("sled::tree", &Level::WARN));
        let (t, _) = filter(Some("debug"));
        assert!(t.would_enable("anything", &Level::DEBUG));
    }

    #[test]
    fn unparsable_value_falls_back_and_says_why() {
        let (t, problem) = filter(Some("tinycoded=loud"));
        assert!(t.would_enable("tinycoded", &Level::INFO));
        assert!(!t.would_enable("tinycoded", &Level::DEBUG));
        let problem = problem.unwrap_or_default();
        assert!(problem.contains("RUST_LOG=\"tinycoded=loud\""), "{problem}");
    }
}
