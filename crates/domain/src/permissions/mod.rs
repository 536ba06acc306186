//! The permission rule table of the TinyCode design: tool + arguments →
//! allow / ask / deny, evaluated before a tool runs. Until durable approvals
//! exist, an `ask` is settled by the run's policy ([`RunPolicy`]).

use serde_json::Value;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rule {
    Allow,
    /// A human must approve; the reason says why.
    Ask(String),
    Deny(String),
}

/// Read-only tools and `load_skill`: evidence gathering is free.
const READ_ONLY: [&str; 7] = [
    "render_report",
    "list_tickets",
    "get_ticket",
    "search_tickets",
    "search_knowledge",
    "read_article",
    "load_skill",
];

/// The sub-agent tools. Workers only read, but TinyCode's table asks for
/// every uncategorised tool (MCP, sub-agent): they ask unless config
/// `permissions.allow` names them (the demo desk's does).
pub const SUB_AGENT_TOOLS: [&str; 4] = ["spawn_agent", "wait_agent", "list_agents", "close_agent"];

/// Whether `tool` only reads.
pub fn is_read_only(tool: &str) -> bool {
    READ_ONLY.contains(&tool)
}

/// Tools whose "always allow" is never remembered: every call is reviewed.
pub const REVIEW_REQUIRED: [&str; 1] = ["propose_knowledge_edit"];

/// Whether config `permissions.allow` lets `tool` run without asking (a
/// name, or a prefix ending in `*`); never a review-required tool.
pub fn allowed_by_config(allow: &[String], tool: &str) -> bool {
    !REVIEW_REQUIRED.contains(&tool)
        && tool != "ask_user"
        && allow.iter().any(|a| match a.strip_suffix('*') {
            Some(prefix) => tool.starts_with(prefix),
            None => a == tool,
        })
}

/// The rule for one call.
pub fn rule_for(tool: &str, args: &Value) -> Rule {
    match tool {
        t if READ_ONLY.contains(&t) => Rule::Allow,
        t if SUB_AGENT_TOOLS.contains(&t) => Rule::Ask(format!(
            "{tool} starts or manages a sub-agent: allowed by config `permissions.allow`, otherwise a human decides"
        )),
        "classify_ticket" | "route_ticket" => Rule::Allow,
        "escalate_ticket" => match args.get("level").and_then(Value::as_u64) {
            Some(1) => Rule::Allow,
            _ => Rule::Ask(
                "escalating to a supervisor (level 2) needs a human's confirmation".into(),
            ),
        },
        "reply_customer" => {
            Rule::Ask("replies leave the company: a human approves each one".into())
        }
        "propose_knowledge_edit" => {
            let old = args.get("old_text").and_then(Value::as_str);
            let new = args.get("new_text").and_then(Value::as_str);
            if old.is_some() && old == new {
                Rule::Allow // no change: short-circuit, no approval taken
            } else {
                Rule::Ask("knowledge base changes are reviewed by a human".into())
            }
        }
        t if t.starts_with("mcp__") => Rule::Ask(format!(
            "{tool} comes from an MCP server: its tools need a human's approval"
        )),
        _ => Rule::Ask(format!(
            "{tool} is not in the rule table; unclassified tools need approval"
        )),
    }
}

/// How a session settles a call whose rule says ask: stored as `ask`,
/// `auto` or `deny` on `SessionCreated` and accepted in that spelling from
/// clients and config.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(from = "String", into = "&'static str")]
pub enum ApprovalMode {
    /// A durable approval: a human decides.
    #[default]
    Ask,
    /// Allow what would be asked (deny rules still deny).
    Auto,
    /// Refuse what would be asked, with the reason returned to the model.
    Deny,
}

impl ApprovalMode {
    pub const NAMES: [&str; 3] = ["ask", "auto", "deny"];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ask => "ask",
            Self::Auto => "auto",
            Self::Deny => "deny",
        }
    }

    /// `Ok(None)` for an empty value (the default applies).
    pub fn parse(value: &str) -> Result<Option<Self>, String> {
        Ok(Some(match value.trim() {
            "" => return Ok(None),
            "ask" => Self::Ask,
            "auto" => Self::Auto,
            "deny" => Self::Deny,
            other => return Err(format!("must be ask, auto or deny, got {other:?}")),
        }))
    }

    /// A stored mode; a value this version does not know asks.
    pub fn of_stored(value: &str) -> Self {
        Self::parse(value).ok().flatten().unwrap_or_default()
    }

    /// How a turn settles `ask` where no approval can be taken (sub-steps
    /// without a human): only `auto` allows.
    pub fn run_policy(self) -> RunPolicy {
        match self {
            Self::Auto => RunPolicy::Auto,
            Self::Ask | Self::Deny => RunPolicy::Deny,
        }
    }
}

impl From<String> for ApprovalMode {
    fn from(value: String) -> Self {
        Self::of_stored(&value)
    }
}

impl From<ApprovalMode> for &'static str {
    fn from(mode: ApprovalMode) -> Self {
        mode.as_str()
    }
}

/// How a run settles `ask` while no human is wired in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RunPolicy {
    /// Headless default: refuse, with the reason returned to the model.
    #[default]
    Deny,
    /// Allow what would be asked (deny rules still deny).
    Auto,
}

/// The gate's verdict for one call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Allow,
    /// Refused; the text goes back to the model as the tool's error result.
    Deny(String),
    /// A question (`ask_user`) settled: the text is the call's result (a
    /// person's answer, a declined question, nobody in reach).
    Answered(String),
    /// No decision, and none can come now (the daemon is stopping): the
    /// turn stops before this call, records nothing more, and the next
    /// start resumes it here.
    Unsettled(String),
}

impl RunPolicy {
    /// Settle a call whose rule says ask (`reason`: the rule's).
    pub fn settle(self, reason: &str) -> Decision {
        match self {
            RunPolicy::Auto => Decision::Allow,
            RunPolicy::Deny => Decision::Deny(format!(
                "not approved: {reason}, and this run settles approvals with --approve deny; continue without this action and say what a human should do"
            )),
        }
    }
}

pub fn decide(tool: &str, args: &Value, policy: RunPolicy) -> Decision {
    match rule_for(tool, args) {
        Rule::Allow => Decision::Allow,
        Rule::Deny(reason) => Decision::Deny(reason),
        Rule::Ask(reason) => policy.settle(&reason),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn sub_agent_tools_ask_unless_the_config_allows_them() {
        for tool in SUB_AGENT_TOOLS {
            assert!(matches!(rule_for(tool, &json!({})), Rule::Ask(_)), "{tool}");
            assert!(allowed_by_config(
                &[
                    "spawn_agent".into(),
                    "*_agent".into(),
                    "list_agents".into(),
                    "close_agent".into(),
                    "wait_agent".into()
                ],
                tool
            ));
        }
        assert!(!allowed_by_config(
            &["propose_knowledge_edit".into()],
            "propose_knowledge_edit"
        ));
        assert!(!allowed_by_config(&[], "spawn_agent"));
    }

    #[test]
    fn the_rule_table_of_the_design() {
        for tool in READ_ONLY {
            assert_eq!(rule_for(tool, &json!({})), Rule::Allow, "{tool}");
        }
        assert_eq!(rule_for("classify_ticket", &json!({})), Rule::Allow);
        assert_eq!(rule_for("route_ticket", &json!({})), Rule::Allow);
        assert_eq!(
            rule_for("escalate_ticket", &json!({"level": 1})),
            Rule::Allow
        );
        assert!(matches!(
            rule_for("escalate_ticket", &json!({"level": 2})),
            Rule::Ask(_)
        ));
        assert!(matches!(
            rule_for("reply_customer", &json!({})),
            Rule::Ask(_)
        ));
        assert!(matches!(
            rule_for(
                "propose_knowledge_edit",
                &json!({"old_text": "a", "new_text": "b"})
            ),
            Rule::Ask(_)
        ));
        assert_eq!(
            rule_for(
                "propose_knowledge_edit",
                &json!({"old_text": "a", "new_text": "a"})
            ),
            Rule::Allow
        );
        assert!(matches!(rule_for("mcp_weather", &json!({})), Rule::Ask(_)));
    }

    #[test]
    fn the_run_policy_settles_asks() {
        let l2 = json!({"level": 2});
        assert_eq!(
            decide("escalate_ticket", &l2, RunPolicy::Auto),
            Decision::Allow
        );
        let Decision::Deny(reason) = decide("escalate_ticket", &l2, RunPolicy::Deny) else {
            panic!()
        };
        assert!(
            reason.contains("--approve deny") && reason.contains("supervisor"),
            "{reason}"
        );
        assert_eq!(
            decide("get_ticket", &json!({}), RunPolicy::Deny),
            Decision::Allow
        );
    }
}
