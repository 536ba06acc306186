//! Context hygiene: tool results over the limit keep their head and tail
//! around a `[… N characters truncated …]` marker (the caller stores the
//! full text as an artifact); token estimates for text the provider has not
//! counted (chars / 4); compaction ([`compact`]).

pub mod compact;

use crate::model::Message;

pub use tinycode_base::clock::parse_rfc3339;

/// `text` cut to about `max` characters, or `None` when it fits. A JSON
/// result stays valid JSON when it can: long strings and long lists are
/// shortened in place (`…[+N chars]`, `"… N more"`), so a model still reads
/// every field; other text keeps its head and tail.
pub fn truncate(text: &str, max: usize) -> Option<String> {
    let total = text.chars().count();
    if total <= max {
        return None;
    }
    if let Some(short) = shorten_json(text, max) {
        return Some(short);
    }
    let keep = max / 2;
    let head: String = text.chars().take(keep).collect();
    let tail: String = text.chars().skip(total - keep).collect();
    Some(format!(
        "{head}\n{}\n{tail}",
        crate::model::mark::truncated(total - 2 * keep)
    ))
}

/// String caps tried as floors, longest first: 32 keeps timestamps, ids
/// and short names whole; 8 is the last resort.
const STRING_FLOORS: [usize; 2] = [32, 8];
/// List lengths tried, longest first (0: only "… N more").
const LIST_CAPS: [usize; 5] = [usize::MAX, 8, 3, 1, 0];

/// A JSON object or list shortened to at most `max` characters (compact),
/// or `None` when `text` is no such JSON or cannot be made to fit.
fn shorten_json(text: &str, max: usize) -> Option<String> {
    let value: serde_json::Value = serde_json::from_str(text).ok()?;
    if !(value.is_object() || value.is_array()) {
        return None;
    }
    let fits = |strings: usize, items: usize| {
        let s = capped(&value, strings, items).to_string();
        (s.chars().count() <= max).then_some(s)
    };
    if let Some(s) = fits(usize::MAX, usize::MAX) {
        return Some(s); // compact form alone fits
    }
    // Short values (times, ids, names) matter more than long lists: keep
    // strings to at least a floor, shorten lists until that fits, then
    // give the strings the longest cap that still fits.
    let longest = text.chars().count();
    for floor in STRING_FLOORS {
        for items in LIST_CAPS {
            if fits(floor, items).is_none() {
                continue;
            }
            let (mut lo, mut hi) = (floor, longest);
            while lo < hi {
                let mid = lo + (hi - lo).div_ceil(2);
                if fits(mid, items).is_some() {
                    lo = mid;
                } else {
                    hi = mid - 1;
                }
            }
            return fits(lo, items);
        }
    }
    None
}

pub use crate::model::mark::unshortened;

/// `value` with strings over `strings` chars and lists over `items`
/// entries shortened, each saying how much it lost.
fn capped(value: &serde_json::Value, strings: usize, items: usize) -> serde_json::Value {
    use serde_json::Value;
    match value {
        Value::String(s) => {
            let n = s.chars().count();
            if n <= strings {
                value.clone()
            } else {
                let kept: String = s.chars().take(strings).collect();
                Value::String(crate::model::mark::shortened(&kept, n - strings))
            }
        }
        Value::Array(list) => {
            let mut out: Vec<Value> = list
                .iter()
                .take(items)
                .map(|v| capped(v, strings, items))
                .collect();
            if list.len() > items {
                out.push(Value::String(format!("… {} more", list.len() - items)));
            }
            Value::Array(out)
        }
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| (k.clone(), capped(v, strings, items)))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// Save a full tool result as `<dir>/<name>.txt` (name made file-safe).
pub fn save_artifact(
    dir: &std::path::Path,
    name: &str,
    text: &str,
) -> std::io::Result<std::path::PathBuf> {
    let safe: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .take(120)
        .collect();
    std::fs::create_dir_all(dir)?;
    let path = dir.join(format!("{safe}.txt"));
    // A secret a tool's output echoed is not kept in the state dir either.
    std::fs::write(&path, tinycode_shared::secrets::redact(text).as_bytes())?;
    Ok(path)
}

pub use crate::model::tokens::estimate_tokens;

/// Tool results of the running turn a model always sees whole.
pub(crate) const KEEP_RESULTS: usize = 2;

/// Tokens the next request would hold: what the provider last counted plus
/// chars/4 of the messages since, else chars/4 of everything.
pub(crate) fn context_estimate(
    system: &str,
    history: &[Message],
    messages: &[Message],
    counted: Option<(u64, usize)>,
) -> u64 {
    use crate::model::tokens;
    match counted {
        Some((counted, seen)) if seen <= messages.len() => {
            counted + tokens::estimate_request("", messages[seen..].iter())
        }
        _ => tokens::estimate_request(system, history.iter().chain(messages)),
    }
}

/// Replace the content of every tool result but the last `keep` with a
/// marker (the request only; what is stored stays whole).
pub(crate) fn elide_old_results(messages: &mut [Message], keep: usize) {
    let results: Vec<usize> = messages
        .iter()
        .enumerate()
        .filter(|(_, m)| matches!(m, Message::ToolResult { .. }))
        .map(|(i, _)| i)
        .collect();
    for &i in results.iter().take(results.len().saturating_sub(keep)) {
        if let Message::ToolResult { content, .. } = &mut messages[i] {
            let chars = content.chars().count();
            *content = format!(
                "[this earlier result ({chars} characters) is left out to keep the context under compactAboveTokens; call the tool again if you need it]"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_results_keep_head_and_tail() {
        assert_eq!(truncate("short", 10), None);
        let text = format!("{}{}{}", "H".repeat(50), "m".repeat(900), "T".repeat(50));
        let cut = truncate(&text, 100).unwrap();
        assert!(cut.starts_with(&"H".repeat(50)) && cut.ends_with(&"T".repeat(50)));
        assert!(cut.contains("[… 900 characters truncated …]"), "{cut}");
        let cjk = "退".repeat(30);
        assert!(
            truncate(&cjk, 10)
                .unwrap()
                .contains("[… 20 characters truncated …]")
        );
    }

    #[test]
    fn a_long_json_result_stays_json_with_every_field() {
        let ticket = serde_json::json!({
            "id": "T-1001", "subject": "未收到货，要求退款", "slaMinutes": 240,
            "messages": (0..20).map(|i| serde_json::json!({"from": "customer", "text": "很长的消息 ".repeat(30), "n": i})).collect::<Vec<_>>(),
        });
        let text = serde_json::to_string_pretty(&ticket).unwrap();
        for max in [200, 600, 2_000] {
            let cut = truncate(&text, max).unwrap();
            assert!(cut.chars().count() <= max, "{max}: {cut}");
            let back: serde_json::Value = serde_json::from_str(&cut).unwrap();
            assert_eq!(back["id"], "T-1001");
            assert_eq!(back["slaMinutes"], 240);
            assert!(back["subject"].as_str().unwrap().starts_with("未收到货"));
            assert!(cut.contains("more") || cut.contains("chars]"), "{cut}");
        }
        // Too small for any JSON: head and tail, as for text.
        assert!(
            truncate(&text, 40)
                .unwrap()
                .contains("characters truncated")
        );
        // Compact form alone may be enough.
        let small = serde_json::to_string_pretty(&serde_json::json!({"a": [1, 2, 3]})).unwrap();
        assert_eq!(truncate(&small, 16).unwrap(), r#"{"a":[1,2,3]}"#);
    }

    #[test]
    fn artifacts_get_file_safe_names() {
        let tmp = tempfile::tempdir().unwrap();
        let path = save_artifact(tmp.path(), "turn1-call/../x", "full").unwrap();
        assert_eq!(path, tmp.path().join("turn1-call____x.txt"));
        assert_eq!(std::fs::read_to_string(path).unwrap(), "full");
    }

    #[test]
    fn estimates_are_chars_over_four() {
        assert_eq!(estimate_tokens(""), 0);
        assert_eq!(estimate_tokens("abcde"), 2);
    }
}
