//! The offline model's summary for compaction: the user's requests and the
//! assistant's answers, one line each, read from the transcript the request
//! carries (`Role: text` blocks separated by blank lines).

use super::MARK;

/// Lines kept; older ones are counted, not shown.
const MAX_LINES: usize = 40;

pub(super) fn of_transcript(transcript: &str) -> String {
    let lines: Vec<String> = transcript
        .split("\n\n")
        .filter_map(|block| {
            let (who, rest) = block.split_once(": ")?;
            let who = match who {
                "User" => "user asked",
                "Assistant" => "assistant said",
                _ => return None,
            };
            let first: String = rest.lines().next()?.chars().take(160).collect();
            Some(format!("- {who}: {first}"))
        })
        .collect();
    let skipped = lines.len().saturating_sub(MAX_LINES);
    let mut out = format!(
        "{MARK} Earlier in this session ({} exchanges):\n",
        lines.len()
    );
    if skipped > 0 {
        out.push_str(&format!("- … {skipped} older lines left out\n"));
    }
    out.push_str(&lines[skipped..].join("\n"));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_summary_keeps_requests_and_answers() {
        let transcript = "User: Triage T-1001\n\nTool call (get_ticket): {}\n\nAssistant: T-1001: 退款 · P1\nmore\n\n";
        let summary = of_transcript(transcript);
        assert!(summary.contains("- user asked: Triage T-1001"), "{summary}");
        assert!(
            summary.contains("- assistant said: T-1001: 退款 · P1"),
            "{summary}"
        );
        assert!(!summary.contains("more"));
        assert!(!summary.contains("get_ticket"));
    }
}
