//! The daemon's own files: the state dir (private, locked for the
//! daemon's lifetime) and the socket clients connect to.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use tinycode_shared::paths::Layout;
use tokio::net::UnixListener;

use super::{DaemonError, io};

/// Holds the state-dir lock for the daemon's lifetime (released on drop).
pub struct StateLock {
    _file: File,
}

/// Create the state dir (0700) and take its exclusive lock.
pub fn lock_state_dir(layout: &Layout) -> Result<StateLock, DaemonError> {
    create_private_dir(&layout.state_dir)?;
    let path = layout.lock_path();
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(io("cannot open lock file", &path))?;
    match file.try_lock() {
        Ok(()) => {}
        Err(TryLockError::WouldBlock) => {
            let mut content = String::new();
            let _ = file.read_to_string(&mut content);
            return Err(DaemonError::AlreadyRunning {
                state_dir: layout.state_dir.clone(),
                pid: content.trim().parse().ok(),
            });
        }
        Err(TryLockError::Error(e)) => return Err(io("cannot lock", &path)(e)),
    }
    file.set_len(0)
        .map_err(io("cannot write lock file", &path))?;
    file.rewind().map_err(io("cannot write lock file", &path))?;
    writeln!(file, "{}", std::process::id()).map_err(io("cannot write lock file", &path))?;
    Ok(StateLock { _file: file })
}

pub(crate) fn create_private_dir(dir: &Path) -> Result<(), DaemonError> {
    std::fs::create_dir_all(dir).map_err(io("cannot create directory", dir))?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
        .map_err(io("cannot set permissions on", dir))
}

/// Bind the socket: private directory, stale socket removed (we hold the
/// lock, so any socket file left there belongs to a dead daemon), mode 0600.
pub fn bind_socket(layout: &Layout) -> Result<UnixListener, DaemonError> {
    let socket = &layout.socket;
    let dir = socket.parent().unwrap_or(Path::new("/"));
    if dir != layout.state_dir {
        // Fallback runtime dir (long state path): must be ours and private.
        create_private_dir(dir)?;
        let meta = std::fs::metadata(dir).map_err(io("cannot inspect", dir))?;
        let uid = rustix::process::geteuid().as_raw();
        if meta.uid() != uid || meta.mode() & 0o077 != 0 {
            return Err(DaemonError::UnsafeSocketDir {
                path: dir.to_path_buf(),
                uid,
            });
        }
    }
    match std::fs::remove_file(socket) {
        Ok(()) => {
            tracing::warn!(socket = %socket.display(), "removed a stale socket left by a previous run")
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io("cannot remove stale socket", socket)(e)),
    }
    // Written before the socket answers: no client finds a starting daemon
    // without it (`paths::starting_marker`); a client that found none
    // would send its calls to the start-up server, which refuses them.
    let marker = tinycode_shared::paths::starting_marker(socket);
    std::fs::write(&marker, std::process::id().to_string())
        .map_err(io("cannot write the start-up marker", &marker))?;
    let listener = UnixListener::bind(socket).map_err(io("cannot bind socket", socket))?;
    std::fs::set_permissions(socket, std::fs::Permissions::from_mode(0o600))
        .map_err(io("cannot set permissions on", socket))?;
    Ok(listener)
}
