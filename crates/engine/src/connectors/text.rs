//! HTML a helpdesk or a mail client sent, as the plain text the desk
//! stores: tags dropped (what is inside `script` and `style` too), line
//! breaks where blocks and `<br>` were, the common entities decoded,
//! runs of blank lines folded. Nothing of it is ever run as markup: the
//! result is text, and every page escapes it.

/// Block elements that end a line.
const BLOCKS: [&str; 14] = [
    "p",
    "div",
    "br",
    "li",
    "tr",
    "h1",
    "h2",
    "h3",
    "h4",
    "h5",
    "h6",
    "blockquote",
    "pre",
    "table",
];

pub fn html_to_text(html: &str) -> String {
    let mut out = String::with_capacity(html.len());
    let mut rest = html;
    while let Some(open) = rest.find('<') {
        out.push_str(&decode(&rest[..open]));
        let after = &rest[open + 1..];
        let Some(close) = after.find('>') else {
            // A `<` that opens no tag is text.
            out.push_str(&decode(&rest[open..]));
            rest = "";
            break;
        };
        let tag = &after[..close];
        let name: String = tag
            .trim_start_matches('/')
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric())
            .collect::<String>()
            .to_ascii_lowercase();
        rest = &after[close + 1..];
        if (name == "script" || name == "style") && !tag.starts_with('/') && !tag.ends_with('/') {
            // Skip to the element's end: its content is not text. An
            // element never closed is taken as empty (the text after it
            // is kept).
            if let Some(end) = closing_tag(rest, &name) {
                rest = &rest[end..];
            }
            continue;
        }
        if BLOCKS.contains(&name.as_str()) && !out.ends_with('\n') {
            out.push('\n');
        }
    }
    out.push_str(&decode(rest));
    fold_blank_lines(&out)
}

/// Where the text after `</name…>` starts in `html`, found without
/// copying it (case-insensitive).
fn closing_tag(html: &str, name: &str) -> Option<usize> {
    let bytes = html.as_bytes();
    let mut from = 0;
    while let Some(at) = html[from..].find("</") {
        let start = from + at + 2;
        let candidate = bytes.get(start..start + name.len())?;
        if candidate.eq_ignore_ascii_case(name.as_bytes()) {
            return html[start..].find('>').map(|gt| start + gt + 1);
        }
        from = start;
    }
    None
}

fn decode(text: &str) -> String {
    if !text.contains('&') {
        return text.to_string();
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(amp) = rest.find('&') {
        out.push_str(&rest[..amp]);
        let after = &rest[amp..];
        // An entity is short: its `;` is looked for in the next bytes only
        // (a search to the end for every `&` would be quadratic).
        let entity = after.as_bytes()[..after.len().min(12)]
            .iter()
            .position(|&b| b == b';')
            .filter(|&end| end <= 10)
            .and_then(|end| after.get(..=end));
        let decoded = entity.and_then(|e| match e {
            "&amp;" => Some('&'),
            "&lt;" => Some('<'),
            "&gt;" => Some('>'),
            "&quot;" => Some('"'),
            "&#39;" | "&apos;" => Some('\''),
            "&nbsp;" => Some(' '),
            _ => {
                let number = e.strip_prefix("&#")?.strip_suffix(';')?;
                let code = match number.strip_prefix(['x', 'X']) {
                    Some(hex) => u32::from_str_radix(hex, 16).ok()?,
                    None => number.parse().ok()?,
                };
                char::from_u32(code)
            }
        });
        match (entity, decoded) {
            (Some(e), Some(c)) => {
                out.push(c);
                rest = &after[e.len()..];
            }
            _ => {
                out.push('&');
                rest = &after[1..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// Lines trimmed at the end, at most one blank line in a row, none at the
/// start or the end.
fn fold_blank_lines(text: &str) -> String {
    let mut out: Vec<&str> = Vec::new();
    for line in text.lines().map(str::trim_end) {
        if line.trim().is_empty() && out.last().is_none_or(|l| l.is_empty()) {
            continue;
        }
        out.push(if line.trim().is_empty() { "" } else { line });
    }
    while out.last().is_some_and(|l| l.is_empty()) {
        out.pop();
    }
    out.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markup_becomes_text_with_its_lines_and_nothing_of_it_runs() {
        let html = "<div>Hello&nbsp;Ana,</div><p>Your order &amp; invoice &lt;7712&gt;</p>\
                    <script>alert(1)</script><style>p{}</style><br>Thanks &#x263A; &#65;<br/>\
                    <b>bold</b> &unknown; 1 < 2";
        assert_eq!(
            html_to_text(html),
            "Hello Ana,\nYour order & invoice <7712>\nThanks ☺ A\nbold &unknown; 1 < 2"
        );
    }

    #[test]
    fn blank_lines_fold_and_a_plain_text_is_kept() {
        assert_eq!(
            html_to_text("<p></p><p>a</p><p></p><p></p><p>b</p>"),
            "a\nb"
        );
        assert_eq!(html_to_text("a<br><br><br><br>b"), "a\nb");
        assert_eq!(html_to_text("just text\nsecond"), "just text\nsecond");
        assert_eq!(html_to_text("<SCRIPT src=x>evil()</SCRIPT>ok"), "ok");
        assert_eq!(
            html_to_text("<script/>kept <style>never closed"),
            "kept never closed"
        );
    }

    #[test]
    fn a_large_hostile_body_is_read_whole() {
        // Work quadratic in these (a search to the end per `&` or per
        // element) would not finish; the reading is linear.
        assert_eq!(html_to_text(&"&".repeat(1 << 20)).len(), 1 << 20);
        assert_eq!(html_to_text(&"<style></style>".repeat(1 << 16)), "");
        assert_eq!(
            html_to_text(&"&amp;x".repeat(1 << 16)),
            "&x".repeat(1 << 16)
        );
    }
}
