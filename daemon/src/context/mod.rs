//! Context hygiene: tool results over the limit keep their head and tail
//! around a `[… N characters truncated …]` marker (the caller stores the
//! full text as an artifact); token estimates for text the provider has not
//! counted (chars / 4).

/// Default `maxToolResultChars`.
pub const DEFAULT_MAX_TOOL_RESULT_CHARS: usize = 12_000;

/// `text` cut to about `max` characters, or `None` when it fits.
pub fn truncate(text: &str, max: usize) -> Option<String> {
    let total = text.chars().count();
    if total <= max {
        return None;
    }
    let keep = max / 2;
    let head: String = text.chars().take(keep).collect();
    let tail: String = text.chars().skip(total - keep).collect();
    Some(format!(
        "{head}\n[… {} characters truncated …]\n{tail}",
        total - 2 * keep
    ))
}

/// Tokens of text no provider has counted yet: chars / 4, rounded up.
pub fn estimate_tokens(text: &str) -> u64 {
    (text.chars().count() as u64).div_ceil(4)
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
    fn estimates_are_chars_over_four() {
        assert_eq!(estimate_tokens(""), 0);
        assert_eq!(estimate_tokens("abcde"), 2);
    }
}
