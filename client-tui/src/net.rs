//! The gRPC side of the TUI. It follows one session (`Sessions.Attach`)
//! and every approval (`Approvals.Watch`), each in a task that reconnects
//! after losing the daemon and resumes after the last sequence it passed
//! on, so nothing is shown twice or skipped. Other requests run in a task
//! each and answer with a [`NetEvent`].

use std::path::PathBuf;
use std::time::Duration;

use tinycode_shared::client::{self, ClientName, DaemonChannel};
use tinycode_shared::proto::approvals_client::ApprovalsClient;
use tinycode_shared::proto::daemon_client::DaemonClient;
use tinycode_shared::proto::reports_client::ReportsClient;
use tinycode_shared::proto::session_update::Update;
use tinycode_shared::proto::sessions_client::SessionsClient;
use tinycode_shared::proto::tickets_client::TicketsClient;
use tinycode_shared::proto::{
    AttachRequest, CancelTurnRequest, CompactSessionRequest, CreateSessionRequest,
    GetReportRequest, GetSessionRequest, GetStatusRequest, ListSessionsRequest, SendMessageRequest,
    SessionInfo, WatchApprovalsRequest,
};
use tokio::sync::mpsc::UnboundedSender;
use tokio::task::JoinHandle;
use tonic::Code;

use crate::rpc::{NetEvent, Rpc};

/// Pause between reconnection attempts.
const RETRY: Duration = Duration::from_millis(500);

/// Why a followed stream stopped.
enum Stop {
    /// The daemon is gone (or closed the stream): reconnect.
    Lost(String),
    /// Retrying cannot help (the session does not exist).
    Fatal(String),
}

impl From<tonic::Status> for Stop {
    fn from(s: tonic::Status) -> Self {
        match s.code() {
            Code::NotFound | Code::InvalidArgument | Code::PermissionDenied => {
                Stop::Fatal(s.message().to_string())
            }
            _ => Stop::Lost(s.message().to_string()),
        }
    }
}

#[derive(Clone)]
struct Link {
    socket: PathBuf,
    client: ClientName,
    events: UnboundedSender<NetEvent>,
}

impl Link {
    async fn channel(&self) -> Result<DaemonChannel, Stop> {
        client::connect(&self.socket, &self.client)
            .await
            .map_err(|e| Stop::Lost(short(&e.to_string())))
    }

    fn send(&self, event: NetEvent) {
        let _ = self.events.send(event);
    }
}

/// The first clause of a connection error (the banner has one line).
fn short(message: &str) -> String {
    message
        .split(';')
        .next()
        .unwrap_or(message)
        .trim()
        .to_string()
}

pub struct Net {
    link: Link,
    attach: Option<JoinHandle<()>>,
    approvals: JoinHandle<()>,
}

impl Drop for Net {
    fn drop(&mut self) {
        if let Some(a) = &self.attach {
            a.abort();
        }
        self.approvals.abort();
    }
}

impl Net {
    /// Start following approvals; sessions are followed on [`Rpc::Attach`].
    pub fn start(socket: PathBuf, client: ClientName, events: UnboundedSender<NetEvent>) -> Self {
        let link = Link {
            socket,
            client,
            events,
        };
        let approvals = tokio::spawn(watch_approvals(link.clone()));
        Self {
            link,
            attach: None,
            approvals,
        }
    }

    pub fn execute(&mut self, rpc: Rpc) {
        if let Rpc::Attach {
            session_id,
            from_sequence,
        } = rpc
        {
            if let Some(old) = self.attach.take() {
                old.abort();
            }
            let link = self.link.clone();
            self.attach = Some(tokio::spawn(follow(link, session_id, from_sequence)));
            return;
        }
        let link = self.link.clone();
        tokio::spawn(async move {
            if let Err(Stop::Lost(e) | Stop::Fatal(e)) = request(&link, rpc).await {
                link.send(NetEvent::Error(e));
            }
        });
    }
}

/// Follow a session from `from`, reconnecting until a fatal error.
async fn follow(link: Link, session_id: String, mut from: u64) {
    loop {
        match attach_once(&link, &session_id, &mut from).await {
            Stop::Fatal(e) => {
                link.send(NetEvent::Error(format!("cannot attach {session_id}: {e}")));
                return;
            }
            Stop::Lost(e) => link.send(NetEvent::Disconnected(e)),
        }
        tokio::time::sleep(RETRY).await;
    }
}

async fn attach_once(link: &Link, session_id: &str, from: &mut u64) -> Stop {
    let result: Result<(), Stop> = async {
        let channel = link.channel().await?;
        let status = DaemonClient::new(channel.clone())
            .get_status(GetStatusRequest {})
            .await?
            .into_inner();
        let mut sessions = SessionsClient::new(channel);
        let mut stream = sessions
            .attach(AttachRequest {
                session_id: session_id.to_string(),
                from_sequence: *from,
            })
            .await?
            .into_inner();
        link.send(NetEvent::Connected(Box::new(status)));
        let info = sessions
            .get(GetSessionRequest {
                id: session_id.to_string(),
                ..Default::default()
            })
            .await?
            .into_inner();
        link.send(NetEvent::Info(Box::new(info)));
        while let Some(update) = stream.message().await? {
            if let Some(Update::Event(e)) = &update.update {
                *from = e.sequence + 1;
            }
            link.send(NetEvent::Update {
                session_id: session_id.to_string(),
                update: Box::new(update),
            });
        }
        Ok(())
    }
    .await;
    match result {
        Ok(()) => Stop::Lost("the daemon closed the session stream".into()),
        Err(stop) => stop,
    }
}

/// Every approval event from the start, again after each reconnect from
/// the last one passed on.
async fn watch_approvals(link: Link) {
    let mut from = 1;
    loop {
        let result: Result<(), Stop> = async {
            let channel = link.channel().await?;
            let mut stream = ApprovalsClient::new(channel)
                .watch(WatchApprovalsRequest {
                    from_sequence: from,
                })
                .await?
                .into_inner();
            while let Some(e) = stream.message().await? {
                from = e.sequence + 1;
                link.send(NetEvent::Approval(Box::new(e)));
            }
            Ok(())
        }
        .await;
        if let Err(Stop::Fatal(e)) = result {
            link.send(NetEvent::Error(format!("cannot follow approvals: {e}")));
            return;
        }
        tokio::time::sleep(RETRY).await;
    }
}

/// One request; its answer becomes an event.
async fn request(link: &Link, rpc: Rpc) -> Result<(), Stop> {
    let channel = link.channel().await?;
    let mut sessions = SessionsClient::new(channel.clone());
    let event = match rpc {
        Rpc::Attach { .. } => return Ok(()),
        Rpc::Create(req) => NetEvent::Opened(Box::new(sessions.create(req).await?.into_inner())),
        Rpc::AttachLatest => NetEvent::Opened(Box::new(latest_or_new(&mut sessions).await?)),
        Rpc::Send(req) => match send(&mut sessions, req).await? {
            Some(notice) => notice,
            None => return Ok(()),
        },
        Rpc::Cancel(req) => cancel(&mut sessions, req).await?,
        Rpc::Decide(req) => {
            ApprovalsClient::new(channel).decide(req).await?;
            return Ok(());
        }
        Rpc::Compact(req) => compact(&mut sessions, req).await?,
        Rpc::SetModel(req) => NetEvent::Info(Box::new(sessions.set_model(req).await?.into_inner())),
        Rpc::ListSessions(req) => {
            NetEvent::Sessions(sessions.list(req).await?.into_inner().sessions)
        }
        Rpc::ListTickets(req) => NetEvent::Tickets(
            TicketsClient::new(channel)
                .list(req)
                .await?
                .into_inner()
                .tickets,
        ),
        Rpc::GetTicket(req) => NetEvent::Ticket(Box::new(
            TicketsClient::new(channel).get(req).await?.into_inner(),
        )),
        Rpc::Report(req) => {
            let mut reports = ReportsClient::new(channel);
            let report_id = reports.generate(req).await?.into_inner().report_id;
            let content = reports.get(GetReportRequest { report_id }).await?;
            NetEvent::Report(Box::new(content.into_inner()))
        }
        Rpc::Status => NetEvent::Connected(Box::new(
            DaemonClient::new(channel)
                .get_status(GetStatusRequest {})
                .await?
                .into_inner(),
        )),
        Rpc::Refresh { session_id } => NetEvent::Info(Box::new(
            sessions
                .get(GetSessionRequest {
                    id: session_id,
                    ..Default::default()
                })
                .await?
                .into_inner(),
        )),
    };
    link.send(event);
    Ok(())
}

/// The newest session, or a new one when there is none.
async fn latest_or_new(
    sessions: &mut SessionsClient<DaemonChannel>,
) -> Result<SessionInfo, tonic::Status> {
    let latest = sessions
        .list(ListSessionsRequest {
            limit: 1,
            ..Default::default()
        })
        .await?
        .into_inner()
        .sessions
        .into_iter()
        .next();
    Ok(match latest {
        Some(info) => info,
        None => sessions
            .create(CreateSessionRequest::default())
            .await?
            .into_inner(),
    })
}

/// Send a message; a notice only when its turn is queued.
async fn send(
    sessions: &mut SessionsClient<DaemonChannel>,
    req: SendMessageRequest,
) -> Result<Option<NetEvent>, tonic::Status> {
    let sent = sessions.send_message(req).await?.into_inner();
    if !sent.queued {
        return Ok(None);
    }
    Ok(Some(NetEvent::Notice(format!(
        "turn {} queued: it starts when the running turn ends",
        sent.turn
    ))))
}

/// Cancel the running turn; the notice says whether one was.
async fn cancel(
    sessions: &mut SessionsClient<DaemonChannel>,
    req: CancelTurnRequest,
) -> Result<NetEvent, tonic::Status> {
    let cancelled = sessions.cancel_turn(req).await?.into_inner().cancelled;
    Ok(NetEvent::Notice(if cancelled {
        "cancelling the turn…".into()
    } else {
        "no turn is running".into()
    }))
}

/// Compact the session now; the notice says by how much.
async fn compact(
    sessions: &mut SessionsClient<DaemonChannel>,
    req: CompactSessionRequest,
) -> Result<NetEvent, tonic::Status> {
    let c = sessions.compact(req).await?.into_inner();
    Ok(NetEvent::Notice(if c.compacted {
        format!(
            "compacted {} messages: context {} → {} tokens",
            c.summarized_messages, c.tokens_before, c.tokens_after
        )
    } else {
        "nothing to compact yet".into()
    }))
}
