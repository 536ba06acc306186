//! A helpdesk standing in for Chatwoot, Zendesk or a generic receiver in
//! the connector tests and benchmarks: a local HTTP server that records
//! each request and answers as told (an error status, or holding the
//! request unanswered), and a plain HTTP client for posting webhooks.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

/// One request the helpdesk received.
#[derive(Debug, Clone)]
pub struct Received {
    /// `POST /api/v1/…`: the request line's method and path.
    pub request: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// When it arrived.
    pub at: Instant,
}

impl Received {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap()
    }
}

/// The helpdesk: records each request and answers with the next status of
/// `answers` (200 when they run out); `0` holds the request unanswered,
/// `1` closes the connection without an answer.
pub struct Helpdesk {
    pub url: String,
    got: Arc<Mutex<Vec<Received>>>,
    answers: Arc<Mutex<Vec<u16>>>,
}

impl Helpdesk {
    pub fn start() -> Self {
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

    pub fn answer(&self, statuses: &[u16]) {
        *self.answers.lock().unwrap() = statuses.to_vec();
    }

    pub fn got(&self) -> Vec<Received> {
        self.got.lock().unwrap().clone()
    }
}

fn serve(stream: TcpStream, got: &Mutex<Vec<Received>>, answers: &Mutex<Vec<u16>>) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut headers = Vec::new();
    let mut line = String::new();
    reader.read_line(&mut line).unwrap();
    let request = line
        .rsplit_once(' ')
        .map_or(line.trim(), |(r, _)| r)
        .to_string();
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
    got.lock().unwrap().push(Received {
        request,
        headers,
        body,
        at: Instant::now(),
    });
    let status = {
        let mut a = answers.lock().unwrap();
        if a.is_empty() { 200 } else { a.remove(0) }
    };
    if status == 0 {
        std::thread::sleep(Duration::from_secs(120));
        return;
    }
    if status == 1 {
        // Close the connection without an answer.
        let _ = stream.shutdown(std::net::Shutdown::Both);
        return;
    }
    let mut stream = stream;
    let _ = write!(
        stream,
        "HTTP/1.1 {status} X\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok"
    );
}

/// POST `body` to `url` with `headers`; the status and the body.
pub fn post(url: &str, headers: &[(&str, String)], body: &[u8]) -> (u16, Value) {
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
