//! Connectors: tickets in from helpdesks' webhooks and from files, replies
//! out through the outbox (docs/CONNECTORS.md).
//!
//! - `generic.rs`: tinycode's own signed JSON, both ways; `chatwoot.rs`,
//!   `zendesk.rs`, `zammad.rs`: each helpdesk's webhooks in and API out
//!   (`request.rs`: one request out; `text.rs`: HTML as text);
//! - `import.rs`: `tinycode import csv|mbox|maildir|zendesk` (a delivery
//!   per row, message or entry; `mail.rs` reads mail, `zendesk.rs` its
//!   export);
//! - `outbox.rs`: the read model of what is owed to customers;
//! - `sender.rs`: the task that sends it, an event per attempt.
//!
//! A delivery becomes a ticket or a message through the desk's intake
//! (`tinycode_domain::desk::Inbound`), once per delivery id.

mod chatwoot;
mod generic;
mod import;
mod mail;
pub mod outbox;
mod request;
mod sender;
mod smtp;
mod text;
mod zammad;
mod zendesk;

use std::sync::{Arc, Mutex};

use tinycode_shared::proto::event::Payload;
use tinycode_shared::proto::{ClientRef, DeliveryRetried, OutboxItem, SourceStatus};
use tokio::sync::watch;

use crate::config::sources::{DEFAULT_MAX_ATTEMPTS, DEFAULT_RETRY_SECONDS, SourceKind, SourceSpec};
use crate::domain::desk::{Desk, DomainError, Received};
use crate::projection::{ProjectionError, Projector, ProjectorHandle};
use crate::store::{EventStore, ExpectedVersion, StoreError};

pub use generic::{SIGNATURE_HEADER, TIMESTAMP_HEADER, sign};
pub use text::html_to_text;

/// Signatures as each helpdesk makes them (tests and benchmarks sign with
/// these).
pub mod signing {
    pub use super::chatwoot::{
        SIGNATURE_HEADER as CHATWOOT_SIGNATURE, TIMESTAMP_HEADER as CHATWOOT_TIMESTAMP,
    };
    pub use super::zammad::{SIGNATURE_HEADER as ZAMMAD_SIGNATURE, sign as zammad};
    pub use super::zendesk::{
        SIGNATURE_HEADER as ZENDESK_SIGNATURE, TIMESTAMP_HEADER as ZENDESK_TIMESTAMP,
        sign as zendesk,
    };
}

/// What an adapter read from a webhook.
#[derive(Debug)]
pub(crate) enum Read {
    /// A customer's message.
    Delivery(crate::domain::desk::Inbound),
    /// Something the desk does not take (an agent's message, another
    /// event), and why: answered 200 and not stored.
    Ignored(String),
}

/// What became of a webhook delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Receipt {
    Stored(Received),
    Ignored(String),
}
pub use import::{ImportKind, ImportSummary, Mapping};

/// The largest webhook body the daemon reads.
pub const MAX_HOOK_BYTES: usize = 1024 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum ConnectorError {
    #[error(
        "no source {0:?} is configured; add it under `connectors` in .tinycode/config.json (docs/CONNECTORS.md)"
    )]
    UnknownSource(String),
    #[error(
        "the source {name:?} has no secret: set ${env} in tinycoded's environment and restart it"
    )]
    NoSecret { name: String, env: String },
    #[error("the delivery's signature was refused: {0}")]
    BadSignature(String),
    #[error("{0}")]
    Unreadable(String),
    #[error(
        "the source {0:?} is a mailbox: it takes no webhooks (its mail comes in with `tinycode import mbox|maildir --source {0}`)"
    )]
    NoWebhooks(String),
    #[error("the body is {0} bytes; a delivery is at most {MAX_HOOK_BYTES} bytes")]
    TooLarge(usize),
    #[error(
        "no delivery was decided by the event at sequence {0}; `tinycode outbox list` shows them"
    )]
    NotFound(u64),
    #[error("delivery {sequence} is {state}; only a failed (parked) delivery is retried")]
    NotParked { sequence: u64, state: String },
    #[error("cannot import {path}: {problem}")]
    Import { path: String, problem: String },
    #[error(transparent)]
    Domain(#[from] DomainError),
    #[error(transparent)]
    Projection(#[from] ProjectionError),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The machine's clock, Unix seconds: signatures and retries keep real
/// time even when `$TINYCODE_NOW` fixes the desk's clock.
fn real_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// A JSON value a helpdesk sent as text: a string as it is, a number
/// written out (ids come either way), anything else empty.
fn text_of(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Number(n) => n.to_string(),
        _ => String::new(),
    }
}

/// The source's API token (Chatwoot, Zendesk, Zammad), read now.
fn token(spec: &SourceSpec) -> Result<String, String> {
    let env = spec.api_token_env.as_deref().unwrap_or_default();
    std::env::var(env)
        .ok()
        .filter(|s| !s.is_empty())
        .ok_or_else(|| {
            format!(
                "the source {:?} has no API token: set ${env} in tinycoded's environment",
                spec.name
            )
        })
}

/// The request that delivers `item` through `spec`'s helpdesk.
fn outgoing(spec: &SourceSpec, item: &OutboxItem, now: i64) -> Result<request::Outgoing, String> {
    let base = spec
        .deliver_url
        .as_deref()
        .ok_or_else(|| format!("the source {:?} has no deliverUrl", spec.name))?;
    match spec.kind {
        SourceKind::Generic => {
            let secret = secret(spec).map_err(|e| e.to_string())?;
            generic::request(base, secret.as_bytes(), item, now)
        }
        SourceKind::Chatwoot => chatwoot::request(
            base,
            spec.account_id.unwrap_or_default(),
            &token(spec)?,
            item,
        ),
        SourceKind::Zendesk => zendesk::request(
            base,
            spec.api_user.as_deref().unwrap_or_default(),
            &token(spec)?,
            item,
        ),
        SourceKind::Zammad => zammad::request(base, &token(spec)?, item),
        SourceKind::Mail => Err("a mail source replies by SMTP, not HTTP".into()),
    }
}

/// The source's secret, read from its environment variable now.
fn secret(spec: &SourceSpec) -> Result<String, ConnectorError> {
    std::env::var(&spec.secret_env)
        .ok()
        .filter(|s| !s.is_empty())
        .ok_or_else(|| ConnectorError::NoSecret {
            name: spec.name.clone(),
            env: spec.secret_env.clone(),
        })
}

/// The desk's connectors.
pub struct Connectors {
    store: EventStore,
    desk: Arc<Desk>,
    sources: Mutex<Vec<SourceSpec>>,
    outbox: ProjectorHandle,
    changed: watch::Sender<u64>,
    http: reqwest::Client,
    /// This daemon's id, recorded with each attempt it makes.
    daemon: String,
}

impl Connectors {
    /// Open the outbox and start sending what it owes.
    pub fn open(
        store: EventStore,
        desk: Arc<Desk>,
        sources: Vec<SourceSpec>,
        daemon: String,
    ) -> Result<Arc<Self>, ConnectorError> {
        let (changed, _) = watch::channel(0);
        let model = Arc::new(outbox::OutboxModel {
            changed: changed.clone(),
        });
        let outbox = Projector::spawn(&store, model)?;
        let connectors = Arc::new(Self {
            store,
            desk,
            sources: Mutex::new(sources),
            outbox,
            changed,
            http: request::client(),
            daemon,
        });
        tokio::spawn(sender::run(Arc::clone(&connectors)));
        Ok(connectors)
    }

    /// The outbox's read model.
    pub fn projector(&self) -> &ProjectorHandle {
        &self.outbox
    }

    /// The config was reloaded: its sources from now on.
    pub fn set_sources(&self, sources: Vec<SourceSpec>) {
        *crate::sync::lock(&self.sources) = sources;
    }

    fn source(&self, name: &str) -> Option<SourceSpec> {
        crate::sync::lock(&self.sources)
            .iter()
            .find(|s| s.name == name)
            .cloned()
    }

    /// Why a delivery of source `name` cannot be made now, if it cannot.
    fn why_not_sent(&self, name: &str) -> Option<String> {
        match self.source(name) {
            None => Some(format!(
                "the source {name:?} is no longer configured; add it back under `connectors` and retry"
            )),
            Some(s) if s.deliver_url.is_none() => Some(format!(
                "the source {name:?} has no deliverUrl: its tickets' replies do not go out; set one and retry"
            )),
            Some(_) => None,
        }
    }

    fn max_attempts(&self, name: &str) -> u32 {
        self.source(name)
            .map_or(DEFAULT_MAX_ATTEMPTS, |s| s.max_attempts)
    }

    fn retry_seconds(&self, name: &str) -> u64 {
        self.source(name)
            .map_or(DEFAULT_RETRY_SECONDS, |s| s.retry_seconds)
    }

    /// One webhook delivery: checked with the source's secret, read with
    /// its adapter, stored once; answered after it is durable.
    pub async fn receive(
        &self,
        source: &str,
        header: impl Fn(&str) -> Option<String>,
        body: &[u8],
    ) -> Result<Receipt, ConnectorError> {
        let spec = self
            .source(source)
            .ok_or_else(|| ConnectorError::UnknownSource(source.to_string()))?;
        if spec.kind == SourceKind::Mail {
            return Err(ConnectorError::NoWebhooks(source.to_string()));
        }
        if body.len() > MAX_HOOK_BYTES {
            return Err(ConnectorError::TooLarge(body.len()));
        }
        let secret = secret(&spec)?;
        let secret = secret.as_bytes();
        let now = real_now();
        let read = match spec.kind {
            SourceKind::Generic => {
                generic::verify(
                    secret,
                    header(TIMESTAMP_HEADER).as_deref(),
                    header(SIGNATURE_HEADER).as_deref(),
                    body,
                    now,
                )?;
                Read::Delivery(generic::read(source, body)?)
            }
            SourceKind::Chatwoot => {
                chatwoot::verify(secret, &header, body, now)?;
                chatwoot::read(source, body)?
            }
            SourceKind::Zendesk => {
                zendesk::verify(secret, &header, body, now)?;
                zendesk::read(source, body)?
            }
            SourceKind::Zammad => {
                zammad::verify(secret, &header, body)?;
                zammad::read(source, body)?
            }
            SourceKind::Mail => return Err(ConnectorError::NoWebhooks(source.to_string())),
        };
        let inbound = match read {
            Read::Delivery(inbound) => inbound,
            Read::Ignored(why) => {
                tracing::debug!(source, %why, "a delivery was ignored");
                return Ok(Receipt::Ignored(why));
            }
        };
        let received = self.desk.receive(inbound).await?;
        tracing::info!(source, ticket = %received.ticket, created = received.created, duplicate = received.duplicate, "a delivery came in");
        Ok(Receipt::Stored(received))
    }

    /// Deliveries in `state` (empty: any), newest first.
    pub async fn list(&self, state: &str, limit: usize) -> Result<Vec<OutboxItem>, ConnectorError> {
        self.outbox.wait_for(self.store.last_sequence()).await?;
        Ok(outbox::Reader(self.outbox.tree()).list(state, limit)?)
    }

    /// Each source, configured or seen in the log: its figures and its
    /// configuration now (never its secret).
    pub async fn status(&self) -> Result<Vec<SourceStatus>, ConnectorError> {
        self.outbox.wait_for(self.store.last_sequence()).await?;
        let mut all = outbox::Reader(self.outbox.tree()).sources()?;
        for spec in crate::sync::lock(&self.sources).iter() {
            let at = match all.iter().position(|s| s.name == spec.name) {
                Some(at) => at,
                None => {
                    all.push(SourceStatus {
                        name: spec.name.clone(),
                        ..SourceStatus::default()
                    });
                    all.len() - 1
                }
            };
            let s = &mut all[at];
            s.kind = spec.kind.as_str().into();
            s.deliver_host = spec
                .deliver_url
                .as_deref()
                .and_then(|u| reqwest::Url::parse(u).ok())
                .and_then(|u| u.host_str().map(str::to_string))
                .unwrap_or_default();
            s.secret_env = spec.secret_env.clone();
            s.secret_set = spec.kind == SourceKind::Mail || secret(spec).is_ok();
        }
        all.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(all)
    }

    /// Try a parked delivery again, from its first attempt.
    pub async fn retry(&self, sequence: u64, by: ClientRef) -> Result<OutboxItem, ConnectorError> {
        self.outbox.wait_for(self.store.last_sequence()).await?;
        let reader = outbox::Reader(self.outbox.tree());
        let item = reader
            .get(sequence)?
            .ok_or(ConnectorError::NotFound(sequence))?;
        if item.state != outbox::state::FAILED {
            return Err(ConnectorError::NotParked {
                sequence,
                state: item.state,
            });
        }
        let payload = Payload::DeliveryRetried(DeliveryRetried {
            sequence,
            by: Some(by),
            at: crate::clock::now_rfc3339(),
        });
        let events = self
            .store
            .append(
                &outbox::stream(sequence),
                ExpectedVersion::Exact(item.version),
                vec![payload],
            )
            .await?;
        if let Some(last) = events.last() {
            self.outbox.wait_for(last.sequence).await?;
        }
        reader
            .get(sequence)?
            .ok_or(ConnectorError::NotFound(sequence))
    }
}
