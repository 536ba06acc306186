//! The turn loop against a scripted in-process model and the real tools on
//! a copy of the fixture desk.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use serde_json::json;
use tokio::sync::watch;

use super::*;
use crate::config::Config;
use crate::domain::desk::Desk;
use crate::model::{ModelError, ModelStream};
use crate::skills::SkillRegistry;
use crate::store::EventStore;
use crate::testing::fixture_copy;

/// One model step: its events, and whether the stream then hangs.
#[derive(Clone)]
struct Step(Vec<ModelEvent>, bool);

#[derive(Debug)]
struct Scripted {
    steps: Mutex<Vec<Vec<ModelEvent>>>,
    hang_after: Mutex<Vec<bool>>,
    requests: Mutex<Vec<ModelRequest>>,
}

impl Scripted {
    fn new(steps: Vec<Step>) -> Arc<Self> {
        Arc::new(Self {
            hang_after: Mutex::new(steps.iter().map(|s| s.1).collect()),
            steps: Mutex::new(steps.into_iter().map(|s| s.0).collect()),
            requests: Mutex::new(Vec::new()),
        })
    }
}

impl ModelProvider for Scripted {
    fn name(&self) -> String {
        "scripted/test".into()
    }
    fn stream(&self, request: ModelRequest) -> ModelStream {
        self.requests.lock().unwrap().push(request);
        let mut steps = self.steps.lock().unwrap();
        let mut hangs = self.hang_after.lock().unwrap();
        if steps.is_empty() {
            return Box::pin(futures::stream::iter([Err(ModelError::Stream {
                provider: "scripted".into(),
                message: "script exhausted".into(),
            })]));
        }
        let events: Vec<_> = steps.remove(0).into_iter().map(Ok).collect();
        let hang = hangs.remove(0);
        let head = futures::stream::iter(events);
        if hang {
            Box::pin(head.chain(futures::stream::pending()))
        } else {
            Box::pin(head)
        }
    }
}

fn call(id: &str, name: &str, args: serde_json::Value) -> ModelEvent {
    ModelEvent::ToolCall(ToolCall::new(id.into(), name.into(), args.to_string()))
}

fn say(text: &str) -> Step {
    Step(
        vec![
            ModelEvent::TextDelta(text.into()),
            ModelEvent::Usage(Usage {
                input_tokens: 10,
                output_tokens: 5,
                ..Usage::default()
            }),
            ModelEvent::Stop(StopReason::EndTurn),
        ],
        false,
    )
}

struct Env {
    _tmp: tempfile::TempDir,
    ctx: ToolContext,
    cancel: watch::Sender<bool>,
    tools: ToolRegistry,
}

async fn env() -> Env {
    let (tmp, ws) = fixture_copy();
    let store = EventStore::open(&tmp.path().join("db")).unwrap();
    let (desk, _) = Desk::open(store, &ws, &Config::load(&ws).unwrap().desk())
        .await
        .unwrap();
    let (cancel, rx) = watch::channel(false);
    Env {
        _tmp: tmp,
        ctx: ToolContext {
            desk,
            skills: Arc::new(SkillRegistry::discover(&ws).0),
            cancel: rx,
            origin: None,
            agents: None,
            reports: None,
            confidence: Vec::new(),
            review_below: Default::default(),
        },
        cancel,
        tools: ToolRegistry::standard(),
    }
}

async fn run(
    env: &Env,
    model: &Arc<Scripted>,
    config: TurnConfig,
    text: &str,
) -> (TurnResult, Vec<TurnEvent>) {
    let turn = Turn {
        provider: model.as_ref(),
        tools: &env.tools,
        ctx: &env.ctx,
        config: &config,
        approver: None,
        compactor: None,
        fence: None,
    };
    let mut events = Vec::new();
    let result = turn
        .run("system", Vec::new(), text, &mut |e| events.push(e))
        .await;
    (result, events)
}

#[tokio::test]
async fn tools_run_and_the_model_continues_until_it_stops() {
    let env = env().await;
    let model = Scripted::new(vec![
        Step(
            vec![
                call("c1", "get_ticket", json!({"ticket_id": "T-1001"})),
                call("c2", "search_knowledge", json!({"query": "退款 时效"})),
                ModelEvent::Stop(StopReason::ToolUse),
            ],
            false,
        ),
        Step(
            vec![call(
                "c3",
                "classify_ticket",
                json!({"ticket_id": "T-1001", "category": "退款", "priority": "P1", "intent": "refund"}),
            )],
            false,
        ),
        say("T-1001 is a refund for 售后组."),
    ]);
    let (result, events) = run(&env, &model, TurnConfig::default(), "triage T-1001").await;
    assert_eq!(result.outcome, TurnOutcome::Completed);
    assert_eq!((result.steps, result.tool_calls), (3, 3));
    assert_eq!(result.usage.input_tokens, 10);
    assert_eq!(env.ctx.desk.get_ticket("T-1001").unwrap().status, "triaged");
    // The model saw the tool results in the next request, in order.
    let requests = model.requests.lock().unwrap();
    let last = requests.last().unwrap();
    let results: Vec<_> = last
        .messages
        .iter()
        .filter_map(|m| match m {
            Message::ToolResult { call_id, .. } => Some(call_id.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(results, ["c1", "c2", "c3"]);
    assert!(!last.tools.is_empty() && last.system == "system");
    let started = events
        .iter()
        .filter(|e| matches!(e, TurnEvent::ToolStarted(_)))
        .count();
    assert_eq!(started, 3);
    assert!(events.contains(&TurnEvent::TextDelta(
        "T-1001 is a refund for 售后组.".into()
    )));
}

#[tokio::test]
async fn a_failing_tool_is_reported_to_the_model_not_fatal() {
    let env = env().await;
    let model = Scripted::new(vec![
        Step(
            vec![call("c1", "get_ticket", json!({"ticket_id": "T-9999"}))],
            false,
        ),
        Step(
            vec![ModelEvent::ToolCall(ToolCall::new(
                "c2".into(),
                "get_ticket".into(),
                "{\"ticket_id\": \"T-10".into(),
            ))],
            false,
        ),
        say("done"),
    ]);
    let (result, events) = run(&env, &model, TurnConfig::default(), "go").await;
    assert_eq!(result.outcome, TurnOutcome::Completed);
    let errors: Vec<String> = events
        .iter()
        .filter_map(|e| match e {
            TurnEvent::ToolFinished { output, .. } if output.is_error => {
                Some(output.content.clone())
            }
            _ => None,
        })
        .collect();
    assert!(
        errors[0].contains("ticket T-9999 does not exist; use list_tickets"),
        "{errors:?}"
    );
    assert!(errors[1].contains("not valid JSON"), "{errors:?}");
}

#[tokio::test]
async fn asks_are_settled_by_the_run_policy() {
    let env = env().await;
    let steps = || {
        vec![
            Step(
                vec![call(
                    "c0",
                    "classify_ticket",
                    json!({"ticket_id": "T-1003", "category": "账户", "priority": "P0", "intent": "unfreeze"}),
                )],
                false,
            ),
            Step(
                vec![call(
                    "c1",
                    "escalate_ticket",
                    json!({"ticket_id": "T-1003", "level": 2, "reason": "escalation-policy"}),
                )],
                false,
            ),
            say("ok"),
        ]
    };
    let (_, events) = run(&env, &Scripted::new(steps()), TurnConfig::default(), "go").await;
    let denied = events.iter().any(|e| matches!(e, TurnEvent::ToolFinished { output, .. } if output.is_error && output.content.contains("--approve deny")));
    assert!(denied, "default policy denies an L2 escalation");
    assert_eq!(env.ctx.desk.get_ticket("T-1003").unwrap().escalate_level, 0);
    let auto = TurnConfig {
        policy: RunPolicy::Auto,
        ..TurnConfig::default()
    };
    run(&env, &Scripted::new(steps()), auto, "go").await;
    assert_eq!(env.ctx.desk.get_ticket("T-1003").unwrap().escalate_level, 2);
}

#[tokio::test]
async fn max_steps_and_empty_responses_end_the_turn_with_their_outcome() {
    let env = env().await;
    let looping = Scripted::new(
        (0..5)
            .map(|i| {
                Step(
                    vec![call(&format!("c{i}"), "list_tickets", json!({}))],
                    false,
                )
            })
            .collect(),
    );
    let (result, _) = run(
        &env,
        &looping,
        TurnConfig {
            max_steps: 3,
            ..TurnConfig::default()
        },
        "go",
    )
    .await;
    assert_eq!(
        (result.outcome, result.steps, result.tool_calls),
        (TurnOutcome::MaxSteps, 3, 3)
    );

    let thinking_only = Scripted::new(vec![Step(
        vec![
            ModelEvent::ThinkingDelta("hmm".into()),
            ModelEvent::Stop(StopReason::EndTurn),
        ],
        false,
    )]);
    let (result, events) = run(&env, &thinking_only, TurnConfig::default(), "go").await;
    assert_eq!(result.outcome, TurnOutcome::EmptyResponse);
    assert!(events.contains(&TurnEvent::ThinkingDelta("hmm".into())));
}

#[tokio::test]
async fn provider_errors_fail_the_turn() {
    let env = env().await;
    let (result, _) = run(&env, &Scripted::new(vec![]), TurnConfig::default(), "go").await;
    assert!(
        matches!(result.outcome, TurnOutcome::Failed(ref m) if m.contains("script exhausted")),
        "{:?}",
        result.outcome
    );
}

#[tokio::test]
async fn cancel_during_a_stream_is_distinct_from_a_timeout() {
    let env = env().await;
    let hanging = || {
        Scripted::new(vec![Step(
            vec![ModelEvent::TextDelta("partial".into())],
            true,
        )])
    };
    let cancel = env.cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(50)).await;
        cancel.send_replace(true);
    });
    let (result, _) = run(&env, &hanging(), TurnConfig::default(), "go").await;
    assert_eq!(result.outcome, TurnOutcome::Cancelled);
    assert!(
        matches!(&result.messages[1], Message::Assistant { text, .. } if text == "partial"),
        "kept what was said"
    );

    env.cancel.send_replace(false);
    let timed = TurnConfig {
        timeout: Some(Duration::from_millis(50)),
        ..TurnConfig::default()
    };
    let (result, _) = run(&env, &hanging(), timed, "go").await;
    assert_eq!(result.outcome, TurnOutcome::TimedOut);
}

/// A tool that takes a long time (a slow external system).
struct Slow;

impl crate::tools::Tool for Slow {
    fn name(&self) -> &str {
        "slow_lookup"
    }
    fn description(&self) -> &str {
        "takes ten seconds"
    }
    fn parameters(&self) -> serde_json::Value {
        json!({"type": "object", "properties": {}})
    }
    fn execute<'a>(
        &'a self,
        _args: &'a serde_json::Value,
        _ctx: &'a ToolContext,
    ) -> futures::future::BoxFuture<'a, Result<ToolOutput, crate::tools::ToolError>> {
        Box::pin(async {
            tokio::time::sleep(Duration::from_secs(10)).await;
            Ok(ToolOutput::ok("done", serde_json::Value::Null))
        })
    }
}

#[tokio::test]
async fn cancel_during_a_tool_ends_the_turn_and_answers_every_call() {
    let mut env = env().await;
    env.tools.register(Arc::new(Slow));
    let model = Scripted::new(vec![
        Step(
            vec![
                call("a", "slow_lookup", json!({})),
                call("b", "get_ticket", json!({"ticket_id": "T-1001"})),
            ],
            false,
        ),
        say("never reached"),
    ]);
    let cancel = env.cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        cancel.send_replace(true);
    });
    let auto = TurnConfig {
        policy: RunPolicy::Auto,
        ..TurnConfig::default()
    };
    let started = std::time::Instant::now();
    let (result, events) = run(&env, &model, auto, "go").await;
    assert_eq!(result.outcome, TurnOutcome::Cancelled);
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "did not wait for the tool"
    );
    assert!(
        events
            .iter()
            .any(|e| matches!(e, TurnEvent::ToolStarted(c) if c.name == "slow_lookup"))
    );
    let results: Vec<_> = result
        .messages
        .iter()
        .filter_map(|m| match m {
            Message::ToolResult {
                call_id,
                content,
                is_error,
                ..
            } => Some((call_id.clone(), content.clone(), *is_error)),
            _ => None,
        })
        .collect();
    assert_eq!(results.len(), 2, "both calls answered: {results:?}");
    assert!(
        results
            .iter()
            .all(|(_, c, e)| *e && c.contains("interrupted"))
    );
}

#[tokio::test]
async fn long_tool_results_are_truncated_for_the_model() {
    let env = env().await;
    let model = Scripted::new(vec![
        Step(
            vec![call("c1", "get_ticket", json!({"ticket_id": "T-1001"}))],
            false,
        ),
        say("ok"),
    ]);
    let artifacts = tempfile::tempdir().unwrap();
    let config = TurnConfig {
        max_tool_result_chars: 60,
        artifact_dir: Some(artifacts.path().to_path_buf()),
        ..TurnConfig::default()
    };
    let (_, events) = run(&env, &model, config, "go").await;
    let (output, full, artifact) = events
        .iter()
        .find_map(|e| match e {
            TurnEvent::ToolFinished {
                output,
                full_chars,
                artifact,
                ..
            } => Some((output.clone(), *full_chars, artifact.clone())),
            _ => None,
        })
        .unwrap();
    assert!(
        output.content.contains("characters truncated …]"),
        "{}",
        output.content
    );
    assert!(full.unwrap() > 60);
    let artifact = artifact.expect("the full text is saved");
    assert!(
        output.content.contains(&artifact.display().to_string()),
        "the model is told where"
    );
    let saved = std::fs::read_to_string(&artifact).unwrap();
    assert!(
        saved.contains("张伟") && saved.chars().count() == full.unwrap(),
        "the artifact holds the full result"
    );
    let sent = model.requests.lock().unwrap()[1]
        .messages
        .iter()
        .find_map(|m| match m {
            Message::ToolResult { content, .. } => Some(content.clone()),
            _ => None,
        })
        .unwrap();
    assert_eq!(sent, output.content, "the model gets the truncated text");
}

mod offline_scenarios {
    use super::*;
    use crate::offline::{MARK, OfflineModel};

    async fn triage(env: &Env, ticket: &str, policy: RunPolicy) -> (TurnResult, Vec<String>) {
        let ws = env.ctx.desk.workspace().to_path_buf();
        let system = prompt::system_prompt(&ws, &env.ctx.skills, env.ctx.desk.queues());
        let config = TurnConfig {
            policy,
            ..TurnConfig::default()
        };
        let model = OfflineModel::default();
        let turn = Turn {
            provider: &model,
            tools: &env.tools,
            ctx: &env.ctx,
            config: &config,
            approver: None,
            compactor: None,
            fence: None,
        };
        let mut calls = Vec::new();
        let result = turn
            .run(&system, Vec::new(), &format!("triage {ticket}"), &mut |e| {
                if let TurnEvent::ToolStarted(c) = e {
                    calls.push(c.name);
                }
            })
            .await;
        (result, calls)
    }

    fn final_text(result: &TurnResult) -> String {
        match result.messages.last() {
            Some(Message::Assistant { text, .. }) => text.clone(),
            other => panic!("no final text: {other:?}"),
        }
    }

    #[tokio::test]
    async fn t1001_is_a_refund_for_the_after_sales_queue() {
        let env = env().await;
        let (result, calls) = triage(&env, "T-1001", RunPolicy::Deny).await;
        assert_eq!(
            result.outcome,
            TurnOutcome::Completed,
            "{:?}",
            result.messages.last()
        );
        assert_eq!(
            calls,
            [
                "get_ticket",
                "load_skill",
                "search_knowledge",
                "read_article",
                "classify_ticket",
                "route_ticket"
            ]
        );
        let t = env.ctx.desk.get_ticket("T-1001").unwrap();
        assert_eq!(
            (t.category.as_str(), t.queue.as_str(), t.status.as_str()),
            ("退款", "售后组", "routed")
        );
        assert_eq!(t.priority, "P1", "overdue SLA → at least P1 (TINY.md)");
        let text = final_text(&result);
        assert!(
            text.starts_with(MARK) && text.contains("退款 · P1 → 售后组"),
            "{text}"
        );
    }

    #[tokio::test]
    async fn t1002_is_logistics_for_the_logistics_queue() {
        let env = env().await;
        let (result, calls) = triage(&env, "T-1002", RunPolicy::Deny).await;
        assert_eq!(result.outcome, TurnOutcome::Completed);
        assert!(!calls.contains(&"escalate_ticket".to_string()), "{calls:?}");
        let t = env.ctx.desk.get_ticket("T-1002").unwrap();
        assert_eq!((t.category.as_str(), t.queue.as_str()), ("物流", "物流组"));
    }

    #[tokio::test]
    async fn t1003_asks_for_an_l2_escalation_and_cites_the_policy() {
        let env = env().await;
        // Headless deny: the ask path refuses, the ticket is still classified
        // and routed, and the summary says the escalation is pending a human.
        let (result, calls) = triage(&env, "T-1003", RunPolicy::Deny).await;
        assert!(calls.contains(&"escalate_ticket".to_string()), "{calls:?}");
        let t = env.ctx.desk.get_ticket("T-1003").unwrap();
        assert_eq!(
            (t.category.as_str(), t.escalate_level, t.status.as_str()),
            ("账户", 0, "routed")
        );
        let text = final_text(&result);
        assert!(
            text.contains("L2 escalation not done") && text.contains("--approve deny"),
            "{text}"
        );

        // Approved: escalated to L2, with a note citing escalation-policy.
        let approved = super::env().await;
        let (result, _) = triage(&approved, "T-1003", RunPolicy::Auto).await;
        assert_eq!(result.outcome, TurnOutcome::Completed);
        let t = approved.ctx.desk.get_ticket("T-1003").unwrap();
        assert_eq!(
            (t.status.as_str(), t.escalate_level, t.priority.as_str()),
            ("escalated", 2, "P0")
        );
        assert!(
            t.notes.iter().any(|n| n.text.contains("escalation-policy")),
            "{:?}",
            t.notes
        );
    }

    #[tokio::test]
    async fn free_questions_are_answered_from_the_knowledge_base() {
        let env = env().await;
        let model = OfflineModel::default();
        let config = TurnConfig::default();
        let turn = Turn {
            provider: &model,
            tools: &env.tools,
            ctx: &env.ctx,
            config: &config,
            approver: None,
            compactor: None,
            fence: None,
        };
        let result = turn
            .run("", Vec::new(), "退款 时效 多久到账？", &mut |_| {})
            .await;
        let text = final_text(&result);
        assert!(
            text.starts_with(MARK) && text.contains("refund-policy"),
            "{text}"
        );
        assert_eq!(result.tool_calls, 2);
    }
}

/// A compactor that replaces the history with one summary message.
struct Summarising {
    asked: std::sync::atomic::AtomicU32,
}

impl super::Compactor for Summarising {
    fn compact(&self) -> futures::future::BoxFuture<'_, Option<Vec<Message>>> {
        self.asked.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Box::pin(async {
            Some(vec![Message::User {
                text: "<conversation-summary>earlier turns</conversation-summary>".into(),
            }])
        })
    }
}

#[tokio::test]
async fn the_context_is_compacted_before_every_request_that_would_outgrow_the_limit() {
    let env = env().await;
    // Four steps of one tool call each, then an answer; every ticket read
    // adds about 100 tokens.
    let read = |id: &str, n: &str| {
        Step(
            vec![
                call(n, "get_ticket", json!({"ticket_id": id})),
                ModelEvent::Stop(StopReason::ToolUse),
            ],
            false,
        )
    };
    let model = Scripted::new(vec![
        read("T-1001", "c1"),
        read("T-1002", "c2"),
        read("T-1003", "c3"),
        read("T-1001", "c4"),
        say("done"),
    ]);
    let compactor = Summarising {
        asked: std::sync::atomic::AtomicU32::new(0),
    };
    let config = TurnConfig {
        compact_above_tokens: 250,
        ..TurnConfig::default()
    };
    let long_history = vec![Message::User {
        text: "an earlier turn ".repeat(100),
    }];
    let turn = Turn {
        provider: model.as_ref(),
        tools: &env.tools,
        ctx: &env.ctx,
        config: &config,
        approver: None,
        compactor: Some(&compactor),
        fence: None,
    };
    let result = turn
        .run("system", long_history, "triage", &mut |_| {})
        .await;
    assert_eq!(result.outcome, TurnOutcome::Completed);
    let requests = model.requests.lock().unwrap().clone();
    // The first request was already over the limit (a long history): the
    // history was compacted before it was sent.
    assert!(compactor.asked.load(std::sync::atomic::Ordering::SeqCst) >= 1);
    assert_eq!(requests[0].history.len(), 1);
    assert!(
        matches!(&requests[0].history[0], Message::User { text } if text.contains("conversation-summary"))
    );
    // Later requests of the same long turn see its older results elided,
    // its last two whole; every request fits.
    let last = requests.last().unwrap();
    let results: Vec<&str> = last
        .messages
        .iter()
        .filter_map(|m| match m {
            Message::ToolResult { content, .. } => Some(content.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(results.len(), 4);
    assert!(
        results[..2]
            .iter()
            .all(|c| c.contains("left out to keep the context")),
        "{results:?}"
    );
    assert!(
        results[2..].iter().all(|c| c.contains("\"id\"")),
        "{results:?}"
    );
    // What the turn stores stays whole.
    let stored = result
        .messages
        .iter()
        .filter(
            |m| matches!(m, Message::ToolResult { content, .. } if content.contains("left out")),
        )
        .count();
    assert_eq!(stored, 0);
}

/// Settles every ask as the approver does when the daemon stops first.
struct Stopping;

impl Approver for Stopping {
    fn settle<'a>(
        &'a self,
        _: &'a ToolCall,
        _: &'a str,
    ) -> futures::future::BoxFuture<'a, Decision> {
        Box::pin(async { Decision::Unsettled("the daemon stopped".into()) })
    }
}

#[tokio::test]
async fn an_unsettled_ask_pauses_the_turn_before_that_call_and_runs_nothing_after_it() {
    let env = env().await;
    let model = Scripted::new(vec![
        Step(
            vec![call(
                "c0",
                "classify_ticket",
                json!({"ticket_id": "T-1003", "category": "账户", "priority": "P0", "intent": "unfreeze"}),
            )],
            false,
        ),
        Step(
            vec![
                call(
                    "c1",
                    "escalate_ticket",
                    json!({"ticket_id": "T-1003", "level": 2, "reason": "escalation-policy"}),
                ),
                call(
                    "c2",
                    "route_ticket",
                    json!({"ticket_id": "T-1003", "queue": "售后组"}),
                ),
            ],
            false,
        ),
        say("never asked for"),
    ]);
    let before = env.ctx.desk.get_ticket("T-1003").unwrap();
    let config = TurnConfig::default();
    let turn = Turn {
        provider: model.as_ref(),
        tools: &env.tools,
        ctx: &env.ctx,
        config: &config,
        approver: Some(&Stopping),
        compactor: None,
        fence: None,
    };
    let mut events = Vec::new();
    let result = turn
        .run("system", Vec::new(), "go", &mut |e| events.push(e))
        .await;
    assert_eq!(
        result.outcome,
        TurnOutcome::Paused("the daemon stopped".into())
    );
    assert_eq!(result.outcome.paused(), Some("the daemon stopped"));
    // Neither call of the second step has a result: a resumed turn runs
    // both again.
    let finished = events
        .iter()
        .filter(|e| matches!(e, TurnEvent::ToolFinished { .. }))
        .count();
    assert_eq!(finished, 1, "{events:?}");
    assert_eq!(unanswered_calls(&result.messages).len(), 2);
    let after = env.ctx.desk.get_ticket("T-1003").unwrap();
    assert_eq!(
        after.queue, before.queue,
        "the call after the unsettled one ran"
    );
    assert_eq!(after.escalate_level, 0);
    assert_eq!(model.requests.lock().unwrap().len(), 2);
}
