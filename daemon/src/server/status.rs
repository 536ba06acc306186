//! Library errors → gRPC status codes, explicitly, one place.

use tonic::Status;

use crate::domain::desk::DomainError;
use crate::domain::knowledge::EditError;
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

pub trait IntoStatus {
    fn into_status(self) -> Status;
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
            StoreError::Unreachable(_) => Status::unavailable(message),
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
