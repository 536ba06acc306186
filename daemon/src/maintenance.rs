//! Maintenance of a stopped daemon's log: `tinycoded verify`, `export`,
//! `import` (the state lock is taken, so a running daemon refuses them).

use std::path::{Path, PathBuf};

use tinycode_shared::paths::Layout;

use crate::config::Config;
use crate::lifecycle::{DaemonError, create_private_dir, io, lock_state_dir, store_url};
use crate::store::EventStore;

/// What `tinycoded verify|export|import` does, on a stopped daemon's log.
#[derive(Debug, Clone)]
pub enum Maintenance {
    Verify,
    Export(PathBuf),
    Import(PathBuf),
}

/// Run a maintenance command on the log (the daemon must be stopped: the
/// state lock is taken). Returns what to print; a damaged log is an error.
pub fn maintain(layout: &Layout, command: &Maintenance) -> Result<String, DaemonError> {
    create_private_dir(&layout.state_dir)?;
    let _lock = match lock_state_dir(layout) {
        Err(DaemonError::AlreadyRunning { pid, .. }) => {
            return Err(DaemonError::Maintenance(format!(
                "tinycoded{} is running on this workspace; verify, export and import work on a stopped log: run `tinycode daemon stop` first",
                pid.map(|p| format!(" (pid {p})")).unwrap_or_default()
            )));
        }
        other => other?,
    };
    if let Some(workspace) = &layout.workspace
        && let Ok(config) = Config::load(workspace)
        && let Some(url) = store_url(&config)
    {
        let Maintenance::Import(file) = command else {
            return Err(DaemonError::Maintenance(
                "verify and export work on the embedded log; this desk's log is in PostgreSQL: back it up with pg_dump".into(),
            ));
        };
        // Moving an embedded desk to PostgreSQL: its export, restored.
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(io("cannot start the import", &layout.state_dir))?;
        let n = runtime.block_on(EventStore::import_postgres(&url, file))?;
        return Ok(format!(
            "imported {n} events from {} into PostgreSQL",
            file.display()
        ));
    }
    let db = layout.db_path();
    match command {
        Maintenance::Verify => verify(&db),
        Maintenance::Export(file) => {
            let n = EventStore::export(&db, file)?;
            Ok(format!("exported {n} events to {}", file.display()))
        }
        Maintenance::Import(file) => import(layout, &db, file),
    }
}

/// `tinycoded verify`: the whole log checked; a damaged one is an error
/// naming what is wrong.
fn verify(db: &Path) -> Result<String, DaemonError> {
    let report = EventStore::verify(db)?;
    let gaps: Vec<String> = report
        .recovered_gaps
        .iter()
        .map(|(a, b)| format!("{a}–{b}"))
        .collect();
    let mut out = format!(
        "{} events, last sequence {}",
        report.events, report.last_sequence
    );
    if !gaps.is_empty() {
        out.push_str(&format!("; lost in a recovery: {}", gaps.join(", ")));
    }
    if report.problems.is_empty() {
        Ok(format!("the log is sound: {out}"))
    } else {
        Err(DaemonError::Maintenance(format!(
            "the log is damaged ({out}):\n  {}",
            report.problems.join("\n  ")
        )))
    }
}

/// `tinycoded import FILE`: the export restored into this state dir; what
/// was there is kept aside, never overwritten.
fn import(layout: &Layout, db: &Path, file: &Path) -> Result<String, DaemonError> {
    let mut moved = String::new();
    if db.exists() {
        let stamp = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let aside = (0..)
            .map(|n| match n {
                0 => layout.state_dir.join(format!("db.before-import-{stamp}")),
                n => layout
                    .state_dir
                    .join(format!("db.before-import-{stamp}-{n}")),
            })
            .find(|p| !p.exists())
            .unwrap_or_else(|| layout.state_dir.join("db.before-import"));
        std::fs::rename(db, &aside).map_err(io("cannot move aside", db))?;
        moved = format!(" (the previous log is kept in {})", aside.display());
    }
    let n = EventStore::import(db, file)?;
    Ok(format!(
        "imported {n} events from {}{moved}",
        file.display()
    ))
}
