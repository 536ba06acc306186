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
        Code::Unavailable | Code::Unknown
            if message.is_empty() || message.contains("transport") =>
        {
            "lost the connection to tinycoded (it may have stopped); check `tinycode daemon status`"
                .into()
        }
        Code::Unimplemented => format!(
            "this tinycoded does not support that request yet ({message}); see docs/PROTOCOL.md"
        ),
        _ if message.is_empty() => format!("tinycoded answered {:?}", status.code()),
        _ => message.to_string(),
    }
}
