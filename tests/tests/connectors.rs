//! Connectors end to end: the real daemon and the real `tinycode web`,
//! signed webhooks posted over loopback, and a local HTTP server standing in
//! for the helpdesk that receives the replies (failing when told to).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};
use tinycode_tests::helpdesk::{Helpdesk, post};
use tinycode_tests::{Desk, LineReader, kill, wait_until};

const SECRET: &str = "acme-s3cret";

fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// Signed as a generic source signs.
fn signed(body: &[u8], secret: &str, at: i64) -> Vec<(&'static str, String)> {
    vec![
        ("x-tinycode-timestamp", at.to_string()),
        (
            "x-tinycode-signature",
            tinycoded::connectors::sign(secret.as_bytes(), at, body),
        ),
    ]
}

fn delivery(event: &str, conversation: &str, text: &str) -> Vec<u8> {
    json!({
        "event_id": event, "conversation_id": conversation, "subject": "Parcel lost",
        "body": text, "customer": "ana@example.com", "channel": "email",
    })
    .to_string()
    .into_bytes()
}

fn start_web(desk: &Desk) -> (LineReader, String) {
    let (web, link) = tinycode_tests::start_web(desk);
    let base = link.split("/?").next().unwrap().to_string();
    (web, base)
}

fn desk_with_helpdesk(helpdesk: &Helpdesk) -> Desk {
    let desk = Desk::new().with_env("ACME_SECRET", SECRET);
    desk.write(".tinycode/config.json", "{}");
    desk.edit_config(|c| {
        c["connectors"] = json!({"acme": {
            "secretEnv": "ACME_SECRET", "deliverUrl": helpdesk.url,
            "maxAttempts": 2, "retrySeconds": 1
        }});
        c["autoTriage"] = json!({"enabled": false});
    });
    desk
}

fn outbox(desk: &Desk) -> Vec<Value> {
    let out = desk.ok(&["--json", "outbox", "list"]);
    out.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn webhooks_come_in_once_and_replies_go_out_signed_with_retries() {
    let helpdesk = Helpdesk::start();
    let desk = desk_with_helpdesk(&helpdesk);
    desk.ok(&["daemon", "start"]);
    let (_web, base) = start_web(&desk);
    let hook = format!("{base}/hooks/acme");

    // A new conversation: a ticket, once however often it is delivered.
    let first = delivery("evt-1", "conv-9", "My parcel <b>never</b> came");
    let (status, r) = post(&hook, &signed(&first, SECRET, now()), &first);
    assert_eq!(status, 201, "{r}");
    let ticket = r["ticket_id"].as_str().unwrap().to_string();
    let (status, r) = post(&hook, &signed(&first, SECRET, now()), &first);
    assert_eq!((status, &r["duplicate"]), (200, &json!(true)), "{r}");
    // The next message of that conversation joins its ticket.
    let second = delivery("evt-2", "conv-9", "Any news?");
    let (status, r) = post(&hook, &signed(&second, SECRET, now()), &second);
    assert_eq!(
        (status, r["ticket_id"].as_str()),
        (200, Some(ticket.as_str())),
        "{r}"
    );

    // Refused, each with a reason, and nothing stored.
    let third = delivery("evt-3", "conv-10", "hello");
    for (headers, body, want) in [
        (signed(&third, "wrong", now()), third.clone(), 401),
        (signed(&third, SECRET, now() - 3600), third.clone(), 401),
        (vec![], third.clone(), 401),
        (
            signed(b"not json", SECRET, now()),
            b"not json".to_vec(),
            400,
        ),
    ] {
        let (status, r) = post(&hook, &headers, &body);
        assert_eq!(status, want, "{r}");
        assert!(r["error"].as_str().is_some_and(|e| !e.is_empty()), "{r}");
    }
    let (status, _) = post(
        &format!("{base}/hooks/nobody"),
        &signed(&third, SECRET, now()),
        &third,
    );
    assert_eq!(status, 404);
    let big = vec![b'x'; 2 * 1024 * 1024];
    let (status, _) = post(&hook, &signed(&big, SECRET, now()), &big);
    assert_eq!(status, 413);
    let tickets = desk.json(&["ticket", "list"]);
    assert_eq!(tickets["total"], 1, "{tickets}");
    let text = desk.ok(&["ticket", "show", &ticket]);
    assert!(
        text.contains("source     acme · conversation conv-9"),
        "{text}"
    );
    let shown = desk.json(&["ticket", "show", &ticket]);
    let messages = shown["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 2, "{shown}");
    assert_eq!(messages[0]["text"], "My parcel <b>never</b> came");

    // A person's reply goes out signed; the first attempt is redirected (not
    // followed: a failed attempt), the second (same idempotency key) is
    // delivered.
    helpdesk.answer(&[302]);
    desk.ok(&["ticket", "reply", &ticket, "It is on its way."]);
    let sent = wait_until(Duration::from_secs(20), || {
        outbox(&desk).iter().any(|i| i["state"] == "sent")
    });
    assert!(sent, "{:?}", outbox(&desk));
    let got = helpdesk.got();
    assert_eq!(got.len(), 2, "{got:?}");
    let key = got[0].header("idempotency-key").unwrap().to_string();
    assert_eq!(got[1].header("idempotency-key"), Some(key.as_str()));
    for r in &got {
        let at: i64 = r.header("x-tinycode-timestamp").unwrap().parse().unwrap();
        assert_eq!(
            r.header("x-tinycode-signature").unwrap(),
            tinycoded::connectors::sign(SECRET.as_bytes(), at, &r.body)
        );
        assert_eq!(r.json()["conversation_id"], "conv-9");
        assert_eq!(r.json()["text"], "It is on its way.");
        assert_eq!(r.json()["kind"], "reply");
    }
    let item = &outbox(&desk)[0];
    assert_eq!(item["attempts"], 2, "{item}");
    let redirected = desk.events(&["--stream", "outbox-"]).iter().any(|e| {
        e["deliveryFinished"]["error"]
            .as_str()
            .is_some_and(|m| m.contains("redirects are not followed"))
    });
    assert!(redirected, "the 302 was followed or not named");

    // Failing every attempt: parked as failed, visible, retried by a person.
    helpdesk.answer(&[500, 503]);
    desk.ok(&["ticket", "reply", &ticket, "Second reply."]);
    let parked = wait_until(Duration::from_secs(20), || {
        outbox(&desk).iter().any(|i| i["state"] == "failed")
    });
    assert!(parked, "{:?}", outbox(&desk));
    let failed = outbox(&desk)
        .into_iter()
        .find(|i| i["state"] == "failed")
        .unwrap();
    assert!(
        failed["lastError"].as_str().unwrap().contains("503"),
        "{failed}"
    );
    let sequence = failed["sequence"]
        .as_str()
        .map(str::to_string)
        .unwrap_or_else(|| failed["sequence"].to_string());
    let again = desk.run(&["outbox", "retry", &ticket]);
    assert_ne!(again.code, 0, "a ticket id is not a delivery number");
    desk.ok(&["outbox", "retry", &sequence]);
    let resent = wait_until(Duration::from_secs(20), || {
        outbox(&desk).iter().all(|i| i["state"] == "sent")
    });
    assert!(resent, "{:?}", outbox(&desk));
    assert_eq!(helpdesk.got().len(), 5);

    // The source's figures, from the log.
    let status: Vec<Value> = desk
        .ok(&["--json", "connectors", "status"])
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let acme = &status[0];
    assert_eq!(
        (
            &acme["name"],
            &acme["received"],
            &acme["sent"],
            &acme["secretSet"]
        ),
        (&json!("acme"), &json!(2), &json!(2), &json!(true)),
        "{acme}"
    );
    assert!(
        acme["lastError"].as_str().unwrap().contains("503"),
        "{acme}"
    );
    assert!(
        acme.get("failed").is_none() && acme.get("pending").is_none(),
        "{acme}"
    );

    // A reload moves the source to another helpdesk: the next reply goes there.
    let other = Helpdesk::start();
    desk.edit_config(|c| c["connectors"]["acme"]["deliverUrl"] = json!(other.url));
    let reloaded = desk.ok(&["daemon", "reload"]);
    assert!(reloaded.contains("connectors"), "{reloaded}");
    desk.ok(&["ticket", "reply", &ticket, "Third reply."]);
    assert!(wait_until(Duration::from_secs(20), || other.got().len() == 1));
    assert_eq!(other.got()[0].json()["text"], "Third reply.");
    assert_eq!(helpdesk.got().len(), 5);
    desk.stop();
}

#[test]
fn a_delivery_in_flight_when_the_daemon_is_killed_is_sent_again_with_its_key() {
    let helpdesk = Helpdesk::start();
    let desk = desk_with_helpdesk(&helpdesk);
    desk.ok(&["daemon", "start"]);
    let (web, base) = start_web(&desk);
    let body = delivery("evt-1", "conv-1", "Where is my refund?");
    let (status, r) = post(
        &format!("{base}/hooks/acme"),
        &signed(&body, SECRET, now()),
        &body,
    );
    assert_eq!(status, 201, "{r}");
    let ticket = r["ticket_id"].as_str().unwrap().to_string();
    // The helpdesk holds the first request: the daemon dies waiting.
    helpdesk.answer(&[0]);
    desk.ok(&["ticket", "reply", &ticket, "Refunded today."]);
    assert!(wait_until(Duration::from_secs(20), || helpdesk.got().len() == 1));
    kill(desk.daemon_pid().unwrap(), "KILL");
    drop(web);
    desk.ok(&["daemon", "start"]);
    let sent = wait_until(Duration::from_secs(20), || {
        outbox(&desk).iter().any(|i| i["state"] == "sent")
    });
    assert!(sent, "{:?}\n{}", outbox(&desk), desk.log());
    let got = helpdesk.got();
    assert_eq!(got.len(), 2, "{got:?}");
    assert_eq!(
        got[0].header("idempotency-key"),
        got[1].header("idempotency-key")
    );
    desk.stop();
}

#[test]
fn a_csv_file_imports_once_with_quoted_fields_and_its_replies_stay_in_the_desk() {
    let desk = Desk::new();
    let file = desk.root.join("export.csv");
    std::fs::write(
        &file,
        "\u{feff}Ref,Title,Description,Email\r\n\
         7,\"Refund, please\",\"She said \"\"now\"\"\nsecond line\",a@example.com\r\n\
         7,Refund,\"Still waiting\",a@example.com\r\n\
         8,Login,\"\nstarts with a line break\",b@example.com\r\n\
         9,Empty,,c@example.com\r\n",
    )
    .unwrap();
    let file = file.to_str().unwrap();
    let map = "id=Ref,subject=Title,body=Description,customer=Email";
    let first = desk.json(&["import", "csv", file, "--map", map]);
    assert_eq!(
        (
            &first["rowsRead"],
            &first["created"],
            &first["appended"],
            &first["skipped"]
        ),
        (&json!(4), &json!(2), &json!(1), &json!(1)),
        "{first}"
    );
    let again = desk.ok(&["import", "csv", file, "--map", map]);
    assert!(
        again.contains("0 tickets created, 0 messages appended, 4 skipped"),
        "{again}"
    );
    assert!(again.contains("imported before"), "{again}");
    let list = desk.json(&["ticket", "list"]);
    assert_eq!(list["total"], 2, "{list}");
    let t = &list["tickets"][0];
    let id = t["id"].as_str().unwrap();
    let shown = desk.json(&["ticket", "show", id]);
    let texts: Vec<&str> = shown["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["text"].as_str().unwrap())
        .collect();
    assert!(
        texts.contains(&"She said \"now\"\nsecond line")
            || texts.contains(&"starts with a line break"),
        "{shown}"
    );
    // An imported ticket has no way out: a reply stays in the desk.
    desk.ok(&["ticket", "reply", id, "Thanks."]);
    assert!(outbox(&desk).is_empty());
    let bad = desk.run(&["import", "csv", file, "--map", "body=Nope"]);
    assert_ne!(bad.code, 0);
    assert!(bad.stderr.contains("no column \"Nope\""), "{}", bad.stderr);
    desk.stop();
}

#[test]
fn a_thousand_deliveries_from_32_senders_with_repeats_store_a_thousand_tickets() {
    let helpdesk = Helpdesk::start();
    let desk = desk_with_helpdesk(&helpdesk);
    desk.ok(&["daemon", "start"]);
    let (_web, base) = start_web(&desk);
    let hook = Arc::new(format!("{base}/hooks/acme"));
    // 1,000 deliveries, every tenth sent twice: 1,100 requests.
    let work: Vec<usize> = (0..1000).chain((0..1000).step_by(10)).collect();
    let work = Arc::new(Mutex::new(work));
    let acked = Arc::new(Mutex::new(Vec::new()));
    let senders: Vec<_> = (0..32)
        .map(|_| {
            let (hook, work, acked) = (Arc::clone(&hook), Arc::clone(&work), Arc::clone(&acked));
            std::thread::spawn(move || {
                loop {
                    let Some(n) = work.lock().unwrap().pop() else {
                        return;
                    };
                    let body = delivery(
                        &format!("evt-{n}"),
                        &format!("conv-{n}"),
                        &format!("message {n}"),
                    );
                    let (status, r) = post(&hook, &signed(&body, SECRET, now()), &body);
                    assert!(status == 200 || status == 201, "{status} {r}");
                    acked
                        .lock()
                        .unwrap()
                        .push((n, r["ticket_id"].as_str().unwrap().to_string()));
                }
            })
        })
        .collect();
    for s in senders {
        s.join().unwrap();
    }
    let acked = acked.lock().unwrap().clone();
    assert_eq!(acked.len(), 1100);
    // A delivery sent twice was answered with one ticket both times.
    let mut by_delivery = std::collections::BTreeMap::new();
    for (n, ticket) in &acked {
        let first = by_delivery.entry(*n).or_insert_with(|| ticket.clone());
        assert_eq!(first, ticket, "delivery {n}");
    }
    let distinct: std::collections::BTreeSet<&String> = by_delivery.values().collect();
    assert_eq!(distinct.len(), 1000);
    let list = desk.json(&["ticket", "list", "--limit", "1"]);
    assert_eq!(list["total"], 1000, "{list}");
    let messages = desk
        .events(&["--stream", "ticket-"])
        .iter()
        .filter(|e| e.get("ticketCreated").is_some() || e.get("customerMessageAdded").is_some())
        .count();
    assert_eq!(messages, 1000);
    desk.stop();
}

/// Rounds of the kill -9 loop over the outbox.
const KILLS: usize = 20;

#[test]
fn a_kill_9_loop_while_replies_go_out_loses_none_and_repeats_only_with_their_key() {
    let helpdesk = Helpdesk::start();
    // One request in five fails.
    helpdesk.answer(
        &(0..400)
            .map(|i| if i % 5 == 4 { 500 } else { 200 })
            .collect::<Vec<_>>(),
    );
    let desk = desk_with_helpdesk(&helpdesk);
    desk.edit_config(|c| c["connectors"]["acme"]["maxAttempts"] = json!(100));
    desk.ok(&["daemon", "start"]);
    let tickets: Vec<String> = {
        let (_web, base) = start_web(&desk);
        (0..4)
            .map(|n| {
                let body = delivery(&format!("evt-{n}"), &format!("conv-{n}"), "Where is it?");
                let (status, r) = post(
                    &format!("{base}/hooks/acme"),
                    &signed(&body, SECRET, now()),
                    &body,
                );
                assert_eq!(status, 201, "{r}");
                r["ticket_id"].as_str().unwrap().to_string()
            })
            .collect()
    };
    let mut replies = Vec::new();
    for round in 0..KILLS {
        let out = desk.run(&["daemon", "start"]);
        assert_eq!(out.code, 0, "round {round}: {out:?}\n{}", desk.log());
        for k in 0..2 {
            let text = format!("round {round} reply {k}");
            desk.ok(&[
                "ticket",
                "reply",
                &tickets[(round + k) % tickets.len()],
                &text,
            ]);
            replies.push(text);
        }
        std::thread::sleep(Duration::from_millis(30 + (round as u64 * 37) % 200));
        let pid = desk.daemon_pid().unwrap();
        kill(pid, "KILL");
        assert!(wait_until(Duration::from_secs(10), || {
            !tinycode_tests::alive(pid)
        }));
    }
    desk.ok(&["daemon", "start"]);
    let all_sent = wait_until(Duration::from_secs(120), || {
        let items = outbox(&desk);
        items.len() == replies.len() && items.iter().all(|i| i["state"] == "sent")
    });
    assert!(all_sent, "{:?}\n{}", outbox(&desk), desk.log());
    // Every reply arrived; a reply seen twice carried one key each time.
    let mut keys: std::collections::BTreeMap<String, std::collections::BTreeSet<String>> =
        Default::default();
    for r in helpdesk.got() {
        let text = r.json()["text"].as_str().unwrap().to_string();
        keys.entry(text)
            .or_default()
            .insert(r.header("idempotency-key").unwrap().to_string());
    }
    for text in &replies {
        let seen = keys
            .get(text)
            .unwrap_or_else(|| panic!("{text} never arrived"));
        assert_eq!(seen.len(), 1, "{text} arrived under several keys: {seen:?}");
    }
    assert_eq!(keys.len(), replies.len());
    desk.stop();
}

/// Chatwoot's webhook signature (as tinycode's generic one, with its own
/// header names).
fn chatwoot_signed(body: &[u8]) -> Vec<(&'static str, String)> {
    let at = now();
    let sig = tinycoded::connectors::sign(SECRET.as_bytes(), at, body);
    use tinycoded::connectors::signing::{CHATWOOT_SIGNATURE, CHATWOOT_TIMESTAMP};
    vec![
        (CHATWOOT_TIMESTAMP, at.to_string()),
        (CHATWOOT_SIGNATURE, sig),
    ]
}

#[test]
fn helpdesks_speak_their_own_webhooks_and_apis() {
    let chatwoot = Helpdesk::start();
    let zammad = Helpdesk::start();
    let base = |h: &Helpdesk| h.url.trim_end_matches("/tinycode").to_string();
    let desk = Desk::new()
        .with_env("CW_SECRET", SECRET)
        .with_env("CW_TOKEN", "cw-token")
        .with_env("ZM_SECRET", SECRET)
        .with_env("ZM_TOKEN", "zm-token");
    desk.write(".tinycode/config.json", "{}");
    desk.edit_config(|c| {
        c["connectors"] = json!({
            "cw": {"type": "chatwoot", "secretEnv": "CW_SECRET", "deliverUrl": base(&chatwoot),
                   "apiTokenEnv": "CW_TOKEN", "accountId": 3},
            "zm": {"type": "zammad", "secretEnv": "ZM_SECRET", "deliverUrl": base(&zammad),
                   "apiTokenEnv": "ZM_TOKEN"}
        });
        c["autoTriage"] = json!({"enabled": false});
    });
    desk.ok(&["daemon", "start"]);
    let (_web, web) = start_web(&desk);

    // Chatwoot announces a new conversation and its first message: one
    // ticket, one message; the agent's own message comes back and is ignored.
    let created = json!({"event": "conversation_created", "id": 7,
        "messages": [{"id": 901, "content": "Where is my order?", "message_type": 0}],
        "meta": {"sender": {"name": "Ana", "email": "ana@example.com"}}})
    .to_string();
    let (status, r) = post(
        &format!("{web}/hooks/cw"),
        &chatwoot_signed(created.as_bytes()),
        created.as_bytes(),
    );
    assert_eq!(status, 201, "{r}");
    let ticket = r["ticket_id"].as_str().unwrap().to_string();
    let message = json!({"event": "message_created", "id": 901, "content": "Where is my order?",
        "message_type": "incoming", "conversation": {"id": 7}, "sender": {"email": "ana@example.com"}})
    .to_string();
    let (status, r) = post(
        &format!("{web}/hooks/cw"),
        &chatwoot_signed(message.as_bytes()),
        message.as_bytes(),
    );
    assert_eq!((status, &r["duplicate"]), (200, &json!(true)), "{r}");
    let agents = json!({"event": "message_created", "id": 902, "content": "On it",
        "message_type": "outgoing", "conversation": {"id": 7}})
    .to_string();
    let (status, r) = post(
        &format!("{web}/hooks/cw"),
        &chatwoot_signed(agents.as_bytes()),
        agents.as_bytes(),
    );
    assert_eq!(status, 200, "{r}");
    assert!(r["ignored"].as_str().unwrap().contains("agent"), "{r}");
    let (status, _) = post(
        &format!("{web}/hooks/cw"),
        &signed(message.as_bytes(), SECRET, now()),
        message.as_bytes(),
    );
    assert_eq!(status, 401, "tinycode's headers are not Chatwoot's");

    // The reply and the resolution go to Chatwoot's API.
    desk.ok(&["ticket", "reply", &ticket, "It ships today."]);
    desk.ok(&["ticket", "close", &ticket]);
    assert!(
        wait_until(Duration::from_secs(20), || chatwoot.got().len() == 2),
        "{:?}",
        outbox(&desk)
    );
    let got = chatwoot.got();
    assert_eq!(
        got[0].request,
        "POST /api/v1/accounts/3/conversations/7/messages"
    );
    assert_eq!(got[0].header("api_access_token"), Some("cw-token"));
    assert_eq!(got[0].json()["content"], "It ships today.");
    assert_eq!(
        got[1].request,
        "POST /api/v1/accounts/3/conversations/7/toggle_status"
    );
    assert_eq!(got[1].json()["status"], "resolved");

    // Zammad: an HTML article in, signed with HMAC-SHA1; a reply out as an article.
    let article = json!({"ticket": {"id": 12, "title": "Login broken", "customer": {"email": "li@example.com"}},
        "article": {"id": 55, "sender": "Customer", "internal": false, "content_type": "text/html",
                    "body": "<p>I cannot log in</p><script>x()</script>"}})
    .to_string();
    let sig = tinycoded::connectors::signing::zammad(SECRET.as_bytes(), article.as_bytes());
    let (status, r) = post(
        &format!("{web}/hooks/zm"),
        &[(tinycoded::connectors::signing::ZAMMAD_SIGNATURE, sig)],
        article.as_bytes(),
    );
    assert_eq!(status, 201, "{r}");
    let zm_ticket = r["ticket_id"].as_str().unwrap().to_string();
    let shown = desk.json(&["ticket", "show", &zm_ticket]);
    assert_eq!(shown["messages"][0]["text"], "I cannot log in");
    desk.ok(&["ticket", "reply", &zm_ticket, "Password reset sent."]);
    assert!(wait_until(Duration::from_secs(20), || zammad.got().len() == 1));
    let got = &zammad.got()[0];
    assert_eq!(got.request, "POST /api/v1/ticket_articles");
    assert_eq!(got.header("authorization"), Some("Token token=zm-token"));
    assert_eq!(got.json()["ticket_id"], 12);
    desk.stop();
}

/// The first mail of the mbox threads (the customer's).
const FIRST_MAIL: &str = "From ana@example.com Mon Dec  1 10:00:00 2026\n\
    From: Ana <ana@example.com>\nSubject: Refund\nMessage-ID: <a1@example.com>\n\n\
    Where is my refund?\n\n";

#[test]
fn an_mbox_thread_and_a_zendesk_export_import_once() {
    let desk = Desk::new();
    let mbox = desk.root.join("support.mbox");
    std::fs::write(
        &mbox,
        FIRST_MAIL.to_string()
            + "From desk@example.com Mon Dec  1 11:00:00 2026\n\
         From: Desk <desk@example.com>\nSubject: Re: Refund\nMessage-ID: <b2@example.com>\n\
         In-Reply-To: <a1@example.com>\n\nWe are on it.\n\n\
         From ana@example.com Mon Dec  1 12:00:00 2026\n\
         From: Ana <ana@example.com>\nSubject: Re: Refund\nMessage-ID: <c3@example.com>\n\
         References: <a1@example.com> <b2@example.com>\nContent-Type: text/html\n\n\
         <p>Still <b>waiting</b></p>\n",
    )
    .unwrap();
    let export = desk.root.join("zendesk.json");
    std::fs::write(
        &export,
        json!({"tickets": [{"id": 77, "subject": "Locked out", "description": "I cannot log in",
            "requester_id": 5, "comments": [{"id": 700, "body": "Still locked", "author_id": 5, "public": true}]}]})
        .to_string(),
    )
    .unwrap();
    let first = desk.json(&["import", "mbox", mbox.to_str().unwrap()]);
    assert_eq!(
        (&first["created"], &first["appended"], &first["skipped"]),
        (&json!(1), &json!(1), &json!(1)),
        "{first}"
    );
    assert!(
        first["skipReasons"][0]
            .as_str()
            .unwrap()
            .contains("desk@example.com"),
        "{first}"
    );
    let first = desk.json(&["import", "zendesk", export.to_str().unwrap()]);
    assert_eq!(
        (&first["created"], &first["appended"]),
        (&json!(1), &json!(1)),
        "{first}"
    );
    for (kind, file) in [("mbox", &mbox), ("zendesk", &export)] {
        let again = desk.json(&["import", kind, file.to_str().unwrap()]);
        assert_eq!(again.get("created"), None, "{kind}: {again}");
        assert_eq!(again.get("appended"), None, "{kind}: {again}");
    }
    let list = desk.json(&["ticket", "list"]);
    assert_eq!(list["total"], 2, "{list}");
    let thread = list["tickets"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["subject"] == "Refund")
        .unwrap();
    let shown = desk.json(&["ticket", "show", thread["id"].as_str().unwrap()]);
    let texts: Vec<&str> = shown["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["text"].as_str().unwrap())
        .collect();
    assert_eq!(texts, ["Where is my refund?", "Still waiting"]);
    desk.stop();
}

#[test]
fn a_helpdesk_that_hangs_or_hangs_up_never_holds_up_another() {
    let (stuck, fine) = (Helpdesk::start(), Helpdesk::start());
    // The stuck one holds its first request, then hangs up on the next.
    stuck.answer(&[0, 1]);
    let desk = Desk::new().with_env("ACME_SECRET", SECRET);
    desk.write(".tinycode/config.json", "{}");
    desk.edit_config(|c| {
        c["connectors"] = json!({
            "stuck": {"secretEnv": "ACME_SECRET", "deliverUrl": stuck.url, "retrySeconds": 1},
            "fine": {"secretEnv": "ACME_SECRET", "deliverUrl": fine.url}
        });
        c["autoTriage"] = json!({"enabled": false});
    });
    desk.ok(&["daemon", "start"]);
    let (_web, base) = start_web(&desk);
    let mut tickets = Vec::new();
    for source in ["stuck", "fine"] {
        let body = delivery(&format!("{source}-1"), "c-1", "hello");
        let (status, r) = post(
            &format!("{base}/hooks/{source}"),
            &signed(&body, SECRET, now()),
            &body,
        );
        assert_eq!(status, 201, "{r}");
        tickets.push(r["ticket_id"].as_str().unwrap().to_string());
    }
    desk.ok(&["ticket", "reply", &tickets[0], "to the stuck one"]);
    assert!(wait_until(Duration::from_secs(10), || stuck.got().len() == 1));
    desk.ok(&["ticket", "reply", &tickets[1], "to the fine one"]);
    assert!(
        wait_until(Duration::from_secs(5), || fine.got().len() == 1),
        "the fine helpdesk waited for the stuck one"
    );
    assert_eq!(stuck.got().len(), 1, "the stuck request is still held");
    // After the 15 s limit the held request fails, the retry is hung up on,
    // the next one is delivered — all with one key.
    let sent = wait_until(Duration::from_secs(60), || {
        outbox(&desk).iter().all(|i| i["state"] == "sent")
    });
    assert!(sent, "{:?}", outbox(&desk));
    let got = stuck.got();
    assert_eq!(got.len(), 3, "{got:?}");
    assert!(
        got.iter()
            .all(|r| r.header("idempotency-key") == got[0].header("idempotency-key"))
    );
    let item = outbox(&desk)
        .into_iter()
        .find(|i| i["ticketId"] == tickets[0].as_str())
        .unwrap();
    assert_eq!(item["attempts"], 3, "{item}");
    desk.stop();
}

#[test]
fn two_daemons_on_one_postgresql_log_deliver_each_reply_once() {
    if !tinycode_tests::tool_available(
        &["pg_isready", "-h", "127.0.0.1"],
        "PostgreSQL on 127.0.0.1:5432",
    ) {
        return;
    }
    let schema = tinycode_tests::pg::Schema::new("outbox");
    let helpdesk = Helpdesk::start();
    let members: Vec<Desk> = (0..2)
        .map(|_| {
            let desk = desk_with_helpdesk(&helpdesk).with_env("TINYCODE_STORE_URL", &schema.url());
            desk.ok(&["daemon", "start"]);
            desk
        })
        .collect();
    let (_web, base) = start_web(&members[0]);
    let tickets: Vec<String> = (0..20)
        .map(|n| {
            let body = delivery(&format!("evt-{n}"), &format!("conv-{n}"), "Hello?");
            let (status, r) = post(
                &format!("{base}/hooks/acme"),
                &signed(&body, SECRET, now()),
                &body,
            );
            assert_eq!(status, 201, "{r}");
            r["ticket_id"].as_str().unwrap().to_string()
        })
        .collect();
    for (n, ticket) in tickets.iter().enumerate() {
        members[n % 2].ok(&["ticket", "reply", ticket, &format!("reply {n}")]);
    }
    let sent = wait_until(Duration::from_secs(60), || {
        let items = outbox(&members[1]);
        items.len() == 20 && items.iter().all(|i| i["state"] == "sent")
    });
    assert!(sent, "{:?}", outbox(&members[1]));
    let got = helpdesk.got();
    let keys: std::collections::BTreeSet<&str> = got
        .iter()
        .map(|r| r.header("idempotency-key").unwrap())
        .collect();
    assert_eq!(
        (got.len(), keys.len()),
        (20, 20),
        "each reply once: {got:?}"
    );
    for desk in &members {
        desk.stop();
    }
}

/// A real SMTP server (aiosmtpd) writing what it receives into a maildir;
/// stopped when dropped.
struct SmtpSink {
    child: std::process::Child,
    port: u16,
    maildir: tempfile::TempDir,
}

impl SmtpSink {
    fn start() -> Option<Self> {
        if !tinycode_tests::tool_available(
            &["python3", "-c", "import aiosmtpd"],
            "pip install aiosmtpd",
        ) {
            return None;
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let maildir = tempfile::tempdir().unwrap();
        let child = std::process::Command::new("python3")
            .args(["-m", "aiosmtpd", "-n", "-l", &format!("127.0.0.1:{port}")])
            .args([
                "-c",
                "aiosmtpd.handlers.Mailbox",
                maildir.path().join("box").to_str().unwrap(),
            ])
            .spawn()
            .unwrap();
        let up = wait_until(Duration::from_secs(20), || {
            std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
        });
        assert!(up, "aiosmtpd did not listen");
        Some(Self {
            child,
            port,
            maildir,
        })
    }

    /// The mails received, oldest first.
    fn mails(&self) -> Vec<String> {
        let dir = self.maildir.path().join("box/new");
        let mut files: Vec<_> = std::fs::read_dir(dir)
            .map(|d| d.filter_map(|e| e.ok()).map(|e| e.path()).collect())
            .unwrap_or_default();
        files.sort_by_key(|f| std::fs::metadata(f).and_then(|m| m.modified()).unwrap());
        files
            .iter()
            .map(|f| std::fs::read_to_string(f).unwrap())
            .collect()
    }
}

impl Drop for SmtpSink {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn mail_imported_into_a_mail_source_is_answered_by_smtp_in_its_thread() {
    let Some(smtp) = SmtpSink::start() else {
        return;
    };
    let desk = Desk::new();
    desk.write(".tinycode/config.json", "{}");
    desk.edit_config(|c| {
        c["connectors"] = json!({"support": {"type": "mail", "from": "Support <support@acme.test>",
            "deliverUrl": format!("smtp://127.0.0.1:{}", smtp.port)}});
        c["autoTriage"] = json!({"enabled": false});
    });
    let mbox = desk.root.join("support.mbox");
    std::fs::write(
        &mbox,
        FIRST_MAIL.to_string()
            + "From ana@example.com Mon Dec  1 12:00:00 2026\n\
         From: Ana <ana@example.com>\nSubject: Re: Refund\nMessage-ID: <c3@example.com>\n\
         In-Reply-To: <a1@example.com>\nReferences: <a1@example.com>\n\nStill waiting.\n",
    )
    .unwrap();
    let mbox = mbox.to_str().unwrap();
    let bad = desk.run(&["import", "csv", mbox, "--source", "support"]);
    assert!(
        bad.code != 0 && bad.stderr.contains("type \"mail\""),
        "{bad:?}"
    );
    let imported = desk.json(&["import", "mbox", mbox, "--source", "support"]);
    assert_eq!(
        (&imported["created"], &imported["appended"]),
        (&json!(1), &json!(1)),
        "{imported}"
    );
    let ticket = desk.json(&["ticket", "list"])["tickets"][0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    desk.ok(&["ticket", "reply", &ticket, "Your refund left today."]);
    desk.ok(&["ticket", "close", &ticket]);
    assert!(
        wait_until(Duration::from_secs(20), || smtp.mails().len() == 2),
        "{:?}\n{}",
        outbox(&desk),
        desk.log()
    );
    let mails = smtp.mails();
    let reply = &mails[0];
    for line in [
        "From: Support <support@acme.test>",
        "To: ana@example.com",
        "Subject: Re: Refund",
        "In-Reply-To: <c3@example.com>",
        "References: <a1@example.com> <c3@example.com>",
    ] {
        assert!(reply.contains(line), "{line} not in\n{reply}");
    }
    assert!(reply.contains("Your refund left today."), "{reply}");
    assert!(
        mails[1].contains(&format!("Your request {ticket} is resolved.")),
        "{}",
        mails[1]
    );
    // The server has both mails; the outbox records each send once the
    // SMTP exchange has ended, a moment later.
    let sent = wait_until(Duration::from_secs(20), || {
        outbox(&desk).iter().all(|i| i["state"] == "sent")
    });
    assert!(sent, "{:?}", outbox(&desk));
    let hook = desk.run(&["connectors", "status"]);
    assert!(hook.stdout.contains("support"), "{hook:?}");
    desk.stop();
}

/// The agent's model: `reply_customer` on the ticket its prompt names, then
/// a final text.
fn replying_model(request: &Value) -> tinycode_tests::mock_llm::Reply {
    use tinycode_tests::mock_llm::{text, tool};
    let messages = request["messages"].as_array().cloned().unwrap_or_default();
    if messages.last().is_some_and(|m| m["role"] == "tool") {
        return text("Replied.");
    }
    let prompt = messages
        .last()
        .map(|m| m["content"].to_string())
        .unwrap_or_default();
    let ticket = prompt
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
        .find(|w| w.starts_with("T-"))
        .unwrap_or("T-0")
        .to_string();
    tool(
        "reply_customer",
        json!({"ticket_id": ticket, "message": "Your parcel is on its way."}),
    )
}

#[test]
fn an_approved_agent_reply_goes_out_once_and_a_denied_one_never() {
    let helpdesk = Helpdesk::start();
    let mock = tinycode_tests::mock_llm::MockLlm::respond(replying_model);
    let desk = desk_with_helpdesk(&helpdesk)
        .with_env("OPENAI_BASE_URL", &mock.base_url)
        .with_env("OPENAI_API_KEY", "sk-test");
    desk.ok(&["daemon", "start"]);
    let (_web, base) = start_web(&desk);
    let mut tickets = Vec::new();
    for n in 0..2 {
        let body = delivery(
            &format!("evt-{n}"),
            &format!("conv-{n}"),
            "Where is my parcel?",
        );
        let (status, r) = post(
            &format!("{base}/hooks/acme"),
            &signed(&body, SECRET, now()),
            &body,
        );
        assert_eq!(status, 201, "{r}");
        tickets.push(r["ticket_id"].as_str().unwrap().to_string());
    }
    for (ticket, decision) in tickets.iter().zip(["approve", "deny"]) {
        let session = desk.new_session(&["--model", "openai/gpt-test", "--approve", "ask"]);
        desk.ok(&["session", "send", &session, &format!("Answer {ticket}")]);
        let id = tinycode_tests::pending_approval(&desk, Duration::from_secs(20));
        desk.ok(&["approvals", decision, &id]);
    }
    let sent = wait_until(Duration::from_secs(20), || {
        outbox(&desk).iter().any(|i| i["state"] == "sent")
    });
    assert!(sent, "{:?}", outbox(&desk));
    std::thread::sleep(Duration::from_secs(2));
    let got = helpdesk.got();
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0].json()["ticket_id"], tickets[0].as_str());
    assert_eq!(got[0].json()["text"], "Your parcel is on its way.");
    assert_eq!(outbox(&desk).len(), 1, "a denied reply owes nothing");
    desk.stop();
}
