//! The workspace's business rules: TINY.md, then AGENTS.md and CLAUDE.md
//! when present. They go into the system prompt verbatim, and the desk
//! reads its categories from them.

use std::path::Path;

/// Files whose content is business rules, in order.
pub const RULE_FILES: [&str; 3] = ["TINY.md", "AGENTS.md", "CLAUDE.md"];

/// Each rules file present, with its text.
pub fn read(workspace: &Path) -> Vec<(&'static str, String)> {
    RULE_FILES
        .iter()
        .filter_map(|file| {
            std::fs::read_to_string(workspace.join(file))
                .ok()
                .map(|text| (*file, text))
        })
        .collect()
}
