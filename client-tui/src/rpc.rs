//! What the UI asks of the daemon ([`Rpc`]) and what comes back
//! ([`NetEvent`]). The app only produces and consumes these values; the
//! network layer turns them into gRPC calls, so key handling is tested by
//! asserting the requests it produced.

use tinycode_shared::proto::{
    CancelTurnRequest, CompactSessionRequest, CreateSessionRequest, DaemonStatus,
    DecideApprovalRequest, Event, GenerateReportRequest, GetTicketRequest, ListSessionsRequest,
    ListTicketsRequest, ReportContent, SendMessageRequest, SessionInfo, SessionUpdate,
    SetSessionModelRequest, Ticket,
};

/// A request for the daemon.
#[derive(Debug, Clone, PartialEq)]
pub enum Rpc {
    /// Follow a session (replacing the one followed): `Sessions.Attach`
    /// from `from_sequence`, again after each reconnect from the last
    /// sequence seen.
    Attach {
        session_id: String,
        from_sequence: u64,
    },
    /// `Sessions.Create`, then attach to it.
    Create(CreateSessionRequest),
    /// The newest session (`--continue`, `/resume` with nothing open), then
    /// attach; a new one when there is none.
    AttachLatest,
    Send(SendMessageRequest),
    Cancel(CancelTurnRequest),
    Decide(DecideApprovalRequest),
    Compact(CompactSessionRequest),
    /// `Sessions.SetModel`: the followed session's next turns.
    SetModel(SetSessionModelRequest),
    ListSessions(ListSessionsRequest),
    ListTickets(ListTicketsRequest),
    GetTicket(GetTicketRequest),
    /// `Reports.Generate`, then `Reports.Get` of what it made.
    Report(GenerateReportRequest),
    /// `Daemon.GetStatus`.
    Status,
    /// `Sessions.Get` of the followed session (status bar).
    Refresh {
        session_id: String,
    },
}

/// Something the daemon (or the connection) said.
#[derive(Debug, Clone)]
pub enum NetEvent {
    /// Connected (again); the daemon's status.
    Connected(Box<DaemonStatus>),
    /// The connection is gone; the network layer keeps retrying.
    Disconnected(String),
    /// A session to follow now (created, or the newest for `--continue`).
    Opened(Box<SessionInfo>),
    /// Fresh information on a session (shown if it is the one followed).
    Info(Box<SessionInfo>),
    /// A stored event or live delta of session `session_id`.
    Update {
        session_id: String,
        update: Box<SessionUpdate>,
    },
    /// An approval event of any session (`Approvals.Watch`).
    Approval(Box<Event>),
    Sessions(Vec<SessionInfo>),
    Tickets(Vec<Ticket>),
    Ticket(Box<Ticket>),
    /// A report made for `/report`.
    Report(Box<ReportContent>),
    /// A finished request's one-line answer (e.g. "compacted 12 messages").
    Notice(String),
    /// A request failed; the message says what to do.
    Error(String),
}

/// The daemon connection as the status bar shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Connection {
    Connecting,
    Connected,
    Lost(String),
}
