//! `HostName`: a canonical DNS name, and the checks that keep numbers out of names.
//!
//! Every name that reaches a decision, a resolver or an audit record went through
//! [`HostName::parse`], so there is exactly one spelling of each name.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr};

use crate::TargetError;

/// Longest name in presentation form, without the trailing dot (RFC 1035 §2.3.4).
const MAX_NAME: usize = 253;
/// Longest label (RFC 1035 §2.3.4).
const MAX_LABEL: usize = 63;

/// A canonical host name: lowercase ASCII letters, digits, `-` and `_` in non-empty labels of at
/// most 63 bytes, at most 253 bytes in all, no trailing dot, and never something a resolver could
/// read as a number.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HostName(Box<str>);

impl HostName {
    /// Parses and canonicalises a host name.
    ///
    /// Canonical means: ASCII only (non-ASCII must be written as the `xn--` A-label, because a
    /// Unicode name has several spellings that map to one A-label), lowercase, exactly one trailing
    /// dot removed (`example.com.` is the same name as `example.com`; `example.com..` is not a name).
    /// IP literals and numeric-looking names are refused: resolvers such as glibc's `inet_aton`
    /// read `127.1`, `0x7f000001`, `2130706433` and `0177.0.0.1` as addresses, so a name like that
    /// would reach an address without an `ip:` rule.
    pub fn parse(text: &str) -> Result<HostName, TargetError> {
        let text_owned = || text.to_owned();
        if text.is_empty() {
            return Err(TargetError::EmptyName);
        }
        if !text.is_ascii() {
            return Err(TargetError::NonAscii { text: text_owned() });
        }
        // An IP literal is the most common mistake; say so before complaining about characters.
        let unbracketed = text
            .strip_prefix('[')
            .and_then(|t| t.strip_suffix(']'))
            .unwrap_or(text);
        if let Ok(ip) = unbracketed.parse::<IpAddr>() {
            return Err(TargetError::IpLiteral {
                text: text_owned(),
                ip,
            });
        }
        let body = text.strip_suffix('.').unwrap_or(text);
        if let Some(bad) = body
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')))
        {
            return Err(TargetError::InvalidCharacter {
                text: text_owned(),
                character: bad,
            });
        }
        if body.is_empty() || body.split('.').any(str::is_empty) {
            return Err(TargetError::EmptyLabel { text: text_owned() });
        }
        if let Some(label) = body.split('.').find(|l| l.len() > MAX_LABEL) {
            return Err(TargetError::LabelTooLong {
                label: label.to_owned(),
            });
        }
        if body.len() > MAX_NAME {
            return Err(TargetError::NameTooLong { length: body.len() });
        }
        let canonical = body.to_ascii_lowercase();
        if looks_numeric(&canonical) {
            return Err(TargetError::NumericName {
                text: text_owned(),
                address: legacy_ipv4(&canonical),
            });
        }
        Ok(HostName(canonical.into_boxed_str()))
    }

    /// A name that skipped validation, for tests of the checks behind `parse`.
    #[cfg(test)]
    pub(crate) fn unchecked(text: &str) -> HostName {
        HostName(text.into())
    }

    /// The canonical text (lowercase, no trailing dot).
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The labels, leftmost first.
    pub fn labels(&self) -> impl DoubleEndedIterator<Item = &str> {
        self.0.split('.')
    }

    /// How many labels the name has.
    pub fn label_count(&self) -> usize {
        self.0.bytes().filter(|&b| b == b'.').count() + 1
    }

    /// The proper suffixes of this name that start at a label boundary, longest first:
    /// `a.b.example.com` gives `b.example.com`, `example.com`, `com`.
    pub fn parent_suffixes(&self) -> impl Iterator<Item = &str> {
        let s: &str = &self.0;
        s.match_indices('.').map(move |(i, _)| &s[i + 1..])
    }

    /// True when `self` is a strict subdomain of `ancestor` (`a.example.com` of `example.com`).
    pub fn is_strict_subdomain_of(&self, ancestor: &HostName) -> bool {
        self.parent_suffixes().any(|s| s == ancestor.as_str())
    }
}

impl fmt::Display for HostName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Lets maps keyed by `HostName` be searched with a `&str` suffix without allocating; sound
/// because the derived `Hash`/`Eq` of `HostName` are those of its single `str` field.
impl std::borrow::Borrow<str> for HostName {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl AsRef<str> for HostName {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

/// True when a resolver might read `name` (lowercase, no trailing dot) as an IPv4 address.
///
/// This follows the WHATWG URL "ends in a number" rule, which is what browsers use and a superset
/// of what `inet_aton` accepts: the last label is all decimal digits, or `0x` followed by hex
/// digits (`0x` alone included). No top-level domain is numeric, so no real name is lost.
pub(crate) fn looks_numeric(name: &str) -> bool {
    let last = name.rsplit('.').next().unwrap_or(name);
    if !last.is_empty() && last.bytes().all(|b| b.is_ascii_digit()) {
        return true;
    }
    last.strip_prefix("0x")
        .is_some_and(|hex| hex.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// The address `inet_aton` would read from `text` (1 to 4 parts, each decimal, `0`-octal or
/// `0x`-hex, the last part filling the remaining bytes), if any. Used only to suggest the `ip:`
/// rule in an error message, never to reach an address.
pub(crate) fn legacy_ipv4(text: &str) -> Option<Ipv4Addr> {
    let parts: Vec<&str> = text.split('.').collect();
    if parts.is_empty() || parts.len() > 4 {
        return None;
    }
    let mut values = Vec::with_capacity(parts.len());
    for part in &parts {
        let (digits, radix) = if let Some(hex) = part.strip_prefix("0x") {
            (hex, 16)
        } else if part.len() > 1 && part.starts_with('0') {
            (&part[1..], 8)
        } else {
            (*part, 10)
        };
        if part.is_empty() {
            return None;
        }
        let value = if digits.is_empty() {
            0
        } else {
            u64::from_str_radix(digits, radix).ok()?
        };
        values.push(value);
    }
    let (last, init) = values.split_last()?;
    if init.iter().any(|&v| v > 255) {
        return None;
    }
    let rest_bits = 8 * (4 - init.len() as u32);
    if rest_bits < 64 && *last >= 1u64 << rest_bits {
        return None;
    }
    let mut address: u64 = 0;
    for (i, v) in init.iter().enumerate() {
        address |= v << (24 - 8 * i as u32);
    }
    address |= last;
    u32::try_from(address).ok().map(Ipv4Addr::from)
}
