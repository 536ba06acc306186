//! Labelled sets for an evaluation: a CSV or JSONL file, a directory of
//! ticket files with a labels file, or the desk's own history (tickets
//! whose decisions a person made or corrected).

use std::collections::BTreeMap;
use std::path::Path;

use tinycode_shared::proto::Ticket;

use super::EvalError;
use crate::learn::dataset::{self, Row};

/// The fields a set may label, as they are named in files and reports.
pub const FIELDS: [&str; 5] = ["category", "priority", "queue", "escalateLevel", "intent"];

/// Largest labelled set read (bytes).
const MAX_FILE: u64 = 64 << 20;
/// Most rows measured in one evaluation.
pub const MAX_ROWS: usize = 100_000;

/// One ticket to triage and what it should come out as.
#[derive(Debug, Clone, PartialEq)]
pub struct Labelled {
    pub subject: String,
    pub body: String,
    /// Field (one of [`FIELDS`]) → expected value.
    pub labels: BTreeMap<String, String>,
}

impl Labelled {
    /// The text a classifier reads.
    pub fn text(&self) -> String {
        if self.body.is_empty() {
            self.subject.clone()
        } else {
            format!("{}\n{}", self.subject, self.body)
        }
    }
}

fn bad(path: &Path, problem: impl std::fmt::Display) -> EvalError {
    EvalError::Labels(format!("{}: {problem}", path.display()))
}

fn read(path: &Path) -> Result<String, EvalError> {
    let size = std::fs::metadata(path).map_err(|e| bad(path, e))?.len();
    if size > MAX_FILE {
        return Err(bad(
            path,
            format!("{size} bytes; a labelled set may have at most {MAX_FILE}"),
        ));
    }
    let bytes = std::fs::read(path).map_err(|e| bad(path, e))?;
    String::from_utf8(bytes).map_err(|e| {
        let valid = &e.as_bytes()[..e.utf8_error().valid_up_to()];
        let line = valid.iter().filter(|b| **b == b'\n').count() + 1;
        let column = valid.len() - valid.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1) + 1;
        bad(
            path,
            format!("line {line} is not UTF-8 text (at byte {column} of the line); save the file as UTF-8"),
        )
    })
}

/// Rows of a CSV (`.csv`) or JSON-lines (anything else) file.
fn rows(path: &Path) -> Result<Vec<Row>, EvalError> {
    let text = read(path)?;
    let parsed = if path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("csv"))
    {
        dataset::csv(&text)
    } else {
        dataset::jsonl(&text)
    };
    parsed.map_err(|e| bad(path, e))
}

fn labels_of(row: &Row) -> BTreeMap<String, String> {
    FIELDS
        .iter()
        .filter_map(|f| {
            let v = row.get(*f)?.trim();
            (!v.is_empty()).then(|| ((*f).to_string(), v.to_string()))
        })
        .collect()
}

/// A row's subject and body: `subject` and `body`, or `text` (its first
/// line, shortened, is the subject).
fn ticket_of(row: &Row) -> (String, String) {
    match (row.get("subject"), row.get("text")) {
        (Some(subject), _) => (
            subject.trim().to_string(),
            row.get("body")
                .map(|b| b.trim().to_string())
                .unwrap_or_default(),
        ),
        (None, Some(text)) => {
            let first: String = text
                .lines()
                .next()
                .unwrap_or("")
                .chars()
                .take(120)
                .collect();
            (first.trim().to_string(), text.trim().to_string())
        }
        (None, None) => (String::new(), String::new()),
    }
}

/// A labelled file, or a directory of ticket files with `labels.csv` /
/// `labels.jsonl` (column `id` names the ticket file's id).
pub fn load(path: &Path) -> Result<Vec<Labelled>, EvalError> {
    let out = if path.is_dir() {
        from_dir(path)?
    } else {
        let mut out = Vec::new();
        for (i, row) in rows(path)?.iter().enumerate() {
            let (subject, body) = ticket_of(row);
            if subject.is_empty() {
                return Err(bad(
                    path,
                    format!("row {} has no `text` and no `subject`", i + 1),
                ));
            }
            out.push(Labelled {
                subject,
                body,
                labels: labels_of(row),
            });
        }
        out
    };
    check(path, out)
}

fn check(path: &Path, rows: Vec<Labelled>) -> Result<Vec<Labelled>, EvalError> {
    if rows.len() > MAX_ROWS {
        return Err(bad(
            path,
            format!("{} rows; at most {MAX_ROWS}", rows.len()),
        ));
    }
    if !rows.iter().any(|r| !r.labels.is_empty()) {
        return Err(bad(
            path,
            format!("no row labels any of {}", FIELDS.join(", ")),
        ));
    }
    Ok(rows)
}

fn from_dir(dir: &Path) -> Result<Vec<Labelled>, EvalError> {
    let labels_file = ["labels.csv", "labels.jsonl"]
        .iter()
        .map(|n| dir.join(n))
        .find(|p| p.is_file())
        .ok_or_else(|| {
            bad(
                dir,
                "a directory of tickets needs a labels.csv or labels.jsonl beside them",
            )
        })?;
    let mut out = Vec::new();
    for row in rows(&labels_file)? {
        let id = row.get("id").map(|s| s.trim()).unwrap_or_default();
        let id = crate::domain::ids::sanitize_id(id)
            .map_err(|e| bad(&labels_file, format!("`id` {id:?}: {e}")))?;
        let file = dir.join(format!("{id}.json"));
        let ticket =
            crate::domain::ticket::parse_ticket_file(&read(&file)?).map_err(|e| bad(&file, e))?;
        let body = customer_text(&ticket);
        out.push(Labelled {
            subject: ticket.subject,
            body,
            labels: labels_of(&row),
        });
    }
    Ok(out)
}

fn customer_text(t: &Ticket) -> String {
    t.messages
        .iter()
        .filter(|m| m.from == "customer")
        .map(|m| m.text.as_str())
        .collect::<Vec<_>>()
        .join("\n")
}

/// The desk's tickets with a decision a person made or corrected (the
/// history read model, `learn::model`: a field counts when the last change
/// to it came from a file or a call outside any session).
pub fn from_history(history: &sled::Tree) -> Result<Vec<Labelled>, EvalError> {
    let mut out = Vec::new();
    for row in crate::learn::model::labelled(history) {
        let row = row.map_err(|e| EvalError::Labels(e.to_string()))?;
        out.push(Labelled {
            subject: row.subject.clone(),
            body: row.messages.join("\n"),
            labels: row.labels,
        });
    }
    check(Path::new("the desk's history"), out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_rows_get_a_subject_and_only_known_labels() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("set.csv");
        std::fs::write(
            &path,
            "text,category,queue,other\n\"退款 没收到\n第二行\",退款,售后组,x\nplain,,物流组,y\n",
        )
        .unwrap();
        let rows = load(&path).unwrap();
        assert_eq!(rows[0].subject, "退款 没收到");
        assert_eq!(rows[0].body, "退款 没收到\n第二行");
        assert_eq!(rows[0].labels.len(), 2);
        assert_eq!(rows[1].labels.keys().collect::<Vec<_>>(), ["queue"]);
    }

    #[test]
    fn a_set_that_is_not_utf8_is_refused_naming_the_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("set.csv");
        std::fs::write(&path, b"text,category\nok,\xe9\x80\x80\nbad \xff here,x\n").unwrap();
        let err = load(&path).unwrap_err().to_string();
        assert!(
            err.contains("line 3 is not UTF-8 text (at byte 5 of the line)"),
            "{err}"
        );
    }

    #[test]
    fn a_set_without_labels_or_text_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("set.jsonl");
        std::fs::write(&path, "{\"text\": \"hi\", \"other\": \"x\"}\n").unwrap();
        assert!(
            load(&path)
                .unwrap_err()
                .to_string()
                .contains("no row labels")
        );
        std::fs::write(&path, "{\"category\": \"退款\"}\n").unwrap();
        assert!(load(&path).unwrap_err().to_string().contains("no `text`"));
        let none = dir.path().join("missing.csv");
        assert!(load(&none).unwrap_err().to_string().contains("missing.csv"));
    }

    #[test]
    fn a_directory_of_ticket_files_with_a_labels_file() {
        let fixture = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../../shared/fixtures/tinycode-support-desk/tickets/T-1001.json");
        let dir = tempfile::tempdir().unwrap();
        std::fs::copy(&fixture, dir.path().join("T-1001.json")).unwrap();
        std::fs::write(
            dir.path().join("labels.csv"),
            "id,category,queue\nT-1001,退款,售后组\n",
        )
        .unwrap();
        let rows = load(dir.path()).unwrap();
        assert_eq!(rows.len(), 1);
        assert!(rows[0].subject.starts_with("退款"), "{:?}", rows[0]);
        assert!(rows[0].body.contains("全额退款"), "{:?}", rows[0]);
        assert_eq!(rows[0].labels["queue"], "售后组");
        std::fs::write(dir.path().join("labels.csv"), "id,category\n../etc,退款\n").unwrap();
        assert!(load(dir.path()).unwrap_err().to_string().contains("`id`"));
    }
}
