//! Printing: text or JSON, and errors as one readable sentence.

use std::io::Write;

/// Print one JSON value on its own line.
pub fn json_line(value: &serde_json::Value) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{value}");
}

/// Print a JSON value, pretty, for single answers.
pub fn json_pretty(value: &serde_json::Value) {
    let text = serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string());
    println!("{text}");
}

/// One sentence for any error: gRPC statuses keep only their message (with
/// a hint for the transport-level ones); other errors show their cause chain.
pub fn describe(err: &anyhow::Error) -> String {
    if let Some(status) = err.downcast_ref::<tonic::Status>() {
        return describe_status(status);
    }
    let mut parts: Vec<String> = err.chain().map(ToString::to_string).collect();
    parts.dedup();
    parts.join(": ")
}

pub fn describe_status(status: &tonic::Status) -> String {
    use tonic::Code;
    let message = status.message();
    match status.code() {
        Code::Unavailable | Code::Unknown | Code::Internal if connection_lost(message) => {
            "the daemon stopped (the connection to tinycoded closed); check `tinycode daemon status`"
                .into()
        }
        Code::Unimplemented => format!(
            "this tinycoded does not support that request yet ({message}); see docs/PROTOCOL.md"
        ),
        _ if message.is_empty() => format!("tinycoded answered {:?}", status.code()),
        _ => message.to_string(),
    }
}

/// Whether a status says the connection itself went (the daemon stopped
/// or was killed): transport errors, HTTP/2 resets, a closed socket.
fn connection_lost(message: &str) -> bool {
    message.is_empty()
        || [
            "transport",
            "h2 protocol error",
            "connection reset",
            "broken pipe",
            "connection closed",
            "error reading a body",
            "stream no longer needed",
        ]
        .iter()
        .any(|m| message.contains(m))
}

pub use tinycode_shared::text::{clip, width};

/// A plain text table; the last column is not padded.
pub fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let cols = headers.len();
    let mut widths: Vec<usize> = headers.iter().map(|h| width(h)).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate().take(cols) {
            widths[i] = widths[i].max(width(cell));
        }
    }
    let line = |cells: Vec<&str>| {
        let mut out = String::new();
        for (i, cell) in cells.iter().enumerate() {
            out.push_str(cell);
            if i + 1 < cells.len() {
                out.push_str(&" ".repeat(widths[i] - width(cell) + 2));
            }
        }
        out.trim_end().to_string()
    };
    let mut out = line(headers.to_vec());
    out.push('\n');
    for row in rows {
        out.push_str(&line(row.iter().map(String::as_str).collect()));
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_daemon_that_went_away_is_named_not_its_http2_error() {
        for (code, message) in [
            (
                tonic::Code::Unknown,
                "h2 protocol error: error reading a body from connection",
            ),
            (
                tonic::Code::Internal,
                "h2 protocol error: stream no longer needed",
            ),
            (tonic::Code::Unavailable, "transport error"),
        ] {
            let text = describe_status(&tonic::Status::new(code, message));
            assert!(text.starts_with("the daemon stopped"), "{text}");
            assert!(!text.contains("h2"), "{text}");
        }
        let text = describe_status(&tonic::Status::internal("the store failed"));
        assert_eq!(text, "the store failed");
    }

    #[test]
    fn wide_characters_take_two_columns() {
        assert_eq!(width("abc"), 3);
        assert_eq!(width("退款"), 4);
        assert_eq!(width("T-1 退款"), 8);
        assert_eq!(clip("退款政策说明", 7), "退款政…");
        let t = table(
            &["ID", "QUEUE"],
            &[
                vec!["T-1".into(), "售后组".into()],
                vec!["T-10".into(), "x".into()],
            ],
        );
        assert_eq!(t, "ID    QUEUE\nT-1   售后组\nT-10  x\n");
    }
}
