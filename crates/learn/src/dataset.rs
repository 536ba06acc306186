//! Labelled sets: CSV (RFC 4180: quoted fields, doubled quotes, newlines
//! inside quotes, a BOM, CRLF) with a header row, or JSON lines; each row a
//! map from column name to text.

use std::collections::BTreeMap;

pub type Row = BTreeMap<String, String>;

/// Why a labelled set could not be read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DatasetError {
    #[error("line {line}: {problem}")]
    Bad { line: usize, problem: String },
    #[error("the set has no rows")]
    Empty,
}

/// Rows of a CSV text with a header: RFC 4180 as spreadsheets and
/// helpdesk exports write it (the `csv` crate) — quoted fields holding
/// commas, doubled quotes and line breaks (a text may start with one), a
/// byte-order mark, CRLF or LF line ends; blank lines are skipped. A row
/// is named by the line it starts on.
pub fn csv(text: &str) -> Result<Vec<Row>, DatasetError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut reader = ::csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        .from_reader(text.as_bytes());
    let bad = |e: ::csv::Error| DatasetError::Bad {
        line: e.position().map_or(0, |p| p.line() as usize),
        problem: e.to_string(),
    };
    let mut records = reader.records();
    let header: Vec<String> = match records.next() {
        Some(first) => first
            .map_err(bad)?
            .iter()
            .map(|h| h.trim().to_string())
            .collect(),
        None => return Err(DatasetError::Empty),
    };
    let mut rows = Vec::new();
    for record in records {
        let record = record.map_err(bad)?;
        let line = record.position().map_or(0, |p| p.line() as usize);
        if record.iter().all(str::is_empty) {
            continue;
        }
        if record.len() != header.len() {
            return Err(DatasetError::Bad {
                line,
                problem: format!(
                    "{} fields, the header has {} ({})",
                    record.len(),
                    header.len(),
                    header.join(",")
                ),
            });
        }
        rows.push(
            header
                .iter()
                .cloned()
                .zip(record.iter().map(str::to_string))
                .collect(),
        );
    }
    if rows.is_empty() {
        return Err(DatasetError::Empty);
    }
    Ok(rows)
}

/// Rows of a JSON-lines text: objects whose values are strings or numbers.
pub fn jsonl(text: &str) -> Result<Vec<Row>, DatasetError> {
    let mut rows = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        if raw.trim().is_empty() {
            continue;
        }
        let bad = |problem: String| DatasetError::Bad {
            line: i + 1,
            problem,
        };
        let value: serde_json::Value =
            serde_json::from_str(raw).map_err(|e| bad(format!("not JSON: {e}")))?;
        let object = value
            .as_object()
            .ok_or_else(|| bad("not a JSON object".into()))?;
        let mut row = Row::new();
        for (k, v) in object {
            let text = match v {
                serde_json::Value::String(s) => s.clone(),
                serde_json::Value::Number(n) => n.to_string(),
                serde_json::Value::Null => continue,
                other => return Err(bad(format!("`{k}` must be text or a number, got {other}"))),
            };
            row.insert(k.clone(), text);
        }
        rows.push(row);
    }
    if rows.is_empty() {
        return Err(DatasetError::Empty);
    }
    Ok(rows)
}

/// A row's text: `text`, else `subject` and `body` joined.
pub fn text_of(row: &Row) -> String {
    match row.get("text") {
        Some(t) => t.clone(),
        None => [row.get("subject"), row.get("body")]
            .into_iter()
            .flatten()
            .cloned()
            .collect::<Vec<_>>()
            .join("\n"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoted_fields_commas_quotes_and_newlines() {
        let rows =
            csv("text,intent\n\"a, b\",x\n\"say \"\"hi\"\"\nthen go\",y\r\nplain,z\n").unwrap();
        assert_eq!(rows.len(), 3);
        assert_eq!(rows[0]["text"], "a, b");
        assert_eq!(rows[1]["text"], "say \"hi\"\nthen go");
        assert_eq!(rows[2]["intent"], "z");
    }

    #[test]
    fn a_bad_row_is_named_by_line() {
        let e = csv("text,intent\nok,x\nno label\n").unwrap_err();
        assert_eq!(
            e,
            DatasetError::Bad {
                line: 3,
                problem: "1 fields, the header has 2 (text,intent)".into()
            }
        );
        assert!(matches!(
            csv("text,intent\n\"open,x\n"),
            Err(DatasetError::Bad { line: 2, .. })
        ));
        assert_eq!(csv("text,intent\n"), Err(DatasetError::Empty));
    }

    #[test]
    fn a_text_that_starts_with_a_line_break() {
        let rows = csv("text,intent\n\"\nwhere is my parcel\",shipping\n").unwrap();
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0]["text"], "\nwhere is my parcel");
        assert_eq!(rows[0]["intent"], "shipping");
    }

    #[test]
    fn a_byte_order_mark_is_not_part_of_the_first_column() {
        let rows = csv("\u{feff}text,intent\nhello,greet\n").unwrap();
        assert_eq!(rows[0]["text"], "hello");
        assert!(rows[0].contains_key("text"), "{:?}", rows[0]);
    }

    #[test]
    fn crlf_line_ends_outside_and_inside_quotes() {
        let rows =
            csv("text,intent\r\n\"charged\r\ntwice\",billing\r\n\r\nplain,other\r\n").unwrap();
        assert_eq!(rows.len(), 2, "{rows:?}");
        // Inside quotes the text is kept as written; outside, CRLF ends a row.
        assert_eq!(rows[0]["text"], "charged\r\ntwice");
        assert_eq!(rows[0]["intent"], "billing");
        assert_eq!(rows[1]["intent"], "other");
    }

    #[test]
    fn commas_and_doubled_quotes_inside_quotes() {
        let rows = csv("text,intent\n\"a, \"\"b\"\", c\",x\n").unwrap();
        assert_eq!(rows[0]["text"], "a, \"b\", c");
        assert_eq!(rows[0]["intent"], "x");
    }

    #[test]
    fn a_row_after_a_multi_line_one_is_named_by_its_own_first_line() {
        let e = csv("text,intent\n\"a\nb\",x\nlonely\n").unwrap_err();
        assert!(matches!(e, DatasetError::Bad { line: 4, .. }), "{e:?}");
    }

    #[test]
    fn json_lines_and_subject_body() {
        let rows = jsonl("{\"subject\":\"退款\",\"body\":\"未收到\",\"category\":\"退款\",\"escalateLevel\":2}\n\n").unwrap();
        assert_eq!(text_of(&rows[0]), "退款\n未收到");
        assert_eq!(rows[0]["escalateLevel"], "2");
        assert!(matches!(
            jsonl("[1]"),
            Err(DatasetError::Bad { line: 1, .. })
        ));
    }
}
