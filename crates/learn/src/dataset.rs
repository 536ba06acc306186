//! Labelled sets: CSV (RFC 4180: quoted fields, doubled quotes, newlines
//! inside quotes) with a header row, or JSON lines; each row a map from
//! column name to text.

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

/// The records of a CSV text, quotes undone.
fn records(text: &str) -> Result<Vec<(usize, Vec<String>)>, DatasetError> {
    let mut out = Vec::new();
    let (mut field, mut record) = (String::new(), Vec::new());
    let (mut quoted, mut line, mut start) = (false, 1usize, 1usize);
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match (quoted, c) {
            (true, '"') if chars.peek() == Some(&'"') => {
                chars.next();
                field.push('"');
            }
            (true, '"') => quoted = false,
            (true, c) => {
                if c == '\n' {
                    line += 1;
                }
                field.push(c);
            }
            (false, '"') if field.is_empty() => quoted = true,
            (false, ',') => record.push(std::mem::take(&mut field)),
            (false, '\r') => {}
            (false, '\n') => {
                record.push(std::mem::take(&mut field));
                if record.iter().any(|f| !f.is_empty()) {
                    out.push((start, std::mem::take(&mut record)));
                }
                record.clear();
                line += 1;
                start = line;
            }
            (false, c) => field.push(c),
        }
    }
    if quoted {
        return Err(DatasetError::Bad {
            line: start,
            problem: "a quoted field is never closed".into(),
        });
    }
    if !field.is_empty() || !record.is_empty() {
        record.push(field);
        out.push((start, record));
    }
    Ok(out)
}

/// Rows of a CSV text with a header.
pub fn csv(text: &str) -> Result<Vec<Row>, DatasetError> {
    let mut records = records(text.trim_start_matches('\u{feff}'))?.into_iter();
    let (_, header) = records.next().ok_or(DatasetError::Empty)?;
    let header: Vec<String> = header.iter().map(|h| h.trim().to_string()).collect();
    let mut rows = Vec::new();
    for (line, record) in records {
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
        rows.push(header.iter().cloned().zip(record).collect());
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
