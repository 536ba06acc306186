//! The workspace's files as a start first sees them: each kind's visible
//! files listed and `stat`ed, on a blocking thread. The daemon starts this
//! look before it opens the log, so the two overlap (on a large desk each
//! takes a few hundred milliseconds: sled's open mostly one core, the
//! `stat`s both); the desk's start compares the stamps with the mirror's
//! records once the log is open (`read_back.rs`). A file changed after its
//! `stat` is read back by the mirror's first poll, as one changed after the
//! scan always was; one that was missing and is put back before the mirror
//! writes it again is kept aside if it is not what the mirror wrote.
//! A start that fails before the desk opens leaves the look to finish on
//! its own (the process waits for it as it exits).

use std::path::{Path, PathBuf};

use super::{Kind, on_both_cores};
use crate::desk::{DeskSettings, Stamp};

/// The look at the workspace's files, under way.
pub struct FilesLook {
    dirs: [(Kind, PathBuf); 2],
    task: tokio::task::JoinHandle<Looked>,
}

/// Per kind (tickets, then articles): its directory, its visible files'
/// names sorted bytewise (the order of the mirror's record keys), and
/// each one's stamp (`None`: it could not be `stat`ed).
pub(super) type Looked = [(Kind, PathBuf, Vec<String>, Vec<Option<Stamp>>); 2];

impl FilesLook {
    /// Start looking at the files `settings` places under `workspace`
    /// (within a Tokio runtime).
    pub fn start(workspace: &Path, settings: &DeskSettings) -> Self {
        let dirs = [
            (Kind::Ticket, workspace.join(&settings.tickets_dir)),
            (Kind::Article, workspace.join(&settings.knowledge_dir)),
        ];
        let task = {
            let dirs = dirs.clone();
            tokio::task::spawn_blocking(move || look(dirs))
        };
        Self { dirs, task }
    }

    /// What the look found, for the directories `dirs` (looked at again,
    /// here, if they are not the ones it was started on).
    pub(super) async fn wait(self, dirs: [(Kind, &Path); 2]) -> Looked {
        let same = self
            .dirs
            .iter()
            .zip(&dirs)
            .all(|((a, x), (b, y))| a == b && x == y);
        let owned = || dirs.map(|(kind, dir)| (kind, dir.to_path_buf()));
        let task = if same {
            self.task
        } else {
            self.task.abort();
            let dirs = owned();
            tokio::task::spawn_blocking(move || look(dirs))
        };
        match task.await {
            Ok(looked) => looked,
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            // Cancelled: the runtime is shutting down.
            Err(_) => look(owned()),
        }
    }

    #[cfg(test)]
    pub(crate) fn is_finished(&self) -> bool {
        self.task.is_finished()
    }
}

fn look(dirs: [(Kind, PathBuf); 2]) -> Looked {
    dirs.map(|(kind, dir)| {
        let names = list_names(&dir, kind.ext());
        let stamps = stat_all(&dir, &names);
        (kind, dir, names, stamps)
    })
}

/// The names of `dir`'s visible `*.ext` files, sorted bytewise (the order
/// of the mirror's record keys).
fn list_names(dir: &Path, ext: &str) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let dot_ext = format!(".{ext}");
    let mut names: Vec<String> = entries
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| n.ends_with(&dot_ext) && n.len() > dot_ext.len() && !n.starts_with('.'))
        .collect();
    names.sort_unstable();
    names
}

/// One `stat` per file, on both cores for a large directory.
fn stat_all(dir: &Path, names: &[String]) -> Vec<Option<Stamp>> {
    use rustix::fs::{Mode, OFlags};
    // Each `stat` names the file relative to the directory, opened once:
    // looking up the directory's path again for each file was about half
    // of a `stat`'s cost (a profile of a start on 100,000 files).
    let opened = rustix::fs::open(
        dir,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    );
    on_both_cores(names.iter().collect(), |part| match &opened {
        Ok(fd) => part.iter().map(|n| Stamp::read_at(fd, n)).collect(),
        Err(_) => part.iter().map(|n| Stamp::read(&dir.join(n))).collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The look lists each kind's visible files in key order with their
    /// stamps; asked for other directories than it started on, it looks at
    /// those instead.
    #[tokio::test]
    async fn a_look_lists_the_files_of_the_directories_asked_for() {
        let tmp = tempfile::tempdir().unwrap();
        let ws = tmp.path();
        for (dir, name) in [
            ("tickets", "T-2.json"),
            ("tickets", "T-10.json"),
            ("tickets", ".hidden.json"),
            ("tickets", "notes.txt"),
            ("knowledge", "a.md"),
            ("other", "T-9.json"),
        ] {
            std::fs::create_dir_all(ws.join(dir)).unwrap();
            std::fs::write(ws.join(dir).join(name), "x").unwrap();
        }
        let settings = DeskSettings::default();
        let (tickets, knowledge, other) =
            (ws.join("tickets"), ws.join("knowledge"), ws.join("other"));
        let looked = FilesLook::start(ws, &settings)
            .wait([(Kind::Ticket, &tickets), (Kind::Article, &knowledge)])
            .await;
        assert_eq!(looked[0].2, ["T-10.json", "T-2.json"]);
        let stamps = ["T-10.json", "T-2.json"].map(|n| Stamp::read(&tickets.join(n)));
        assert!(stamps.iter().all(Option::is_some));
        assert_eq!(looked[0].3, stamps);
        assert_eq!(looked[1].2, ["a.md"]);
        let looked = FilesLook::start(ws, &settings)
            .wait([(Kind::Ticket, &other), (Kind::Article, &knowledge)])
            .await;
        assert_eq!(
            (&looked[0].1, &looked[0].2[..]),
            (&other, &["T-9.json".to_string()][..])
        );
        // Asked for the directories it started on, it gives what it saw
        // then: a file gone since is still listed.
        let look = FilesLook::start(ws, &settings);
        while !look.is_finished() {
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
        std::fs::remove_file(tickets.join("T-2.json")).unwrap();
        let looked = look
            .wait([(Kind::Ticket, &tickets), (Kind::Article, &knowledge)])
            .await;
        assert_eq!(looked[0].2, ["T-10.json", "T-2.json"]);
    }
}
