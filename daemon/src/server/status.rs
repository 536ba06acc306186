//! Library errors → gRPC status codes, explicitly, one place.

use tonic::Status;

use crate::calls::CallError;
use crate::config::{ConfigEditError, ConfigError};
use crate::domain::desk::DomainError;
use crate::domain::knowledge::EditError;
use crate::eval::EvalError;
use crate::extensions::ExtensionError;
use crate::sessions::SessionError;
use crate::skills::SkillInstallError;
use crate::store::StoreError;

/// A request tonic cannot decode (invalid UTF-8 in a string field, a
/// truncated message) is the caller's error: tonic answers `INTERNAL`
/// before any handler runs; this turns it into `INVALID_ARGUMENT` with the
/// same message.
pub fn undecodable_request_is_invalid_argument(
    mut response: tonic::codegen::http::Response<tonic::body::Body>,
) -> tonic::codegen::http::Response<tonic::body::Body> {
    let headers = response.headers_mut();
    let internal = headers
        .get("grpc-status")
        .is_some_and(|v| v.as_bytes() == b"13");
    let undecodable = headers
        .get("grpc-message")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|m| m.contains("failed%20to%20decode") || m.contains("failed to decode"));
    if internal && undecodable {
        headers.insert(
            "grpc-status",
            tonic::codegen::http::HeaderValue::from_static("3"),
        );
    }
    response
}

/// While the daemon starts only `Daemon` is served; a call to another
/// service (tonic answers `UNIMPLEMENTED` with no message) is told to ask
/// again instead of being taken for an old daemon.
pub fn unserved_while_starting(
    mut response: tonic::codegen::http::Response<tonic::body::Body>,
) -> tonic::codegen::http::Response<tonic::body::Body> {
    let headers = response.headers_mut();
    if headers
        .get("grpc-status")
        .is_some_and(|v| v.as_bytes() == b"12")
    {
        use tonic::codegen::http::HeaderValue;
        headers.insert("grpc-status", HeaderValue::from_static("14"));
        headers.insert(
            "grpc-message",
            HeaderValue::from_static(
                "tinycoded%20is%20starting%3B%20ask%20again%20in%20a%20moment%20%28%60tinycode%20daemon%20status%60%20shows%20how%20far%29",
            ),
        );
    }
    response
}

/// A library error as the gRPC status it means. Every mapping is in this
/// module. (`From<…Error> for Status` cannot be written here: both types
/// are other crates', which Rust's orphan rule forbids.)
pub trait IntoStatus {
    fn into_status(self) -> Status;
}

/// `result.or_status()?` in a handler: the error as its status.
pub trait OrStatus<T> {
    fn or_status(self) -> Result<T, Status>;
}

impl<T, E: IntoStatus> OrStatus<T> for Result<T, E> {
    fn or_status(self) -> Result<T, Status> {
        self.map_err(IntoStatus::into_status)
    }
}

impl IntoStatus for StoreError {
    fn into_status(self) -> Status {
        let message = self.to_string();
        match self {
            StoreError::Conflict { .. } => Status::aborted(message),
            StoreError::InvalidStream { .. }
            | StoreError::EmptyAppend
            | StoreError::TooLarge { .. } => Status::invalid_argument(message),
            StoreError::Closed => Status::unavailable(message),
            StoreError::Corrupt { .. }
            | StoreError::Checksum { .. }
            | StoreError::Damaged { .. }
            | StoreError::Behind { .. }
            | StoreError::NoHead { .. }
            | StoreError::Unreadable { .. } => Status::data_loss(message),
            StoreError::Io(_) | StoreError::Database(_) => Status::internal(message),
            StoreError::Unreachable(_) | StoreError::Fenced { .. } => Status::unavailable(message),
            StoreError::DiskFull { .. } => Status::resource_exhausted(message),
            StoreError::SchemaNewer { .. } => Status::failed_precondition(message),
        }
    }
}

impl IntoStatus for DomainError {
    fn into_status(self) -> Status {
        let message = self.to_string();
        match self {
            DomainError::TicketNotFound(_) | DomainError::ArticleNotFound(_) => {
                Status::not_found(message)
            }
            DomainError::BadId { .. } | DomainError::Invalid { .. } => {
                Status::invalid_argument(message)
            }
            DomainError::Edit(EditError::NotFound(_) | EditError::Ambiguous { .. }) => {
                Status::failed_precondition(message)
            }
            DomainError::Edit(EditError::EmptyOldText) => Status::invalid_argument(message),
            DomainError::Busy(_) => Status::aborted(message),
            DomainError::Store(e) => e.into_status(),
            DomainError::Io { .. } => Status::internal(message),
            DomainError::Projection(e) => e.into_status(),
        }
    }
}

impl IntoStatus for crate::connectors::ConnectorError {
    fn into_status(self) -> Status {
        use crate::connectors::ConnectorError as E;
        let message = self.to_string();
        match self {
            E::UnknownSource(_) | E::NotFound(_) | E::NoWebhooks(_) => Status::not_found(message),
            E::NoSecret { .. } | E::NotParked { .. } => Status::failed_precondition(message),
            E::BadSignature(_) => Status::unauthenticated(message),
            E::Unreadable(_) | E::Import { .. } | E::TooLarge(_) => {
                Status::invalid_argument(message)
            }
            E::Domain(e) => e.into_status(),
            E::Projection(e) => e.into_status(),
            E::Store(e) => e.into_status(),
        }
    }
}

impl IntoStatus for crate::auth::AuthError {
    fn into_status(self) -> Status {
        use crate::auth::AuthError as E;
        let message = self.to_string();
        match self {
            E::UnknownProvider(_) => Status::not_found(message),
            E::BadKey(_) => Status::invalid_argument(message),
            E::Master(_) | E::Helper { .. } => Status::failed_precondition(message),
            E::Io(_) => Status::unavailable(message),
            E::Store(e) => e.into_status(),
        }
    }
}

impl IntoStatus for crate::projection::ProjectionError {
    fn into_status(self) -> Status {
        use crate::projection::ProjectionError as E;
        let message = self.to_string();
        match self {
            E::Stopped { .. } => Status::unavailable(message),
            E::Corrupt(_) => Status::data_loss(message),
            E::Storage(_) => Status::internal(message),
        }
    }
}

impl IntoStatus for crate::approvals::ApprovalError {
    fn into_status(self) -> Status {
        use crate::approvals::ApprovalError as E;
        let message = self.to_string();
        match self {
            E::NotFound(_) | E::RuleNotFound(_) => Status::not_found(message),
            E::AlreadyDecided { .. } | E::Cancelled { .. } => Status::failed_precondition(message),
            E::NoDecision | E::BadAnswer(_) => Status::invalid_argument(message),
            E::Store(e) => e.into_status(),
            E::Projection(e) => e.into_status(),
        }
    }
}

impl IntoStatus for crate::triage::TriageError {
    fn into_status(self) -> Status {
        use crate::triage::TriageError as E;
        match self {
            E::Domain(e) => e.into_status(),
            E::Session(e) => e.into_status(),
            E::Store(e) => e.into_status(),
            E::Projection(e) => e.into_status(),
            e @ E::Invalid { .. } => Status::invalid_argument(e.to_string()),
            e @ E::Elsewhere(_) => Status::failed_precondition(e.to_string()),
        }
    }
}

impl IntoStatus for CallError {
    fn into_status(self) -> Status {
        let message = self.to_string();
        match self {
            CallError::Invalid(_) => Status::invalid_argument(message),
            CallError::UnknownTool { .. } => Status::not_found(message),
            CallError::Store(e) => e.into_status(),
            CallError::Approval(e) => e.into_status(),
        }
    }
}

impl IntoStatus for EvalError {
    fn into_status(self) -> Status {
        let message = self.to_string();
        match self {
            EvalError::Labels(_) | EvalError::Invalid { .. } => Status::invalid_argument(message),
            EvalError::NotFound(_) => Status::not_found(message),
            EvalError::Scratch(_) => Status::unavailable(message),
            EvalError::Store(e) => e.into_status(),
            EvalError::Projection(e) => e.into_status(),
        }
    }
}

impl IntoStatus for crate::reports::ReportError {
    fn into_status(self) -> Status {
        use crate::reports::ReportError;
        let message = self.to_string();
        match self {
            ReportError::Invalid { .. } => Status::invalid_argument(message),
            ReportError::NotFound(_) => Status::not_found(message),
            ReportError::Elsewhere(_) => Status::failed_precondition(message),
            ReportError::Io { .. } | ReportError::Chart { .. } | ReportError::Stopped(_) => {
                Status::internal(message)
            }
            ReportError::Store(e) => e.into_status(),
            ReportError::Domain(e) => e.into_status(),
            ReportError::Approvals(e) => e.into_status(),
            ReportError::Projection(e) => e.into_status(),
        }
    }
}

impl IntoStatus for ExtensionError {
    fn into_status(self) -> Status {
        let message = self.to_string();
        match self {
            ExtensionError::Invalid(_) => Status::invalid_argument(message),
            ExtensionError::Stopping => Status::unavailable(message),
            ExtensionError::Config(e) => match e {
                ConfigEditError::Config(ConfigError::Read { .. })
                | ConfigEditError::Write { .. } => Status::internal(message),
                ConfigEditError::Config(_) => Status::invalid_argument(message),
                ConfigEditError::NoSuchServer { .. } => Status::not_found(message),
                ConfigEditError::ServerExists { .. } => Status::already_exists(message),
            },
            ExtensionError::Skill(e) => match e {
                SkillInstallError::Missing(_) | SkillInstallError::NoSuchSkill { .. } => {
                    Status::not_found(message)
                }
                SkillInstallError::NoSkillFile(_) | SkillInstallError::Invalid { .. } => {
                    Status::invalid_argument(message)
                }
                SkillInstallError::Exists(_) => Status::already_exists(message),
                SkillInstallError::NotOurs(_) => Status::failed_precondition(message),
                SkillInstallError::Io { .. } => Status::internal(message),
            },
        }
    }
}

impl IntoStatus for SessionError {
    fn into_status(self) -> Status {
        let message = self.to_string();
        match self {
            SessionError::NotFound(_) | SessionError::Deleted(_) => Status::not_found(message),
            SessionError::BadId(_) | SessionError::Invalid { .. } => {
                Status::invalid_argument(message)
            }
            SessionError::Model { .. } | SessionError::Agent(_) => {
                Status::failed_precondition(message)
            }
            SessionError::Draining => Status::unavailable(message),
            SessionError::Approval(e) => e.into_status(),
            SessionError::Store(e) => e.into_status(),
            SessionError::Projection(e) => e.into_status(),
        }
    }
}

impl IntoStatus for crate::control::ReloadError {
    fn into_status(self) -> Status {
        // A config that does not load (or names an unusable model) is the
        // caller's to fix; nothing changed.
        Status::invalid_argument(self.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::ExpectedVersion;
    use tonic::Code;

    #[test]
    fn store_errors_map_to_meaningful_codes() {
        let conflict = StoreError::Conflict {
            stream: "s".into(),
            expected: ExpectedVersion::Exact(1),
            actual: 2,
        };
        assert_eq!(conflict.into_status().code(), Code::Aborted);
        assert_eq!(
            StoreError::EmptyAppend.into_status().code(),
            Code::InvalidArgument
        );
        assert_eq!(StoreError::Closed.into_status().code(), Code::Unavailable);
        assert_eq!(
            StoreError::Io("x".into()).into_status().code(),
            Code::Internal
        );
    }
}

#[cfg(test)]
mod starting_tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_service_not_served_while_starting_is_unavailable_with_a_reason() {
        let unserved = Status::unimplemented("").into_http::<tonic::body::Body>();
        let answer = unserved_while_starting(unserved);
        let status = Status::from_header_map(answer.headers()).unwrap();
        assert_eq!(status.code(), tonic::Code::Unavailable);
        assert_eq!(
            status.message(),
            "tinycoded is starting; ask again in a moment (`tinycode daemon status` shows how far)"
        );
        let other = Status::not_found("no such ticket").into_http::<tonic::body::Body>();
        let status = Status::from_header_map(unserved_while_starting(other).headers()).unwrap();
        assert_eq!(status.code(), tonic::Code::NotFound, "others untouched");
    }
}
