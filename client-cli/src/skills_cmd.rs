//! `tinycode skills list|install PATH|remove NAME`: the workspace's skills
//! (`.tinycode/skills/<name>/SKILL.md`), changed without a daemon restart.

use std::process::ExitCode;

use clap::Subcommand;
use tinycode_shared::proto::calls_client::CallsClient;
use tinycode_shared::proto::extensions_client::ExtensionsClient;
use tinycode_shared::proto::{InstallSkillRequest, ListSkillsRequest, RemoveSkillRequest};

use crate::{Ctx, output};

#[derive(Subcommand, Debug)]
pub enum SkillsAction {
    /// Every skill: its name and description (`/name` runs it in a session).
    List,
    /// Copy a skill folder (holding SKILL.md with `name` and `description`
    /// frontmatter), or a SKILL.md file, into `.tinycode/skills/<name>/`.
    Install {
        path: std::path::PathBuf,
        /// Replace an installed skill of the same name.
        #[arg(long)]
        replace: bool,
    },
    /// Remove `.tinycode/skills/<name>/`.
    Remove { name: String },
}

pub async fn run(ctx: &Ctx, action: SkillsAction) -> anyhow::Result<ExitCode> {
    match action {
        SkillsAction::List => {
            let skills = CallsClient::new(ctx.connect().await?)
                .list_skills(ListSkillsRequest {})
                .await?
                .into_inner()
                .skills;
            if ctx.json {
                output::json_pretty(&serde_json::json!({
                    "skills": skills.iter().map(|s| serde_json::json!({
                        "name": s.name, "description": s.description,
                        "disableModelInvocation": s.disable_model_invocation,
                    })).collect::<Vec<_>>(),
                }));
            } else if skills.is_empty() {
                println!(
                    "{}",
                    tinycode_shared::hint::localize(
                        "no skills (install one with `tinycode skills install PATH`)"
                    )
                );
            } else {
                let rows: Vec<Vec<String>> = skills
                    .iter()
                    .map(|s| {
                        let who = if s.disable_model_invocation {
                            "people"
                        } else {
                            "model, people"
                        };
                        vec![format!("/{}", s.name), who.into(), s.description.clone()]
                    })
                    .collect();
                print!(
                    "{}",
                    output::table(&["SKILL", "USED BY", "DESCRIPTION"], &rows)
                );
            }
        }
        SkillsAction::Install { path, replace } => {
            // The daemon's working directory is not ours.
            let path = std::path::absolute(&path)?;
            let skill = ExtensionsClient::new(ctx.connect().await?)
                .install_skill(InstallSkillRequest {
                    path: path.display().to_string(),
                    replace,
                })
                .await?
                .into_inner();
            if ctx.json {
                output::json_pretty(&serde_json::json!({
                    "installed": skill.name, "description": skill.description,
                }));
            } else {
                println!(
                    "installed skill /{} ({}); the next turn sees it",
                    skill.name, skill.description
                );
            }
        }
        SkillsAction::Remove { name } => {
            ExtensionsClient::new(ctx.connect().await?)
                .remove_skill(RemoveSkillRequest { name: name.clone() })
                .await?;
            if ctx.json {
                output::json_pretty(&serde_json::json!({"removed": name}));
            } else {
                println!("removed skill /{name}");
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
