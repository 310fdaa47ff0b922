//! `Lock`: what keeps a run (or a workspace) to one holder until dropped. With the SQLite store it
//! is an exclusive `flock` on a file under `locks/`, which the kernel releases when the process
//! dies — so a `kill -9` never leaves a stale lock. With the PostgreSQL store a run's lock is a
//! lease in the database, renewed by a thread of the holder (`pg::lease`).

use std::fs::{File, OpenOptions, TryLockError};
use std::path::{Path, PathBuf};

use crate::StoreError;

/// A held lock. Dropping it releases the lock.
#[derive(Debug)]
pub struct Lock(Held);

#[derive(Debug)]
enum Held {
    File {
        _file: File,
        path: PathBuf,
    },
    #[cfg(feature = "scale-out")]
    Lease(crate::pg::Lease),
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
            Ok(()) => Ok(Some(Lock(Held::File {
                _file: file,
                path: path.to_path_buf(),
            }))),
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

    #[cfg(feature = "scale-out")]
    pub(crate) fn lease(lease: crate::pg::Lease) -> Lock {
        Lock(Held::Lease(lease))
    }

    /// What is held, for messages: the lock file, or the run's lease and its generation.
    pub fn describe(&self) -> String {
        match &self.0 {
            Held::File { path, .. } => format!("lock `{}`", path.display()),
            #[cfg(feature = "scale-out")]
            Held::Lease(lease) => lease.describe(),
        }
    }
}
