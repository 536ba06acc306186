//! Where things live. The daemon and every client use these same rules, so a
//! client always finds the socket of the daemon that owns its workspace.
//!
//! - Workspace: `--workspace DIR`, else the nearest ancestor of the current
//!   directory holding `.tinycode/` (the way git finds a repository).
//! - State dir: `$TINYCODE_HOME` when set, else `<workspace>/.tinycode/state`.
//! - Socket: `<state>/tinycoded.sock`, or — when that path is too long for a
//!   Unix socket address — `<runtime>/<hash of state dir>.sock` where runtime
//!   is `$XDG_RUNTIME_DIR/tinycode` or `/tmp/tinycode-<uid>`.

use std::path::{Path, PathBuf};

/// The workspace marker directory.
pub const MARKER_DIR: &str = ".tinycode";
/// Environment variable that overrides the state dir.
pub const HOME_ENV: &str = "TINYCODE_HOME";
/// Longest socket path we bind directly (`sun_path` is 108 bytes with NUL).
pub const MAX_SOCKET_PATH: usize = 100;

#[derive(Debug, thiserror::Error)]
pub enum PathError {
    #[error(
        "no tinycode workspace found in {start} or any parent directory; run `tinycode init` there or pass --workspace DIR"
    )]
    NoWorkspace { start: PathBuf },
    #[error("workspace {path} is not a directory")]
    NotADirectory { path: PathBuf },
    #[error("cannot use {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Every path one daemon instance uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    /// The support workspace (tickets, knowledge, `.tinycode/`). `None` only
    /// for a client that found the daemon through `$TINYCODE_HOME` alone.
    pub workspace: Option<PathBuf>,
    pub state_dir: PathBuf,
    pub socket: PathBuf,
}

impl Layout {
    /// Resolve the layout from an explicit workspace, or by searching upward
    /// from the current directory. With `$TINYCODE_HOME` set, a missing
    /// workspace is not an error (the state dir is known without it).
    pub fn discover(explicit_workspace: Option<&Path>) -> Result<Self, PathError> {
        let cwd = std::env::current_dir().map_err(|source| PathError::Io {
            path: PathBuf::from("."),
            source,
        })?;
        let home = std::env::var_os(HOME_ENV)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from);
        Self::resolve(explicit_workspace, &cwd, home.as_deref(), &runtime_dir())
    }

    /// [`Layout::discover`] with its inputs explicit: the current directory,
    /// `$TINYCODE_HOME` and the runtime dir for long-path sockets.
    pub fn resolve(
        explicit_workspace: Option<&Path>,
        cwd: &Path,
        home: Option<&Path>,
        runtime: &Path,
    ) -> Result<Self, PathError> {
        let workspace = match explicit_workspace {
            Some(dir) => Some(canonical_dir(&cwd.join(dir))?),
            None => find_workspace(cwd),
        };
        let state_dir = match (home, &workspace) {
            (Some(home), _) => absolutize(&cwd.join(home)),
            (None, Some(ws)) => ws.join(MARKER_DIR).join("state"),
            (None, None) => {
                return Err(PathError::NoWorkspace {
                    start: cwd.to_path_buf(),
                });
            }
        };
        let socket = socket_path(&state_dir, runtime);
        Ok(Self {
            workspace,
            state_dir,
            socket,
        })
    }

    pub fn lock_path(&self) -> PathBuf {
        self.state_dir.join("tinycoded.lock")
    }
    pub fn db_path(&self) -> PathBuf {
        self.state_dir.join("db")
    }
    pub fn log_dir(&self) -> PathBuf {
        self.state_dir.join("logs")
    }
    pub fn log_path(&self) -> PathBuf {
        self.log_dir().join("tinycoded.log")
    }
    /// Where an auto-started daemon's stderr goes (start-up errors).
    pub fn stderr_path(&self) -> PathBuf {
        self.log_dir().join("tinycoded.stderr.log")
    }
}

/// The nearest ancestor of `start` (itself included) holding `.tinycode/`.
pub fn find_workspace(start: &Path) -> Option<PathBuf> {
    start
        .ancestors()
        .find(|dir| dir.join(MARKER_DIR).is_dir())
        .map(absolutize)
}

fn canonical_dir(path: &Path) -> Result<PathBuf, PathError> {
    let canonical = path.canonicalize().map_err(|source| PathError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    if !canonical.is_dir() {
        return Err(PathError::NotADirectory { path: canonical });
    }
    Ok(canonical)
}

/// Canonical when it exists, else the path as given (already absolute).
fn absolutize(path: &Path) -> PathBuf {
    path.canonicalize().unwrap_or_else(|_| path.to_path_buf())
}

/// The socket for a state dir (see the module docs for the fallback rule).
pub fn socket_path(state_dir: &Path, runtime: &Path) -> PathBuf {
    let direct = state_dir.join("tinycoded.sock");
    if direct.as_os_str().len() <= MAX_SOCKET_PATH {
        return direct;
    }
    runtime.join(format!(
        "{:016x}.sock",
        fnv1a64(state_dir.as_os_str().as_encoded_bytes())
    ))
}

/// The file a daemon keeps beside its socket while it starts (removed once
/// the full server answers): a client that finds none sends its calls at
/// once instead of first asking how far the start is.
pub fn starting_marker(socket: &Path) -> PathBuf {
    socket.with_extension("starting")
}

/// Per-user directory for sockets whose natural path is too long.
pub fn runtime_dir() -> PathBuf {
    match std::env::var_os("XDG_RUNTIME_DIR").filter(|v| !v.is_empty()) {
        Some(dir) => PathBuf::from(dir).join("tinycode"),
        None => {
            std::env::temp_dir().join(format!("tinycode-{}", rustix::process::geteuid().as_raw()))
        }
    }
}

/// FNV-1a, 64 bit: stable across builds and platforms (unlike `DefaultHasher`).
fn fnv1a64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &b| {
        (hash ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// Create `dir` (and missing parents) private to the user: mode 0700, also
/// when it already existed.
pub fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
}

/// Open `path` for appending, creating it private (mode 0600).
pub fn open_private_append(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_nearest_workspace_like_git() {
        let tmp = tempfile::tempdir().unwrap();
        let ws = tmp.path().join("desk");
        let deep = ws.join("tickets/sub/dir");
        std::fs::create_dir_all(&deep).unwrap();
        std::fs::create_dir_all(ws.join(MARKER_DIR)).unwrap();
        let layout = Layout::resolve(None, &deep, None, Path::new("/run")).unwrap();
        let ws = ws.canonicalize().unwrap();
        assert_eq!(layout.workspace.as_deref(), Some(ws.as_path()));
        assert_eq!(layout.state_dir, ws.join(".tinycode/state"));
        assert_eq!(layout.socket, ws.join(".tinycode/state/tinycoded.sock"));
    }

    #[test]
    fn no_workspace_is_a_readable_error() {
        let tmp = tempfile::tempdir().unwrap();
        let err = Layout::resolve(None, tmp.path(), None, Path::new("/run")).unwrap_err();
        assert!(err.to_string().contains("tinycode init"), "{err}");
    }

    #[test]
    fn home_overrides_state_dir_and_needs_no_workspace() {
        let tmp = tempfile::tempdir().unwrap();
        let home = tmp.path().join("home");
        let layout = Layout::resolve(None, tmp.path(), Some(&home), Path::new("/run")).unwrap();
        assert_eq!(layout.workspace, None);
        assert_eq!(layout.state_dir, home);
    }

    #[test]
    fn explicit_workspace_must_exist() {
        let tmp = tempfile::tempdir().unwrap();
        let err = Layout::resolve(
            Some(Path::new("missing")),
            tmp.path(),
            None,
            Path::new("/run"),
        )
        .unwrap_err();
        assert!(matches!(err, PathError::Io { .. }), "{err}");
    }

    #[test]
    fn long_state_dirs_fall_back_to_a_short_stable_socket() {
        let run = Path::new("/run/user/1000/tinycode");
        let long = PathBuf::from("/").join("x".repeat(150));
        let a = socket_path(&long, run);
        assert!(a.starts_with(run), "{}", a.display());
        assert!(a.as_os_str().len() <= MAX_SOCKET_PATH, "{}", a.display());
        assert_eq!(a, socket_path(&long, run), "stable");
        assert_ne!(
            a,
            socket_path(&long.join("other"), run),
            "distinct per state dir"
        );
        let short = PathBuf::from("/tmp/s");
        assert_eq!(socket_path(&short, run), short.join("tinycoded.sock"));
    }
}
