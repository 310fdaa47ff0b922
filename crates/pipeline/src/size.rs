//! `ByteSize`: sizes such as `2G`, `512M`, `64Ki` — binary units, as DESIGN §2 says.

use std::fmt;

/// A size in bytes, greater than 0. `K`/`M`/`G`/`T` are binary (`2G` = 2 GiB); `Ki`/`Mi`/`Gi`/`Ti`
/// mean the same and are accepted; a trailing `B` is allowed (`512MiB`); no suffix means bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ByteSize(u64);

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ByteSizeError {
    #[error("size `{0}` is not a number with an optional unit; write it like `512M` or `2G`")]
    Syntax(String),
    #[error("size `{0}` has an unknown unit; use K, M, G or T (binary: 2G is 2 GiB)")]
    Unit(String),
    #[error("size `{0}` does not fit in 64 bits; give a smaller size")]
    Overflow(String),
    #[error("size `{0}` is zero; give a size greater than 0 or remove the key")]
    Zero(String),
}

const UNITS: [(char, u32); 5] = [('K', 10), ('M', 20), ('G', 30), ('T', 40), ('P', 50)];

impl ByteSize {
    pub fn bytes(self) -> u64 {
        self.0
    }

    pub fn from_bytes(bytes: u64) -> Option<ByteSize> {
        (bytes > 0).then_some(ByteSize(bytes))
    }

    pub fn parse(text: &str) -> Result<ByteSize, ByteSizeError> {
        let trimmed = text.trim();
        let split = trimmed
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(trimmed.len());
        let (digits, unit) = trimmed.split_at(split);
        if digits.is_empty() {
            return Err(ByteSizeError::Syntax(text.to_owned()));
        }
        let unit = unit.trim_start();
        let unit = unit.strip_suffix(['B', 'b']).unwrap_or(unit);
        let unit = unit.strip_suffix('i').unwrap_or(unit);
        let shift = match unit {
            "" => 0,
            _ => {
                let mut chars = unit.chars();
                let (Some(c), None) = (chars.next(), chars.next()) else {
                    return Err(ByteSizeError::Unit(text.to_owned()));
                };
                let c = c.to_ascii_uppercase();
                match UNITS.iter().find(|(u, _)| *u == c) {
                    Some((_, shift)) => *shift,
                    None => return Err(ByteSizeError::Unit(text.to_owned())),
                }
            }
        };
        let number: u64 = digits
            .parse()
            .map_err(|_| ByteSizeError::Overflow(text.to_owned()))?;
        let bytes = number
            .checked_mul(1u64 << shift)
            .ok_or_else(|| ByteSizeError::Overflow(text.to_owned()))?;
        ByteSize::from_bytes(bytes).ok_or_else(|| ByteSizeError::Zero(text.to_owned()))
    }
}

impl fmt::Display for ByteSize {
    /// The largest unit that divides the size exactly: `2G`, `1536M`, `100`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (unit, shift) in UNITS.iter().rev() {
            let scale = 1u64 << shift;
            if self.0.is_multiple_of(scale) {
                return write!(f, "{}{unit}", self.0 / scale);
            }
        }
        write!(f, "{}", self.0)
    }
}

impl std::str::FromStr for ByteSize {
    type Err = ByteSizeError;

    fn from_str(text: &str) -> Result<ByteSize, ByteSizeError> {
        ByteSize::parse(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(text: &str, expected: Result<u64, &str>) {
        let got = ByteSize::parse(text)
            .map(ByteSize::bytes)
            .map_err(|e| e.to_string());
        assert_eq!(got, expected.map_err(str::to_owned), "input {text:?}");
    }

    #[test]
    fn sizes_use_binary_units() {
        check("2G", Ok(2 << 30));
        check("2Gi", Ok(2 << 30));
        check("2GiB", Ok(2 << 30));
        check("512M", Ok(512 << 20));
        check("512m", Ok(512 << 20));
        check("64Ki", Ok(64 << 10));
        check("100", Ok(100));
        check("1T", Ok(1 << 40));
        check(
            "",
            Err("size `` is not a number with an optional unit; write it like `512M` or `2G`"),
        );
        check(
            "G",
            Err("size `G` is not a number with an optional unit; write it like `512M` or `2G`"),
        );
        check(
            "1.5G",
            Err("size `1.5G` has an unknown unit; use K, M, G or T (binary: 2G is 2 GiB)"),
        );
        check(
            "2X",
            Err("size `2X` has an unknown unit; use K, M, G or T (binary: 2G is 2 GiB)"),
        );
        check(
            "0",
            Err("size `0` is zero; give a size greater than 0 or remove the key"),
        );
        check(
            "99999999999P",
            Err("size `99999999999P` does not fit in 64 bits; give a smaller size"),
        );
        check(
            "-1G",
            Err("size `-1G` is not a number with an optional unit; write it like `512M` or `2G`"),
        );
    }

    #[test]
    fn sizes_display_in_the_largest_exact_unit() {
        for (text, shown) in [
            ("2048M", "2G"),
            ("1536M", "1536M"),
            ("100", "100"),
            ("1024", "1K"),
        ] {
            assert_eq!(
                ByteSize::parse(text).map(|s| s.to_string()),
                Ok(shown.to_owned())
            );
        }
    }
}
