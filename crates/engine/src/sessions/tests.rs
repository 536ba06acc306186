use std::sync::Arc;
use std::time::Duration;

use tinycode_shared::proto::event::Payload;
use tinycode_shared::proto::{ClientRef, Event, TurnStarted};

use super::*;
use crate::config::Config;
use crate::model::Message;
use crate::store::SubscriptionOptions;
use crate::testing::fixture_copy;

pub(super) fn me() -> ClientRef {
    ClientRef {
        name: "tests".into(),
        uid: 0,
        pid: 1,
    }
}

pub(crate) fn defaults() -> TurnDefaults {
    TurnDefaults {
        model: "offline".into(),
        max_steps: 12,
        max_tool_result_chars: 12_000,
        timeout: None,
        artifact_root: None,
        providers: Vec::new(),
        compaction: crate::config::Compaction::default(),
        approval_timeout: None,
        approve: crate::permissions::ApprovalMode::Ask,
        sub_agents: crate::config::SubAgents::default(),
        // As the demo desk: the L2 path's worker runs unattended.
        allow: crate::permissions::SUB_AGENT_TOOLS
            .map(String::from)
            .to_vec(),
        review_below: Default::default(),
    }
}

async fn open(ws: &std::path::Path, store: &EventStore) -> Arc<Sessions> {
    open_with(ws, store, defaults()).await
}

pub(crate) async fn open_with(
    ws: &std::path::Path,
    store: &EventStore,
    d: TurnDefaults,
) -> Arc<Sessions> {
    let (desk, _) = Desk::open(store.clone(), ws, &Config::load(ws).unwrap().desk())
        .await
        .unwrap();
    let skills = Arc::new(crate::skills::Skills::discover(ws).0);
    let approvals = crate::approvals::Approvals::open(store.clone())
        .await
        .unwrap();
    let me = crate::store::Member {
        id: "test-daemon".into(),
        ..Default::default()
    };
    let cluster = crate::cluster::Cluster::join(store.clone(), me, Duration::from_secs(15))
        .await
        .unwrap();
    Sessions::open(
        crate::sessions::Parts {
            store: store.clone(),
            desk,
            skills,
            approvals,
            workspace: ws.to_path_buf(),
            cluster,
            offline: Arc::new(crate::offline::OfflineModel::default()),
            keys: Arc::new(crate::model::keys::Environment),
        },
        d,
    )
    .await
    .unwrap()
}

/// Stored events of the session until turn `turn` completes, returned once
/// the session's projection has folded them too (a store subscriber may
/// see an event before the actor folds it).
pub(super) async fn until_done(sessions: &Sessions, id: &str, turn: u64) -> Vec<Arc<Event>> {
    let mut sub = sessions.store.subscribe(SubscriptionOptions {
        from_sequence: 1,
        stream_prefix: session_stream(id),
        follow: true,
    });
    let mut out = Vec::new();
    loop {
        let e = tokio::time::timeout(Duration::from_secs(20), sub.recv())
            .await
            .expect("turn finished")
            .unwrap()
            .unwrap();
        let done = matches!(&e.payload, Some(Payload::TurnCompleted(c)) if c.turn == turn);
        let sequence = e.sequence;
        out.push(e);
        if done {
            sessions.read_at(sequence).await.unwrap();
            return out;
        }
    }
}

#[tokio::test]
async fn an_offline_turn_runs_in_the_session_and_is_stored() {
    let (tmp, ws) = fixture_copy();
    let store = EventStore::open(&tmp.path().join("db")).unwrap();
    let sessions = open(&ws, &store).await;
    let s = sessions.create("T-1001", "", "", me()).await.unwrap();
    assert_eq!(
        (s.model.as_str(), s.approve.as_str()),
        ("offline", "ask"),
        "the configured permissionMode"
    );
    let Sent { turn, queued, .. } = sessions.send(&s.id, "triage T-1001", me()).await.unwrap();
    assert_eq!((turn, queued), (1, false));
    let events = until_done(&sessions, &s.id, 1).await;
    let kinds: Vec<&str> = events
        .iter()
        .map(|e| match &e.payload {
            Some(Payload::SessionCreated(_)) => "created",
            Some(Payload::UserMessageAdded(_)) => "user",
            Some(Payload::TurnStarted(_)) => "started",
            Some(Payload::AssistantMessageAdded(_)) => "assistant",
            Some(Payload::ToolCallFinished(_)) => "tool",
            Some(Payload::TurnCompleted(_)) => "completed",
            _ => "other",
        })
        .collect();
    assert_eq!(&kinds[..3], ["created", "user", "started"]);
    assert_eq!(
        kinds.iter().filter(|k| **k == "tool").count(),
        6,
        "{kinds:?}"
    );
    let Some(Payload::TurnCompleted(done)) = &events.last().unwrap().payload else {
        panic!()
    };
    assert_eq!(done.outcome, TurnOutcome::Completed as i32);
    assert_eq!((done.steps, done.tool_calls), (7, 6));
    assert!(done.usage.unwrap().input_tokens > 0);
    let Some(Payload::UserMessageAdded(u)) = &events[1].payload else {
        panic!()
    };
    assert_eq!(
        u.from.as_ref().unwrap().name,
        "tests",
        "who sent it is recorded"
    );
    assert_eq!(sessions.desk.get_ticket("T-1001").unwrap().queue, "售后组");
    let state = sessions.get(&s.id).unwrap();
    assert_eq!(
        state.turns[&1].messages, 13,
        "7 assistant messages, 6 tool results"
    );
}

#[tokio::test]
async fn a_second_message_is_queued_and_sees_the_first_turn() {
    let (tmp, ws) = fixture_copy();
    let store = EventStore::open(&tmp.path().join("db")).unwrap();
    let sessions = open(&ws, &store).await;
    let s = sessions.create("", "offline", "auto", me()).await.unwrap();
    sessions.send(&s.id, "triage T-1002", me()).await.unwrap();
    let Sent { turn, .. } = sessions
        .send(&s.id, "退款 时效 是多久？", me())
        .await
        .unwrap();
    assert_eq!(turn, 2);
    until_done(&sessions, &s.id, 2).await;
    let state = sessions.get(&s.id).unwrap();
    assert!(
        state
            .turns
            .values()
            .all(|t| t.outcome == Some(TurnOutcome::Completed))
    );
    let history = sessions.history(&state).await.unwrap().before(2);
    assert!(matches!(&history[0], crate::model::Message::User { text } if text == "triage T-1002"));
    assert_eq!(history.len(), 1 + state.turns[&1].messages as usize);
    assert_eq!(sessions.list(10).unwrap()[0].id, s.id);
    assert!(!sessions.cancel(&s.id).unwrap(), "nothing runs now");
}

#[tokio::test]
async fn bad_requests_are_refused_with_a_reason() {
    let (tmp, ws) = fixture_copy();
    let store = EventStore::open(&tmp.path().join("db")).unwrap();
    let sessions = open(&ws, &store).await;
    assert!(matches!(sessions.get("../x"), Err(SessionError::BadId(_))));
    assert!(matches!(
        sessions
            .send(&Arc::clone(&sessions).new_id(), "hi", me())
            .await,
        Err(SessionError::NotFound(_))
    ));
    let err = sessions
        .create("", "gemini/x", "", me())
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("cannot use model \"gemini/x\""), "{err}");
    let err = sessions
        .create("", "", "sometimes", me())
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("`approve` must be ask, auto or deny"), "{err}");
    let s = sessions.create("", "", "", me()).await.unwrap();
    assert!(sessions.send(&s.id, "  ", me()).await.is_err());
}

#[tokio::test]
async fn a_turn_left_running_by_a_crash_is_marked_interrupted_on_open() {
    let (tmp, ws) = fixture_copy();
    let store = EventStore::open(&tmp.path().join("db")).unwrap();
    let sessions = open(&ws, &store).await;
    let s = sessions.create("", "", "", me()).await.unwrap();
    // As if the daemon died right after starting turn 1.
    store
        .append(
            &session_stream(&s.id),
            ExpectedVersion::Any,
            vec![
                Payload::UserMessageAdded(tinycode_shared::proto::UserMessageAdded {
                    text: "triage T-1001".into(),
                    from: Some(me()),
                    turn: 1,
                    ..Default::default()
                }),
                Payload::TurnStarted(TurnStarted {
                    turn: 1,
                    ..TurnStarted::default()
                }),
            ],
        )
        .await
        .unwrap();
    let reopened = open(&ws, &store).await;
    let state = reopened.get(&s.id).unwrap();
    assert_eq!(state.turns[&1].outcome, Some(TurnOutcome::Interrupted));
    let last = store
        .read_stream(&session_stream(&s.id), 1, 100)
        .await
        .unwrap()
        .pop()
        .unwrap();
    assert!(
        matches!(last.payload, Some(Payload::TurnCompleted(ref c)) if c.outcome == TurnOutcome::Interrupted as i32)
    );
    // The session goes on.
    let Sent { turn, .. } = reopened.send(&s.id, "triage T-1002", me()).await.unwrap();
    assert_eq!(turn, 2);
    until_done(&reopened, &s.id, 2).await;
}

#[tokio::test]
async fn sessions_can_be_renamed_forked_and_deleted() {
    let (tmp, ws) = fixture_copy();
    let store = EventStore::open(&tmp.path().join("db")).unwrap();
    let sessions = open(&ws, &store).await;
    let s = sessions.create("first", "", "", me()).await.unwrap();
    sessions.send(&s.id, "triage T-1002", me()).await.unwrap();
    let turn1 = until_done(&sessions, &s.id, 1).await;
    assert_eq!(
        sessions
            .rename(&s.id, "logistics", me())
            .await
            .unwrap()
            .title,
        "logistics"
    );

    // A full fork has the same history and goes on independently.
    let fork = sessions.fork(&s.id, 0, "", me()).await.unwrap();
    assert_eq!(
        (fork.title.as_str(), fork.forked_from.as_str()),
        ("fork of logistics", s.id.as_str())
    );
    let original = sessions.get(&s.id).unwrap();
    assert_eq!(
        sessions.history(&fork).await.unwrap().before(2),
        sessions.history(&original).await.unwrap().before(2)
    );
    let Sent { turn, .. } = sessions
        .send(&fork.id, "退款 时效 是多久？", me())
        .await
        .unwrap();
    assert_eq!(turn, 2);
    until_done(&sessions, &fork.id, 2).await;
    assert_eq!(
        sessions.get(&s.id).unwrap().turns.len(),
        1,
        "the original is untouched"
    );

    // A fork cut inside a turn marks that turn interrupted.
    let mid = turn1
        .iter()
        .find(|e| matches!(e.payload, Some(Payload::ToolCallFinished(_))))
        .unwrap()
        .sequence;
    let cut = sessions.fork(&s.id, mid, "cut", me()).await.unwrap();
    assert_eq!(cut.turns[&1].outcome, Some(TurnOutcome::Interrupted));

    // Delete: gone from listings and refused, but its events stay.
    let before = store
        .read_stream(&session_stream(&s.id), 1, 1000)
        .await
        .unwrap()
        .len();
    assert!(
        !sessions.delete(&s.id, me()).await.unwrap(),
        "no turn was running"
    );
    assert!(sessions.list(100).unwrap().iter().all(|x| x.id != s.id));
    assert!(matches!(sessions.get(&s.id), Err(SessionError::Deleted(_))));
    assert!(matches!(
        sessions.send(&s.id, "hi", me()).await,
        Err(SessionError::Deleted(_))
    ));
    assert_eq!(
        store
            .read_stream(&session_stream(&s.id), 1, 1000)
            .await
            .unwrap()
            .len(),
        before + 1
    );
    let reopened = open(&ws, &store).await;
    assert!(
        matches!(reopened.get(&s.id), Err(SessionError::Deleted(_))),
        "deletion survives restart"
    );
}

/// The history the recall gives is the one a full read of the stream
/// folds (`recall.rs`).
async fn assert_recalled(sessions: &Sessions, id: &str) {
    let state = sessions.get(id).unwrap();
    let recalled = sessions.history(&state).await.unwrap();
    let stream = session_stream(id);
    let from = state.history_from.max(1);
    let all = sessions.store.read_stream(&stream, from, usize::MAX).await;
    let full = History::of(&state, &all.unwrap());
    assert!(!full.turns.is_empty());
    assert_eq!(recalled, full, "recalled from {} on", state.history_from);
}

/// Defaults that compact above 300 tokens, keeping 2 messages.
fn compacting_early() -> TurnDefaults {
    let mut d = defaults();
    d.compaction = crate::config::Compaction {
        above_tokens: 300,
        keep_recent_messages: 2,
    };
    d
}

#[tokio::test]
async fn compaction_summarises_old_turns_at_a_user_boundary_and_survives_restart() {
    let (tmp, ws) = fixture_copy();
    let store = EventStore::open(&tmp.path().join("db")).unwrap();
    let d = compacting_early();
    let sessions = open_with(&ws, &store, d.clone()).await;
    let s = sessions.create("", "offline", "deny", me()).await.unwrap();
    for (n, text) in [
        (1, "what is the refund policy?"),
        (2, "triage T-1002"),
        (3, "how long do refunds take?"),
    ] {
        sessions.send(&s.id, text, me()).await.unwrap();
        until_done(&sessions, &s.id, n).await;
        assert_recalled(&sessions, &s.id).await;
    }
    let total = sessions.get(&s.id).unwrap().message_count();
    let events = sessions.stored(&s.id, 1, u64::MAX).await.unwrap();
    let auto: Vec<_> = events
        .iter()
        .filter_map(|e| match &e.payload {
            Some(Payload::SessionCompacted(c)) => Some(c.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(auto.len(), 1, "compacted once, before turn 3");
    assert_eq!(
        auto[0].first_kept_turn, 2,
        "cut at the user message of turn 2"
    );
    assert!(!auto[0].manual);
    assert_eq!(
        auto[0].summarized_messages, 4,
        "turn 1: question, search, result, answer"
    );
    assert!(
        auto[0]
            .summary
            .contains("user asked: what is the refund policy?"),
        "{}",
        auto[0].summary
    );
    assert!(auto[0].tokens_after < auto[0].tokens_before);
    let state = sessions.get(&s.id).unwrap();
    assert_eq!(state.turns.keys().copied().collect::<Vec<_>>(), [2, 3]);
    let Message::User { text } = &sessions.history(&state).await.unwrap().before(3)[0] else {
        panic!("the summary leads the history")
    };
    assert!(text.starts_with("<conversation-summary>\n"), "{text}");

    // Manual compaction keeps the newest turn and summarises the summary too.
    let c = sessions.compact(&s.id, me()).await.unwrap();
    assert_recalled(&sessions, &s.id).await;
    assert!(c.compacted);
    assert_eq!(c.first_kept_turn, 3);
    assert_eq!(
        c.summarized_messages,
        1 + 14,
        "the old summary and turn 2 (user, 7 steps, 6 results)"
    );
    assert!(c.tokens_after < c.tokens_before, "{c:?}");
    let after = sessions.get(&s.id).unwrap();
    assert_eq!(
        after.message_count(),
        total,
        "counts include summarised messages"
    );
    assert_eq!(after.next_turn(), 4);

    // A restart loads from the last boundary; the log keeps everything.
    drop(sessions);
    let reopened = open_with(&ws, &store, d).await;
    let state = reopened.get(&s.id).unwrap();
    assert_eq!(state.compacted_before, 3);
    assert_eq!(state.turns.keys().copied().collect::<Vec<_>>(), [3]);
    assert_eq!(state.summary, after.summary);
    assert_eq!(state.context_tokens(), after.context_tokens());
    let users = reopened
        .stored(&s.id, 1, u64::MAX)
        .await
        .unwrap()
        .iter()
        .filter(|e| matches!(e.payload, Some(Payload::UserMessageAdded(_))))
        .count();
    assert_eq!(users, 3, "the full history stays in the log");
    // Nothing left to summarise when only the newest turn is held.
    assert!(!reopened.compact(&s.id, me()).await.unwrap().compacted);
}

#[tokio::test]
async fn a_mid_turn_compaction_with_nothing_to_cut_asks_the_writer_for_nothing() {
    use crate::agent::Compactor;
    let (tmp, ws) = fixture_copy();
    let store = EventStore::open(&tmp.path().join("db")).unwrap();
    let sessions = open_with(&ws, &store, compacting_early()).await;
    let s = sessions.create("", "offline", "deny", me()).await.unwrap();
    sessions.with_live(&s.id, |_| ()).unwrap();
    let live = lock(&sessions.live).get(&s.id).cloned().unwrap();
    let (writer, mut held) = tokio::sync::mpsc::unbounded_channel();
    let mid_turn = compaction::MidTurn {
        sessions: &sessions,
        id: &s.id,
        live: &live,
        turn: 1,
        writer: &writer,
        failed: std::sync::atomic::AtomicBool::new(false),
    };
    // Turn 1 has no earlier turn to summarise: no flush is asked for (one
    // would wait here for a writer that never answers).
    let compacted = tokio::time::timeout(Duration::from_secs(5), mid_turn.compact())
        .await
        .expect("no wait for the writer");
    assert!(compacted.is_none());
    assert!(held.try_recv().is_err(), "the writer was asked for nothing");
}

#[tokio::test]
async fn context_tokens_use_reported_usage_then_estimate_what_came_after() {
    let mut state = SessionState::default();
    let event = |payload| Event {
        payload: Some(payload),
        ..Default::default()
    };
    state.apply(&event(Payload::UserMessageAdded(
        tinycode_shared::proto::UserMessageAdded {
            text: "x".repeat(400),
            from: None,
            turn: 1,
            ..Default::default()
        },
    )));
    assert_eq!(state.context_tokens(), 100, "chars/4 before any usage");
    state.apply(&event(Payload::AssistantMessageAdded(
        tinycode_shared::proto::AssistantMessageAdded {
            text: "ok".into(),
            turn: 1,
            usage: Some(tinycode_shared::proto::ModelUsage {
                input_tokens: 1_000,
                output_tokens: 20,
                ..Default::default()
            }),
            ..Default::default()
        },
    )));
    assert_eq!(state.context_tokens(), 1_020, "the provider's count wins");
    state.apply(&event(Payload::ToolCallFinished(
        tinycode_shared::proto::ToolCallFinished {
            content: "y".repeat(41),
            turn: 1,
            ..Default::default()
        },
    )));
    assert_eq!(
        state.context_tokens(),
        1_031,
        "plus chars/4 of what followed"
    );
}

/// An idle session's actor retires unless a client is attached; the next
/// message starts a new one and its turn runs.
#[tokio::test]
async fn an_idle_session_gives_up_its_actor_and_wakes_for_the_next_message() {
    let (tmp, ws) = fixture_copy();
    let store = EventStore::open(&tmp.path().join("db")).unwrap();
    let sessions = open(&ws, &store).await;
    let s = sessions.create("", "offline", "deny", me()).await.unwrap();
    let live = |sessions: &Sessions| lock(&sessions.live).contains_key(&s.id);
    let (rx, _, _) = sessions.attach(&s.id).unwrap();
    let Sent { turn, .. } = sessions
        .send(&s.id, "退款 时效 是多久？", me())
        .await
        .unwrap();
    until_done(&sessions, &s.id, turn).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(live(&sessions), "an attached client keeps the actor");
    drop(rx);
    let mut retired = false;
    for _ in 0..300 {
        if !live(&sessions) {
            retired = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(retired, "the actor retired once nobody was attached");
    let Sent { turn, queued, .. } = sessions
        .send(&s.id, "T-1002 的物流呢？", me())
        .await
        .unwrap();
    assert!(!queued);
    let events = until_done(&sessions, &s.id, turn).await;
    assert!(events.iter().any(|e| matches!(
        &e.payload,
        Some(Payload::TurnCompleted(c)) if c.turn == turn && c.outcome == TurnOutcome::Completed as i32
    )));
}

/// The payload kinds of a session's events, up to and without the turn's
/// completion.
fn kinds(events: &[Arc<Event>]) -> Vec<&'static str> {
    events
        .iter()
        .filter_map(|e| match &e.payload {
            Some(Payload::UserMessageAdded(_)) => Some("user"),
            Some(Payload::TurnStarted(_)) => Some("started"),
            Some(Payload::AssistantMessageAdded(_)) => Some("assistant"),
            Some(Payload::ToolCallFinished(_)) => Some("tool"),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn a_failed_append_fails_the_turn_and_nothing_after_it_is_stored() {
    // The turn as it runs when every append succeeds.
    let (tmp, ws) = fixture_copy();
    let store = EventStore::open(&tmp.path().join("db")).unwrap();
    let sessions = open(&ws, &store).await;
    let s = sessions.create("T-1001", "", "", me()).await.unwrap();
    let Sent { turn, .. } = sessions.send(&s.id, "triage T-1001", me()).await.unwrap();
    let whole = kinds(&until_done(&sessions, &s.id, turn).await);
    assert!(whole.len() > 6, "{whole:?}");

    let (tmp, ws) = fixture_copy();
    let store = EventStore::open(&tmp.path().join("db")).unwrap();
    let sessions = open(&ws, &store).await;
    let s = sessions.create("T-1001", "", "", me()).await.unwrap();
    // The session's first writes go through (the user message, the turn's
    // start with its first answer, stored when its tool starts; the tool's
    // result with the next answer, when the next tool starts), then one
    // fails.
    store.inject_failure("session-", 3);
    let Sent { turn, .. } = sessions.send(&s.id, "triage T-1001", me()).await.unwrap();
    let events = until_done(&sessions, &s.id, turn).await;
    let Some(Payload::TurnCompleted(done)) = &events.last().unwrap().payload else {
        panic!()
    };
    assert_eq!(done.outcome, TurnOutcome::Failed as i32, "{done:?}");
    assert!(
        done.error.contains("could not be stored") && done.error.contains("injected failure"),
        "{}",
        done.error
    );
    // What was stored is a strict prefix of the whole turn: once an event
    // was lost, nothing after it was stored (no result without its call).
    let stored = kinds(&events);
    assert!(stored.len() < whole.len(), "{stored:?}");
    assert!(stored.len() > 2, "the failure came mid-turn: {stored:?}");
    assert_eq!(stored[..], whole[..stored.len()], "{stored:?} vs {whole:?}");
    drop(tmp);
}

#[tokio::test]
async fn an_end_stored_whose_answer_was_lost_is_not_stored_again() {
    let (tmp, ws) = fixture_copy();
    let store = EventStore::open(&tmp.path().join("db")).unwrap();
    let sessions = open(&ws, &store).await;
    let s = sessions.create("T-1001", "", "", me()).await.unwrap();
    // The append carrying the turn's end is stored, and its answer lost (a
    // connection to PostgreSQL dying after the commit).
    store.inject_lost_answer(|stream, payloads| {
        stream.starts_with("session-")
            && payloads
                .iter()
                .any(|p| matches!(p, Payload::TurnCompleted(_)))
    });
    let (_stop, stopping) = tokio::sync::watch::channel(false);
    let mut attached = Arc::clone(&sessions)
        .follow(&s.id, 1, stopping)
        .await
        .unwrap();
    let Sent { turn, .. } = sessions.send(&s.id, "triage T-1001", me()).await.unwrap();
    until_done(&sessions, &s.id, turn).await;
    // An attached client sees the end, though its append's answer was
    // lost (published from the log).
    let seen_end = tokio::time::timeout(Duration::from_secs(10), async {
        while let Some(update) = attached.recv().await {
            if let Ok(LiveUpdate::Event(e)) = update
                && matches!(&e.payload, Some(Payload::TurnCompleted(c)) if c.turn == turn)
            {
                return true;
            }
        }
        false
    })
    .await;
    assert_eq!(seen_end, Ok(true), "the attached client never saw the end");
    // The session's next turn runs once the first one's task is over, its
    // end handled.
    let Sent { turn: next, .. } = sessions.send(&s.id, "thanks", me()).await.unwrap();
    let events = until_done(&sessions, &s.id, next).await;
    let ends: Vec<_> = events
        .iter()
        .filter_map(|e| match &e.payload {
            Some(Payload::TurnCompleted(c)) if c.turn == turn => Some(c.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(ends.len(), 1, "{ends:?}");
    assert_eq!(ends[0].outcome, TurnOutcome::Completed as i32, "{ends:?}");
    drop(tmp);
}

fn rows(sessions: &Sessions) -> Vec<(Vec<u8>, Vec<u8>)> {
    crate::projection::rows(sessions.projector().tree())
}

/// Every stored session equals a fold of its stream from scratch, and a
/// rebuild of the model from the log gives the same rows.
async fn assert_model_follows_the_log(sessions: &Sessions) {
    sessions.caught_up().await.unwrap();
    let before = rows(sessions);
    let ids: Vec<String> = before
        .iter()
        .filter_map(|(k, _)| k.strip_prefix(b"s/"))
        .map(|id| String::from_utf8_lossy(id).to_string())
        .collect();
    assert!(!ids.is_empty());
    for id in &ids {
        let mut folded = SessionState::default();
        for e in sessions.stored(id, 1, u64::MAX).await.unwrap() {
            folded.apply(&e);
        }
        let stored = model::read(sessions.projector().tree(), id).unwrap();
        assert_eq!(stored, Some(folded), "session {id}");
    }
    sessions.projector().rebuild().await.unwrap();
    assert_eq!(rows(sessions), before, "a rebuild gives the same model");
}

#[tokio::test]
async fn the_sessions_model_equals_a_fold_and_a_rebuild_of_the_log() {
    let (tmp, ws) = fixture_copy();
    let store = EventStore::open(&tmp.path().join("db")).unwrap();
    let d = compacting_early();
    let sessions = open_with(&ws, &store, d).await;
    let a = sessions.create("a", "offline", "deny", me()).await.unwrap();
    let b = sessions.create("b", "offline", "auto", me()).await.unwrap();
    for (n, text) in [(1, "what is the refund policy?"), (2, "triage T-1002")] {
        sessions.send(&a.id, text, me()).await.unwrap();
        sessions.send(&b.id, text, me()).await.unwrap();
        until_done(&sessions, &a.id, n).await;
        until_done(&sessions, &b.id, n).await;
    }
    sessions.send(&a.id, "how long?", me()).await.unwrap();
    until_done(&sessions, &a.id, 3).await;
    assert!(sessions.get(&a.id).unwrap().summary.is_some(), "compacted");
    sessions.rename(&b.id, "renamed", me()).await.unwrap();
    let fork = sessions.fork(&b.id, 0, "", me()).await.unwrap();
    sessions.delete(&a.id, me()).await.unwrap();
    assert_eq!(
        sessions
            .list(10)
            .unwrap()
            .iter()
            .map(|s| s.id.as_str())
            .collect::<Vec<_>>(),
        [fork.id.as_str(), b.id.as_str()],
        "newest first, the deleted one left out"
    );
    assert_model_follows_the_log(&sessions).await;
    drop(tmp);
}

#[tokio::test]
async fn artifacts_belong_to_their_turn_and_go_with_their_session() {
    let (tmp, ws) = fixture_copy();
    let store = EventStore::open(&tmp.path().join("db")).unwrap();
    let root = tmp.path().join("artifacts");
    let mut d = defaults();
    d.max_tool_result_chars = 200;
    d.artifact_root = Some(root.clone());
    let sessions = open_with(&ws, &store, d).await;
    let s = sessions
        .create("artifacts", "", "auto", me())
        .await
        .unwrap();
    for (n, ticket) in [(1u64, "T-1002"), (2, "T-1003")] {
        let Sent { turn, .. } = sessions
            .send(&s.id, &format!("triage {ticket}"), me())
            .await
            .unwrap();
        assert_eq!(turn, n);
        until_done(&sessions, &s.id, turn).await;
    }
    let files = |turn: u64| -> Vec<String> {
        let dir = root.join(&s.id).join(format!("turn-{turn}"));
        let mut names: Vec<String> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|e| std::fs::read_to_string(e.unwrap().path()).unwrap())
            .collect();
        names.sort();
        names
    };
    let (first, second) = (files(1), files(2));
    assert!(!first.is_empty() && !second.is_empty());
    assert!(
        first.iter().any(|text| text.contains("T-1002")),
        "turn 1 keeps T-1002's full results"
    );
    assert!(
        first
            .iter()
            .all(|text| !text.contains("\"id\": \"T-1003\"")),
        "turn 2 overwrote nothing of turn 1"
    );
    sessions.delete(&s.id, me()).await.unwrap();
    assert!(
        !root.join(&s.id).exists(),
        "deleting the session removes its artifacts"
    );
}

#[tokio::test]
async fn a_skill_command_is_expanded_for_the_model_and_stored_as_typed() {
    let (tmp, ws) = fixture_copy();
    let store = EventStore::open(&tmp.path().join("db")).unwrap();
    let sessions = open(&ws, &store).await;
    let s = sessions.create("skills", "", "auto", me()).await.unwrap();
    let Sent { turn, .. } = sessions
        .send(&s.id, "/triage-sop T-1001", me())
        .await
        .unwrap();
    let events = until_done(&sessions, &s.id, turn).await;
    let m = events
        .iter()
        .find_map(|e| match &e.payload {
            Some(Payload::UserMessageAdded(m)) => Some(m.clone()),
            _ => None,
        })
        .expect("the user message");
    assert_eq!(m.text, "/triage-sop T-1001", "stored as typed");
    assert_eq!(m.skill, "triage-sop");
    assert!(m.skill_body.contains("分流"), "{}", m.skill_body);
    // What the model read: the skill's body, then the args.
    let state = sessions.get(&s.id).unwrap();
    let history = sessions.history(&state).await.unwrap();
    let user = &history.turn(turn).user;
    assert!(
        user.starts_with("<skill name=\"triage-sop\">\n") && user.ends_with("</skill>\n\nT-1001"),
        "{user}"
    );
    // The offline model still triaged T-1001.
    let t = sessions.desk.get_ticket("T-1001").unwrap();
    assert_eq!(t.status, "routed", "{t:?}");
    // A command naming no skill is refused with the list; plain text is not.
    let err = sessions.send(&s.id, "/nope T-1", me()).await.unwrap_err();
    assert!(
        err.to_string().contains("/escalation-rules, /triage-sop"),
        "{err}"
    );
}

#[tokio::test]
async fn prune_deletes_idle_old_sessions_with_their_artifacts() {
    let (tmp, ws) = fixture_copy();
    let store = EventStore::open(&tmp.path().join("db")).unwrap();
    let root = tmp.path().join("artifacts");
    let mut d = defaults();
    d.artifact_root = Some(root.clone());
    let sessions = open_with(&ws, &store, d).await;
    let old = sessions.create("old", "", "", me()).await.unwrap();
    std::fs::create_dir_all(root.join(&old.id).join("turn-1")).unwrap();
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let new = sessions.create("new", "", "", me()).await.unwrap();
    let would = sessions
        .prune(Duration::from_secs(1), true, me())
        .await
        .unwrap();
    assert_eq!(would, vec![old.id.clone()]);
    assert!(root.join(&old.id).exists(), "a dry run changes nothing");
    let pruned = sessions
        .prune(Duration::from_secs(1), false, me())
        .await
        .unwrap();
    assert_eq!(pruned, vec![old.id.clone()]);
    assert!(!root.join(&old.id).exists());
    let listed: Vec<String> = sessions
        .list(100)
        .unwrap()
        .into_iter()
        .map(|s| s.id)
        .collect();
    assert_eq!(listed, vec![new.id.clone()], "the pruned one is hidden");
    // Its events stay, the last one marking it deleted.
    let events = store
        .read_stream(&session_stream(&old.id), 1, 100)
        .await
        .unwrap();
    assert!(matches!(
        events.last().unwrap().payload,
        Some(Payload::SessionDeleted(_))
    ));
}

#[tokio::test]
async fn attaching_after_the_last_event_sees_the_next_turn_whole_and_nothing_older() {
    let (tmp, ws) = fixture_copy();
    let store = EventStore::open(&tmp.path().join("db")).unwrap();
    let sessions = open(&ws, &store).await;
    let s = sessions.create("T-1001", "", "", me()).await.unwrap();
    for text in ["triage T-1001", "thanks"] {
        let Sent { turn, .. } = sessions.send(&s.id, text, me()).await.unwrap();
        until_done(&sessions, &s.id, turn).await;
    }
    // A client about to send its next message attaches after the last
    // event it has (the session's earlier events are skipped unread).
    let before = sessions.get(&s.id).unwrap();
    assert!(before.last_version > 2, "{before:?}");
    let (_stop, stopping) = tokio::sync::watch::channel(false);
    let mut attached = Arc::clone(&sessions)
        .follow(&s.id, before.last_sequence + 1, stopping)
        .await
        .unwrap();
    let Sent { turn, .. } = sessions.send(&s.id, "once more", me()).await.unwrap();
    let stored: Vec<(u64, u64)> = until_done(&sessions, &s.id, turn)
        .await
        .iter()
        .filter(|e| e.sequence > before.last_sequence)
        .map(|e| (e.sequence, e.stream_version))
        .collect();
    let mut seen = Vec::new();
    while seen.len() < stored.len() {
        let update = tokio::time::timeout(Duration::from_secs(10), attached.recv())
            .await
            .expect("the attached client saw the turn")
            .expect("still attached")
            .unwrap();
        if let LiveUpdate::Event(e) = update {
            seen.push((e.sequence, e.stream_version));
        }
    }
    assert_eq!(seen, stored);
    assert_eq!(stored[0].1, before.last_version + 1, "{stored:?}");
    drop(tmp);
}
