//! How a shortened tool result says what it lost — the one format both
//! sides read: the turn loop writes it (`context::truncate`) and a model
//! reading the result (the offline policy) strips it.

/// Opens the mark a shortened string ends with: `…[+N chars]`.
pub const MARK_OPEN: &str = "…[+";

/// `kept` followed by the mark saying `lost` characters were cut.
pub fn shortened(kept: &str, lost: usize) -> String {
    format!("{kept}{MARK_OPEN}{lost} chars]")
}

/// The line that stands for `lost` characters cut out of plain text.
pub fn truncated(lost: usize) -> String {
    format!("[… {lost} characters truncated …]")
}

/// A string of a shortened result without its `…[+N chars]` mark.
pub fn unshortened(s: &str) -> &str {
    match s.rfind(MARK_OPEN) {
        Some(at) if s.ends_with(" chars]") => &s[..at],
        _ => s,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mark_written_is_a_mark_stripped() {
        let s = shortened("2026-09-18T09:12", 9);
        assert_eq!(s, "2026-09-18T09:12…[+9 chars]");
        assert_eq!(unshortened(&s), "2026-09-18T09:12");
        assert_eq!(unshortened("plain …[+ text"), "plain …[+ text");
        assert_eq!(truncated(900), "[… 900 characters truncated …]");
    }
}
