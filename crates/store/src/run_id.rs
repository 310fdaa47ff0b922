//! New run ids: the current time and 80 bits from the kernel's random source.

use std::io::Read;
use std::time::{SystemTime, UNIX_EPOCH};

use cordon_protocol::RunId;

use crate::StoreError;

/// The kernel's random source.
const RANDOM: &str = "/dev/urandom";

/// `N` bytes from the kernel's random source.
fn random_bytes<const N: usize>() -> std::io::Result<[u8; N]> {
    let mut bytes = [0u8; N];
    std::fs::File::open(RANDOM)?.read_exact(&mut bytes)?;
    Ok(bytes)
}

/// `N` random bytes as lowercase hex (twice as long): a per-process secret such as the run
/// page's token or a session's proxy credential.
pub fn random_hex<const N: usize>() -> std::io::Result<String> {
    Ok(random_bytes::<N>()?
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect())
}

/// A fresh ULID. Ids of runs started in the same millisecond differ in their random bits.
pub fn new_run_id() -> Result<RunId, StoreError> {
    let bytes = random_bytes::<16>().map_err(|source| StoreError::Io {
        path: std::path::PathBuf::from(RANDOM),
        source,
    })?;
    let millis = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    Ok(RunId::from_parts(millis, u128::from_le_bytes(bytes)))
}

#[cfg(test)]
mod tests {
    #[test]
    fn random_hex_is_fresh_and_of_its_length() {
        let one = super::random_hex::<16>().expect("random");
        assert_eq!(one.len(), 32);
        assert!(one.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_ne!(one, super::random_hex::<16>().expect("random"));
    }
}
