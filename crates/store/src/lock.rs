//! `Lock`: an exclusive `flock` on a file under `locks/`, held until dropped (or until the
//! process dies, which the kernel releases for us — so a `kill -9` never leaves a stale lock).

use std::fs::{File, OpenOptions, TryLockError};
use std::path::{Path, PathBuf};

use crate::StoreError;

/// A held lock. Dropping it releases the lock.
#[derive(Debug)]
pub struct Lock {
    _file: File,
    path: PathBuf,
}

impl Lock {
    /// Takes the lock at `path` without waiting; `Ok(None)` when another holder has it.
    pub(crate) fn try_take(path: &Path) -> Result<Option<Lock>, StoreError> {
        let io = |source| StoreError::Io {
            path: path.to_path_buf(),
            source,
        };
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path)
            .map_err(io)?;
        match file.try_lock() {
            Ok(()) => Ok(Some(Lock {
                _file: file,
                path: path.to_path_buf(),
            })),
            Err(TryLockError::WouldBlock) => Ok(None),
            Err(TryLockError::Error(source)) => Err(io(source)),
        }
    }

    /// Whether someone holds the lock at `path` right now (taken and released at once).
    pub(crate) fn is_held(path: &Path) -> bool {
        if !path.exists() {
            return false;
        }
        matches!(Lock::try_take(path), Ok(None))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}
