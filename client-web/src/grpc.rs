//! The daemon as the page's handlers call it: one gRPC channel over the
//! Unix socket, each request carrying the person who made it (so the
//! daemon records "Ana (via tinycode-web/…)" with the bridge's uid and pid,
//! as it records the CLI), and a daemon error turned into a page a person
//! can act on.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use tinycode_shared::client::DaemonChannel;
use tinycode_shared::proto::approvals_client::ApprovalsClient;
use tinycode_shared::proto::connectors_client::ConnectorsClient;
use tinycode_shared::proto::daemon_client::DaemonClient;
use tinycode_shared::proto::events_client::EventsClient;
use tinycode_shared::proto::reports_client::ReportsClient;
use tinycode_shared::proto::sessions_client::SessionsClient;
use tinycode_shared::proto::tickets_client::TicketsClient;
use tinycode_shared::proto::triage_client::TriageClient;
use tonic::Status;
use tonic::metadata::MetadataValue;

use crate::person::Person;

#[derive(Clone)]
pub struct Daemon {
    channel: DaemonChannel,
}

impl Daemon {
    pub fn new(channel: DaemonChannel) -> Self {
        Self { channel }
    }

    pub fn daemon(&self) -> DaemonClient<DaemonChannel> {
        DaemonClient::new(self.channel.clone())
    }
    pub fn tickets(&self) -> TicketsClient<DaemonChannel> {
        TicketsClient::new(self.channel.clone())
    }
    pub fn approvals(&self) -> ApprovalsClient<DaemonChannel> {
        ApprovalsClient::new(self.channel.clone())
    }
    pub fn sessions(&self) -> SessionsClient<DaemonChannel> {
        SessionsClient::new(self.channel.clone())
    }
    pub fn triage(&self) -> TriageClient<DaemonChannel> {
        TriageClient::new(self.channel.clone())
    }
    pub fn events(&self) -> EventsClient<DaemonChannel> {
        EventsClient::new(self.channel.clone())
    }
    pub fn reports(&self) -> ReportsClient<DaemonChannel> {
        ReportsClient::new(self.channel.clone())
    }
    pub fn connectors(&self) -> ConnectorsClient<DaemonChannel> {
        ConnectorsClient::new(self.channel.clone())
    }
}

/// `message` as a request made by `person`.
pub fn by<T>(person: &Person, message: T) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    if let Ok(v) = MetadataValue::try_from(tinycode_shared::encode_person(&person.name)) {
        request
            .metadata_mut()
            .insert(tinycode_shared::PERSON_METADATA, v);
    }
    request
}

/// A daemon call that failed, shown as a page with the daemon's words.
#[derive(Debug)]
pub struct Failed(pub Status);

impl From<Status> for Failed {
    fn from(s: Status) -> Self {
        Self(s)
    }
}

/// The HTTP status a daemon error is shown with.
pub fn http_status(code: tonic::Code) -> StatusCode {
    use tonic::Code;
    match code {
        Code::NotFound => StatusCode::NOT_FOUND,
        Code::InvalidArgument | Code::OutOfRange => StatusCode::BAD_REQUEST,
        Code::FailedPrecondition | Code::AlreadyExists | Code::Aborted => StatusCode::CONFLICT,
        Code::PermissionDenied => StatusCode::FORBIDDEN,
        Code::ResourceExhausted => StatusCode::TOO_MANY_REQUESTS,
        Code::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        Code::DeadlineExceeded => StatusCode::GATEWAY_TIMEOUT,
        _ => StatusCode::BAD_GATEWAY,
    }
}

impl IntoResponse for Failed {
    fn into_response(self) -> Response {
        let status = http_status(self.0.code());
        let why = match self.0.code() {
            tonic::Code::Unavailable => format!(
                "tinycoded is not answering ({}); start it with `tinycode daemon start` and reload",
                self.0.message()
            ),
            _ => self.0.message().to_string(),
        };
        (status, crate::pages::refused(status, &why)).into_response()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_persons_name_rides_on_each_request_encoded() {
        let person = Person {
            id: "x".into(),
            name: "Zoë\nAdmin".into(),
            csrf: "c".into(),
        };
        let r = by(&person, ());
        let v = r
            .metadata()
            .get(tinycode_shared::PERSON_METADATA)
            .unwrap()
            .to_str()
            .unwrap();
        assert_eq!(tinycode_shared::decode_person(v), "Zoë\nAdmin");
        assert_eq!(http_status(tonic::Code::NotFound), StatusCode::NOT_FOUND);
        assert_eq!(
            http_status(tonic::Code::FailedPrecondition),
            StatusCode::CONFLICT
        );
    }
}
