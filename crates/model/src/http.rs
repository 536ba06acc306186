//! HTTP and SSE plumbing shared by the provider adapters: POST a JSON body,
//! retry with backoff on 429 / 5xx / overload, map 401/403 and 404 to clear
//! errors, then feed the server-sent events to a wire-format decoder.

use std::time::Duration;

use eventsource_stream::Eventsource;
use futures::StreamExt;
use serde_json::Value;

use super::keys::Keys;
use super::redact::redact;
use std::sync::Arc;
use tokio::sync::mpsc;

use super::{ModelError, ModelEvent, ModelStream};

/// How an adapter talks to its server.
#[derive(Clone)]
pub(crate) struct Endpoint {
    /// `openai`, `anthropic`, … (for messages).
    pub provider: String,
    pub model: String,
    pub url: String,
    /// Extra headers that are not credentials (versions).
    pub headers: Vec<(String, String)>,
    /// Where the key comes from, asked on every request.
    pub keys: Arc<dyn Keys>,
    /// The environment variable the catalog names for the key.
    pub key_env: String,
    /// A request without a key is refused before it is sent.
    pub key_required: bool,
    /// The header that carries the key.
    pub auth: AuthHeader,
}

/// How a wire carries its key.
#[derive(Clone, Copy)]
pub(crate) enum AuthHeader {
    /// `authorization: Bearer <key>`.
    Bearer,
    /// `<name>: <key>` (Anthropic's `x-api-key`).
    Named(&'static str),
}

impl Endpoint {
    /// A 401/403: the key's outcome recorded, the error says how to set it.
    pub(crate) fn refused(&self, status: u16, message: String) -> ModelError {
        self.keys
            .outcome(&self.provider, Err(&format!("{status}: {message}")));
        ModelError::Auth {
            provider: self.provider.clone(),
            status,
            advice: self.keys.advice(&self.provider, &self.key_env),
            message,
        }
    }

    /// The key for this request as a header, asked of [`Keys`] now.
    pub(crate) async fn credentials(&self) -> Result<Option<(String, String)>, ModelError> {
        let key = self.keys.key(&self.provider, &self.key_env).await?;
        let Some(key) = key.filter(|k| !k.trim().is_empty()) else {
            if self.key_required {
                return Err(ModelError::MissingKey {
                    provider: self.provider.clone(),
                    advice: self.keys.advice(&self.provider, &self.key_env),
                });
            }
            return Ok(None);
        };
        // Redacted by value from anything stored or logged from now on.
        tinycode_shared::secrets::register(&key);
        Ok(Some(match self.auth {
            AuthHeader::Bearer => ("authorization".to_string(), format!("Bearer {key}")),
            AuthHeader::Named(name) => (name.to_string(), key),
        }))
    }
}

/// Retries of the request phase (before any event arrived).
#[derive(Debug, Clone, Copy)]
pub struct RetryPolicy {
    pub attempts: u32,
    pub base_delay: Duration,
    pub max_delay: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            attempts: 4,
            base_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(20),
        }
    }
}

/// A wire format: turns SSE events into model events.
pub(crate) trait Decoder: Send + 'static {
    /// One SSE event (`event:` name, may be empty; `data:` payload).
    fn event(&mut self, name: &str, data: &str) -> Result<Vec<ModelEvent>, ModelError>;
    /// The stream said it is complete; nothing more is read.
    fn done(&self) -> bool;
    /// The connection ended: the last events, or an error if it was cut.
    fn finish(&mut self) -> Result<Vec<ModelEvent>, ModelError>;
}

/// The shared HTTP client (rustls with the ring provider), built once:
/// building one loads the platform's root certificates, and reusing it
/// keeps connections to the provider alive between requests.
pub fn client() -> reqwest::Client {
    static CLIENT: std::sync::OnceLock<reqwest::Client> = std::sync::OnceLock::new();
    CLIENT
        .get_or_init(|| {
            let _ = rustls::crypto::ring::default_provider().install_default();
            reqwest::Client::builder()
                .connect_timeout(Duration::from_secs(10))
                .build()
                .unwrap_or_default()
        })
        .clone()
}

fn retryable(status: u16) -> bool {
    matches!(status, 408 | 409 | 429 | 500 | 502 | 503 | 504 | 529)
}

/// The most useful part of an error body: `error.message` when JSON.
pub(crate) fn error_message(body: &str) -> String {
    let parsed: Option<Value> = serde_json::from_str(body).ok();
    parsed
        .as_ref()
        .and_then(|v| v.pointer("/error/message").or_else(|| v.get("message")))
        .and_then(Value::as_str)
        .map(str::to_string)
        .unwrap_or_else(|| {
            body.chars()
                .take(300)
                .collect::<String>()
                .trim()
                .to_string()
        })
}

async fn open(
    client: &reqwest::Client,
    ep: &Endpoint,
    body: &bytes::Bytes,
    retry: RetryPolicy,
) -> Result<reqwest::Response, ModelError> {
    let credentials = ep.credentials().await?;
    let secret = credentials
        .as_ref()
        .map(|(_, v)| v.strip_prefix("Bearer ").unwrap_or(v).to_string());
    let secrets: Vec<&str> = secret.as_deref().into_iter().collect();
    let mut attempt = 0;
    loop {
        attempt += 1;
        let mut request = client
            .post(&ep.url)
            .header("content-type", "application/json")
            .header("accept", "text/event-stream")
            .body(body.clone());
        for (k, v) in ep.headers.iter().chain(credentials.iter()) {
            request = request.header(k.as_str(), v.as_str());
        }
        let response = match request.send().await {
            Ok(r) => r,
            Err(e) if attempt < retry.attempts && (e.is_connect() || e.is_timeout()) => {
                tokio::time::sleep(backoff(retry, attempt, None)).await;
                continue;
            }
            Err(e) => {
                return Err(ModelError::Connect {
                    provider: ep.provider.clone(),
                    url: ep.url.clone(),
                    message: e.to_string(),
                });
            }
        };
        let status = response.status().as_u16();
        if response.status().is_success() {
            ep.keys.outcome(&ep.provider, Ok(()));
            return Ok(response);
        }
        let retry_after = response
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(Duration::from_secs);
        // A server may echo the request's credentials: never keep them.
        let message = redact(
            &error_message(&response.text().await.unwrap_or_default()),
            &secrets,
        );
        match status {
            401 | 403 => return Err(ep.refused(status, message)),
            404 => {
                return Err(ModelError::NotFound {
                    provider: ep.provider.clone(),
                    model: ep.model.clone(),
                    status,
                    message,
                });
            }
            s if retryable(s) && attempt < retry.attempts => {
                tracing::warn!(provider = %ep.provider, status = s, attempt, "model request failed; retrying");
                tokio::time::sleep(backoff(retry, attempt, retry_after)).await;
            }
            _ => {
                return Err(ModelError::Http {
                    provider: ep.provider.clone(),
                    status,
                    attempts: attempt,
                    message,
                });
            }
        }
    }
}

fn backoff(retry: RetryPolicy, attempt: u32, retry_after: Option<Duration>) -> Duration {
    let exp = retry.base_delay.saturating_mul(1 << (attempt - 1).min(16));
    retry_after.unwrap_or(exp).min(retry.max_delay)
}

/// Run one streamed request through `decoder`, as a [`ModelStream`].
pub(crate) fn drive<D: Decoder>(
    ep: Endpoint,
    body: Vec<u8>,
    retry: RetryPolicy,
    mut decoder: D,
) -> ModelStream {
    let (tx, rx) = mpsc::channel(64);
    tokio::spawn(async move {
        let stream_err = |message: String| ModelError::Stream {
            provider: ep.provider.clone(),
            message,
        };
        let body = bytes::Bytes::from(body);
        let response = match open(&client(), &ep, &body, retry).await {
            Ok(r) => r,
            Err(e) => {
                let _ = tx.send(Err(e)).await;
                return;
            }
        };
        // A final blank line at EOF dispatches a last event whose trailing
        // newline was lost (recordings, some proxies); a truncated event
        // then fails to decode instead of vanishing.
        let bytes =
            response
                .bytes_stream()
                .chain(futures::stream::iter([Ok(bytes::Bytes::from_static(
                    b"\n\n",
                ))]));
        let mut events = bytes.eventsource();
        while let Some(item) = events.next().await {
            let decoded = match item {
                Ok(ev) => decoder.event(&ev.event, &ev.data),
                Err(e) => Err(stream_err(e.to_string())),
            };
            match decoded {
                Ok(out) => {
                    for event in out {
                        if tx.send(Ok(event)).await.is_err() {
                            return; // consumer gone: cancel
                        }
                    }
                }
                Err(e) => {
                    let _ = tx.send(Err(e)).await;
                    return;
                }
            }
            if decoder.done() {
                break;
            }
        }
        match decoder.finish() {
            Ok(out) => {
                for event in out {
                    if tx.send(Ok(event)).await.is_err() {
                        return;
                    }
                }
            }
            Err(e) => {
                let _ = tx.send(Err(e)).await;
            }
        }
    });
    Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx))
}
