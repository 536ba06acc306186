//! Who is calling: the peer's uid/pid from the socket's credentials and the
//! client's self-declared name from metadata.

use tinycode_shared::CLIENT_NAME_METADATA;
use tonic::transport::server::UdsConnectInfo;
use tonic::{Request, Status};

/// The caller of one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peer {
    pub client_name: String,
    pub uid: Option<u32>,
    pub pid: Option<i32>,
}

impl Peer {
    pub fn of<T>(request: &Request<T>) -> Self {
        let cred = request
            .extensions()
            .get::<UdsConnectInfo>()
            .and_then(|info| info.peer_cred);
        let client_name = request
            .metadata()
            .get(CLIENT_NAME_METADATA)
            .or_else(|| request.metadata().get("user-agent"))
            .and_then(|v| v.to_str().ok())
            .map(|s| s.chars().take(128).collect::<String>())
            .unwrap_or_else(|| "unknown".to_string());
        // A person acting through a bridging client (the web page).
        let person = request
            .metadata()
            .get(tinycode_shared::PERSON_METADATA)
            .and_then(|v| v.to_str().ok())
            .map(tinycode_shared::decode_person)
            .map(|p| {
                p.chars()
                    .filter(|c| !c.is_control())
                    .take(80)
                    .collect::<String>()
            })
            .filter(|p| !p.trim().is_empty());
        let client_name = match person {
            Some(p) => format!("{} (via {client_name})", p.trim()),
            None => client_name,
        };
        Self {
            client_name,
            uid: cred.map(|c| c.uid()),
            pid: cred.and_then(|c| c.pid()),
        }
    }
}

/// The caller as the events record it (`by`).
pub fn client_ref<T>(request: &Request<T>) -> tinycode_shared::proto::ClientRef {
    let peer = Peer::of(request);
    tinycode_shared::proto::ClientRef {
        name: peer.client_name,
        uid: peer.uid.unwrap_or(0),
        pid: peer.pid.unwrap_or(0),
    }
}

/// The caller and the message of a request.
pub fn caller_and<T>(request: Request<T>) -> (tinycode_shared::proto::ClientRef, T) {
    (client_ref(&request), request.into_inner())
}

/// Interceptor refusing any peer whose uid differs from the daemon's. The
/// socket is 0600 in a 0700 directory already; this also stops root-owned
/// or otherwise privileged peers from driving another user's daemon.
pub fn require_same_uid(
    own_uid: u32,
) -> impl Fn(Request<()>) -> Result<Request<()>, Status> + Clone + Send + Sync + 'static {
    move |request: Request<()>| {
        let peer_uid = request
            .extensions()
            .get::<UdsConnectInfo>()
            .and_then(|info| info.peer_cred)
            .map(|cred| cred.uid());
        check_uid(own_uid, peer_uid)?;
        Ok(request)
    }
}

fn check_uid(own_uid: u32, peer_uid: Option<u32>) -> Result<(), Status> {
    match peer_uid {
        Some(uid) if uid == own_uid => Ok(()),
        Some(uid) => Err(Status::permission_denied(format!(
            "this tinycoded belongs to uid {own_uid}; uid {uid} may not use it"
        ))),
        None => Err(Status::permission_denied(
            "tinycoded could not read the caller's socket credentials; connect over its Unix socket",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_daemon_owner_passes() {
        assert!(check_uid(1000, Some(1000)).is_ok());
        let denied = check_uid(1000, Some(0)).unwrap_err();
        assert_eq!(denied.code(), tonic::Code::PermissionDenied);
        assert!(denied.message().contains("uid 0"));
        assert_eq!(
            check_uid(1000, None).unwrap_err().code(),
            tonic::Code::PermissionDenied
        );
    }

    #[test]
    fn client_name_comes_from_metadata() {
        let mut req = Request::new(());
        req.metadata_mut()
            .insert(CLIENT_NAME_METADATA, "tinycode-cli/0.1".parse().unwrap());
        assert_eq!(Peer::of(&req).client_name, "tinycode-cli/0.1");
        assert_eq!(Peer::of(&Request::new(())).client_name, "unknown");
    }
}
