//! Comparing per-process secrets (the run page's token, the host-side proxy credential) in
//! time that does not reveal where two texts differ. The secrets themselves come from
//! `cordon_store::random_hex` (this crate does no IO).

/// Whether `a` equals `b`, in time that depends on their lengths only.
pub fn same(a: &[u8], b: &[u8]) -> bool {
    let mut diff = u8::from(a.len() != b.len());
    for (i, x) in a.iter().enumerate() {
        diff |= x ^ b.get(i).copied().unwrap_or(0);
    }
    diff == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn texts_are_the_same_only_when_every_byte_is() {
        for (a, b, want) in [
            ("abc", "abc", true),
            ("abc", "abd", false),
            ("abc", "ab", false),
            ("ab", "abc", false),
            ("", "", true),
        ] {
            assert_eq!(same(a.as_bytes(), b.as_bytes()), want, "{a:?} {b:?}");
        }
    }
}
