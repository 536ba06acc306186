//! What the pages read from the daemon: the log's position, one stream's
//! events, and each page's view (the desk, a ticket, the approvals, a
//! session).

use tinycode_shared::proto::*;

use crate::grpc::{Daemon, Failed};
use crate::pages::{self, DeskView, Filter, TicketView};

impl Daemon {
    /// The log's last sequence: a page read after it and followed live
    /// from the next one misses nothing.
    pub async fn now(&self) -> Result<u64, Failed> {
        let request = ReadStreamRequest {
            stream_id: "web-now".into(),
            limit: 1,
            ..Default::default()
        };
        Ok(self
            .events()
            .read_stream(request)
            .await?
            .into_inner()
            .last_sequence)
    }

    pub async fn status(&self) -> Result<DaemonStatus, Failed> {
        Ok(self
            .daemon()
            .get_status(GetStatusRequest {})
            .await?
            .into_inner())
    }

    /// Every event of one stream, and the log's sequence they were read
    /// at (the live stream continues after it).
    pub async fn read_stream(&self, stream_id: &str) -> Result<(Vec<Event>, u64), Failed> {
        let mut events = Vec::new();
        let mut from_version = 1;
        let mut at = None;
        loop {
            let page = self
                .events()
                .read_stream(ReadStreamRequest {
                    stream_id: stream_id.into(),
                    from_version,
                    limit: 5_000,
                })
                .await?
                .into_inner();
            at.get_or_insert(page.last_sequence);
            events.extend(page.events);
            if page.next_version == 0 {
                break;
            }
            from_version = page.next_version;
        }
        let last = events.iter().map(|e| e.sequence).max().unwrap_or(0);
        Ok((events, at.unwrap_or(0).max(last)))
    }

    pub(super) async fn desk(&self, filter: Filter, from: u64) -> Result<DeskView, Failed> {
        let listing = async {
            if filter.q.trim().is_empty() {
                let request = ListTicketsRequest {
                    status: filter.status.clone(),
                    queue: filter.queue.clone(),
                    priority: filter.priority.clone(),
                    category: filter.category.clone(),
                    limit: 100,
                    min_sequence: from,
                    page_token: filter.from.clone(),
                    order: "urgent".into(),
                    brief: true,
                    ..Default::default()
                };
                let page = self.tickets().list(request).await?.into_inner();
                Ok::<_, Failed>((page.tickets, page.total, page.next_page_token, None))
            } else {
                let request = SearchRequest {
                    query: filter.q.clone(),
                    limit: 50,
                };
                let hits = self.tickets().search(request).await?.into_inner().hits;
                Ok((Vec::new(), 0, String::new(), Some(hits)))
            }
        };
        // The desk's queues and categories, asked at the same time.
        let (status, listing) = tokio::join!(self.status(), listing);
        let (status, (tickets, total, next, hits)) = (status?, listing?);
        Ok(DeskView {
            filter,
            queues: status.queues,
            categories: status.categories,
            tickets,
            total,
            next,
            hits,
        })
    }

    pub(super) async fn ticket(&self, id: &str) -> Result<(TicketView, u64), Failed> {
        let (history, from) = self.read_stream(&format!("ticket-{id}")).await?;
        let ticket = self
            .tickets()
            .get(GetTicketRequest {
                id: id.into(),
                min_sequence: from,
            })
            .await?
            .into_inner();
        let status = self.status().await?;
        let triage = self
            .triage()
            .get_status(TriageStatusRequest {
                ticket_ids: vec![id.into()],
                ..Default::default()
            })
            .await?
            .into_inner()
            .items
            .into_iter()
            .next();
        let triage_events = match triage.as_ref().filter(|t| !t.session_id.is_empty()) {
            Some(t) => {
                self.read_stream(&format!("session-{}", t.session_id))
                    .await?
                    .0
            }
            None => Vec::new(),
        };
        let view = TicketView {
            ticket,
            history,
            triage,
            triage_events,
            queues: status.queues,
            categories: status.categories,
        };
        Ok((view, from))
    }

    pub(super) async fn inbox(&self) -> Result<pages::ApprovalsView, Failed> {
        let pending = self
            .approvals()
            .list(ListApprovalsRequest {
                limit: 200,
                order: "due".into(),
                ..Default::default()
            })
            .await?
            .into_inner()
            .approvals;
        let recent = self
            .approvals()
            .list(ListApprovalsRequest {
                all: true,
                newest_first: true,
                limit: 30,
                ..Default::default()
            })
            .await?
            .into_inner()
            .approvals
            .into_iter()
            .filter(|a| a.state != ApprovalState::Pending as i32)
            .collect();
        Ok(pages::ApprovalsView { pending, recent })
    }

    pub(super) async fn pending(&self, session_id: &str) -> Result<Vec<ApprovalInfo>, Failed> {
        let request = ListApprovalsRequest {
            session_id: session_id.into(),
            limit: 200,
            ..Default::default()
        };
        Ok(self.approvals().list(request).await?.into_inner().approvals)
    }

    pub(super) async fn session(&self, id: &str) -> Result<pages::SessionView, Failed> {
        let (events, last_sequence) = self.read_stream(&format!("session-{id}")).await?;
        let info = self
            .sessions()
            .get(GetSessionRequest {
                id: id.into(),
                min_sequence: last_sequence,
            })
            .await?
            .into_inner();
        let pending = self.pending(id).await?;
        Ok(pages::SessionView {
            info,
            events,
            pending,
            last_sequence,
        })
    }
}
