//! `tinycode web --url`: a fresh one-time link from the page already
//! running for a workspace. The running bridge answers on `web.sock` in the
//! workspace's state directory (0600, in the 0700 state directory, like
//! the daemon's socket): connecting is asking; the answer is one line, the
//! link. The newest bridge of a workspace holds the socket.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use tinycode_shared::paths::Layout;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::auth::Auth;

fn socket_path(layout: &Layout) -> PathBuf {
    layout.state_dir.join("web.sock")
}

/// Ask the running page for a fresh link.
pub async fn fresh_link(layout: &Layout) -> anyhow::Result<String> {
    let path = socket_path(layout);
    let mut stream = tokio::net::UnixStream::connect(&path).await.with_context(|| {
        format!(
            "no page is running for this workspace (nothing answers on {}); start one with `tinycode web`",
            path.display()
        )
    })?;
    let mut link = String::new();
    stream
        .read_to_string(&mut link)
        .await
        .context("the running page did not answer")?;
    let link = link.trim().to_string();
    anyhow::ensure!(
        link.starts_with("http"),
        "the running page answered something that is not a link"
    );
    Ok(link)
}

/// Answer `--url` asks on the workspace's `web.sock` for as long as the
/// bridge runs; the socket is removed when the returned guard drops.
pub fn serve_links(layout: &Layout, auth: Arc<Auth>) -> anyhow::Result<RemoveOnDrop> {
    use std::os::unix::fs::PermissionsExt;
    let path = socket_path(layout);
    // A socket left by a bridge that died, or one another bridge holds:
    // the newest takes it.
    let _ = std::fs::remove_file(&path);
    let listener = tokio::net::UnixListener::bind(&path)
        .with_context(|| format!("cannot listen on {}", path.display()))?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
        .with_context(|| format!("cannot make {} private", path.display()))?;
    let own_uid = rustix::process::geteuid().as_raw();
    tokio::spawn(async move {
        loop {
            let Ok((mut stream, _)) = listener.accept().await else {
                // Out of descriptors, say: wait rather than spin.
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                continue;
            };
            let same_user = stream
                .peer_cred()
                .map(|c| c.uid() == own_uid)
                .unwrap_or(false);
            if !same_user {
                continue;
            }
            let link = auth.link();
            let _ = stream.write_all(format!("{link}\n").as_bytes()).await;
        }
    });
    let inode = inode_of(&path);
    Ok(RemoveOnDrop(path, inode))
}

fn inode_of(path: &std::path::Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::symlink_metadata(path)
        .ok()
        .map(|m| (m.dev(), m.ino()))
}

/// Removes the bridge's `web.sock` when it stops — unless a newer bridge
/// has taken the path since.
pub struct RemoveOnDrop(PathBuf, Option<(u64, u64)>);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        if self.1.is_some() && inode_of(&self.0) == self.1 {
            let _ = std::fs::remove_file(&self.0);
        }
    }
}
