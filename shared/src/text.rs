//! Text measured in terminal columns, shared by the CLI's tables and the
//! TUI's screen. Wrapping by display width: a CJK character takes two columns, a
//! combining mark none. Lines break at the last space that fits, else
//! (a long word, or Chinese, which has no spaces) at the last character
//! that fits.

use unicode_width::UnicodeWidthChar;

/// Display width of `text` in terminal columns.
pub fn width(text: &str) -> usize {
    text.chars().map(char_width).sum()
}

fn char_width(c: char) -> usize {
    if c == '\t' {
        return 4;
    }
    if c.is_control() {
        return 0;
    }
    c.width().unwrap_or(0)
}

/// `text` (one logical line) cut into rows of at most `max` columns.
/// An empty line is one empty row.
pub fn wrap(text: &str, max: usize) -> Vec<String> {
    let max = max.max(1);
    let mut rows = Vec::new();
    let mut row = String::new();
    let mut row_width = 0;
    // Byte index in `row` just after the last space, and the width before it.
    let mut last_space: Option<(usize, usize)> = None;
    for c in text.chars() {
        let c = if c == '\t' { ' ' } else { c };
        let w = char_width(c);
        if row_width + w > max && !row.is_empty() {
            match last_space {
                Some((at, before)) if c != ' ' && at < row.len() => {
                    let rest = row.split_off(at);
                    rows.push(row.trim_end().to_string());
                    row = rest;
                    row_width -= before;
                }
                _ => {
                    rows.push(std::mem::take(&mut row));
                    row_width = 0;
                }
            }
            last_space = None;
            if c == ' ' && row.is_empty() {
                continue;
            }
        }
        row.push(c);
        row_width += w;
        if c == ' ' {
            last_space = Some((row.len(), row_width));
        }
    }
    rows.push(row);
    rows
}

/// `text` cut or padded with spaces to exactly `columns` columns.
pub fn pad(text: &str, columns: usize) -> String {
    let mut out = clip(text, columns);
    let w = width(&out);
    out.extend(std::iter::repeat_n(' ', columns.saturating_sub(w)));
    out
}

/// `text` cut to at most `max` columns, with `…` when something was cut.
pub fn clip(text: &str, max: usize) -> String {
    if width(text) <= max {
        return text.to_string();
    }
    let mut out = String::new();
    let mut used = 0;
    for c in text.chars() {
        let w = char_width(c);
        if used + w + 1 > max {
            break;
        }
        out.push(c);
        used += w;
    }
    out.push('…');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chinese_takes_two_columns_and_wraps_between_characters() {
        assert_eq!(width("退款政策"), 8);
        assert_eq!(wrap("退款政策说明", 5), ["退款", "政策", "说明"]);
        assert!(wrap("退款政策说明", 5).iter().all(|r| width(r) <= 5));
    }

    #[test]
    fn words_break_at_spaces_and_long_words_are_cut() {
        assert_eq!(
            wrap("refund the order now", 10),
            ["refund the", "order now"]
        );
        assert_eq!(wrap("abcdefghijkl", 5), ["abcde", "fghij", "kl"]);
        assert_eq!(wrap("", 5), [""]);
    }

    #[test]
    fn mixed_text_never_overflows() {
        let text = "T-1001 客户申请退款 refund-policy 第 3 条 applies to 订单 #8812";
        for max in 1..30 {
            for row in wrap(text, max) {
                assert!(width(&row) <= max.max(2), "{row:?} at {max}");
            }
        }
    }

    #[test]
    fn clipping_counts_columns() {
        assert_eq!(clip("退款政策", 5), "退款…");
        assert_eq!(clip("abc", 5), "abc");
        assert_eq!(pad("账户组", 8), "账户组  ");
        assert_eq!(pad("售后服务组", 7), "售后服…");
    }
}
