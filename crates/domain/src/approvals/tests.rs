use std::sync::Arc;

use tinycode_shared::proto::{
    ApprovalDecision, ApprovalRequested, ApprovalState, ClientRef, ToolCallRef,
};

use super::*;

fn client(name: &str, pid: i32) -> ClientRef {
    ClientRef {
        name: name.into(),
        uid: 1000,
        pid,
    }
}

fn asking(session: &str, turn: u64, tool: &str) -> ApprovalRequested {
    ApprovalRequested {
        session_id: session.into(),
        turn,
        call: Some(ToolCallRef {
            id: format!("call-{turn}"),
            name: tool.into(),
            arguments_json: "{}".into(),
            ..Default::default()
        }),
        reason: "a human decides".into(),
        ..ApprovalRequested::default()
    }
}

async fn id_of(approvals: &Approvals, r: ApprovalRequested) -> String {
    let e = approvals.request(r).await.unwrap();
    match &e.payload {
        Some(Payload::ApprovalRequested(r)) => r.approval_id.clone(),
        other => panic!("{other:?}"),
    }
}

fn store() -> (tempfile::TempDir, EventStore) {
    let tmp = tempfile::tempdir().unwrap();
    let store = EventStore::open(&tmp.path().join("db")).unwrap();
    (tmp, store)
}

#[tokio::test]
async fn the_first_decision_wins_and_later_ones_name_who_decided() {
    let (_tmp, store) = store();
    let approvals = Approvals::open(store).await.unwrap();
    let id = id_of(&approvals, asking("s1", 1, "escalate_ticket")).await;
    assert_eq!(id, "A-1");
    assert_eq!(approvals.list(false, "").unwrap().len(), 1);
    assert_eq!(approvals.list(false, "other").unwrap().len(), 0);
    let waiter = {
        let approvals = Arc::clone(&approvals);
        let id = id.clone();
        tokio::spawn(async move { approvals.wait(&id).await })
    };
    let (info, _) = approvals
        .decide(
            &id,
            ApprovalDecision::AllowOnce,
            "",
            false,
            client("tui", 7),
        )
        .await
        .unwrap();
    assert_eq!(info.state, ApprovalState::Allowed as i32);
    assert_eq!(waiter.await.unwrap().unwrap(), Verdict::Allowed);
    let late = approvals
        .decide(&id, ApprovalDecision::Deny, "no", false, client("cli", 9))
        .await
        .unwrap_err();
    assert!(matches!(late, ApprovalError::AlreadyDecided { .. }));
    assert_eq!(
        late.to_string(),
        "approval A-1 was already allowed by tui (uid 1000, pid 7)"
    );
    assert!(approvals.list(false, "").unwrap().is_empty());
    assert_eq!(approvals.list(true, "").unwrap().len(), 1);
}

#[tokio::test]
async fn of_two_clients_deciding_at_once_exactly_one_wins() {
    let (_tmp, store) = store();
    let approvals = Approvals::open(store).await.unwrap();
    for round in 0..10u64 {
        let id = id_of(&approvals, asking("s1", round + 1, "reply_customer")).await;
        let decide = |name: &'static str, d: ApprovalDecision| {
            let approvals = Arc::clone(&approvals);
            let id = id.clone();
            tokio::spawn(async move {
                approvals
                    .decide(&id, d, "", false, client(name, 1))
                    .await
                    .map(|(info, _)| info)
            })
        };
        let a = decide("a", ApprovalDecision::AllowOnce);
        let b = decide("b", ApprovalDecision::Deny);
        let (a, b) = (a.await.unwrap(), b.await.unwrap());
        assert!(a.is_ok() != b.is_ok(), "round {round}: {a:?} / {b:?}");
        let loser = a.err().or(b.err()).unwrap();
        assert!(
            matches!(loser, ApprovalError::AlreadyDecided { .. }),
            "{loser}"
        );
        // The log holds exactly one decision.
        let stream = approvals
            .store
            .read_stream(&approval_stream(&id), 1, 10)
            .await
            .unwrap();
        assert_eq!(stream.len(), 2, "request + one decision");
    }
}

#[tokio::test]
async fn always_allow_is_remembered_except_for_review_required_tools_and_survives_restart() {
    let (_tmp, store) = store();
    let approvals = Approvals::open(store.clone()).await.unwrap();
    let reply = id_of(&approvals, asking("s1", 1, "reply_customer")).await;
    let (info, events) = approvals
        .decide(
            &reply,
            ApprovalDecision::AlwaysAllow,
            "",
            false,
            client("cli", 1),
        )
        .await
        .unwrap();
    assert!(info.decision.unwrap().remembered);
    assert_eq!(events.len(), 2, "the decision and the rule");
    assert!(approvals.remembered("s1", "reply_customer").unwrap());
    assert!(
        !approvals.remembered("s2", "reply_customer").unwrap(),
        "per session"
    );

    let edit = id_of(&approvals, asking("s1", 2, "propose_knowledge_edit")).await;
    let (info, events) = approvals
        .decide(
            &edit,
            ApprovalDecision::AlwaysAllow,
            "",
            true,
            client("cli", 1),
        )
        .await
        .unwrap();
    assert_eq!(info.state, ApprovalState::Allowed as i32, "allowed once");
    assert!(!info.decision.unwrap().remembered, "never remembered");
    assert_eq!(events.len(), 1);
    assert!(
        !approvals
            .remembered("s1", "propose_knowledge_edit")
            .unwrap()
    );

    let wide = id_of(&approvals, asking("s3", 1, "escalate_ticket")).await;
    approvals
        .decide(
            &wide,
            ApprovalDecision::AlwaysAllow,
            "",
            true,
            client("cli", 1),
        )
        .await
        .unwrap();
    assert!(
        approvals
            .remembered("any-session", "escalate_ticket")
            .unwrap()
    );
    assert_eq!(approvals.rules("").unwrap().len(), 2);

    // A restart folds the same rules and approvals from the log.
    drop(approvals);
    let reopened = Approvals::open(store.clone()).await.unwrap();
    assert!(reopened.remembered("s1", "reply_customer").unwrap());
    assert!(reopened.remembered("s9", "escalate_ticket").unwrap());
    assert_eq!(reopened.list(true, "").unwrap().len(), 3);
    let rule = reopened
        .rules("s1")
        .unwrap()
        .into_iter()
        .find(|r| r.tool == "reply_customer")
        .unwrap();
    reopened
        .revoke(&rule.rule_id, client("cli", 1))
        .await
        .unwrap();
    assert!(!reopened.remembered("s1", "reply_customer").unwrap());
    assert!(matches!(
        reopened.revoke(&rule.rule_id, client("cli", 1)).await,
        Err(ApprovalError::RuleNotFound(_))
    ));
    drop(reopened);
    let again = Approvals::open(store).await.unwrap();
    assert!(
        !again.remembered("s1", "reply_customer").unwrap(),
        "revocation survives"
    );
    // Numbering continues after a restart.
    assert_eq!(
        id_of(&again, asking("s1", 5, "reply_customer")).await,
        "A-4"
    );
    // The model equals a rebuild from the log.
    let before = crate::projection::rows(again.projector().tree());
    assert!(
        before.len() > 8,
        "approvals, pending, calls, rules, numbers"
    );
    again.projector().rebuild().await.unwrap();
    assert_eq!(crate::projection::rows(again.projector().tree()), before);
}

#[tokio::test]
async fn cancelling_wakes_the_waiter_and_refuses_later_decisions() {
    let (_tmp, store) = store();
    let approvals = Approvals::open(store).await.unwrap();
    let id = id_of(&approvals, asking("s1", 1, "escalate_ticket")).await;
    let waiter = {
        let approvals = Arc::clone(&approvals);
        let id = id.clone();
        tokio::spawn(async move { approvals.wait(&id).await })
    };
    assert!(
        approvals
            .cancel(&id, "the turn was cancelled")
            .await
            .unwrap()
            .is_some()
    );
    assert_eq!(
        waiter.await.unwrap().unwrap(),
        Verdict::Cancelled("the turn was cancelled".into())
    );
    assert!(approvals.cancel(&id, "again").await.unwrap().is_none());
    let err = approvals
        .decide(
            &id,
            ApprovalDecision::AllowOnce,
            "",
            false,
            client("cli", 1),
        )
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("was cancelled: the turn was cancelled"),
        "{err}"
    );
    assert!(matches!(
        approvals.get("A-99"),
        Err(ApprovalError::NotFound(_))
    ));
    assert!(matches!(
        approvals
            .decide(
                &id,
                ApprovalDecision::Unspecified,
                "",
                false,
                client("cli", 1)
            )
            .await,
        Err(ApprovalError::NoDecision)
    ));
}
