//! The worker on a copy of the fixture desk with the offline model.

use std::sync::Arc;
use std::time::Duration;

use tinycode_shared::proto::event::Payload;
use tinycode_shared::proto::{ApprovalDecision, ClientRef, TriageState, TriageStatus};

use super::*;
use crate::config::AutoTriage;
use crate::domain::desk::NewTicket;
use crate::sessions::tests::{defaults, open_with};
use crate::testing::fixture_copy;

struct Bench {
    _tmp: tempfile::TempDir,
    ws: std::path::PathBuf,
    store: EventStore,
    sessions: Arc<Sessions>,
    triage: Arc<Triage>,
}

fn config(concurrency: usize) -> AutoTriage {
    AutoTriage {
        enabled: true,
        concurrency: Some(concurrency),
        retry_delay_ms: 10,
        ..AutoTriage::default()
    }
}

/// The daemon alone on its log.
async fn alone(store: &EventStore) -> Arc<Cluster> {
    let me = crate::store::Member {
        id: "test-daemon".into(),
        ..Default::default()
    };
    Cluster::join(store.clone(), me, Duration::from_secs(15))
        .await
        .unwrap()
}

async fn start(approve: &str, concurrency: usize) -> Bench {
    start_with(approve, config(concurrency)).await
}

async fn start_with(approve: &str, config: AutoTriage) -> Bench {
    let (tmp, ws) = fixture_copy();
    let store = EventStore::open(&tmp.path().join("db")).unwrap();
    let mut d = defaults();
    d.approve = crate::permissions::ApprovalMode::of_stored(approve);
    let sessions = open_with(&ws, &store, d).await;
    let desk = Arc::clone(&sessions.desk);
    let triage = Triage::open(
        store.clone(),
        desk,
        Arc::clone(&sessions),
        config,
        alone(&store).await,
    )
    .await
    .unwrap();
    Bench {
        _tmp: tmp,
        ws,
        store,
        sessions,
        triage,
    }
}

/// Poll the status until `done` holds for it.
async fn until(triage: &Triage, done: impl Fn(&TriageStatus) -> bool) -> TriageStatus {
    for _ in 0..2000 {
        let s = triage.status(&[], false, None, 0).unwrap();
        if done(&s) {
            return s;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!(
        "status never matched: {:?}",
        triage.status(&[], false, None, 0).unwrap()
    );
}

fn settled(s: &TriageStatus) -> bool {
    s.queued + s.running + s.retrying == 0
}

fn item<'a>(s: &'a TriageStatus, ticket: &str) -> &'a tinycode_shared::proto::TriageItem {
    s.items
        .iter()
        .find(|i| i.ticket_id == ticket)
        .unwrap_or_else(|| panic!("{ticket} has no triage item: {s:?}"))
}

fn state(i: &tinycode_shared::proto::TriageItem) -> TriageState {
    TriageState::try_from(i.state).unwrap()
}

fn new_ticket(subject: &str) -> NewTicket {
    NewTicket {
        subject: subject.into(),
        customer: "Ana".into(),
        channel: "email".into(),
        body: "物流 一直 没有 更新，快递 到哪了？".into(),
        sla_minutes: 0,
    }
}

/// Session ids titled `triage <ticket>`, by ticket.
fn triage_sessions(sessions: &Sessions, ticket: &str) -> Vec<String> {
    sessions
        .list(1000)
        .unwrap()
        .into_iter()
        .filter(|s| s.title == format!("triage {ticket}"))
        .map(|s| s.id)
        .collect()
}

#[tokio::test]
async fn unset_slots_follow_the_default_model_and_a_set_number_does_not() {
    // The dispatcher holds one slot while it waits for a job (none here):
    // `n` slots show as `n - 1` free once it does.
    async fn slots_settle_at(triage: &Triage, n: usize) {
        for _ in 0..400 {
            if triage.slots.available_permits() == n - 1 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert_eq!(triage.slots.available_permits(), n - 1, "{n} slots");
    }
    let unset = AutoTriage {
        enabled: false,
        ..AutoTriage::default()
    };
    let b = start_with("auto", unset.clone()).await;
    let offline = crate::config::OFFLINE_TRIAGE_CONCURRENCY;
    assert_eq!(b.triage.slot_count(), offline);
    slots_settle_at(&b.triage, offline).await;
    let status = b.triage.status(&[], true, None, 0).unwrap();
    assert_eq!(status.concurrency as usize, offline);

    // A reload to a provider's model: the slots shrink to its default.
    b.sessions.set_defaults(crate::sessions::TurnDefaults {
        model: "openai/gpt-test".into(),
        ..defaults()
    });
    b.triage.set_config(unset.clone()).await.unwrap();
    let provider = crate::config::TRIAGE_CONCURRENCY;
    assert_eq!(b.triage.slot_count(), provider);
    slots_settle_at(&b.triage, provider).await;

    // A number set in the config holds whatever the model.
    let set = AutoTriage {
        concurrency: Some(5),
        ..unset
    };
    b.triage.set_config(set).await.unwrap();
    assert_eq!(b.triage.slot_count(), 5);
    slots_settle_at(&b.triage, 5).await;
    let status = b.triage.status(&[], true, None, 0).unwrap();
    assert_eq!(status.concurrency, 5);
}

#[tokio::test]
async fn open_tickets_and_new_ones_are_triaged_once_and_a_restart_adds_nothing() {
    let b = start("auto", 2).await;
    let s = until(&b.triage, |s| s.done == 3).await;
    assert!(settled(&s), "{s:?}");
    assert_eq!(item(&s, "T-1001").queue, "售后组");
    assert_eq!(item(&s, "T-1002").queue, "物流组");
    assert_eq!(item(&s, "T-1003").escalate_level, 2);
    assert!(
        s.queues
            .iter()
            .any(|q| q.queue == "物流组" && q.tickets == 1),
        "{s:?}"
    );
    // A ticket created while the daemon runs is queued by its event.
    let t = b
        .sessions
        .desk
        .create_ticket(new_ticket("where is my parcel"))
        .await
        .unwrap();
    let s = until(&b.triage, |s| s.done == 4).await;
    assert_eq!(item(&s, &t.id).queue, "物流组", "{s:?}");
    for ticket in ["T-1001", "T-1002", "T-1003", t.id.as_str()] {
        assert_eq!(triage_sessions(&b.sessions, ticket).len(), 1, "{ticket}");
    }
    // A second worker on the same log (a restart) queues nothing again.
    let again = Triage::open(
        b.store.clone(),
        Arc::clone(&b.sessions.desk),
        Arc::clone(&b.sessions),
        config(2),
        alone(&b.store).await,
    )
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let s = again.status(&[], true, None, 0).unwrap();
    assert_eq!((s.done, s.queued, s.running), (4, 0, 0), "{s:?}");
    let queued = b
        .store
        .read_range(1, u64::MAX, usize::MAX)
        .await
        .unwrap()
        .into_iter()
        .filter(|e| matches!(e.payload, Some(Payload::TriageQueued(_))))
        .count();
    assert_eq!(queued, 4);
    // The board equals a rebuild from the log.
    let before = crate::projection::rows(again.projector().tree());
    assert_eq!(before.len(), 4, "4 finished records, none unfinished");
    again.projector().rebuild().await.unwrap();
    assert_eq!(crate::projection::rows(again.projector().tree()), before);
}

#[tokio::test]
async fn with_one_slot_no_two_triage_turns_overlap() {
    let b = start("auto", 1).await;
    for n in 0..5 {
        b.sessions
            .desk
            .create_ticket(new_ticket(&format!("parcel {n}")))
            .await
            .unwrap();
    }
    until(&b.triage, |s| s.done == 8).await;
    let mut running = 0i32;
    let mut most = 0;
    let events = b.store.read_range(1, u64::MAX, usize::MAX).await.unwrap();
    // A triage's sub-agents (the offline model asks one before an L2
    // escalation) run inside its slot: only triage sessions count.
    let workers: Vec<String> = events
        .iter()
        .filter_map(|e| match &e.payload {
            Some(Payload::SubAgentSpawned(s)) => Some(format!("session-{}", s.session_id)),
            _ => None,
        })
        .collect();
    for e in events
        .into_iter()
        .filter(|e| !workers.contains(&e.stream_id))
    {
        match e.payload {
            Some(Payload::TurnStarted(_)) => running += 1,
            Some(Payload::TurnCompleted(_)) => running -= 1,
            _ => {}
        }
        most = most.max(running);
    }
    assert_eq!(most, 1);
}

#[tokio::test]
async fn a_turn_waiting_for_a_human_gives_its_slot_back_and_finishes_after_approval() {
    let b = start("ask", 1).await;
    let s = until(&b.triage, |s| s.waiting_for_approval == 1 && s.done == 2).await;
    let waiting = item(&s, "T-1003");
    assert_eq!(state(waiting), TriageState::WaitingForApproval);
    assert_eq!(waiting.approval_ids.len(), 1);
    // The only slot is free: a new ticket is triaged meanwhile.
    let t = b
        .sessions
        .desk
        .create_ticket(new_ticket("parcel"))
        .await
        .unwrap();
    let s = until(&b.triage, |s| s.done == 3).await;
    assert_eq!(state(item(&s, &t.id)), TriageState::Done);
    assert_eq!(state(item(&s, "T-1003")), TriageState::WaitingForApproval);
    let by = ClientRef {
        name: "supervisor".into(),
        ..ClientRef::default()
    };
    b.sessions
        .decide(
            &waiting.approval_ids[0],
            ApprovalDecision::AllowOnce,
            "",
            false,
            by,
        )
        .await
        .unwrap();
    let s = until(&b.triage, |s| s.done == 4).await;
    let t1003 = item(&s, "T-1003");
    assert_eq!(
        (t1003.escalate_level, t1003.ticket_status.as_str()),
        (2, "escalated")
    );
}

#[tokio::test]
async fn a_request_triages_again_and_leaves_running_work_alone() {
    let b = start("auto", 2).await;
    until(&b.triage, |s| s.done == 3).await;
    let (queued, already) = b
        .triage
        .enqueue(
            &["T-1001".into(), "T-1001".into()],
            false,
            "deny",
            "",
            crate::triage::worker_client(),
        )
        .await
        .unwrap();
    assert_eq!((queued, already.len()), (vec!["T-1001".to_string()], 0));
    let (queued, already) = b
        .triage
        .enqueue(
            &["T-1001".into()],
            false,
            "",
            "",
            crate::triage::worker_client(),
        )
        .await
        .unwrap();
    // Either still queued/running (left alone) or already done again.
    assert!(queued.len() + already.len() == 1);
    until(&b.triage, |s| s.done == 3 && settled(s)).await;
    assert_eq!(
        triage_sessions(&b.sessions, "T-1001").len(),
        1,
        "the round reuses the session"
    );
    let bad = b
        .triage
        .enqueue(
            &["T-9999".into()],
            false,
            "",
            "",
            crate::triage::worker_client(),
        )
        .await;
    assert!(matches!(
        bad,
        Err(TriageError::Domain(DomainError::TicketNotFound(_)))
    ));
    let bad = b
        .triage
        .enqueue(
            &["T-1001".into()],
            false,
            "sometimes",
            "",
            crate::triage::worker_client(),
        )
        .await;
    assert!(matches!(
        bad,
        Err(TriageError::Invalid {
            field: "approve",
            ..
        })
    ));
    let _ = &b.ws;
}

#[tokio::test]
async fn the_status_pages_its_items_and_counts_every_record() {
    let b = start("auto", 2).await;
    for n in 0..4 {
        b.sessions
            .desk
            .create_ticket(new_ticket(&format!("parcel {n} lost")))
            .await
            .unwrap();
    }
    let whole = until(&b.triage, |s| s.done == 7).await;
    assert_eq!(whole.items.len(), 7);
    assert!(whole.next_page_token.is_empty());
    let mut paged = Vec::new();
    let mut token = None;
    loop {
        let page = b.triage.status(&[], false, token.clone(), 3).unwrap();
        assert_eq!(page.done, 7, "counts cover every record on every page");
        assert!(page.items.len() <= 3);
        paged.extend(page.items);
        if page.next_page_token.is_empty() {
            break;
        }
        token = Some(page.next_page_token);
    }
    let ids = |items: &[tinycode_shared::proto::TriageItem]| {
        items
            .iter()
            .map(|i| i.ticket_id.clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(
        ids(&paged),
        ids(&whole.items),
        "the same items in the same order"
    );
    let counts = b.triage.status(&[], true, None, 0).unwrap();
    assert!(counts.items.is_empty() && counts.next_page_token.is_empty());
}
