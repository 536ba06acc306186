//! Connectors end to end: the real daemon and the real `tinycode web`,
//! signed webhooks posted over loopback, and a local HTTP server standing in
//! for the helpdesk that receives the replies (failing when told to).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};
use tinycode_tests::{Desk, LineReader, kill, wait_until};

const SECRET: &str = "acme-s3cret";

/// One request the helpdesk received.
#[derive(Debug, Clone)]
struct Received {
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Received {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap()
    }
}

/// The helpdesk: records each request and answers with the next status of
/// `answers` (200 when they run out); `0` holds the request unanswered.
struct Helpdesk {
    url: String,
    got: Arc<Mutex<Vec<Received>>>,
    answers: Arc<Mutex<Vec<u16>>>,
}

impl Helpdesk {
    fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/tinycode", listener.local_addr().unwrap());
        let got = Arc::new(Mutex::new(Vec::new()));
        let answers = Arc::new(Mutex::new(Vec::new()));
        let (g, a) = (Arc::clone(&got), Arc::clone(&answers));
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let (g, a) = (Arc::clone(&g), Arc::clone(&a));
                std::thread::spawn(move || serve(stream, &g, &a));
            }
        });
        Self { url, got, answers }
    }

    fn answer(&self, statuses: &[u16]) {
        *self.answers.lock().unwrap() = statuses.to_vec();
    }

    fn got(&self) -> Vec<Received> {
        self.got.lock().unwrap().clone()
    }
}

fn serve(stream: TcpStream, got: &Mutex<Vec<Received>>, answers: &Mutex<Vec<u16>>) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut headers = Vec::new();
    let mut line = String::new();
    reader.read_line(&mut line).unwrap();
    loop {
        line.clear();
        if reader.read_line(&mut line).unwrap() == 0 || line == "\r\n" {
            break;
        }
        if let Some((k, v)) = line.trim_end().split_once(':') {
            headers.push((k.trim().to_string(), v.trim().to_string()));
        }
    }
    let length: usize = headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
        .map_or(0, |(_, v)| v.parse().unwrap());
    let mut body = vec![0; length];
    reader.read_exact(&mut body).unwrap();
    got.lock().unwrap().push(Received { headers, body });
    let status = {
        let mut a = answers.lock().unwrap();
        if a.is_empty() { 200 } else { a.remove(0) }
    };
    if status == 0 {
        std::thread::sleep(Duration::from_secs(120));
        return;
    }
    let mut stream = stream;
    let _ = write!(
        stream,
        "HTTP/1.1 {status} X\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok"
    );
}

/// POST `body` to `url` with `headers`; the status and the body.
fn post(url: &str, headers: &[(&str, String)], body: &[u8]) -> (u16, Value) {
    let rest = url.strip_prefix("http://").unwrap();
    let (host, path) = rest.split_at(rest.find('/').unwrap());
    let mut stream = TcpStream::connect(host).unwrap();
    let mut head = format!(
        "POST {path} HTTP/1.1\r\nhost: {host}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n",
        body.len()
    );
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).unwrap();
    let _ = stream.write_all(body);
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    let text = String::from_utf8_lossy(&answer);
    let status: u16 = text.split(' ').nth(1).unwrap_or("0").parse().unwrap_or(0);
    let body = text.split("\r\n\r\n").nth(1).unwrap_or("");
    (status, serde_json::from_str(body).unwrap_or(Value::Null))
}

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
    let shown = desk.json(&["ticket", "show", &ticket]);
    let messages = shown["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 2, "{shown}");
    assert_eq!(messages[0]["text"], "My parcel <b>never</b> came");

    // A person's reply goes out signed; the first attempt fails, the
    // second (same idempotency key) is delivered.
    helpdesk.answer(&[500]);
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
