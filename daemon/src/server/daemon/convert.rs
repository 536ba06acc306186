//! The Daemon service's boundary: requests checked and typed (`TryFrom`),
//! MCP servers' state in its wire form.

use std::time::Duration;

use tinycode_shared::proto::{McpServerStatus, ShutdownRequest};
use tonic::Status;

/// `Daemon.Shutdown`, checked: stop now, or first let running work finish
/// for at most this long.
pub struct Shutdown {
    pub drain: Option<Duration>,
}

impl TryFrom<ShutdownRequest> for Shutdown {
    type Error = Status;

    fn try_from(req: ShutdownRequest) -> Result<Self, Status> {
        if req.drain_seconds > 3600 {
            return Err(Status::invalid_argument(format!(
                "`drain_seconds` must be at most 3600 (an hour), got {}",
                req.drain_seconds
            )));
        }
        let seconds = match req.drain_seconds {
            0 => 60,
            n => n,
        };
        Ok(Self {
            drain: req.drain.then(|| Duration::from_secs(seconds.into())),
        })
    }
}

pub fn mcp_status(s: &crate::mcp::ServerStatus) -> McpServerStatus {
    use crate::mcp::ServerState;
    let (tools, error) = match &s.state {
        ServerState::Ready { tools } => (*tools, String::new()),
        ServerState::Failed { error } => (0, error.clone()),
        ServerState::Unsupported { kind } => {
            (0, format!("the {kind} transport is not supported yet"))
        }
        ServerState::Connecting | ServerState::Disabled => (0, String::new()),
    };
    McpServerStatus {
        name: s.name.clone(),
        state: s.state.name().into(),
        tools,
        error,
        starts: s.starts,
    }
}
