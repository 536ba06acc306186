//! Lower-case hex, the one writer and reader (signatures, keys on disk).

/// Lower-case hex of `bytes`.
pub fn encode(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The bytes of a hex text (either case); `None` when it is not hex.
pub fn decode(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn round_trips_and_refuses_what_is_not_hex() {
        assert_eq!(super::encode(&[0, 0xab, 0x10]), "00ab10");
        assert_eq!(super::decode("00AB10"), Some(vec![0, 0xab, 0x10]));
        assert_eq!(super::decode("abc"), None);
        assert_eq!(super::decode("zz"), None);
        assert_eq!(super::decode("é1"), None);
    }
}
