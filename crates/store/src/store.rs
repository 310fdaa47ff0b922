//! `Store`: where runs, their append-only events, blobs and setup stamps are kept — the state
//! directory's SQLite database, or a shared PostgreSQL store (`--store URL`, DESIGN §16). Both
//! backends keep the same guarantees; callers never see which one they have, except through the
//! run locks, which are lock files with SQLite and leases with PostgreSQL.

use std::fs;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use cordon_protocol::event::{BlobId, Timestamp};
use cordon_protocol::{Event, Record, RunId, StepName};

use crate::lock::Lock;
use crate::rows;
use crate::sqlite::Sqlite;
use crate::{StateDir, StoreError};

/// The database's file name inside the state directory.
pub const DATABASE: &str = "cordon.db";

/// One stored run's fixed facts (its progress is in its events).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunRow {
    pub id: RunId,
    /// The pipeline's `name`.
    pub pipeline: String,
    pub pipeline_file: PathBuf,
    pub workspace: PathBuf,
    pub started: Timestamp,
    /// The tooling snapshot taken at run start (a blob).
    pub snapshot: Option<BlobId>,
}

/// The open store.
pub struct Store {
    pub(crate) backend: Backend,
    /// The state directory: this machine's own files (workspace locks, caches), whichever backend
    /// keeps the runs.
    pub(crate) dir: PathBuf,
}

pub(crate) enum Backend {
    Sqlite(Sqlite),
    #[cfg(feature = "scale-out")]
    Postgres(Box<crate::pg::Postgres>),
}

/// The same call on whichever backend this store has.
macro_rules! each {
    ($store:expr, $backend:ident => $call:expr) => {
        match &$store.backend {
            Backend::Sqlite($backend) => $call,
            #[cfg(feature = "scale-out")]
            Backend::Postgres($backend) => $call,
        }
    };
}
pub(crate) use each;

impl Store {
    /// Opens (creating when missing, mode 0700) the state directory and the store it names: its
    /// own database, or the PostgreSQL store of [`StateDir::store`]. Either is migrated to this
    /// build's schema and checked, so a damaged or newer store is named at once.
    pub fn open(dir: &StateDir) -> Result<Store, StoreError> {
        let root = dir.path();
        for path in [root.to_path_buf(), root.join("locks")] {
            fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(&path)
                .map_err(|source| StoreError::Io {
                    path: path.clone(),
                    source,
                })?;
        }
        let backend = match dir.store() {
            None => Backend::Sqlite(Sqlite::open(root)?),
            Some(url) => open_shared(url)?,
        };
        Ok(Store {
            backend,
            dir: root.to_path_buf(),
        })
    }

    /// Another connection to the same store, for a thread of this process (an outcome run's
    /// parallel task): checked and migrated already by [`Store::open`].
    pub fn connect(&self) -> Result<Store, StoreError> {
        let backend = match &self.backend {
            Backend::Sqlite(db) => Backend::Sqlite(db.connect()?),
            #[cfg(feature = "scale-out")]
            Backend::Postgres(db) => Backend::Postgres(Box::new(db.connect()?)),
        };
        Ok(Store {
            backend,
            dir: self.dir.clone(),
        })
    }

    /// Where the runs are, for messages: the database file or the store's URL (no password).
    pub fn shown(&self) -> String {
        each!(self, db => db.shown())
    }

    /// The state directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Whether runs are kept in a store shared between machines (so run locks are leases).
    pub fn is_shared(&self) -> bool {
        !matches!(self.backend, Backend::Sqlite(_))
    }

    /// The socket addresses of a shared store (none for SQLite): no sandbox may reach them.
    pub fn addresses(&self) -> Vec<std::net::SocketAddr> {
        match &self.backend {
            Backend::Sqlite(_) => Vec::new(),
            #[cfg(feature = "scale-out")]
            Backend::Postgres(db) => db.addresses(),
        }
    }

    /// Records a new run's fixed facts. Its events follow through [`Store::append`].
    pub fn create_run(&self, row: &RunRow) -> Result<(), StoreError> {
        each!(self, db => db.create_run(row))
    }

    /// Appends one event as the run's next sequence number and returns it as stored. A boundary
    /// event ([`Event::is_boundary`]) is durable when this returns. With a shared store the
    /// append is refused once another holder has taken the run's lease (the fencing generation).
    pub fn append(
        &self,
        run: RunId,
        step: Option<&StepName>,
        event: &Event,
    ) -> Result<Record, StoreError> {
        each!(self, db => db.append(run, step, event))
    }

    /// The run's events with a sequence number above `after`, in order.
    pub fn events_after(&self, run: RunId, after: u64) -> Result<Vec<Record>, StoreError> {
        each!(self, db => db.events_after(run, after))
    }

    /// Every event of the run, in order.
    pub fn events(&self, run: RunId) -> Result<Vec<Record>, StoreError> {
        self.events_after(run, 0)
    }

    pub fn run(&self, id: RunId) -> Result<Option<RunRow>, StoreError> {
        each!(self, db => db.run(id))
    }

    /// Every run, oldest first.
    pub fn runs(&self) -> Result<Vec<RunRow>, StoreError> {
        each!(self, db => db.runs())
    }

    /// The run whose id is `text` or starts with it (case-insensitive); exactly one must match.
    pub fn find_run(&self, text: &str) -> Result<RunId, StoreError> {
        rows::find_run(self.runs()?, text)
    }

    /// The most recently started run.
    pub fn last_run(&self) -> Result<Option<RunId>, StoreError> {
        Ok(self.runs()?.last().map(|r| r.id))
    }

    /// Stores bytes (a large output, a diff, a snapshot) for the run.
    pub fn put_blob(&self, run: RunId, bytes: &[u8]) -> Result<BlobId, StoreError> {
        each!(self, db => db.put_blob(run, bytes))
    }

    pub fn blob(&self, id: BlobId) -> Result<Option<Vec<u8>>, StoreError> {
        each!(self, db => db.blob(id))
    }

    /// Whether a setup hook with this stamp has succeeded before.
    pub fn has_stamp(&self, stamp: &str) -> Result<bool, StoreError> {
        each!(self, db => db.has_stamp(stamp))
    }

    /// Records a successful setup hook.
    pub fn put_stamp(&self, stamp: &str) -> Result<(), StoreError> {
        each!(self, db => db.put_stamp(stamp))
    }

    /// Holds the run for the life of the returned guard: `locks/<RUN_ID>`, or the run's lease in
    /// a shared store (renewed while held). Another live holder → `Held` / `Leased`.
    pub fn lock_run(&self, run: RunId) -> Result<Lock, StoreError> {
        each!(self, db => db.lock_run(run))
    }

    /// Whether a live process (of any machine, with a shared store) holds the run.
    pub fn is_held(&self, run: RunId) -> bool {
        each!(self, db => db.is_held(run))
    }

    /// Checks, before a host action acts (a commit, a push), that this process still holds the
    /// run: always so with a lock file; with a lease, refused once it was lost or taken over.
    pub fn check_held(&self, run: RunId) -> Result<(), StoreError> {
        match &self.backend {
            Backend::Sqlite(_) => {
                let _ = run;
                Ok(())
            }
            #[cfg(feature = "scale-out")]
            Backend::Postgres(db) => db.check_held(run),
        }
    }

    /// Takes the lock of a workspace (one live run per workspace), named by a digest of its
    /// canonical path; another holder → `None`. A workspace is this machine's, so its lock is
    /// always a local file, whichever store keeps the runs.
    pub fn lock_workspace(&self, workspace: &Path) -> Result<Option<Lock>, StoreError> {
        use sha2::Digest as _;
        let digest = sha2::Sha256::digest(workspace.as_os_str().as_encoded_bytes());
        let name: String = digest.iter().take(16).map(|b| format!("{b:02x}")).collect();
        Lock::try_take(&self.dir.join("locks").join(format!("workspace-{name}")))
    }
}

#[cfg(feature = "scale-out")]
fn open_shared(url: &str) -> Result<Backend, StoreError> {
    Ok(Backend::Postgres(Box::new(crate::pg::Postgres::open(url)?)))
}

#[cfg(not(feature = "scale-out"))]
fn open_shared(url: &str) -> Result<Backend, StoreError> {
    Err(StoreError::NoScaleOut(crate::url::shown(url)))
}

#[cfg(all(test, not(feature = "scale-out")))]
mod tests {
    use super::*;

    #[test]
    fn a_postgres_store_in_a_build_without_it_is_refused_with_the_fix() {
        let dir = tempfile::tempdir().expect("tempdir");
        let state = StateDir::new(dir.path().join("state"))
            .with_store(Some("postgres://cordon@db.test/runs?options=x".to_owned()));
        let want = "the store `postgres://cordon@db.test/runs` is a PostgreSQL store, and this \
                    cordon was built without it; build cordon with `--features scale-out`, or \
                    unset --store and $CORDON_STORE to keep runs in the state directory";
        let store = Store::open(&state).err().map(|e| e.to_string());
        assert_eq!(store.as_deref(), Some(want));
        let reader = crate::Reader::open(&state).err().map(|e| e.to_string());
        assert_eq!(reader.as_deref(), Some(want));
    }
}
