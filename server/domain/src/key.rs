use std::fmt;

/// The client's `Idempotency-Key`: 1 to 255 characters of visible ASCII (0x21 to 0x7E).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct IdempotencyKey(String);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidIdempotencyKey {
    #[error("the Idempotency-Key header is empty")]
    Empty,
    #[error("the Idempotency-Key header is longer than 255 characters")]
    TooLong,
    #[error("the Idempotency-Key header may hold only visible ASCII characters (0x21 to 0x7E)")]
    InvalidCharacter,
}

impl IdempotencyKey {
    pub const MAX_LEN: usize = 255;

    /// Takes the raw header bytes: a header that is not even valid text is refused the same
    /// way as one with a forbidden character.
    pub fn parse(raw: &[u8]) -> Result<IdempotencyKey, InvalidIdempotencyKey> {
        if raw.is_empty() {
            return Err(InvalidIdempotencyKey::Empty);
        }
        if raw.len() > Self::MAX_LEN {
            return Err(InvalidIdempotencyKey::TooLong);
        }
        if !raw.iter().all(|byte| (0x21..=0x7e).contains(byte)) {
            return Err(InvalidIdempotencyKey::InvalidCharacter);
        }
        // Every byte is visible ASCII, so this is valid UTF-8.
        Ok(IdempotencyKey(String::from_utf8_lossy(raw).into_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for IdempotencyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn visible_ascii_up_to_255_characters_is_a_key() {
        assert_eq!(
            IdempotencyKey::parse(b"abc-123").expect("valid").as_str(),
            "abc-123"
        );
        assert!(IdempotencyKey::parse(b"!~").is_ok());
        assert!(IdempotencyKey::parse(&[b'k'; 255]).is_ok());
    }

    #[test]
    fn everything_else_is_refused_with_its_reason() {
        assert_eq!(IdempotencyKey::parse(b""), Err(InvalidIdempotencyKey::Empty));
        assert_eq!(
            IdempotencyKey::parse(&[b'k'; 256]),
            Err(InvalidIdempotencyKey::TooLong)
        );
        for raw in [&b"a b"[..], b"tab\there", b"caf\xc3\xa9", b"\x7f", b"nul\x00"] {
            assert_eq!(
                IdempotencyKey::parse(raw),
                Err(InvalidIdempotencyKey::InvalidCharacter),
                "{raw:?}"
            );
        }
    }
}
