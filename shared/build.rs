//! Compiles `proto/tinycode/v1/*.proto` with protox (pure Rust, no system
//! protoc) and generates the prost messages plus tonic clients and servers.
//! The encoded descriptor set is written beside them for gRPC reflection and
//! for rendering events as JSON.

use std::path::PathBuf;

use prost::Message;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let proto_root = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?).join("../proto");
    let files = [
        "tinycode/v1/events.proto",
        "tinycode/v1/daemon.proto",
        "tinycode/v1/support.proto",
        "tinycode/v1/tickets.proto",
        "tinycode/v1/session_events.proto",
        "tinycode/v1/sessions.proto",
        "tinycode/v1/approval_events.proto",
        "tinycode/v1/approvals.proto",
        "tinycode/v1/triage_events.proto",
        "tinycode/v1/triage.proto",
        "tinycode/v1/call_events.proto",
        "tinycode/v1/calls.proto",
        "tinycode/v1/extensions.proto",
        "tinycode/v1/eval_events.proto",
        "tinycode/v1/evals.proto",
        "tinycode/v1/reports.proto",
        "tinycode/v1/connectors.proto",
        "tinycode/v1/providers.proto",
    ];
    for file in &files {
        println!("cargo:rerun-if-changed={}", proto_root.join(file).display());
    }
    let fds = protox::compile(files, [&proto_root])?;
    let out_dir = PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(out_dir.join("tinycode_descriptor.bin"), fds.encode_to_vec())?;
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        .compile_fds(fds)?;
    Ok(())
}
