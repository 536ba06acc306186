//! Helpers of the daemon's unit tests.

use std::path::{Path, PathBuf};

/// A writable copy of the fixture workspace.
pub(crate) fn fixture_copy() -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().join("desk");
    copy_dir(
        &Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../../shared/fixtures/tinycode-support-desk"),
        &ws,
    );
    (tmp, ws)
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::write(&target, std::fs::read(entry.path()).unwrap()).unwrap();
        }
    }
}
