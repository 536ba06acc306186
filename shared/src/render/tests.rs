use super::*;
use crate::proto::{DaemonStarted, event::Payload};

#[test]
fn dates_render_as_utc_rfc3339() {
    assert_eq!(rfc3339(0, 0), "1970-01-01T00:00:00.000Z");
    assert_eq!(rfc3339(951_782_400, 5_000_000), "2000-02-29T00:00:00.005Z");
    assert_eq!(rfc3339(1_795_991_400, 0), "2026-11-29T22:30:00.000Z");
}

#[test]
fn events_render_as_a_line_and_as_canonical_json() {
    let event = Event {
        sequence: 7,
        stream_id: "daemon".into(),
        stream_version: 3,
        recorded_at: Some(prost_types::Timestamp {
            seconds: 0,
            nanos: 0,
        }),
        payload: Some(Payload::DaemonStarted(DaemonStarted {
            version: "0.1.0".into(),
            pid: 42,
            workspace: "/desk".into(),
            protocol_version: 1,
            previous_run_unclean: false,
        })),
    };
    assert_eq!(
        event_line(&event),
        "#7 1970-01-01T00:00:00.000Z daemon@3 daemon_started version=0.1.0 pid=42 workspace=/desk protocolVersion=1"
    );
    let json = event_json(&event);
    assert_eq!(json["sequence"], 7);
    assert_eq!(json["streamId"], "daemon");
    assert_eq!(json["daemonStarted"]["pid"], 42);
}
