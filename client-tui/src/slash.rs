//! Slash commands: the table, parsing, and Tab completion (which also
//! offers the workspace's skills, run as `/<skill> args`).

/// A built-in command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command {
    Help,
    New,
    Clear,
    Resume,
    Sessions,
    Model,
    Skills,
    Mcp,
    Agents,
    Compact,
    Status,
    Approvals,
    Tickets,
    Report,
    Exit,
}

/// Name, command, and the help line.
pub const COMMANDS: &[(&str, Command, &str)] = &[
    ("help", Command::Help, "keys and commands"),
    (
        "new",
        Command::New,
        "start a new session (with /model's choice)",
    ),
    (
        "clear",
        Command::Clear,
        "clear the screen (the session keeps its history)",
    ),
    (
        "resume",
        Command::Resume,
        "[ID] attach another session (no ID: pick one)",
    ),
    ("sessions", Command::Sessions, "pick a session"),
    (
        "model",
        Command::Model,
        "[provider/model] show the model, or switch this session's (and /new's)",
    ),
    (
        "skills",
        Command::Skills,
        "the workspace's skills (run one as /<skill> args)",
    ),
    ("mcp", Command::Mcp, "MCP servers"),
    ("agents", Command::Agents, "sub-agents"),
    ("compact", Command::Compact, "summarise older turns now"),
    ("status", Command::Status, "daemon and session status"),
    (
        "approvals",
        Command::Approvals,
        "approvals waiting in every session",
    ),
    ("tickets", Command::Tickets, "the desk's tickets"),
    (
        "report",
        Command::Report,
        "make the daily report [YYYY-MM-DD, default yesterday]: its summary and where its files are",
    ),
    (
        "exit",
        Command::Exit,
        "detach (a running turn keeps running)",
    ),
];

/// What a line starting with `/` asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parsed {
    Builtin(Command, String),
    Skill(String, String),
    Unknown(String),
}

/// Parse `/name args`; `skills` are the workspace's skill names.
pub fn parse(line: &str, skills: &[String]) -> Parsed {
    let body = line.trim().trim_start_matches('/');
    let (name, args) = body.split_once(char::is_whitespace).unwrap_or((body, ""));
    let args = args.trim().to_string();
    if let Some((_, command, _)) = COMMANDS.iter().find(|(n, _, _)| *n == name) {
        return Parsed::Builtin(*command, args);
    }
    if skills.iter().any(|s| s == name) {
        return Parsed::Skill(name.to_string(), args);
    }
    Parsed::Unknown(name.to_string())
}

/// Names (commands, then skills) starting with what follows the `/`.
pub fn complete(prefix: &str, skills: &[String]) -> Vec<String> {
    let typed = prefix.trim_start_matches('/');
    COMMANDS
        .iter()
        .map(|(n, _, _)| n.to_string())
        .chain(skills.iter().cloned())
        .filter(|n| n.starts_with(typed))
        .collect()
}

/// Longest common prefix of `names`.
pub fn common_prefix(names: &[String]) -> String {
    let Some(first) = names.first() else {
        return String::new();
    };
    let mut end = first.len();
    for n in &names[1..] {
        end = end.min(
            first
                .char_indices()
                .zip(n.chars())
                .find(|((_, a), b)| a != b)
                .map(|((i, _), _)| i)
                .unwrap_or(first.len().min(n.len())),
        );
    }
    first[..end].to_string()
}

/// The text a skill command sends: the command itself; the daemon expands
/// it into the skill's body for the model and keeps what was typed.
pub fn skill_message(skill: &str, args: &str) -> String {
    if args.is_empty() {
        format!("/{skill}")
    } else {
        format!("/{skill} {args}")
    }
}

/// The `/help` text.
pub fn help() -> String {
    let mut out = String::from(
        "Keys: Enter send · Alt+Enter or Ctrl+J newline · ↑/↓ history · PgUp/PgDn scroll · Tab complete · Ctrl+C cancel the turn (asks) / detach · Esc close\n",
    );
    for (name, _, help) in COMMANDS {
        out.push_str(&format!("/{name:<10} {help}\n"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_skills_and_unknown_names_parse() {
        let skills = vec!["triage-sop".to_string()];
        assert_eq!(
            parse("/resume s1", &skills),
            Parsed::Builtin(Command::Resume, "s1".into())
        );
        assert_eq!(
            parse("/triage-sop T-1001", &skills),
            Parsed::Skill("triage-sop".into(), "T-1001".into())
        );
        assert_eq!(parse("/nope", &skills), Parsed::Unknown("nope".into()));
    }

    #[test]
    fn completion_offers_commands_and_skills() {
        let skills = vec!["triage-sop".to_string()];
        assert_eq!(complete("/se", &skills), ["sessions"]);
        assert_eq!(complete("/t", &skills), ["tickets", "triage-sop"]);
        assert_eq!(common_prefix(&complete("/t", &skills)), "t");
        assert_eq!(common_prefix(&complete("/s", &skills)), "s");
        assert_eq!(common_prefix(&["compact".into()]), "compact");
    }
}
