//! One request to a helpdesk: what an adapter builds for a delivery, and
//! what the sender sends (with the idempotency key, a time limit and a
//! bounded read of the answer).

use std::time::Duration;

/// A request an adapter built.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outgoing {
    pub method: reqwest::Method,
    pub url: String,
    pub headers: Vec<(&'static str, String)>,
    pub body: Vec<u8>,
}

/// The client connectors send with: no redirect is followed (reqwest turns
/// a redirected POST into a GET, and would carry the API token along).
pub fn client() -> reqwest::Client {
    // The process's rustls provider is installed by the shared client.
    let shared = crate::model::http_client();
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .connect_timeout(Duration::from_secs(10))
        .build()
        .unwrap_or(shared)
}

/// One request's time limit.
pub const TIMEOUT: Duration = Duration::from_secs(15);

/// `id` when it is a number (it goes into an API path: nothing else may).
pub fn number(id: &str, what: &str) -> Result<(), String> {
    if !id.is_empty() && id.len() <= 20 && id.bytes().all(|b| b.is_ascii_digit()) {
        Ok(())
    } else {
        Err(format!("{id:?} is not a {what} (digits only)"))
    }
}

/// `base` (a helpdesk's URL as configured) joined with `path`.
pub fn join(base: &str, path: &str) -> String {
    format!(
        "{}/{}",
        base.trim_end_matches('/'),
        path.trim_start_matches('/')
    )
}

/// Send `out` with `key`; the error and HTTP status when it failed.
pub async fn send(http: &reqwest::Client, out: Outgoing, key: &str) -> Result<(), (String, u32)> {
    let url = out.url.clone();
    let mut request = http
        .request(out.method, &out.url)
        .timeout(TIMEOUT)
        .header("content-type", "application/json")
        .header("idempotency-key", key);
    for (name, value) in out.headers {
        request = request.header(name, value);
    }
    let mut response = request
        .body(out.body)
        .send()
        .await
        .map_err(|e| (format!("cannot reach {url}: {e}"), 0))?;
    let status = response.status();
    if status.is_success() {
        return Ok(());
    }
    if status.is_redirection() {
        let location = response
            .headers()
            .get("location")
            .and_then(|l| l.to_str().ok())
            .unwrap_or("nowhere");
        return Err((
            format!(
                "{url} answered {status} to {location}: redirects are not followed (a POST would become a GET); set deliverUrl to where it points"
            ),
            u32::from(status.as_u16()),
        ));
    }
    // The start of the answer's body says why; the rest is never read.
    let mut head = Vec::new();
    while head.len() < 1024
        && let Ok(Some(chunk)) = response.chunk().await
    {
        head.extend_from_slice(&chunk);
    }
    let text: String = String::from_utf8_lossy(&head).chars().take(200).collect();
    Err((
        format!("{url} answered {status}: {}", text.trim()),
        u32::from(status.as_u16()),
    ))
}
