//! `Triage.GetStatus`: counts by state, tickets per queue, and the items.

use std::collections::BTreeMap;

use tinycode_shared::proto::{QueueCount, TriageItem, TriageState, TriageStatus};

use super::board::{Phase, Record};
use super::{Triage, TriageError};

/// Where a record sorts on the board, as a page token: unfinished records
/// by arrival (`0:<sequence>:<id>`), then the rest by id (`1:<id>`).
fn board_key(r: &Record) -> String {
    if r.phase.finished() {
        format!("1:{}", r.ticket)
    } else {
        format!("0:{:020}:{}", r.queued_sequence, r.ticket)
    }
}

impl Triage {
    /// The status now: counts over every record; `items` for `ids` (all
    /// when empty) unless `counts_only`, one page of them after `after`.
    pub fn status(
        &self,
        ids: &[String],
        counts_only: bool,
        after: Option<String>,
        limit: usize,
    ) -> Result<TriageStatus, TriageError> {
        let sequence = self.board.applied();
        let records = self.records_in_order(ids, !counts_only)?;
        let mut status = TriageStatus {
            auto_triage: self.config().enabled,
            concurrency: self.slot_count() as u32,
            sequence,
            ..TriageStatus::default()
        };
        let mut per_queue: BTreeMap<String, u32> = BTreeMap::new();
        // Each item is built once (it reads its ticket): counted, and kept
        // for the page unless counts only.
        let mut items: Vec<(String, TriageItem)> = Vec::new();
        for (key, r) in records {
            let item = self.item(&r);
            match TriageState::try_from(item.state).unwrap_or_default() {
                TriageState::Queued => status.queued += 1,
                TriageState::Running => status.running += 1,
                TriageState::WaitingForApproval => status.waiting_for_approval += 1,
                TriageState::Retrying => status.retrying += 1,
                TriageState::Done => status.done += 1,
                TriageState::Failed => status.failed += 1,
                TriageState::Skipped => status.skipped += 1,
                TriageState::Unspecified => {}
            }
            if r.outcome == super::settle::INCOMPLETE
                && !matches!(r.phase, Phase::Done | Phase::Skipped)
            {
                status.incomplete += 1;
            }
            if r.phase == Phase::Done && !item.queue.is_empty() {
                *per_queue.entry(item.queue.clone()).or_default() += 1;
            }
            if !counts_only {
                items.push((key, item));
            }
        }
        if !counts_only {
            let (page, next) = crate::paging::page_by(
                items,
                |(key, _)| key.clone(),
                |(_, item)| prost::Message::encoded_len(item),
                after,
                if limit == 0 { usize::MAX } else { limit },
            );
            status.items = page.into_iter().map(|(_, item)| item).collect();
            status.next_page_token = next.unwrap_or_default();
        }
        status.queues = self.queue_counts(per_queue);
        Ok(status)
    }

    /// The records of `ids` (all when empty) with their board keys, in
    /// queue order: unfinished records by arrival, then the rest by id
    /// (unless `ordered` is false: counts need neither).
    fn records_in_order(
        &self,
        ids: &[String],
        ordered: bool,
    ) -> Result<Vec<(String, Record)>, TriageError> {
        let records: Vec<Record> = if ids.is_empty() {
            self.records().all()?
        } else {
            let mut found = Vec::new();
            for id in ids {
                found.extend(self.record(id)?);
            }
            found
        };
        if !ordered {
            return Ok(records.into_iter().map(|r| (String::new(), r)).collect());
        }
        let mut records: Vec<(String, Record)> =
            records.into_iter().map(|r| (board_key(&r), r)).collect();
        records.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(records)
    }

    /// Tickets done per queue: the desk's queues first, in its order, then
    /// any other.
    fn queue_counts(&self, mut per_queue: BTreeMap<String, u32>) -> Vec<QueueCount> {
        let mut queues = Vec::new();
        for q in self.desk.queues() {
            if let Some(n) = per_queue.remove(q) {
                queues.push(QueueCount {
                    queue: q.clone(),
                    tickets: n,
                });
            }
        }
        queues.extend(
            per_queue
                .into_iter()
                .map(|(queue, tickets)| QueueCount { queue, tickets }),
        );
        queues
    }

    fn item(&self, r: &Record) -> TriageItem {
        // The attempt's turn as the log says (the sessions model), so that
        // every daemon sharing the log counts a record alike whichever
        // holds it; this daemon's own note of it while the model catches up.
        let turn = (r.phase == Phase::Running)
            .then(|| {
                self.sessions
                    .last_turn_after(&r.session, r.started_sequence)
                    .map(|(turn, _)| turn)
                    .or_else(|| self.turn_of(r))
            })
            .flatten();
        let approvals = if let Some(turn) = turn {
            self.sessions
                .approvals()
                .pending_of_turn(&r.session, turn)
                .unwrap_or_else(|e| {
                    tracing::warn!(error = %e, "cannot read the approvals of a triage turn");
                    Vec::new()
                })
        } else {
            Vec::new()
        };
        let state = match r.phase {
            Phase::Queued => TriageState::Queued,
            Phase::Running if !approvals.is_empty() => TriageState::WaitingForApproval,
            Phase::Running => TriageState::Running,
            Phase::Retrying => TriageState::Retrying,
            Phase::Done => TriageState::Done,
            Phase::Failed => TriageState::Failed,
            Phase::Skipped => TriageState::Skipped,
        };
        let mut item = TriageItem {
            ticket_id: r.ticket.clone(),
            state: state as i32,
            session_id: r.session.clone(),
            attempt: r.attempt,
            approval_ids: approvals,
            outcome: r.outcome.clone(),
            error: r.error.clone(),
            sequence: r.sequence,
            ..TriageItem::default()
        };
        // Its head only: a board of thousands reads none of their texts.
        self.desk.with_ticket_head(&r.ticket, |t| {
            item.category = t.category.clone();
            item.priority = t.priority.clone();
            item.queue = t.queue.clone();
            item.escalate_level = t.escalate_level;
            item.ticket_status = t.status.clone();
        });
        item
    }
}
