use std::sync::Arc;

use serde_json::json;
use tokio::sync::watch;

use super::*;
use crate::config::Config;
use crate::store::EventStore;
use crate::testing::fixture_copy;

struct Setup {
    _tmp: tempfile::TempDir,
    ws: std::path::PathBuf,
    ctx: ToolContext,
    registry: ToolRegistry,
    store: EventStore,
    cancel: watch::Sender<bool>,
}

async fn setup() -> Setup {
    let (tmp, ws) = fixture_copy();
    let store = EventStore::open(&tmp.path().join("db")).unwrap();
    let (desk, _) = Desk::open(store.clone(), &ws, &Config::load(&ws).unwrap().desk())
        .await
        .unwrap();
    let (skills, _) = SkillRegistry::discover(&ws);
    let (cancel, cancel_rx) = watch::channel(false);
    Setup {
        _tmp: tmp,
        ws,
        ctx: ToolContext {
            desk,
            skills: Arc::new(skills),
            cancel: cancel_rx,
            origin: None,
            agents: None,
            reports: None,
            confidence: Vec::new(),
            review_below: Default::default(),
        },
        registry: ToolRegistry::standard(),
        store,
        cancel,
    }
}

#[tokio::test]
async fn the_registry_offers_the_ten_business_tools_and_load_skill() {
    let s = setup().await;
    assert_eq!(
        s.registry.names(),
        [
            "classify_ticket",
            "escalate_ticket",
            "get_ticket",
            "list_tickets",
            "load_skill",
            "propose_knowledge_edit",
            "read_article",
            "render_report",
            "reply_customer",
            "route_ticket",
            "search_knowledge",
            "search_tickets",
        ]
    );
    for spec in s.registry.specs() {
        assert_eq!(spec.parameters["type"], "object", "{}", spec.name);
        assert!(!spec.description.is_empty());
    }
}

#[tokio::test]
async fn the_refund_ticket_path_reads_searches_classifies_and_routes() {
    let s = setup().await;
    let call = |name: &'static str, args: serde_json::Value| {
        let (registry, ctx) = (s.registry.clone(), s.ctx.clone());
        async move { registry.call(name, &args, &ctx).await }
    };
    let list = call("list_tickets", json!({})).await;
    assert!(
        !list.is_error && list.content.starts_with("3 of 3 tickets"),
        "{}",
        list.content
    );
    let t = call("get_ticket", json!({"ticket_id": "T-1001"})).await;
    assert!(
        t.content.contains("张伟") && t.content.contains("8842"),
        "{}",
        t.content
    );
    let hits = call("search_knowledge", json!({"query": "退款 时效"})).await;
    let first: serde_json::Value = serde_json::from_str(&hits.content).unwrap();
    assert_eq!(first[0]["id"], "refund-policy");
    let article = call("read_article", json!({"article_id": "refund-policy"})).await;
    assert!(article.content.contains("owner: 售后组") && article.content.contains("7 个工作日"));
    let classified = call("classify_ticket", json!({"ticket_id": "T-1001", "category": "退款", "priority": "P1", "intent": "未收到货要求全额退款", "summary": "未收到货，要求全额退款"})).await;
    assert_eq!(
        classified.content,
        "T-1001 classified: 退款 · P1 · 未收到货要求全额退款 → triaged"
    );
    let ticket = &classified.details["ticket"];
    assert_eq!(ticket["status"], "triaged");
    assert_eq!(
        (&ticket["category"], &ticket["priority"]),
        (&json!("退款"), &json!("P1"))
    );
    // The file's document plus the stream version, which moved on.
    assert!(ticket["version"].as_u64().unwrap() > 1, "{ticket}");
    assert_eq!(ticket["messages"][0]["from"], "customer");
    assert!(
        ticket.get("queue").is_none(),
        "unset fields are omitted: {ticket}"
    );
    let routed = call(
        "route_ticket",
        json!({"ticket_id": "T-1001", "queue": "售后组", "reason": "refund-policy"}),
    )
    .await;
    assert_eq!(routed.content, "T-1001 routed to 售后组 → routed");
    s.ctx.desk.settled().await.unwrap();
    let file = std::fs::read_to_string(s.ws.join("tickets/T-1001.json")).unwrap();
    assert!(
        file.contains("\"queue\": \"售后组\"") && file.contains("\"status\": \"routed\""),
        "{file}"
    );
    // As TinyCode's T-1001 scenario asserts: the two decisions left two
    // notes, one citing the policy article.
    let doc: serde_json::Value = serde_json::from_str(&file).unwrap();
    let notes = doc["notes"].as_array().unwrap();
    assert_eq!(notes.len(), 2, "{file}");
    assert_eq!(notes[0]["text"], "分类 退款 · P1: 未收到货，要求全额退款");
    assert_eq!(notes[1]["text"], "路由 → 售后组: refund-policy");
    assert!(notes.iter().all(|n| !n["at"].as_str().unwrap().is_empty()));
}

#[tokio::test]
async fn failures_become_actionable_error_results_and_store_nothing() {
    let s = setup().await;
    let before = s.store.last_sequence();
    let cases = [
        (
            "get_ticket",
            json!({"ticket_id": "T-9999"}),
            "ticket T-9999 does not exist; use list_tickets",
        ),
        (
            "get_ticket",
            json!({"ticket_id": "../../etc/passwd"}),
            "invalid ticket id",
        ),
        (
            "get_ticket",
            json!({}),
            "get_ticket: `ticket_id` is required",
        ),
        (
            "classify_ticket",
            json!({"ticket_id": "T-1001", "category": "退款", "priority": "urgent", "intent": "x"}),
            "classify_ticket: `priority` must be one of P0, P1, P2, P3",
        ),
        (
            "route_ticket",
            json!({"ticket_id": "T-1002", "queue": "VIP组", "reason": "r"}),
            "there is no queue \"VIP组\" on this desk; the queues are 售后组, 物流组, 技术支持",
        ),
        (
            "classify_ticket",
            json!({"ticket_id": "T-1002", "category": "billing", "priority": "P2", "intent": "i"}),
            "there is no category \"billing\" on this desk; the categories are 退款, 物流, 账户, 技术",
        ),
        (
            "escalate_ticket",
            json!({"ticket_id": "T-1003", "level": 2, "reason": "r"}),
            "T-1003 is not classified yet; call classify_ticket before escalate_ticket",
        ),
        (
            "escalate_ticket",
            json!({"ticket_id": "T-1003", "level": 3, "reason": "r"}),
            "`level` must be one of 1, 2",
        ),
        (
            "propose_knowledge_edit",
            json!({"article_id": "refund-policy", "old_text": "不存在的句子", "new_text": "x", "rationale": "r"}),
            "old_text was not found in article refund-policy",
        ),
        (
            "load_skill",
            json!({"name": "nope"}),
            "there is no skill \"nope\"; the skills are escalation-rules, triage-sop",
        ),
        (
            "delete_everything",
            json!({}),
            "there is no tool named \"delete_everything\"; available tools: classify_ticket",
        ),
        (
            "get_ticket",
            serde_json::Value::Null,
            "get_ticket: arguments must be a JSON object",
        ),
    ];
    for (name, args, expected) in cases {
        let out = s.registry.call(name, &args, &s.ctx).await;
        assert!(out.is_error, "{name} {args}");
        assert!(
            out.content.contains(expected),
            "{name} {args}: {}",
            out.content
        );
    }
    assert_eq!(s.store.last_sequence(), before, "nothing was stored");
}

#[tokio::test]
async fn escalation_after_classification_records_level_and_a_note() {
    let s = setup().await;
    let r = &s.registry;
    r.call("classify_ticket", &json!({"ticket_id": "T-1003", "category": "账户", "priority": "P0", "intent": "解冻企业账户"}), &s.ctx).await;
    let out = r.call("escalate_ticket", &json!({"ticket_id": "T-1003", "level": 2, "reason": "支付安全风险，依据 escalation-policy"}), &s.ctx).await;
    assert_eq!(
        out.content, "T-1003 escalated to L2 → escalated",
        "{}",
        out.content
    );
    let t = s.ctx.desk.get_ticket("T-1003").unwrap();
    assert_eq!((t.status.as_str(), t.escalate_level), ("escalated", 2));
    assert!(t.notes[0].text.contains("escalation-policy"));
}

#[tokio::test]
async fn knowledge_edits_return_the_diff_and_no_ops_record_nothing() {
    let s = setup().await;
    let out = s.registry.call("propose_knowledge_edit", &json!({
        "article_id": "refund-policy", "old_text": "7 个工作日", "new_text": "5 个工作日", "rationale": "财务已缩短周期"
    }), &s.ctx).await;
    assert!(!out.is_error, "{}", out.content);
    assert_eq!(
        (
            out.details["added"].as_u64(),
            out.details["removed"].as_u64()
        ),
        (Some(1), Some(1))
    );
    assert!(
        out.content
            .starts_with("edited refund-policy: +1 −1\n--- a/knowledge/refund-policy.md")
    );
    let seq = s.store.last_sequence();
    let same = s.registry.call("propose_knowledge_edit", &json!({
        "article_id": "refund-policy", "old_text": "5 个工作日", "new_text": "5 个工作日", "rationale": "none"
    }), &s.ctx).await;
    assert!(
        same.content.starts_with("no change to refund-policy"),
        "{}",
        same.content
    );
    assert_eq!(s.store.last_sequence(), seq);
}

#[tokio::test]
async fn skills_load_on_demand_and_cancelled_turns_run_nothing() {
    let s = setup().await;
    let sop = s
        .registry
        .call("load_skill", &json!({"name": "triage-sop"}), &s.ctx)
        .await;
    assert!(sop.content.starts_with("# 工单分流 SOP"), "{}", sop.content);
    s.cancel.send_replace(true);
    let before = s.store.last_sequence();
    let out = s
        .registry
        .call(
            "classify_ticket",
            &json!({"ticket_id": "T-1001", "category": "退款", "priority": "P1", "intent": "x"}),
            &s.ctx,
        )
        .await;
    assert!(
        out.is_error && out.content.contains("the turn was cancelled"),
        "{}",
        out.content
    );
    assert_eq!(s.store.last_sequence(), before);
}

#[tokio::test]
async fn a_tool_call_makes_its_change_once_even_when_run_again() {
    let s = setup().await;
    let turn = ToolContext {
        origin: Some(tinycode_shared::proto::ToolOrigin {
            session_id: "s1".into(),
            turn: 3,
            call_id: String::new(),
        }),
        ..s.ctx.clone()
    };
    let reply = json!({ "ticket_id": "T-1002", "message": "已为您催促物流" });
    let edit = json!({
        "article_id": "refund-policy",
        "old_text": "7 个工作日",
        "new_text": "5 个工作日",
        "rationale": "财务已缩短退款周期",
    });
    // The same call run twice (a turn resumed after a crash between the
    // change and its stored result): one reply, one edit.
    for _ in 0..2 {
        let r = s
            .registry
            .call("reply_customer", &reply, &turn.for_call("c1"))
            .await;
        assert!(!r.is_error, "{}", r.content);
        let e = s
            .registry
            .call("propose_knowledge_edit", &edit, &turn.for_call("c2"))
            .await;
        assert!(!e.is_error, "{}", e.content);
        assert_eq!(e.details["added"], 1, "the edit's result, from the log");
    }
    let replies = async |store: &EventStore| {
        store
            .read_stream("ticket-T-1002", 1, usize::MAX)
            .await
            .unwrap()
            .iter()
            .filter(|e| {
                matches!(
                    e.payload,
                    Some(tinycode_shared::proto::event::Payload::AgentReplyAdded(_))
                )
            })
            .count()
    };
    assert_eq!(replies(&s.store).await, 1);
    assert_eq!(
        s.store.stream_version("kb-refund-policy").await.unwrap(),
        2,
        "import + one edit"
    );
    // Another call of the same turn is another change.
    s.registry
        .call("reply_customer", &reply, &turn.for_call("c3"))
        .await;
    assert_eq!(replies(&s.store).await, 2);
    // Outside a session (no origin) nothing is deduplicated.
    s.registry.call("reply_customer", &reply, &s.ctx).await;
    assert_eq!(replies(&s.store).await, 3);
}

#[tokio::test]
async fn load_skill_refuses_a_skill_meant_for_people() {
    let s = setup().await;
    let dir = s.ws.join(".claude/skills/close-month");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("SKILL.md"),
        "---\nname: close-month\ndescription: Month-end close.\ndisable-model-invocation: true\n---\nSteps\n",
    )
    .unwrap();
    let ctx = ToolContext {
        skills: Arc::new(SkillRegistry::discover(&s.ws).0),
        ..s.ctx.clone()
    };
    let out = s
        .registry
        .call("load_skill", &json!({"name": "close-month"}), &ctx)
        .await;
    assert!(out.is_error);
    assert!(
        out.content.contains("for people to invoke (/close-month)"),
        "{}",
        out.content
    );
    let ok = s
        .registry
        .call("load_skill", &json!({"name": "triage-sop"}), &ctx)
        .await;
    assert!(!ok.is_error, "{}", ok.content);
}

/// A tool that says every call of it must be reviewed (as an MCP tool
/// marked `destructiveHint` does).
struct Destructive;

impl Tool for Destructive {
    fn name(&self) -> &str {
        "mcp__x__drop_table"
    }
    fn description(&self) -> &str {
        "drops a table"
    }
    fn parameters(&self) -> serde_json::Value {
        json!({"type": "object"})
    }
    fn review_required(&self) -> bool {
        true
    }
    fn execute<'a>(
        &'a self,
        _args: &'a serde_json::Value,
        _ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        Box::pin(async { Ok(ToolOutput::ok("dropped", serde_json::Value::Null)) })
    }
}

#[tokio::test]
async fn tools_that_come_and_go_join_the_registry_and_may_require_review() {
    let s = setup().await;
    assert!(s.registry.review_required("propose_knowledge_edit"));
    assert!(!s.registry.review_required("classify_ticket"));
    assert!(
        !s.registry.review_required("mcp__x__drop_table"),
        "not there yet"
    );
    s.registry
        .dynamic()
        .replace("mcp__x__", vec![Arc::new(Destructive) as Arc<dyn Tool>]);
    assert!(s.registry.review_required("mcp__x__drop_table"));
    assert!(
        s.registry
            .specs()
            .iter()
            .any(|t| t.name == "mcp__x__drop_table")
    );
    let out = s
        .registry
        .call("mcp__x__drop_table", &json!({}), &s.ctx)
        .await;
    assert_eq!(out.content, "dropped");
    // Withdrawn (the server failed): gone from the offer and the calls.
    s.registry.dynamic().replace("mcp__x__", Vec::new());
    assert!(!s.registry.names().iter().any(|n| n.starts_with("mcp__x__")));
    assert!(
        s.registry
            .call("mcp__x__drop_table", &json!({}), &s.ctx)
            .await
            .is_error
    );
}
