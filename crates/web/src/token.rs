//! `Token`: the per-process secret every request must present (in `?token=` once, then in a
//! cookie), so other local users and web pages cannot read runs from the loopback port.

use std::fmt;

use crate::WebError;

/// 32 random bytes as 64 lowercase hex digits.
#[derive(Clone, PartialEq, Eq)]
pub struct Token(String);

impl Token {
    /// A fresh token from the kernel's random source.
    pub fn generate() -> Result<Token, WebError> {
        cordon_store::random_hex::<32>()
            .map(Token)
            .map_err(|source| WebError::Random { source })
    }

    /// A token with known text (tests, or a caller that manages its own secret).
    pub fn from_text(text: &str) -> Token {
        Token(text.to_owned())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Compares in time independent of where the texts differ, so response timing does not
    /// reveal a prefix of the token.
    pub fn matches(&self, candidate: &str) -> bool {
        !self.0.is_empty() && cordon_protocol::secret::same(self.0.as_bytes(), candidate.as_bytes())
    }
}

/// Never printed by accident (debug output, panics).
impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Token(..)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_match_only_their_exact_text() {
        let token = Token::from_text("abc123");
        for (candidate, expected) in [
            ("abc123", true),
            ("abc12", false),
            ("abc1234", false),
            ("abd123", false),
            ("", false),
        ] {
            assert_eq!(token.matches(candidate), expected, "{candidate}");
        }
        assert!(
            !Token::from_text("").matches(""),
            "an empty token never matches"
        );
        let fresh = Token::generate().expect("random");
        assert_eq!(fresh.as_str().len(), 64);
        assert_ne!(fresh, Token::generate().expect("random"));
        assert_eq!(format!("{fresh:?}"), "Token(..)");
    }
}
