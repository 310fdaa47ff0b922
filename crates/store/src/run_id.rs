//! New run ids: the current time and 80 bits from the kernel's random source.

use std::io::Read;
use std::time::{SystemTime, UNIX_EPOCH};

use cordon_protocol::RunId;

use crate::StoreError;

/// A fresh ULID. Ids of runs started in the same millisecond differ in their random bits.
pub fn new_run_id() -> Result<RunId, StoreError> {
    let mut bytes = [0u8; 16];
    let path = std::path::Path::new("/dev/urandom");
    std::fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut bytes))
        .map_err(|source| StoreError::Io {
            path: path.to_path_buf(),
            source,
        })?;
    let millis = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    Ok(RunId::from_parts(millis, u128::from_le_bytes(bytes)))
}
