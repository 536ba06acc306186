use std::path::{Path, PathBuf};
use std::sync::Arc;

use tinycode_shared::proto::event::Payload;
use tinycode_shared::proto::{TicketClassified, TicketRouted};

use super::*;
use crate::search::Kind;
use crate::store::EventStore;

/// A writable copy of the fixture workspace.
pub(crate) fn fixture_copy() -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().join("desk");
    copy_dir(
        &Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../../shared/fixtures/tinycode-support-desk"),
        &ws,
    );
    (tmp, ws)
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::write(&target, std::fs::read(entry.path()).unwrap()).unwrap();
        }
    }
}

/// Open the desk; after a close, once the previous desk's projector tasks
/// have let go of the database (they end a moment after the store closes).
pub(crate) async fn open(ws: &Path, db: &Path) -> (Arc<Desk>, LoadReport, EventStore) {
    reopen(ws, db).await
}

/// Every ticket folded from the log alone, by id.
pub(crate) async fn fold_from_log(
    store: &EventStore,
) -> std::collections::BTreeMap<String, tinycode_shared::proto::Ticket> {
    let mut tickets = std::collections::BTreeMap::new();
    for event in store.read_range(1, u64::MAX, usize::MAX).await.unwrap() {
        if let Some(id) = event.stream_id.strip_prefix("ticket-") {
            let t: &mut tinycode_shared::proto::Ticket = tickets.entry(id.to_string()).or_default();
            crate::ticket::apply(t, &event);
        }
    }
    tickets
}

/// Settled, with every SLA alert due now recorded and folded (the
/// fixture's tickets are long past due: the desk records their alerts as it
/// starts).
pub(crate) async fn sla_quiet(desk: &Desk) {
    for _ in 0..1000 {
        desk.settled().await.unwrap();
        if desk.schedule.due(crate::clock::now_unix()).is_empty() {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    panic!("SLA alerts stayed due")
}

/// The projection equals a fold of the log, and every file equals it.
pub(crate) async fn assert_consistent(desk: &Desk, store: &EventStore, ws: &Path) {
    sla_quiet(desk).await;
    let folded = fold_from_log(store).await;
    let (listed, total) = desk.list_tickets(&TicketFilter::default(), usize::MAX);
    assert_eq!(total, folded.len());
    for t in &listed {
        // The SLA clocks are worked out on reading, not folded.
        assert!(!t.sla.is_empty(), "clocks of {}", t.id);
        let t = &tinycode_shared::proto::Ticket {
            sla: Vec::new(),
            ..t.clone()
        };
        assert_eq!(Some(t), folded.get(&t.id), "projection of {}", t.id);
        let file = read(ws.join(format!("tickets/{}.json", t.id)));
        assert_eq!(
            file,
            crate::ticket::render_ticket_file(t),
            "file of {}",
            t.id
        );
    }
}

fn read(path: PathBuf) -> String {
    std::fs::read_to_string(path).unwrap()
}

/// The copies of ticket file `name` kept aside (`<name>.rejected-<seq>`).
fn kept_aside(ws: &Path, name: &str) -> Vec<PathBuf> {
    let prefix = format!("{name}.rejected-");
    std::fs::read_dir(ws.join("tickets"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|p| p.to_string_lossy().contains(&prefix))
        .collect()
}

#[tokio::test]
async fn the_fixture_imports_once_and_restarts_are_no_ops() {
    let (tmp, ws) = fixture_copy();
    let db = tmp.path().join("db");
    let before: Vec<String> = ["T-1001", "T-1002", "T-1003"]
        .iter()
        .map(|id| read(ws.join(format!("tickets/{id}.json"))))
        .collect();
    let (desk, report, store) = open(&ws, &db).await;
    assert_eq!(
        (
            report.imported,
            report.updated,
            report.tickets,
            report.articles
        ),
        (3, 0, 3, 3)
    );
    assert!(report.warnings.is_empty(), "{:?}", report.warnings);
    assert_eq!(desk.get_ticket("T-1001").unwrap().customer, "张伟");
    let events = store.last_sequence();
    store.close().await.unwrap();
    drop((desk, store));
    for _ in 0..2 {
        let (_, report, store) = open(&ws, &db).await;
        assert_eq!((report.imported, report.updated), (0, 0));
        assert_eq!(store.last_sequence(), events, "restart adds no events");
        store.close().await.unwrap();
    }
    // Opening never rewrote the files.
    for (i, id) in ["T-1001", "T-1002", "T-1003"].iter().enumerate() {
        assert_eq!(read(ws.join(format!("tickets/{id}.json"))), before[i]);
    }
}

#[tokio::test]
async fn changes_go_to_the_log_then_the_file_and_leave_other_tickets_alone() {
    let (tmp, ws) = fixture_copy();
    let (desk, _, store) = open(&ws, &tmp.path().join("db")).await;
    let other = read(ws.join("tickets/T-1002.json"));
    let t = desk
        .change_ticket("T-1001", |_| {
            Ok(vec![
                Payload::TicketClassified(TicketClassified {
                    by: None,
                    origin: None,
                    category: "退款".into(),
                    priority: "P1".into(),
                    intent: "refund".into(),
                    summary: "未收到货要求退款".into(),
                    ..Default::default()
                }),
                Payload::TicketRouted(TicketRouted {
                    by: None,
                    origin: None,
                    queue: "售后组".into(),
                    reason: "refund-policy".into(),
                    ..Default::default()
                }),
            ])
        })
        .await
        .unwrap();
    assert_eq!(
        (t.status.as_str(), t.queue.as_str(), t.version),
        ("routed", "售后组", 3)
    );
    desk.settled().await.unwrap();
    let file = crate::ticket::parse_ticket_file(&read(ws.join("tickets/T-1001.json"))).unwrap();
    assert!(
        crate::ticket::same_content(&file, &t),
        "file mirrors the projection"
    );
    assert_eq!(read(ws.join("tickets/T-1002.json")), other);
    let stream = store.read_stream("ticket-T-1001", 1, 10).await.unwrap();
    assert_eq!(stream.len(), 3);
}

#[tokio::test]
async fn a_hand_edited_file_is_imported_as_an_update() {
    let (tmp, ws) = fixture_copy();
    let db = tmp.path().join("db");
    let (desk, _, store) = open(&ws, &db).await;
    store.close().await.unwrap();
    drop((desk, store));
    let path = ws.join("tickets/T-1002.json");
    std::fs::write(&path, read(path.clone()).replace("480", "120")).unwrap();
    let (desk, report, store) = open(&ws, &db).await;
    assert_eq!((report.imported, report.updated), (0, 1));
    assert_eq!(desk.get_ticket("T-1002").unwrap().sla_minutes, 120);
    let last = store.read_stream("ticket-T-1002", 2, 1).await.unwrap();
    assert!(matches!(
        last[0].payload,
        Some(Payload::TicketUpdatedFromFile(_))
    ));
}

/// A workspace copied, or restored from a backup, holds the same files at
/// new stamps: the first start reads them back and records their stamps,
/// and the starts after it know them by their stamps again (each one read
/// every file before).
#[tokio::test]
async fn files_restored_at_new_stamps_are_read_back_once() {
    let (tmp, ws) = fixture_copy();
    let db = tmp.path().join("db");
    let (desk, report, store) = open(&ws, &db).await;
    assert_eq!(report.read, 6, "three tickets and three articles, new");
    closed(desk, store).await;
    let (desk, report, store) = open(&ws, &db).await;
    assert_eq!(report.read, 0, "nothing touched since");
    closed(desk, store).await;
    // As a restore does: each file written again, the same bytes under a
    // new inode, with the modification time it had (an hour ago, say).
    let an_hour_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
    let files: Vec<PathBuf> = ["tickets", "knowledge"]
        .iter()
        .flat_map(|dir| std::fs::read_dir(ws.join(dir)).unwrap())
        .map(|entry| entry.unwrap().path())
        .collect();
    for path in &files {
        let restored = path.with_extension("restored");
        std::fs::write(&restored, std::fs::read(path).unwrap()).unwrap();
        let file = std::fs::File::options()
            .write(true)
            .open(&restored)
            .unwrap();
        file.set_modified(an_hour_ago).unwrap();
        std::fs::rename(&restored, path).unwrap();
    }
    let (desk, report, store) = open(&ws, &db).await;
    assert_eq!(report.read, 6, "every file at a new stamp is read back");
    assert_eq!((report.imported, report.updated), (0, 0));
    assert!(report.warnings.is_empty(), "{:?}", report.warnings);
    closed(desk, store).await;
    for _ in 0..2 {
        let (desk, report, store) = open(&ws, &db).await;
        assert_eq!(report.read, 0, "known by their new stamps");
        closed(desk, store).await;
    }
}

/// A file the mirror wrote that is missing when the start looks, and is put
/// back with other content before the desk writes it again (a checkout, a
/// restore), is kept aside, not overwritten.
#[tokio::test]
async fn a_file_put_back_after_the_look_is_kept_aside_not_overwritten() {
    let (tmp, ws) = fixture_copy();
    let db = tmp.path().join("db");
    let (desk, _, store) = open(&ws, &db).await;
    closed(desk, store).await;
    let path = ws.join("tickets/T-1001.json");
    std::fs::remove_file(&path).unwrap();
    let settings = settings_of(&ws);
    let look = FilesLook::start(&ws, &settings);
    while !look.is_finished() {
        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
    }
    let put_back = "{\"id\": \"T-1001\", \"note\": \"written by a person\"}\n";
    std::fs::write(&path, put_back).unwrap();
    let store = open_store(&db).await;
    let (desk, _) = Desk::open_looked(store.clone(), &ws, &settings, look)
        .await
        .unwrap();
    let aside = kept_aside(&ws, "T-1001.json");
    assert_eq!(aside.len(), 1, "{aside:?}");
    assert_eq!(read(aside[0].clone()), put_back);
    assert_ne!(read(path.clone()), put_back, "written again from the log");
    closed(desk, store).await;
}

/// Close the desk and its store, and wait until the database is free.
async fn closed(desk: Arc<Desk>, store: EventStore) {
    desk.settled().await.unwrap();
    store.close().await.unwrap();
    drop((desk, store));
}

/// Open the store once a closed one's tasks have let go of it.
async fn open_store(db: &Path) -> EventStore {
    for _ in 0..500 {
        if let Ok(store) = EventStore::open(db) {
            return store;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    panic!("the store stayed locked")
}

async fn reopen(ws: &Path, db: &Path) -> (Arc<Desk>, LoadReport, EventStore) {
    let store = open_store(db).await;
    let (desk, report) = Desk::open(store.clone(), ws, &settings_of(ws))
        .await
        .unwrap();
    (desk, report, store)
}

#[tokio::test]
async fn a_hand_edit_back_to_an_older_state_is_an_edit_and_unknown_files_are_kept() {
    let (tmp, ws) = fixture_copy();
    let db = tmp.path().join("db");
    let (desk, _, store) = open(&ws, &db).await;
    let original = read(ws.join("tickets/T-1002.json"));
    desk.add_customer_message("T-1002", "还没到").await.unwrap();
    closed(desk, store).await;
    // The person puts the file back as it was before the message: that is
    // an edit (older than what the mirror last wrote), not a stale file.
    std::fs::write(ws.join("tickets/T-1002.json"), &original).unwrap();
    let (desk, report, store) = reopen(&ws, &db).await;
    assert_eq!(report.updated, 1, "{report:?}");
    assert_eq!(desk.get_ticket("T-1002").unwrap().messages.len(), 1);

    // With no record of writing a file (the mirror's records gone), a file
    // that differs from the log is neither imported nor lost: kept aside.
    let t1001 = read(ws.join("tickets/T-1001.json"));
    closed(desk, store).await;
    {
        let store = open_store(&db).await;
        store
            .projection_tree("proj-mirror")
            .unwrap()
            .clear()
            .unwrap();
        store.close().await.unwrap();
    }
    let edited = t1001.replace("张伟", "王五");
    std::fs::write(ws.join("tickets/T-1001.json"), &edited).unwrap();
    let (desk, report, store) = reopen(&ws, &db).await;
    assert_eq!(report.updated, 0, "{report:?}");
    assert!(
        report
            .warnings
            .iter()
            .any(|w| w.contains("no record of writing it")),
        "{report:?}"
    );
    assert_eq!(desk.get_ticket("T-1001").unwrap().customer, "张伟");
    assert_eq!(
        read(ws.join("tickets/T-1001.json")),
        t1001,
        "written from the log"
    );
    let kept = kept_aside(&ws, "T-1001.json");
    assert_eq!(kept.len(), 1, "{kept:?}");
    assert_eq!(read(kept[0].clone()), edited, "the edit is kept");
    assert_consistent(&desk, &store, &ws).await;
}

#[tokio::test]
async fn malformed_files_are_skipped_with_the_file_and_field_named() {
    let (tmp, ws) = fixture_copy();
    std::fs::write(ws.join("tickets/T-2001.json"), "{ not json").unwrap();
    let bad = read(ws.join("tickets/T-1001.json"))
        .replace("T-1001", "T-2002")
        .replace("\"email\"", "\"fax\"");
    std::fs::write(ws.join("tickets/T-2002.json"), bad).unwrap();
    let misnamed = read(ws.join("tickets/T-1001.json"));
    std::fs::write(ws.join("tickets/T-2003.json"), misnamed).unwrap();
    std::fs::write(ws.join("knowledge/broken.md"), "no frontmatter").unwrap();
    let (desk, report, _) = open(&ws, &tmp.path().join("db")).await;
    assert_eq!(report.imported, 3, "the good tickets still import");
    let w = report.warnings.join("\n");
    assert!(w.contains("tickets/T-2001.json: not valid JSON"), "{w}");
    assert!(w.contains("tickets/T-2002.json: field `channel`"), "{w}");
    assert!(w.contains("tickets/T-2003.json: field `id`"), "{w}");
    assert!(
        w.contains("knowledge/broken.md: missing frontmatter"),
        "{w}"
    );
    assert!(matches!(
        desk.get_ticket("T-2002"),
        Err(DomainError::TicketNotFound(_))
    ));
}

#[tokio::test]
async fn concurrent_updates_to_one_ticket_lose_nothing() {
    let (tmp, ws) = fixture_copy();
    let (desk, _, store) = open(&ws, &tmp.path().join("db")).await;
    let tasks: Vec<_> = (0..20)
        .map(|i| {
            let desk = Arc::clone(&desk);
            tokio::spawn(async move {
                desk.add_customer_message("T-1003", &format!("follow-up {i}"))
                    .await
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap().unwrap();
    }
    let t = desk.get_ticket("T-1003").unwrap();
    assert_eq!(t.messages.len(), 21);
    assert_eq!(t.version, 21);
    for i in 0..20 {
        assert!(
            t.messages
                .iter()
                .any(|m| m.text == format!("follow-up {i}")),
            "lost {i}"
        );
    }
    desk.settled().await.unwrap();
    let file = crate::ticket::parse_ticket_file(&read(ws.join("tickets/T-1003.json"))).unwrap();
    assert_eq!(file.messages.len(), 21, "the file has the last version");
    // The projection and the files equal a fold of the log alone, and a
    // rebuild from scratch gives the same.
    assert_consistent(&desk, &store, &ws).await;
    // Where a posting is stored depends on the batches (its own row, or a
    // block of the batch that indexed it): the rest is the same rows.
    let model_rows = |desk: &Desk| {
        let mut rows = crate::projection::rows(desk.projectors()[0].tree());
        rows.retain(|(k, _)| !k.starts_with(b"p/") && !k.starts_with(b"d/"));
        rows
    };
    let rows = model_rows(&desk);
    let queries = [
        "follow-up 7",
        "退款",
        "物流 停滞 快递",
        "风控冻结 企业",
        "nothing-like-this",
    ];
    let found: Vec<_> = queries
        .iter()
        .map(|q| desk.search(q, 5, Some(Kind::Ticket)).unwrap())
        .collect();
    desk.rebuild(Model::Tickets).await.unwrap();
    desk.rebuild(Model::Mirror).await.unwrap();
    assert_consistent(&desk, &store, &ws).await;
    assert_eq!(model_rows(&desk), rows, "the tickets rebuild the same");
    let again: Vec<_> = queries
        .iter()
        .map(|q| desk.search(q, 5, Some(Kind::Ticket)).unwrap())
        .collect();
    let ranks = |hits: &[Vec<crate::search::Hit>]| -> Vec<Vec<(String, String)>> {
        hits.iter()
            .map(|h| {
                h.iter()
                    .map(|h| (h.id.clone(), format!("{:.9}", h.score)))
                    .collect()
            })
            .collect()
    };
    assert_eq!(
        ranks(&again),
        ranks(&found),
        "the rebuilt index ranks the same"
    );
    // The stored index ranks as the in-memory BM25 index does over the
    // same tickets.
    let memory = in_memory(&desk);
    for (q, hits) in queries.iter().zip(found) {
        let expected = memory.search(q, 5, Some(Kind::Ticket));
        let ids = |h: &[crate::search::Hit]| -> Vec<(String, String)> {
            h.iter()
                .map(|h| (h.id.clone(), format!("{:.9}", h.score)))
                .collect()
        };
        assert_eq!(ids(&hits), ids(&expected), "{q}");
        assert_eq!(
            hits.iter().map(|h| &h.snippet).collect::<Vec<_>>(),
            expected.iter().map(|h| &h.snippet).collect::<Vec<_>>()
        );
    }
}

#[tokio::test]
async fn intake_assigns_the_next_id_and_writes_the_file() {
    let (tmp, ws) = fixture_copy();
    let (desk, _, _) = open(&ws, &tmp.path().join("db")).await;
    let new = |subject: &str| NewTicket {
        subject: subject.into(),
        customer: "Ana".into(),
        channel: "web".into(),
        body: "My printer is on fire".into(),
        sla_minutes: 0,
    };
    let a = desk.create_ticket(new("fire")).await.unwrap();
    let b = desk.create_ticket(new("smoke")).await.unwrap();
    assert_eq!((a.id.as_str(), b.id.as_str()), ("T-1004", "T-1005"));
    assert_eq!((a.status.as_str(), a.sla_minutes), ("open", 480));
    desk.settled().await.unwrap();
    assert!(ws.join("tickets/T-1005.json").exists());
    let err = desk
        .create_ticket(NewTicket {
            channel: "fax".into(),
            ..new("x")
        })
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("`channel` must be one of email, chat, phone, web"),
        "{err}"
    );
    assert_eq!(
        desk.search("printer fire", 5, Some(crate::search::Kind::Ticket))
            .unwrap()[0]
            .id,
        "T-1004"
    );
}

#[tokio::test]
async fn hostile_ids_never_reach_the_filesystem() {
    let (tmp, ws) = fixture_copy();
    let (desk, _, _) = open(&ws, &tmp.path().join("db")).await;
    for id in ["../T-1001", "/etc/passwd", "T-1001/..", "..", "a\0b"] {
        assert!(
            matches!(desk.get_ticket(id), Err(DomainError::BadId { .. })),
            "{id:?}"
        );
        assert!(
            matches!(desk.get_article(id), Err(DomainError::BadId { .. })),
            "{id:?}"
        );
        let err = desk
            .edit_article(id, "a", "b", "r", None)
            .await
            .unwrap_err();
        assert!(matches!(err, DomainError::BadId { .. }), "{id:?}");
    }
    let err = desk.get_ticket("T-9999").unwrap_err().to_string();
    assert!(
        err.contains("ticket T-9999 does not exist; use list_tickets"),
        "{err}"
    );
}

#[tokio::test]
async fn a_knowledge_edit_is_recorded_then_written_and_searchable() {
    let (tmp, ws) = fixture_copy();
    let (desk, _, store) = open(&ws, &tmp.path().join("db")).await;
    let preview = desk
        .preview_article_edit("refund-policy", "7 个工作日", "5 个工作日")
        .unwrap();
    let applied = desk
        .edit_article(
            "refund-policy",
            "7 个工作日",
            "5 个工作日",
            "财务已缩短退款周期",
            None,
        )
        .await
        .unwrap();
    assert_eq!(applied.plan, preview, "the preview is the edit");
    assert_eq!((applied.plan.added, applied.plan.removed), (1, 1));
    let event = applied.event.unwrap();
    assert_eq!(event.stream_id, "kb-refund-policy");
    let Some(Payload::KnowledgeEdited(e)) = &event.payload else {
        panic!()
    };
    assert_eq!(e.diff, preview.diff);
    desk.settled().await.unwrap();
    assert!(read(ws.join("knowledge/refund-policy.md")).contains("5 个工作日"));
    assert!(
        desk.get_article("refund-policy")
            .unwrap()
            .body
            .contains("5 个工作日")
    );
    // old == new records nothing.
    let seq = store.last_sequence();
    let noop = desk
        .edit_article("refund-policy", "5 个工作日", "5 个工作日", "", None)
        .await
        .unwrap();
    assert!(noop.event.is_none() && noop.plan.is_noop());
    assert_eq!(store.last_sequence(), seq);
    let err = desk
        .edit_article("refund-policy", "7 个工作日", "x", "", None)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("old_text was not found"), "{err}");
}

#[tokio::test]
async fn the_open_tickets_index_follows_status_changes_and_rebuilds() {
    let (tmp, ws) = fixture_copy();
    let (desk, _, _) = open(&ws, &tmp.path().join("db")).await;
    let open_by_scan = |desk: &Desk| -> Vec<String> {
        let filter = TicketFilter {
            status: "open".into(),
            ..TicketFilter::default()
        };
        desk.list_tickets(&filter, usize::MAX)
            .0
            .into_iter()
            .map(|t| t.id)
            .collect()
    };
    let status = |s: &str| {
        let s = s.to_string();
        move |_: &tinycode_shared::proto::Ticket| {
            Ok(vec![Payload::TicketStatusChanged(
                tinycode_shared::proto::TicketStatusChanged {
                    by: None,
                    status: s.clone(),
                    reason: String::new(),
                },
            )])
        }
    };
    assert_eq!(desk.open_ticket_ids().unwrap(), open_by_scan(&desk));
    assert!(
        desk.open_ticket_ids()
            .unwrap()
            .contains(&"T-1002".to_string())
    );
    desk.change_ticket("T-1002", status("closed"))
        .await
        .unwrap();
    assert!(
        !desk
            .open_ticket_ids()
            .unwrap()
            .contains(&"T-1002".to_string())
    );
    assert_eq!(desk.open_ticket_ids().unwrap(), open_by_scan(&desk));
    desk.change_ticket("T-1002", status("open")).await.unwrap();
    assert!(
        desk.open_ticket_ids()
            .unwrap()
            .contains(&"T-1002".to_string())
    );
    let before = desk.open_ticket_ids().unwrap();
    desk.rebuild(Model::Tickets).await.unwrap();
    assert_eq!(desk.open_ticket_ids().unwrap(), before);
}

#[tokio::test]
async fn pages_without_a_filter_read_only_the_page_and_agree_with_a_full_listing() {
    let (tmp, ws) = fixture_copy();
    let (desk, _, _) = open(&ws, &tmp.path().join("db")).await;
    for n in 0..20 {
        desk.create_ticket(NewTicket {
            subject: format!("ticket {n}"),
            customer: "Ana".into(),
            channel: "web".into(),
            body: "Where is my parcel?".into(),
            sla_minutes: 0,
        })
        .await
        .unwrap();
    }
    let (all, total) = desk.list_tickets(&TicketFilter::default(), usize::MAX);
    assert_eq!((all.len(), total), (23, 23));
    // Filtered: every ticket is open, so the same tickets, counted by reading.
    let open_only = TicketFilter {
        status: "open".into(),
        ..TicketFilter::default()
    };
    for filter in [TicketFilter::default(), open_only] {
        let mut after = String::new();
        let mut paged = Vec::new();
        loop {
            let page = desk.list_page(&filter, 4, &after, false, usize::MAX);
            assert_eq!(page.total, 23, "{filter:?}");
            paged.extend(page.tickets.iter().map(|t| t.id.clone()));
            match page.next {
                Some(next) => after = next,
                None => break,
            }
        }
        let ids: Vec<String> = all.iter().map(|t| t.id.clone()).collect();
        assert_eq!(paged, ids, "{filter:?}");
    }
}

#[tokio::test]
async fn the_urgent_listing_puts_unresolved_high_priority_first_and_pages_by_offset() {
    let (tmp, ws) = fixture_copy();
    let (desk, _, _) = open(&ws, &tmp.path().join("db")).await;
    let by = || tinycode_shared::proto::ClientRef {
        name: "test".into(),
        uid: 0,
        pid: 0,
    };
    let mut made = Vec::new();
    for (n, priority) in ["P3", "P0", "", "P1", "P0"].iter().enumerate() {
        let t = desk
            .create_ticket(NewTicket {
                subject: format!("ticket {n}"),
                customer: "Ana".into(),
                channel: "web".into(),
                body: "x".repeat(500),
                sla_minutes: 0,
            })
            .await
            .unwrap();
        if !priority.is_empty() {
            desk.classify_as(&t.id, "", priority, "", by())
                .await
                .unwrap();
        }
        made.push(t.id);
    }
    // The second P0 is resolved: after every unresolved ticket.
    desk.set_status_as(&made[4], "resolved", "", by())
        .await
        .unwrap();
    let filter = TicketFilter::default();
    let all = desk.list_urgent(&filter, usize::MAX, 0, true, usize::MAX);
    let ids: Vec<&str> = all.tickets.iter().map(|t| t.id.as_str()).collect();
    let at = |id: &String| ids.iter().position(|i| *i == id).unwrap();
    assert_eq!(all.total, 8, "{ids:?}");
    assert!(
        at(&made[1]) < at(&made[3]) && at(&made[3]) < at(&made[0]),
        "{ids:?}"
    );
    assert!(at(&made[0]) < at(&made[2]), "no priority after P3: {ids:?}");
    assert_eq!(
        ids.last(),
        Some(&made[4].as_str()),
        "resolved last: {ids:?}"
    );
    // Brief rows: one message, clipped; no notes.
    let row = &all.tickets[at(&made[0])];
    assert_eq!(row.messages.len(), 1);
    assert_eq!(row.messages[0].text.chars().count(), BRIEF_CHARS + 1);
    assert!(row.notes.is_empty());
    // Pages of 3 by offset give the same order.
    let mut paged = Vec::new();
    let mut offset = 0;
    loop {
        let page = desk.list_urgent(&filter, 3, offset, true, usize::MAX);
        paged.extend(page.tickets.iter().map(|t| t.id.clone()));
        match page.next {
            Some(next) => offset = next.parse().unwrap(),
            None => break,
        }
    }
    assert_eq!(paged, ids);
    // The order is sorted once per state of the model, and follows it: the
    // resolved P0 reopened is the newest unresolved P0, first.
    desk.set_status_as(&made[4], "open", "", by())
        .await
        .unwrap();
    let after = desk.list_urgent(&filter, 1, 0, true, usize::MAX);
    assert_eq!(after.tickets[0].id, made[4]);
    assert_eq!(after.tickets[0].status, "open");
}

/// The desk settings a workspace's config names (folders, queues,
/// categories), read the simple way: the daemon's config loader stands
/// above this crate.
pub fn settings_of(ws: &Path) -> DeskSettings {
    let config: serde_json::Value = std::fs::read_to_string(ws.join(".tinycode/config.json"))
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_default();
    let list = |key: &str| -> Vec<String> {
        config[key]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|v| v.as_str().map(String::from))
            .collect()
    };
    let dir = |key: &str, default: &str| config[key].as_str().unwrap_or(default).into();
    DeskSettings {
        tickets_dir: dir("ticketsDir", "tickets"),
        knowledge_dir: dir("knowledgeDir", "knowledge"),
        categories: list("categories"),
        queues: list("queues"),
        ..DeskSettings::default()
    }
}

#[tokio::test]
async fn a_triage_sessions_model_use_counts_on_its_ticket() {
    use tinycode_shared::proto::{AssistantMessageAdded, ModelUsage, TriageStarted};
    let (tmp, ws) = fixture_copy();
    let (desk, _, store) = open(&ws, &tmp.path().join("db")).await;
    sla_quiet(&desk).await;
    let step = |input: u64| {
        Payload::AssistantMessageAdded(AssistantMessageAdded {
            model: "openai/gpt-test".into(),
            usage: Some(ModelUsage {
                input_tokens: input,
                output_tokens: 7,
                ..ModelUsage::default()
            }),
            ..AssistantMessageAdded::default()
        })
    };
    // A session not linked to a ticket counts nowhere; T-1002's triage
    // session counts on T-1002.
    let append = |stream: &str, payloads: Vec<Payload>| {
        let (store, stream) = (store.clone(), stream.to_string());
        async move {
            store
                .append(&stream, crate::store::ExpectedVersion::Any, payloads)
                .await
                .unwrap()
        }
    };
    append("session-other", vec![step(1000)]).await;
    append(
        "triage-T-1002",
        vec![Payload::TriageStarted(TriageStarted {
            ticket_id: "T-1002".into(),
            session_id: "s1".into(),
            attempt: 1,
            ..TriageStarted::default()
        })],
    )
    .await;
    append("session-s1", vec![step(100), step(200)]).await;
    desk.tickets_at(store.last_sequence()).await.unwrap();
    let mut joined = Vec::new();
    let n = desk
        .each_ticket_with_facts(|t, f| joined.push((t.id.clone(), f.clone())))
        .unwrap();
    assert_eq!(n, joined.len());
    assert!(n >= 3, "{n}");
    for (id, facts) in &joined {
        let used: Vec<(&str, u64, u64)> = facts.usage().map(|(_, m, i, o)| (m, i, o)).collect();
        if id == "T-1002" {
            assert_eq!(
                used,
                [("openai/gpt-test", 100, 7), ("openai/gpt-test", 200, 7)]
            );
        } else {
            assert!(used.is_empty(), "{id}: {used:?}");
        }
    }
}

/// Postings in blocks: 80 ticket files read at the first start share
/// terms (a batch of them writes blocks of up to 64); 10 of them change one
/// at a time (their postings leave their blocks for rows of their own);
/// then 20 files are edited while the desk is closed, so the next start
/// re-indexes them in one batch — tickets leaving the same block together,
/// into new blocks, some terms gone. Every query ranks as the in-memory
/// BM25 index does over the same tickets, and a rebuild ranks the same.
#[tokio::test]
async fn the_stored_index_ranks_as_bm25_across_blocks_and_rows() {
    let (tmp, ws) = fixture_copy();
    let db = tmp.path().join("db");
    let file = |n: usize| ws.join(format!("tickets/T-{}.json", 2000 + n));
    for n in 0..80 {
        let ticket = serde_json::json!({
            "id": format!("T-{}", 2000 + n), "subject": format!("parcel late {n}"),
            "customer": "Ana", "channel": "web", "createdAt": "2026-09-18T09:12:00+08:00",
            "slaMinutes": 240, "status": "open",
            "messages": [{"from": "customer", "at": "2026-09-18T09:12:00+08:00",
                "text": format!("order {n} parcel stuck 物流 停滞 {}", "x ".repeat(n % 7))}],
        });
        std::fs::write(file(n), ticket.to_string()).unwrap();
    }
    let (desk, _, store) = open(&ws, &db).await;
    desk.settled().await.unwrap();
    let blocks = crate::projection::rows(desk.projectors()[0].tree())
        .iter()
        .filter(|(k, _)| k.starts_with(b"p/parcel\0\x01"))
        .count();
    assert!(blocks >= 2, "{blocks} blocks of `parcel`");
    for n in (0..80).step_by(8) {
        let id = format!("T-{}", 2000 + n);
        desk.add_customer_message(&id, "still no parcel, 物流 没有 更新")
            .await
            .unwrap();
    }
    desk.settled().await.unwrap();
    let queries = [
        "parcel",
        "物流 停滞",
        "late 17",
        "更新",
        "order 3 parcel",
        "stuck",
        "refund",
    ];
    ranks_as_bm25(&desk, &queries);
    closed(desk, store).await;
    // Hand edits while the desk is down: `stuck` and `停滞` leave these
    // tickets, `refund` comes.
    for n in (1..80).step_by(4) {
        let mut ticket: serde_json::Value = serde_json::from_str(&read(file(n))).unwrap();
        ticket["messages"][0]["text"] = format!("order {n} parcel refund 物流").into();
        std::fs::write(file(n), ticket.to_string()).unwrap();
    }
    let (desk, _, _) = reopen(&ws, &db).await;
    desk.settled().await.unwrap();
    assert_eq!(
        desk.get_ticket("T-2005").unwrap().messages[0].text,
        "order 5 parcel refund 物流"
    );
    let found = ranks_as_bm25(&desk, &queries);
    for n in (1..80).step_by(4) {
        let id = format!("T-{}", 2000 + n);
        assert!(
            found[6].iter().any(|(hit, _)| *hit == id),
            "{id} has `refund`"
        );
        assert!(
            !found[5].iter().any(|(hit, _)| *hit == id),
            "{id} lost `stuck`"
        );
    }
    desk.rebuild(Model::Tickets).await.unwrap();
    assert_eq!(
        ranks_as_bm25(&desk, &queries),
        found,
        "a rebuild ranks the same"
    );
}

/// Each query's hits (id, score to 1e-9) from the stored index, checked
/// against the in-memory BM25 index over the same tickets.
fn ranks_as_bm25(desk: &Desk, queries: &[&str]) -> Vec<Vec<(String, String)>> {
    let memory = in_memory(desk);
    let ranks = |hits: &[crate::search::Hit]| -> Vec<(String, String)> {
        hits.iter()
            .map(|h| (h.id.clone(), format!("{:.9}", h.score)))
            .collect()
    };
    let mut out = Vec::new();
    for q in queries {
        let stored = ranks(&desk.search(q, 200, Some(Kind::Ticket)).unwrap());
        let expected = ranks(&memory.search(q, 200, Some(Kind::Ticket)));
        assert_eq!(stored, expected, "{q}");
        out.push(stored);
    }
    out
}

/// The in-memory BM25 index over the desk's tickets (what the stored one
/// must rank as).
fn in_memory(desk: &Desk) -> crate::search::SearchIndex {
    let mut memory = crate::search::SearchIndex::default();
    for t in desk.list_tickets(&TicketFilter::default(), usize::MAX).0 {
        let body = super::ticket_index::body(&t);
        memory.upsert(crate::search::Document {
            kind: Kind::Ticket,
            id: &t.id,
            title: &t.subject,
            keywords: &[],
            body: &body,
        });
    }
    memory
}

#[tokio::test]
async fn a_tickets_head_has_what_a_board_shows_and_none_of_its_texts() {
    let (tmp, ws) = fixture_copy();
    let (desk, _, store) = open(&ws, &tmp.path().join("db")).await;
    // Triaged: every field a board shows has a value.
    let whole = desk
        .change_ticket("T-1001", |_| {
            Ok(vec![
                Payload::TicketClassified(TicketClassified {
                    category: "退款".into(),
                    priority: "P1".into(),
                    ..Default::default()
                }),
                Payload::TicketRouted(TicketRouted {
                    queue: "售后组".into(),
                    ..Default::default()
                }),
            ])
        })
        .await
        .unwrap();
    assert!(
        !whole.category.is_empty() && !whole.queue.is_empty(),
        "{whole:?}"
    );
    let head = desk.with_ticket_head("T-1001", Clone::clone).unwrap();
    assert_eq!(
        (&head.category, &head.priority, &head.queue, &head.status),
        (
            &whole.category,
            &whole.priority,
            &whole.queue,
            &whole.status
        )
    );
    assert_eq!(head.escalate_level, whole.escalate_level);
    assert!(!whole.subject.is_empty() && head.subject.is_empty());
    assert!(desk.with_ticket_head("T-9999", |_| ()).is_none());
    store.close().await.unwrap();
}
