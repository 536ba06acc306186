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
