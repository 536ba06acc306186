//! The workspace's business rules: TINY.md, then AGENTS.md and CLAUDE.md
//! when present. They go into the system prompt verbatim, and the desk
//! reads its categories from them.

use std::path::Path;

/// Files whose content is business rules, in order.
pub const RULE_FILES: [&str; 3] = ["TINY.md", "AGENTS.md", "CLAUDE.md"];

/// A rules file larger than this is not read (it goes into every prompt).
const MAX_RULES_BYTES: u64 = 1024 * 1024;

/// Each rules file present, with its text.
pub fn read(workspace: &Path) -> Vec<(&'static str, String)> {
    RULE_FILES
        .iter()
        .filter_map(|file| {
            crate::files::read_own_text(&workspace.join(file), MAX_RULES_BYTES)
                .inspect_err(|e| {
                    if e.kind() != std::io::ErrorKind::NotFound {
                        tracing::warn!(file, error = %e, "a business-rules file is not read");
                    }
                })
                .ok()
                .map(|text| (*file, text))
        })
        .collect()
}
