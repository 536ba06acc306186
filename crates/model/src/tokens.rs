//! The one token estimate, for text no provider has counted: characters
//! / 4, rounded up. Providers' own counts (usage) always win; this fills in
//! for what was added since, and for the offline model, which counts
//! nothing.

use crate::Message;

/// Tokens of `chars` characters.
pub fn of_chars(chars: u64) -> u64 {
    chars.div_ceil(4)
}

/// Tokens of `text`.
pub fn estimate_tokens(text: &str) -> u64 {
    of_chars(text.chars().count() as u64)
}

/// Tokens of a request nobody counted: its system prompt and messages.
pub fn estimate_request<'a>(system: &str, messages: impl Iterator<Item = &'a Message>) -> u64 {
    estimate_tokens(system) + of_chars(messages.map(|m| m.chars() as u64).sum())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn four_characters_are_a_token_rounded_up() {
        assert_eq!(estimate_tokens(""), 0);
        assert_eq!(estimate_tokens("abcde"), 2);
        assert_eq!(estimate_tokens("退款时效"), 1);
        assert_eq!(of_chars(8), 2);
    }
}
