//! Replacing a file atomically and durably: the one way the daemon writes a
//! file a person may also edit (workspace mirror, config).

use std::path::Path;

/// Write `content` to `path`: a temp file beside it with `mode`, fsynced,
/// then renamed over `path` (the caller fsyncs the directory when the
/// rename itself must survive a crash). Returns the written file's
/// metadata, taken before the rename: a change made after it shows as a
/// different stamp. Creates the directory if needed.
pub fn replace(path: &Path, content: &[u8], mode: u32) -> std::io::Result<std::fs::Metadata> {
    use std::io::Write;
    use std::os::unix::fs::PermissionsExt;
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy())
        .unwrap_or_default();
    // Unique per write: two writers never share a temp file.
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tmp = dir.join(format!(".{name}.{}.{n}.tmp", std::process::id()));
    let written = (|| {
        let mut file = std::fs::File::create(&tmp)?;
        file.set_permissions(std::fs::Permissions::from_mode(mode))?;
        file.write_all(content)?;
        file.sync_all()?;
        file.metadata()
    })();
    let renamed = written.and_then(|meta| std::fs::rename(&tmp, path).map(|()| meta));
    if renamed.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    renamed
}

/// fsync a directory, so a rename inside it survives a crash.
pub fn sync_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}

/// Why a workspace file is not read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    #[error("it is {0}, not a regular file; tinycode reads only regular files")]
    NotRegular(&'static str),
    #[error("it is a symbolic link that cannot be followed ({0})")]
    BrokenLink(String),
    #[error(
        "it is a symbolic link to {0}, outside the workspace; tinycode reads only files inside it"
    )]
    OutsideWorkspace(String),
    #[error("it is {len} bytes; a {what} file may be at most {limit} bytes ({} KiB), so that what is stored stays small", limit / 1024)]
    TooLarge {
        len: u64,
        limit: u64,
        what: &'static str,
    },
    #[error("it is not UTF-8 text (byte {0} is not)")]
    NotUtf8(usize),
    #[error("cannot read: {0}")]
    Io(String),
}

/// What kind of thing a file type is, for a refusal.
fn kind_name(t: std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a FIFO (named pipe)"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_block_device() || t.is_char_device() {
        "a device"
    } else {
        "not a file"
    }
}

/// Where `path` leads if it is to be read at all: itself when it is a
/// regular file, the target of a symbolic link that ends at a regular file
/// inside `root` (a canonical path), and `Ok(None)` when nothing is there.
/// Never opens anything, so a FIFO or a device cannot block or be touched.
pub fn regular_inside(
    path: &Path,
    root: &Path,
) -> Result<Option<(std::path::PathBuf, std::fs::Metadata)>, Refused> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Refused::Io(e.to_string())),
    };
    if meta.file_type().is_symlink() {
        let target = std::fs::canonicalize(path).map_err(|e| Refused::BrokenLink(e.to_string()))?;
        if !target.starts_with(root) {
            return Err(Refused::OutsideWorkspace(target.display().to_string()));
        }
        let meta = std::fs::metadata(&target).map_err(|e| Refused::BrokenLink(e.to_string()))?;
        if !meta.is_file() {
            return Err(Refused::NotRegular(kind_name(meta.file_type())));
        }
        return Ok(Some((target, meta)));
    }
    if !meta.is_file() {
        return Err(Refused::NotRegular(kind_name(meta.file_type())));
    }
    Ok(Some((path.to_path_buf(), meta)))
}

/// Read the regular file at `path` (as [`regular_inside`] found it) as
/// text of at most `limit` bytes. It is opened without following a link
/// and without blocking, and checked again once open: a file swapped for a
/// FIFO after the check is refused, never waited on.
pub fn read_text(path: &Path, limit: u64, what: &'static str) -> Result<String, Refused> {
    open_text(path, limit, what, libc::O_NOFOLLOW)
}

/// Read a file of the person's own (config, business rules) as text of at
/// most `limit` bytes, following links, without blocking on a FIFO or
/// reading a device. `NotFound` stays `NotFound`; any refusal is an
/// `InvalidData` error that says why.
pub fn read_own_text(path: &Path, limit: u64) -> std::io::Result<String> {
    match std::fs::metadata(path) {
        Err(e) => return Err(e),
        Ok(m) if !m.is_file() => {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                Refused::NotRegular(kind_name(m.file_type())).to_string(),
            ));
        }
        Ok(_) => {}
    }
    open_text(path, limit, "text", 0)
        .map_err(|r| std::io::Error::new(std::io::ErrorKind::InvalidData, r.to_string()))
}

fn open_text(path: &Path, limit: u64, what: &'static str, flags: i32) -> Result<String, Refused> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(flags | libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP) => {
                Refused::BrokenLink("it changed into a link while being read".into())
            }
            _ => Refused::Io(e.to_string()),
        })?;
    let meta = file.metadata().map_err(|e| Refused::Io(e.to_string()))?;
    if !meta.is_file() {
        return Err(Refused::NotRegular(kind_name(meta.file_type())));
    }
    if meta.len() > limit {
        return Err(Refused::TooLarge {
            len: meta.len(),
            limit,
            what,
        });
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    file.take(limit + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| Refused::Io(e.to_string()))?;
    if bytes.len() as u64 > limit {
        return Err(Refused::TooLarge {
            len: bytes.len() as u64,
            limit,
            what,
        });
    }
    String::from_utf8(bytes).map_err(|e| Refused::NotUtf8(e.utf8_error().valid_up_to()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root() -> (tempfile::TempDir, std::path::PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        (dir, root)
    }

    #[test]
    fn a_fifo_is_refused_without_opening_it() {
        let (_d, root) = root();
        let fifo = root.join("T-1.json");
        rustix::fs::mkfifoat(
            rustix::fs::CWD,
            &fifo,
            rustix::fs::Mode::from_bits_truncate(0o600),
        )
        .unwrap();
        assert_eq!(
            regular_inside(&fifo, &root).unwrap_err(),
            Refused::NotRegular("a FIFO (named pipe)")
        );
        // Even read directly, it is refused at once (no blocking open).
        assert!(matches!(
            read_text(&fifo, 100, "ticket"),
            Err(Refused::NotRegular(_))
        ));
    }

    #[test]
    fn links_are_followed_only_inside_the_workspace() {
        let (_d, root) = root();
        std::fs::write(root.join("real.json"), "{}").unwrap();
        std::os::unix::fs::symlink(root.join("real.json"), root.join("in.json")).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", root.join("out.json")).unwrap();
        std::os::unix::fs::symlink(root.join("loop.json"), root.join("loop.json")).unwrap();
        std::os::unix::fs::symlink("/dev/null", root.join("dev.json")).unwrap();
        let (target, _) = regular_inside(&root.join("in.json"), &root)
            .unwrap()
            .unwrap();
        assert_eq!(read_text(&target, 10, "ticket").unwrap(), "{}");
        assert!(matches!(
            regular_inside(&root.join("out.json"), &root),
            Err(Refused::OutsideWorkspace(t)) if t == "/etc/passwd"
        ));
        assert!(matches!(
            regular_inside(&root.join("loop.json"), &root),
            Err(Refused::BrokenLink(_))
        ));
        assert!(matches!(
            regular_inside(&root.join("dev.json"), &root),
            Err(Refused::OutsideWorkspace(_))
        ));
        assert!(
            regular_inside(&root.join("none.json"), &root)
                .unwrap()
                .is_none()
        );
        // A link is never followed by the read itself.
        assert!(read_text(&root.join("out.json"), 10_000, "ticket").is_err());
    }

    #[test]
    fn size_and_encoding_are_checked_on_what_is_read() {
        let (_d, root) = root();
        std::fs::write(root.join("big"), vec![b'a'; 11]).unwrap();
        std::fs::write(root.join("bin"), [b'a', 0xff]).unwrap();
        assert!(matches!(
            read_text(&root.join("big"), 10, "ticket"),
            Err(Refused::TooLarge { len: 11, .. })
        ));
        assert_eq!(
            read_text(&root.join("bin"), 10, "ticket"),
            Err(Refused::NotUtf8(1))
        );
    }
}
