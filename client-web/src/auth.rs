//! Who may use the page, checked on every request before any handler runs:
//!
//! - the `Host` header must name this server (a DNS-rebinding page cannot
//!   reach it under another name);
//! - a one-time link (`/?token=…`, printed at start or by
//!   `tinycode web --url`) is exchanged for a session cookie — HttpOnly,
//!   SameSite=Strict, Secure over TLS — and is then spent;
//! - every other request needs that cookie, or gets 401;
//! - a change (any method but GET/HEAD) must come from this origin
//!   (`Origin`) and carry the session's CSRF token (form field `csrf` or
//!   header `x-csrf-token`), or gets 403 and changes nothing;
//! - bodies are capped at 64 KiB and each session at a request rate;
//! - every response carries a Content-Security-Policy without inline
//!   script, `nosniff`, no referrer beyond this origin, no framing.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use axum::body::{Body, to_bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};

use crate::person::Person;

/// Largest request body accepted: the largest field (20,000 characters)
/// percent-encoded as 3-byte UTF-8 is 180 KB.
pub const MAX_BODY: usize = 256 * 1024;
/// A session unused this long is forgotten (its cookie then gets 401).
const SESSION_IDLE: Duration = Duration::from_secs(12 * 3600);
/// A session's requests: this many at once, refilled at `RATE` a second.
const BURST: f64 = 120.0;
const RATE: f64 = 30.0;
/// A one-time link is good for this long.
const LINK_LIFE: Duration = Duration::from_secs(15 * 60);
pub const COOKIE: &str = "tc_session";

struct Session {
    person: Person,
    tokens: f64,
    refilled: Instant,
}

pub struct Auth {
    /// Where links point: `http://127.0.0.1:8123`, or the public URL.
    pub origin: String,
    /// `Host` values that name this server; over TLS any name the
    /// certificate answers for will do (a rebinding name fails TLS).
    hosts: HashSet<String>,
    secure: bool,
    links: Mutex<HashMap<String, Instant>>,
    sessions: Mutex<HashMap<String, Session>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// `n` random bytes as hex, from the OS.
pub fn random_hex(n: usize) -> String {
    use std::io::Read;
    let mut bytes = vec![0u8; n];
    let read = std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut bytes));
    if read.is_err() {
        // No /dev/urandom: the time and the address space, hashed — never
        // reached on Linux, but never a fixed value either.
        let seed = format!("{:?}{:p}", Instant::now(), &bytes);
        for (i, b) in seed.bytes().enumerate() {
            bytes[i % n] ^= b;
        }
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Equal, in time that does not depend on where they differ.
fn same(a: &str, b: &str) -> bool {
    a.len() == b.len() && a.bytes().zip(b.bytes()).fold(0u8, |d, (x, y)| d | (x ^ y)) == 0
}

impl Auth {
    /// `public`: the URL people open (`--public-url`), when it is not the
    /// listening address itself.
    pub fn new(local: SocketAddr, secure: bool, public: Option<&str>) -> Self {
        let port = local.port();
        let host = match local.ip() {
            std::net::IpAddr::V6(ip) => format!("[{ip}]"),
            ip => ip.to_string(),
        };
        let mut hosts: HashSet<String> = [format!("{host}:{port}")].into();
        if local.ip().is_loopback() {
            hosts.insert(format!("localhost:{port}"));
        }
        let scheme = if secure { "https" } else { "http" };
        Self {
            origin: public
                .map(|p| p.trim_end_matches('/').to_string())
                .unwrap_or_else(|| format!("{scheme}://{host}:{port}")),
            hosts,
            secure,
            links: Mutex::default(),
            sessions: Mutex::default(),
        }
    }

    /// Whether `host` (a `Host` header) names this server.
    fn names_this_server(&self, host: &str) -> bool {
        self.secure || self.hosts.contains(host)
    }

    /// The origin a page served under `host` has.
    fn origin_of(&self, host: &str) -> String {
        let scheme = if self.secure { "https" } else { "http" };
        format!("{scheme}://{host}")
    }

    /// A fresh one-time link to the desk.
    pub fn link(&self) -> String {
        let token = random_hex(24);
        let now = Instant::now();
        let mut links = lock(&self.links);
        links.retain(|_, made| now.duration_since(*made) < LINK_LIFE);
        links.insert(token.clone(), now);
        format!("{}/?token={token}", self.origin)
    }

    /// Spend a link's token: a new session, or `None` (unknown, used,
    /// expired).
    fn spend(&self, token: &str) -> Option<Person> {
        let made = {
            let mut links = lock(&self.links);
            let key = links.keys().find(|k| same(k, token)).cloned()?;
            links.remove(&key)?
        };
        if made.elapsed() >= LINK_LIFE {
            return None;
        }
        let person = Person {
            id: random_hex(24),
            name: String::new(),
            csrf: random_hex(24),
        };
        let mut sessions = lock(&self.sessions);
        sessions.retain(|_, s| s.refilled.elapsed() < SESSION_IDLE);
        sessions.insert(
            person.id.clone(),
            Session {
                person: person.clone(),
                tokens: BURST,
                refilled: Instant::now(),
            },
        );
        Some(person)
    }

    /// The session a cookie names, charged one request; `Err(true)` when
    /// it is over its rate.
    fn session(&self, id: &str) -> Result<Person, bool> {
        let mut sessions = lock(&self.sessions);
        let session = sessions.get_mut(id).ok_or(false)?;
        if session.refilled.elapsed() >= SESSION_IDLE {
            sessions.remove(id);
            return Err(false);
        }
        let now = Instant::now();
        let refill = now.duration_since(session.refilled).as_secs_f64() * RATE;
        session.tokens = (session.tokens + refill).min(BURST);
        session.refilled = now;
        if session.tokens < 1.0 {
            return Err(true);
        }
        session.tokens -= 1.0;
        Ok(session.person.clone())
    }

    /// Remember the name a person gave.
    pub fn name(&self, id: &str, name: &str) {
        if let Some(s) = lock(&self.sessions).get_mut(id) {
            s.person.name = name.to_string();
        }
    }

    fn cookie(&self, person: &Person) -> String {
        let secure = if self.secure { "; Secure" } else { "" };
        format!(
            "{COOKIE}={}; HttpOnly; SameSite=Strict; Path=/{secure}",
            person.id
        )
    }
}

fn cookie_of(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .find_map(|kv| {
            let (k, v) = kv.trim().split_once('=')?;
            (k == COOKIE).then(|| v.to_string())
        })
}

fn query_value(query: &str, key: &str) -> Option<String> {
    query.split('&').find_map(|kv| {
        let (k, v) = kv.split_once('=')?;
        (k == key).then(|| v.to_string())
    })
}

/// Security headers every response carries.
fn harden(mut response: Response) -> Response {
    let h = response.headers_mut();
    let set = |h: &mut HeaderMap, k: header::HeaderName, v: &'static str| {
        h.insert(k, HeaderValue::from_static(v));
    };
    // A response with its own policy keeps it (a chart's: no script at
    // all); every other gets the page's.
    if !h.contains_key(header::CONTENT_SECURITY_POLICY) {
        set(
            h,
            header::CONTENT_SECURITY_POLICY,
            "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
        );
    }
    set(h, header::X_CONTENT_TYPE_OPTIONS, "nosniff");
    // `same-origin`, not `no-referrer`: under `no-referrer` a browser sends
    // `Origin: null` with a form post, and the origin check refuses it.
    set(h, header::REFERRER_POLICY, "same-origin");
    set(h, header::X_FRAME_OPTIONS, "DENY");
    set(h, header::CACHE_CONTROL, "no-store");
    response
}

fn refuse(status: StatusCode, why: &str) -> Response {
    harden((status, crate::pages::refused(status, why)).into_response())
}

/// The check every request passes before its handler.
pub async fn guard(State(auth): State<Arc<Auth>>, request: Request, next: Next) -> Response {
    let host = request
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or_default();
    if !auth.names_this_server(host) {
        return refuse(
            StatusCode::MISDIRECTED_REQUEST,
            "this server answers only under the address it printed",
        );
    }
    let host = host.to_string();
    let path = request.uri().path().to_string();
    // The page's own scripts and styles carry nothing private.
    if path.starts_with("/assets/") && request.method() == Method::GET {
        return harden(next.run(request).await);
    }
    if let Some(token) = request.uri().query().and_then(|q| query_value(q, "token")) {
        return match auth.spend(&token) {
            Some(person) => {
                let mut r = Redirect::to(local(&path)).into_response();
                if let Ok(v) = HeaderValue::from_str(&auth.cookie(&person)) {
                    r.headers_mut().insert(header::SET_COOKIE, v);
                }
                harden(r)
            }
            None => refuse(
                StatusCode::UNAUTHORIZED,
                "this link was used already, or has expired; ask for a new one with `tinycode web --url`",
            ),
        };
    }
    let person = match cookie_of(request.headers()).map(|c| auth.session(&c)) {
        Some(Ok(person)) => person,
        Some(Err(true)) => {
            return refuse(
                StatusCode::TOO_MANY_REQUESTS,
                "too many requests; slow down",
            );
        }
        _ => {
            return refuse(
                StatusCode::UNAUTHORIZED,
                "open the desk with the link `tinycode web` printed (or `tinycode web --url` for a new one)",
            );
        }
    };
    let request = if matches!(*request.method(), Method::GET | Method::HEAD) {
        request
    } else {
        match checked_change(&auth.origin_of(&host), &person, request).await {
            Ok(r) => r,
            Err(response) => return response,
        }
    };
    let mut request = request;
    request.extensions_mut().insert(person);
    harden(next.run(request).await)
}

/// A change: same origin, the session's CSRF token, a body within the
/// limit. The body is read here (to find the token of a plain form) and
/// handed on whole.
async fn checked_change(
    origin_here: &str,
    person: &Person,
    request: Request,
) -> Result<Request, Response> {
    let origin = request
        .headers()
        .get(header::ORIGIN)
        .and_then(|o| o.to_str().ok());
    if origin != Some(origin_here) {
        return Err(refuse(
            StatusCode::FORBIDDEN,
            "a change must come from this page (its Origin did not match)",
        ));
    }
    let header_token = request
        .headers()
        .get("x-csrf-token")
        .and_then(|v| v.to_str().ok())
        .map(String::from);
    let (parts, body) = request.into_parts();
    let bytes = to_bytes(body, MAX_BODY)
        .await
        .map_err(|_| refuse(StatusCode::PAYLOAD_TOO_LARGE, "the request is too large"))?;
    let form_token = std::str::from_utf8(&bytes)
        .ok()
        .and_then(|b| query_value(b, "csrf"));
    let token = header_token.or(form_token).unwrap_or_default();
    if !same(&token, &person.csrf) {
        return Err(refuse(
            StatusCode::FORBIDDEN,
            "the page's form token is missing or stale; reload the page and try again",
        ));
    }
    Ok(Request::from_parts(parts, Body::from(bytes)))
}

/// `next` when it is a path of this server, else `/` (no scheme, no
/// `//host`, nothing a browser would strip into one).
pub fn local(next: &str) -> &str {
    let ok = next.starts_with('/')
        && !next.starts_with("//")
        && next.bytes().all(|b| b.is_ascii_graphic() && b != b'\\');
    if ok { next } else { "/" }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_link_is_spent_once_and_sessions_are_rate_limited() {
        let auth = Auth::new("127.0.0.1:8123".parse().unwrap(), false, None);
        assert_eq!(auth.origin, "http://127.0.0.1:8123");
        let link = auth.link();
        let token = link.split("token=").nth(1).unwrap();
        let person = auth.spend(token).unwrap();
        assert!(auth.spend(token).is_none(), "a link works once");
        assert!(auth.spend("nope").is_none());
        for _ in 0..BURST as usize {
            assert!(auth.session(&person.id).is_ok());
        }
        assert!(auth.session(&person.id).unwrap_err(), "over its rate");
        assert!(!auth.session("other").unwrap_err(), "unknown");
        assert!(auth.cookie(&person).contains("HttpOnly; SameSite=Strict"));
    }

    #[test]
    fn hosts_are_this_servers_names_only() {
        let auth = Auth::new("127.0.0.1:8123".parse().unwrap(), false, None);
        assert!(auth.hosts.contains("127.0.0.1:8123"));
        assert!(auth.hosts.contains("localhost:8123"));
        assert!(!auth.names_this_server("evil.example:8123"));
        assert_eq!(auth.origin_of("localhost:8123"), "http://localhost:8123");
        let tls = Auth::new(
            "0.0.0.0:8443".parse().unwrap(),
            true,
            Some("https://desk.example:8443/"),
        );
        assert_eq!(tls.origin, "https://desk.example:8443");
        assert!(tls.names_this_server("desk.example:8443"));
        assert!(same("abc", "abc") && !same("abc", "abd") && !same("abc", "ab"));
    }
}
