//! `RunId`: a run's identifier, a 26-character lowercase ULID (Crockford base32).

use std::fmt;

/// Crockford's base32 alphabet, lowercased; ULIDs use it without padding.
const ALPHABET: &[u8; 32] = b"0123456789abcdefghjkmnpqrstvwxyz";

/// A run id: 128 bits shown as a 26-character lowercase ULID. The text form is canonical, so two
/// ids are equal exactly when their texts are.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RunId(u128);

/// Why a text is not a run id.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RunIdError {
    #[error("run id `{0}` is not 26 characters long; copy the id from `cordon runs`")]
    Length(String),
    #[error(
        "run id `{text}` has `{found}` at position {position}, which is not a ULID character \
         (0-9 and a-z without i, l, o, u); copy the id from `cordon runs`"
    )]
    Character {
        text: String,
        found: char,
        position: usize,
    },
    #[error("run id `{0}` is larger than a ULID can be (its first character must be 0-7)")]
    Overflow(String),
}

impl RunId {
    /// The id with these 128 bits: the upper 48 are the millisecond timestamp in a ULID.
    pub fn from_u128(bits: u128) -> RunId {
        RunId(bits)
    }

    /// Builds an id from a millisecond timestamp (its low 48 bits) and 80 random bits.
    pub fn from_parts(unix_millis: u64, random: u128) -> RunId {
        let time = u128::from(unix_millis & ((1 << 48) - 1));
        RunId((time << 80) | (random & ((1 << 80) - 1)))
    }

    pub fn to_u128(self) -> u128 {
        self.0
    }

    /// The millisecond timestamp a ULID carries in its upper 48 bits.
    pub fn unix_millis(self) -> u64 {
        // The shift leaves 48 bits, which always fit.
        u64::try_from(self.0 >> 80).unwrap_or(u64::MAX)
    }

    /// Parses a full 26-character id. Upper case is accepted and folded, as ULIDs are
    /// case-insensitive; the Display form is always lowercase.
    pub fn parse(text: &str) -> Result<RunId, RunIdError> {
        if text.chars().count() != 26 {
            return Err(RunIdError::Length(text.to_owned()));
        }
        let mut bits: u128 = 0;
        for (position, c) in text.chars().enumerate() {
            let digit = decode(c).ok_or_else(|| RunIdError::Character {
                text: text.to_owned(),
                found: c,
                position: position + 1,
            })?;
            if position == 0 && digit > 7 {
                return Err(RunIdError::Overflow(text.to_owned()));
            }
            bits = (bits << 5) | u128::from(digit);
        }
        Ok(RunId(bits))
    }
}

fn decode(c: char) -> Option<u8> {
    let lower = c.to_ascii_lowercase();
    ALPHABET
        .iter()
        .position(|&a| char::from(a) == lower)
        .and_then(|p| u8::try_from(p).ok())
}

impl fmt::Display for RunId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut out = [0u8; 26];
        for (i, slot) in out.iter_mut().enumerate() {
            let shift = 5 * (25 - i);
            let index = usize::try_from((self.0 >> shift) & 0x1f).unwrap_or(0);
            *slot = ALPHABET[index];
        }
        // Every byte comes from ALPHABET, which is ASCII.
        f.write_str(std::str::from_utf8(&out).unwrap_or("?"))
    }
}

impl std::str::FromStr for RunId {
    type Err = RunIdError;

    fn from_str(text: &str) -> Result<RunId, RunIdError> {
        RunId::parse(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(text: &str, expected: Result<&str, &str>) {
        let got = RunId::parse(text)
            .map(|id| id.to_string())
            .map_err(|e| e.to_string());
        let expected = expected.map(str::to_owned).map_err(str::to_owned);
        assert_eq!(got, expected, "input {text:?}");
    }

    #[test]
    fn run_ids_parse_as_lowercase_ulids() {
        check(
            "01arz3ndektsv4rrffq69g5fav",
            Ok("01arz3ndektsv4rrffq69g5fav"),
        );
        check(
            "01ARZ3NDEKTSV4RRFFQ69G5FAV",
            Ok("01arz3ndektsv4rrffq69g5fav"),
        );
        check(
            "7zzzzzzzzzzzzzzzzzzzzzzzzz",
            Ok("7zzzzzzzzzzzzzzzzzzzzzzzzz"),
        );
        check(
            "00000000000000000000000000",
            Ok("00000000000000000000000000"),
        );
        check(
            "01arz",
            Err("run id `01arz` is not 26 characters long; copy the id from `cordon runs`"),
        );
        check(
            "01arz3ndektsv4rrffq69g5fau",
            Err(
                "run id `01arz3ndektsv4rrffq69g5fau` has `u` at position 26, which is not a ULID character (0-9 and a-z without i, l, o, u); copy the id from `cordon runs`",
            ),
        );
        check(
            "8zzzzzzzzzzzzzzzzzzzzzzzzz",
            Err(
                "run id `8zzzzzzzzzzzzzzzzzzzzzzzzz` is larger than a ULID can be (its first character must be 0-7)",
            ),
        );
    }

    #[test]
    fn run_id_timestamp_occupies_the_leading_characters() {
        let id = RunId::from_parts(1_469_922_850_259, 0);
        assert_eq!(id.to_string(), "01arz3ndek0000000000000000");
        assert_eq!(id.unix_millis(), 1_469_922_850_259);
        assert_eq!(RunId::parse(&id.to_string()), Ok(id));
    }
}
