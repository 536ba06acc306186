use super::*;

fn parse(text: &str) -> Result<Config, ConfigError> {
    Config::parse(Path::new("c.json"), text)
}

#[test]
fn the_fixture_config_loads() {
    let ws = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/fixtures/tinycode-support-desk");
    let c = Config::load(&ws).unwrap();
    assert_eq!(c.queues, ["售后组", "物流组", "技术支持"]);
    assert_eq!(c.max_steps_per_turn, 12);
    assert_eq!(c.permission_mode, crate::permissions::ApprovalMode::Ask);
    assert_eq!(c.tickets_dir, PathBuf::from("tickets"));
}

#[test]
fn missing_file_means_defaults() {
    let tmp = tempfile::tempdir().unwrap();
    assert_eq!(Config::load(tmp.path()).unwrap(), Config::default());
}

#[test]
fn bad_values_and_unknown_keys_are_named() {
    let cases = [
        (
            r#"{"maxStepsPerTurn": 0}"#,
            "`maxStepsPerTurn` must be a whole number from 1 to 200",
        ),
        (r#"{"maxStepsPerTurn": "12"}"#, "`maxStepsPerTurn`"),
        (
            r#"{"permissionMode": "yolo"}"#,
            "`permissionMode` must be \"ask\" or \"auto\"",
        ),
        (r#"{"queues": "售后组"}"#, "`queues` must be a list"),
        (r#"{"queues": ["a", "a"]}"#, "lists \"a\" twice"),
        (r#"{"queues": [""]}"#, "`queues` must hold non-empty names"),
        (
            r#"{"ticketsDir": "../elsewhere"}"#,
            "`ticketsDir` must be a relative path inside the workspace",
        ),
        (
            r#"{"knowledgeDir": "/etc"}"#,
            "`knowledgeDir` must be a relative path",
        ),
        ("[1]", "the top level must be an object"),
        ("{", "not valid JSON"),
    ];
    for (text, expected) in cases {
        let err = parse(text).unwrap_err().to_string();
        assert!(err.contains(expected), "{text}: {err}");
        assert!(err.starts_with("c.json"), "names the file: {err}");
    }
    // An unknown key is ignored, as TinyCode ignores it, and named.
    let c = parse(r#"{"colour": 1, "maxStepsPerTurn": 7}"#).unwrap();
    assert_eq!(c.max_steps_per_turn, 7);
    assert_eq!(c.warnings.len(), 1);
    assert!(
        c.warnings[0].starts_with("c.json: unknown key `colour`")
            && c.warnings[0].ends_with("ignored"),
        "{:?}",
        c.warnings
    );
}

#[test]
fn permissions_allow_names_tools_but_never_a_reviewed_one() {
    let c = parse(r#"{"permissions": {"allow": ["spawn_agent", "mcp__fs__*"]}}"#).unwrap();
    assert_eq!(c.allow, ["spawn_agent", "mcp__fs__*"]);
    assert!(crate::permissions::allowed_by_config(
        &c.allow,
        "mcp__fs__read"
    ));
    assert!(!crate::permissions::allowed_by_config(
        &c.allow,
        "mcp__git__push"
    ));
    for (text, expected) in [
        (
            r#"{"permissions": {"allow": ["propose_knowledge_edit"]}}"#,
            "reviews every time",
        ),
        (
            r#"{"permissions": {"allow": "spawn_agent"}}"#,
            "must be a list",
        ),
        (r#"{"permissions": {"deny": []}}"#, "unknown key `deny`"),
    ] {
        let err = parse(text).unwrap_err().to_string();
        assert!(err.contains(expected), "{text}: {err}");
    }
}

#[test]
fn nested_sections_parse_and_name_their_bad_keys() {
    let c = parse(
        r#"{"providers": {"local": {"type": "openai", "baseUrl": "http://127.0.0.1:8080/v1"},
                          "anthropic": {"apiKeyEnv": "WORK_ANTHROPIC_KEY"}},
            "context": {"compactAboveTokens": 5000, "keepRecentMessages": 4},
            "approvalTimeoutSeconds": 600,
            "autoTriage": {"enabled": true, "concurrency": 3, "retryDelayMs": 10}}"#,
    )
    .unwrap();
    assert_eq!(c.providers.len(), 2);
    let local = c.providers.iter().find(|p| p.name == "local").unwrap();
    assert_eq!(local.base_url.as_deref(), Some("http://127.0.0.1:8080/v1"));
    let anthropic = c.providers.iter().find(|p| p.name == "anthropic").unwrap();
    assert_eq!(anthropic.wire, crate::model::catalog::Wire::Anthropic);
    assert_eq!(anthropic.api_key_env.as_deref(), Some("WORK_ANTHROPIC_KEY"));
    assert_eq!(c.compaction.above_tokens, 5000);
    assert_eq!(c.compaction.keep_recent_messages, 4);
    assert_eq!(
        c.approval_timeout,
        Some(std::time::Duration::from_secs(600))
    );
    assert!(c.auto_triage.enabled);
    assert_eq!(c.auto_triage.concurrency, Some(3));
    assert_eq!(c.auto_triage.slots("offline"), 3, "set: whatever the model");
    assert_eq!(c.auto_triage.slots("openai/gpt-test"), 3);
    assert!(c.auto_triage.prompt.contains("{id}"));
    assert_eq!(c.auto_triage.retry_delay_ms, 10);
    assert_eq!(c.auto_triage.max_attempts, 3);

    let cases = [
        (
            r#"{"providers": {"x": {"baseUrl": "http://a"}}}"#,
            "`type` must be",
        ),
        (
            r#"{"providers": {"x": {"type": "openai", "apiKey": "sk-1"}}}"#,
            "unknown key `apiKey`",
        ),
        (
            r#"{"providers": {"x": {"type": "openai", "apiKeyEnv": "sk-live-123"}}}"#,
            "the key itself never goes in the config",
        ),
        (
            r#"{"providers": {"x": {"type": "openai", "baseUrl": "localhost"}}}"#,
            "must start with http://",
        ),
        (
            r#"{"context": {"compactAboveTokens": 10}}"#,
            "`context` `compactAboveTokens` must be a whole number",
        ),
        (r#"{"context": {"keep": 1}}"#, "unknown key `keep`"),
        (
            r#"{"approvalTimeoutSeconds": 0}"#,
            "`approvalTimeoutSeconds` must be",
        ),
        (
            r#"{"autoTriage": {"enabled": "yes"}}"#,
            "`enabled` must be true or false",
        ),
        (
            r#"{"autoTriage": {"prompt": "triage it"}}"#,
            "must contain {id}",
        ),
        (
            r#"{"autoTriage": {"maxAttempts": 0}}"#,
            "`maxAttempts` must be a whole number from 1 to 10",
        ),
    ];
    for (text, expected) in cases {
        let err = parse(text).unwrap_err().to_string();
        assert!(err.contains(expected), "{text}: {err}");
    }
}

#[test]
fn an_unset_triage_concurrency_follows_the_model() {
    let c = parse(r#"{"autoTriage": {"enabled": true}}"#).unwrap();
    assert_eq!(c.auto_triage.concurrency, None);
    assert_eq!(
        c.auto_triage.slots("offline"),
        super::OFFLINE_TRIAGE_CONCURRENCY
    );
    assert_eq!(
        c.auto_triage.slots("openai/gpt-test"),
        super::TRIAGE_CONCURRENCY
    );
}

#[test]
fn a_tinycode_config_with_every_key_loads() {
    let c = parse(
        r#"{
          "model": "offline",
          "permissionMode": "ask",
          "maxStepsPerTurn": 12,
          "maxToolResultChars": 8000,
          "compactAboveTokens": 50000,
          "keepRecentMessages": 6,
          "knowledgeDir": "knowledge",
          "ticketsDir": "tickets",
          "queues": ["售后组", "物流组"],
          "mcpServers": { "everything": { "command": "npx", "args": ["-y", "@modelcontextprotocol/server-everything"] } },
          "turnTimeoutSeconds": 600,
          "categories": ["退款 (refund)", "物流"]
        }"#,
    )
    .unwrap();
    assert_eq!(c.compaction.above_tokens, 50_000);
    assert_eq!(c.compaction.keep_recent_messages, 6);
    assert_eq!(c.mcp_servers.len(), 1);
    assert_eq!(c.mcp_servers[0].name, "everything");
    assert_eq!(c.turn_timeout, Some(Duration::from_secs(600)));
    assert_eq!(c.categories, ["退款 (refund)", "物流"]);
    // `context` wins over the top-level spelling.
    let c = parse(r#"{"keepRecentMessages": 3, "context": {"keepRecentMessages": 5}}"#).unwrap();
    assert_eq!(c.compaction.keep_recent_messages, 5);
    for (text, expected) in [
        (r#"{"keepRecentMessages": -1}"#, "`keepRecentMessages`"),
        (
            r#"{"turnTimeoutSeconds": 0}"#,
            "`turnTimeoutSeconds` must be a whole number",
        ),
        (r#"{"mcpServers": []}"#, "`mcpServers` must be an object"),
    ] {
        let err = parse(text).unwrap_err().to_string();
        assert!(err.contains(expected), "{text}: {err}");
    }
}

#[test]
fn the_store_lease_is_read_and_bounded() {
    let c = parse(r#"{"store": {"url": "postgres://db/desk", "leaseSeconds": 5}}"#).unwrap();
    assert_eq!(
        (c.store_url.as_deref(), c.lease),
        (Some("postgres://db/desk"), Duration::from_secs(5))
    );
    assert_eq!(parse("{}").unwrap().lease, DEFAULT_LEASE);
    let err = parse(r#"{"store": {"leaseSeconds": 0}}"#)
        .unwrap_err()
        .to_string();
    assert!(err.contains("leaseSeconds"), "{err}");
}
