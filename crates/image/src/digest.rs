//! sha256 digests, and a reader that hashes and counts what passes through it.

use std::fmt;
use std::io::{self, Read};

use sha2::{Digest as _, Sha256};

/// A sha256 digest, shown as `sha256:<64 lowercase hex digits>`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Digest(String);

impl Digest {
    /// Parses `sha256:<hex>`; `None` for anything else (another algorithm included).
    pub fn parse(text: &str) -> Option<Digest> {
        let hex = text.strip_prefix("sha256:")?;
        Digest::from_hex(hex)
    }

    /// The digest whose hex digits are `hex` (64 lowercase ones).
    pub fn from_hex(hex: &str) -> Option<Digest> {
        (hex.len() == 64 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
            .then(|| Digest(hex.to_owned()))
    }

    pub fn of(bytes: &[u8]) -> Digest {
        Digest::finish(Sha256::new_with_prefix(bytes))
    }

    fn finish(hasher: Sha256) -> Digest {
        let mut hex = String::with_capacity(64);
        for byte in hasher.finalize() {
            hex.push_str(&format!("{byte:02x}"));
        }
        Digest(hex)
    }

    pub fn hex(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sha256:{}", self.0)
    }
}

/// The reason a [`Hashing`] reader stopped: more bytes than its limit.
#[derive(Debug)]
pub(crate) struct Exceeded;

impl fmt::Display for Exceeded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("more bytes than the limit")
    }
}

impl std::error::Error for Exceeded {}

impl Exceeded {
    /// Whether `err` is a [`Hashing`] limit (possibly wrapped by a decoder that kept it).
    pub(crate) fn is(err: &io::Error) -> bool {
        err.get_ref().is_some_and(|inner| inner.is::<Exceeded>())
    }
}

/// Hashes and counts the bytes read through it; reading past `limit` bytes fails with
/// [`Exceeded`].
pub(crate) struct Hashing<R> {
    inner: R,
    hasher: Sha256,
    count: u64,
    limit: u64,
}

impl<R: Read> Hashing<R> {
    pub(crate) fn new(inner: R, limit: u64) -> Hashing<R> {
        Hashing {
            inner,
            hasher: Sha256::new(),
            count: 0,
            limit,
        }
    }

    pub(crate) fn count(&self) -> u64 {
        self.count
    }

    pub(crate) fn digest(self) -> Digest {
        Digest::finish(self.hasher)
    }
}

impl<R: Read> Read for Hashing<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let room = self.limit.saturating_sub(self.count);
        if room == 0 && !buf.is_empty() {
            // One byte more tells a stream that ends exactly at the limit from a longer one.
            let mut probe = [0u8; 1];
            return match self.inner.read(&mut probe)? {
                0 => Ok(0),
                _ => Err(io::Error::other(Exceeded)),
            };
        }
        let len = buf.len().min(usize::try_from(room).unwrap_or(usize::MAX));
        let n = self.inner.read(&mut buf[..len])?;
        self.hasher.update(&buf[..n]);
        self.count += n as u64;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_digest_is_sha256_shown_with_its_algorithm() {
        let digest = Digest::of(b"abc");
        assert_eq!(
            digest.to_string(),
            "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(Digest::parse(&digest.to_string()), Some(digest));
        assert_eq!(Digest::parse("sha512:ab"), None);
        assert_eq!(Digest::from_hex("AB"), None);
    }

    #[test]
    fn a_hashing_reader_stops_past_its_limit_and_not_at_it() {
        let mut exact = Hashing::new(&b"abcd"[..], 4);
        assert_eq!(io::read_to_string(&mut exact).unwrap(), "abcd");
        assert_eq!(exact.count(), 4);
        let mut over = Hashing::new(&b"abcde"[..], 4);
        let err = io::read_to_string(&mut over).unwrap_err();
        assert!(Exceeded::is(&err), "{err}");
    }
}
