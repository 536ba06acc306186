//! `tinycode import csv|mbox|maildir|zendesk FILE`: each row, message or
//! entry a delivery of an importer's source (`import-csv`, `import-mail`
//! in `mail.rs`, `import-zendesk` in `zendesk.rs`), through the same intake
//! as a webhook's — so the same file twice adds nothing. For CSV
//! (`--map field=column,…`): A row's delivery id is its `id`
//! column when the file has one (its conversation too: rows with one id
//! are one ticket), else a hash of its subject, body and customer.

use std::collections::BTreeMap;

use tinycode_shared::proto::ImportProgress;
use tokio::sync::mpsc;

use super::{ConnectorError, Connectors};
use crate::config::sources::SourceKind;
use crate::domain::desk::Inbound;

/// The fields a row may fill.
pub const FIELDS: [&str; 6] = ["id", "subject", "body", "customer", "channel", "time"];
/// The source of imported rows (no way out: `outbox.rs`).
pub const CSV_SOURCE: &str = "import-csv";
/// The largest file read.
const MAX_FILE_BYTES: u64 = 256 * 1024 * 1024;
/// Progress is reported every this many rows.
const REPORT_EVERY: u64 = 200;
/// Reasons kept for the summary.
const MAX_REASONS: usize = 20;

/// Field → the column it is read from.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Mapping(BTreeMap<String, String>);

impl Mapping {
    /// `--map` as given; unknown fields are refused.
    pub fn new(given: BTreeMap<String, String>) -> Result<Self, String> {
        match given.keys().find(|k| !FIELDS.contains(&k.as_str())) {
            Some(k) => Err(format!(
                "`--map {k}=…`: {k} is not a field (fields: {})",
                FIELDS.join(", ")
            )),
            None => Ok(Self(given)),
        }
    }

    /// The column of `field` in `header`: the mapped one, else the one
    /// named like the field (any case).
    fn column<'h>(&self, field: &str, header: &'h [String]) -> Result<Option<&'h str>, String> {
        let wanted = self.0.get(field);
        let found = header.iter().find(|h| match wanted {
            Some(w) => h.as_str() == w,
            None => h.eq_ignore_ascii_case(field),
        });
        match (found, wanted) {
            (Some(h), _) => Ok(Some(h.as_str())),
            (None, Some(w)) => Err(format!(
                "`--map {field}={w}`: the file has no column {w:?} (columns: {})",
                header.join(", ")
            )),
            (None, None) => Ok(None),
        }
    }
}

/// What an import did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ImportSummary {
    pub rows: u64,
    pub created: u64,
    pub appended: u64,
    pub skipped: u64,
    pub reasons: Vec<String>,
}

impl ImportSummary {
    fn progress(&self, total: u64, done: bool) -> ImportProgress {
        ImportProgress {
            rows_read: self.rows,
            rows_total: total,
            created: self.created,
            appended: self.appended,
            skipped: self.skipped,
            skip_reasons: if done {
                self.reasons.clone()
            } else {
                Vec::new()
            },
            done,
        }
    }

    fn skip(&mut self, reason: String) {
        self.skipped += 1;
        if self.reasons.len() < MAX_REASONS {
            self.reasons.push(reason);
        }
    }
}

/// The rows of `text` as deliveries (or why a row is not one).
fn deliveries(text: &str, mapping: &Mapping) -> Result<Vec<Result<Inbound, String>>, String> {
    let rows = crate::learn::dataset::csv(text).map_err(|e| e.to_string())?;
    let header: Vec<String> = rows
        .first()
        .map(|r| r.keys().cloned().collect())
        .unwrap_or_default();
    let mut columns = BTreeMap::new();
    for field in FIELDS {
        if let Some(c) = mapping.column(field, &header)? {
            columns.insert(field, c.to_string());
        }
    }
    if !columns.contains_key("body") {
        return Err(format!(
            "the file has no `body` column (columns: {}); name the column of the customer's message with --map body=COLUMN",
            header.join(", ")
        ));
    }
    Ok(rows
        .iter()
        .map(|row| {
            let get = |field: &str| {
                columns
                    .get(field)
                    .and_then(|c| row.get(c))
                    .map(|v| v.trim().to_string())
                    .unwrap_or_default()
            };
            let (subject, body, customer) = (get("subject"), get("body"), get("customer"));
            if body.is_empty() {
                return Err("the body is empty".to_string());
            }
            let delivery = match get("id") {
                id if !id.is_empty() => format!("{id}#{:016x}", crate::fnv::fnv1a(body.bytes())),
                _ => format!(
                    "{:016x}",
                    crate::fnv::fnv1a(format!("{subject}\0{body}\0{customer}").into_bytes())
                ),
            };
            let conversation = match get("id") {
                id if !id.is_empty() => id,
                _ => delivery.clone(),
            };
            Ok(Inbound {
                source: CSV_SOURCE.into(),
                delivery,
                conversation,
                subject,
                body,
                customer,
                channel: get("channel").to_ascii_lowercase(),
                at: get("time"),
                sla_minutes: 0,
            })
        })
        .collect())
}

/// What a file to import is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImportKind {
    /// RFC 4180 CSV with a header row (`--map`).
    Csv,
    /// An mbox file.
    Mbox,
    /// A maildir folder (`cur/`, `new/`).
    Maildir,
    /// Zendesk's incremental ticket export (JSON, tickets with comments).
    Zendesk,
}

impl ImportKind {
    pub const NAMES: [&str; 4] = ["csv", "mbox", "maildir", "zendesk"];

    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "csv" => Some(Self::Csv),
            "mbox" => Some(Self::Mbox),
            "maildir" => Some(Self::Maildir),
            "zendesk" => Some(Self::Zendesk),
            _ => None,
        }
    }

    /// What one of its deliveries is called in a reason.
    fn unit(self) -> &'static str {
        match self {
            Self::Csv => "row",
            Self::Mbox | Self::Maildir => "message",
            Self::Zendesk => "entry",
        }
    }
}

/// A file's text, read whole (at most [`MAX_FILE_BYTES`]).
fn read_text(path: &std::path::Path) -> Result<String, String> {
    let size = std::fs::metadata(path).map_err(|e| e.to_string())?.len();
    if size > MAX_FILE_BYTES {
        return Err(format!("it is {size} bytes; at most {MAX_FILE_BYTES}"));
    }
    let bytes = std::fs::read(path).map_err(|e| e.to_string())?;
    String::from_utf8(bytes).map_err(|e| {
        format!(
            "it is not UTF-8 text (byte {}); save it as UTF-8",
            e.utf8_error().valid_up_to()
        )
    })
}

/// The deliveries of the file at `path` (or why each is not one).
fn read_file(
    kind: ImportKind,
    path: &std::path::Path,
    mapping: &Mapping,
) -> Result<Vec<Result<Inbound, String>>, String> {
    let mail = |messages: Vec<Vec<u8>>| {
        let mut threads = super::mail::Threads::default();
        messages.iter().map(|m| threads.delivery(m)).collect()
    };
    match kind {
        ImportKind::Csv => deliveries(&read_text(path)?, mapping),
        ImportKind::Mbox => Ok(mail(super::mail::mbox(path)?)),
        ImportKind::Maildir => Ok(mail(super::mail::maildir(path)?)),
        ImportKind::Zendesk => super::zendesk::export(&read_text(path)?),
    }
}

impl Connectors {
    /// Import the file at `path`, reporting progress on `progress`; mail
    /// `into` a configured mail source when named (its replies then go out
    /// by SMTP).
    pub async fn import(
        &self,
        kind: ImportKind,
        path: &std::path::Path,
        mapping: &Mapping,
        into: Option<&str>,
        progress: mpsc::Sender<ImportProgress>,
    ) -> Result<ImportSummary, ConnectorError> {
        let failed = |problem: String| ConnectorError::Import {
            path: path.display().to_string(),
            problem,
        };
        if let Some(name) = into {
            let mail_source = self
                .source(name)
                .is_some_and(|s| s.kind == SourceKind::Mail);
            if !mail_source || !matches!(kind, ImportKind::Mbox | ImportKind::Maildir) {
                return Err(failed(format!(
                    "--source {name}: mail (mbox, maildir) is imported into a configured source of type \"mail\" (docs/CONNECTORS.md)"
                )));
            }
        }
        let (read_path, read_mapping) = (path.to_path_buf(), mapping.clone());
        let rows = tokio::task::spawn_blocking(move || read_file(kind, &read_path, &read_mapping))
            .await
            .map_err(|e| failed(e.to_string()))?
            .map_err(failed)?;
        let rows: Vec<Result<Inbound, String>> = match into {
            Some(name) => rows
                .into_iter()
                .map(|row| {
                    row.map(|inbound| Inbound {
                        source: name.to_string(),
                        ..inbound
                    })
                })
                .collect(),
            None => rows,
        };
        let total = rows.len() as u64;
        let unit = kind.unit();
        let mut summary = ImportSummary::default();
        for row in rows {
            summary.rows += 1;
            let n = summary.rows;
            match row {
                Err(reason) => summary.skip(format!("{unit} {n}: {reason}")),
                Ok(inbound) => match self.desk.receive(inbound).await {
                    Ok(r) if r.duplicate => {
                        summary.skip(format!("{unit} {n}: imported before (ticket {})", r.ticket))
                    }
                    Ok(r) if r.created => summary.created += 1,
                    Ok(_) => summary.appended += 1,
                    Err(crate::domain::desk::DomainError::Invalid { field, problem }) => {
                        summary.skip(format!("{unit} {n}: `{field}` {problem}"))
                    }
                    Err(e) => return Err(e.into()),
                },
            }
            if summary.rows.is_multiple_of(REPORT_EVERY) {
                // A client that went away stops seeing progress, not the import.
                let _ = progress.send(summary.progress(total, false)).await;
            }
        }
        let _ = progress.send(summary.progress(total, true)).await;
        Ok(summary)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> Mapping {
        Mapping::new(
            pairs
                .iter()
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .collect(),
        )
        .unwrap()
    }

    #[test]
    fn rows_become_deliveries_with_quoted_commas_quotes_and_newlines() {
        let text = "\u{feff}Title,Description,Email\r\n\"Refund, please\",\"She said \"\"now\"\"\nsecond line\",a@b.c\r\n";
        let rows = deliveries(
            text,
            &map(&[
                ("subject", "Title"),
                ("body", "Description"),
                ("customer", "Email"),
            ]),
        )
        .unwrap();
        let row = rows[0].as_ref().unwrap();
        assert_eq!(row.subject, "Refund, please");
        assert_eq!(row.body, "She said \"now\"\nsecond line");
        assert_eq!(row.customer, "a@b.c");
        assert_eq!(row.source, CSV_SOURCE);
        assert_eq!(row.conversation, row.delivery);
    }

    #[test]
    fn the_same_row_is_the_same_delivery_and_an_id_column_names_the_conversation() {
        let text = "id,body\n7,first\n7,second\n8,first\n";
        let rows: Vec<Inbound> = deliveries(text, &Mapping::default())
            .unwrap()
            .into_iter()
            .map(Result::unwrap)
            .collect();
        assert_eq!(rows[0].conversation, rows[1].conversation);
        assert_ne!(rows[0].delivery, rows[1].delivery);
        assert_ne!(rows[0].conversation, rows[2].conversation);
        let again = deliveries(text, &Mapping::default()).unwrap();
        assert_eq!(again[0].as_ref().unwrap().delivery, rows[0].delivery);
    }

    #[test]
    fn a_file_without_a_body_column_or_a_bad_map_says_how_to_map_it() {
        let e = deliveries("subject,text\na,b\n", &Mapping::default()).unwrap_err();
        assert!(
            e.contains("--map body=COLUMN") && e.contains("subject, text"),
            "{e}"
        );
        let e = deliveries("subject,text\na,b\n", &map(&[("body", "Text")])).unwrap_err();
        assert!(e.contains("no column \"Text\""), "{e}");
        assert!(Mapping::new([("bodyy".to_string(), "x".to_string())].into()).is_err());
        let rows = deliveries("body\n\"\"\n", &Mapping::default());
        assert!(rows.is_err() || rows.unwrap()[0].is_err());
    }
}
