use std::sync::Arc;
use std::time::Duration;

use tinycode_shared::proto::event::Payload;
use tinycode_shared::proto::{ClientRef, Event, TurnStarted};

use super::*;
use crate::config::Config;
use crate::domain::desk::tests::fixture_copy;

fn me() -> ClientRef {
    ClientRef {
        name: "tests".into(),
        uid: 0,
        pid: 1,
    }
}

fn defaults() -> TurnDefaults {
    TurnDefaults {
        model: "offline".into(),
        max_steps: 12,
        max_tool_result_chars: 12_000,
        timeout: None,
        artifact_root: None,
    }
}

async fn open(ws: &std::path::Path, store: &EventStore) -> Arc<Sessions> {
    let (desk, _) = Desk::open(store.clone(), ws, &Config::load(ws).unwrap())
        .await
        .unwrap();
    let skills = Arc::new(SkillRegistry::discover(ws).0);
    Sessions::open(store.clone(), desk, skills, ws.to_path_buf(), defaults())
        .await
        .unwrap()
}

/// Stored events of the session until turn `turn` completes.
async fn until_done(store: &EventStore, id: &str, turn: u64) -> Vec<Arc<Event>> {
    let mut sub = store.subscribe(SubscriptionOptions {
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
        out.push(e);
        if done {
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
    assert_eq!((s.model.as_str(), s.approve.as_str()), ("offline", "deny"));
    let (_, turn, queued) = sessions.send(&s.id, "triage T-1001", me()).await.unwrap();
    assert_eq!((turn, queued), (1, false));
    let events = until_done(&store, &s.id, 1).await;
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
        state.turns[&1].messages.len(),
        13,
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
    let (_, turn, _) = sessions
        .send(&s.id, "退款 时效 是多久？", me())
        .await
        .unwrap();
    assert_eq!(turn, 2);
    until_done(&store, &s.id, 2).await;
    let state = sessions.get(&s.id).unwrap();
    assert!(
        state
            .turns
            .values()
            .all(|t| t.outcome == Some(TurnOutcome::Completed))
    );
    let history = state.history_before(2);
    assert!(matches!(&history[0], crate::model::Message::User { text } if text == "triage T-1002"));
    assert_eq!(history.len(), 1 + state.turns[&1].messages.len());
    assert_eq!(sessions.list(10)[0].id, s.id);
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
    assert!(err.contains("`approve` must be auto or deny"), "{err}");
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
                }),
                Payload::TurnStarted(TurnStarted { turn: 1 }),
            ],
        )
        .await
        .unwrap();
    let reopened = open(&ws, &store).await;
    let state = reopened.get(&s.id).unwrap();
    assert_eq!(state.turns[&1].outcome, Some(TurnOutcome::Interrupted));
    let last = store
        .read_stream(&session_stream(&s.id), 1, 100)
        .unwrap()
        .pop()
        .unwrap();
    assert!(
        matches!(last.payload, Some(Payload::TurnCompleted(ref c)) if c.outcome == TurnOutcome::Interrupted as i32)
    );
    // The session goes on.
    let (_, turn, _) = reopened.send(&s.id, "triage T-1002", me()).await.unwrap();
    assert_eq!(turn, 2);
    until_done(&store, &s.id, 2).await;
}

#[tokio::test]
async fn sessions_can_be_renamed_forked_and_deleted() {
    let (tmp, ws) = fixture_copy();
    let store = EventStore::open(&tmp.path().join("db")).unwrap();
    let sessions = open(&ws, &store).await;
    let s = sessions.create("first", "", "", me()).await.unwrap();
    sessions.send(&s.id, "triage T-1002", me()).await.unwrap();
    let turn1 = until_done(&store, &s.id, 1).await;
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
    assert_eq!(fork.history_before(2), original.history_before(2));
    let (_, turn, _) = sessions
        .send(&fork.id, "退款 时效 是多久？", me())
        .await
        .unwrap();
    assert_eq!(turn, 2);
    until_done(&store, &fork.id, 2).await;
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
        .unwrap()
        .len();
    assert!(
        !sessions.delete(&s.id, me()).await.unwrap(),
        "no turn was running"
    );
    assert!(sessions.list(100).iter().all(|x| x.id != s.id));
    assert!(matches!(sessions.get(&s.id), Err(SessionError::Deleted(_))));
    assert!(matches!(
        sessions.send(&s.id, "hi", me()).await,
        Err(SessionError::Deleted(_))
    ));
    assert_eq!(
        store
            .read_stream(&session_stream(&s.id), 1, 1000)
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
