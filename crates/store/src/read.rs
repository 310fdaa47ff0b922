//! `Reader`: a read-only connection to the store, for code that watches runs (the web UI,
//! `cordon ui`) and must never write. SQLite itself refuses writes through it; a PostgreSQL
//! reader's sessions are read-only on the server.

use std::path::PathBuf;

use cordon_protocol::event::BlobId;
use cordon_protocol::{Record, RunId, StepName};
use rusqlite::{Connection, OpenFlags, OptionalExtension, params_from_iter, types::Value};

use crate::lock::Lock;
use crate::rows;
use crate::store::{DATABASE, RunRow};
use crate::{StateDir, StoreError};

/// Which events of a run to read (`logs --type/--step`, the UI's `?type=&step=&after=`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EventFilter {
    /// Type prefixes: `step` matches `step` and `step.*`. Empty = every type.
    pub types: Vec<String>,
    pub step: Option<StepName>,
    /// Only events with a sequence number above this.
    pub after: u64,
    /// At most this many events (the first ones after `after`); `None` = all.
    pub limit: Option<usize>,
}

/// A read-only view of the store.
pub struct Reader(Backend);

enum Backend {
    Sqlite(SqliteReader),
    #[cfg(feature = "scale-out")]
    Postgres(Box<crate::pg::PgReader>),
}

/// The same call on whichever backend this reader has.
macro_rules! each {
    ($reader:expr, $backend:ident => $call:expr) => {
        match &$reader.0 {
            Backend::Sqlite($backend) => $call,
            #[cfg(feature = "scale-out")]
            Backend::Postgres($backend) => $call,
        }
    };
}

impl Reader {
    /// Opens the existing store read-only (create it first with [`crate::Store::open`]).
    pub fn open(dir: &StateDir) -> Result<Reader, StoreError> {
        match dir.store() {
            None => SqliteReader::open(dir).map(|r| Reader(Backend::Sqlite(r))),
            #[cfg(feature = "scale-out")]
            Some(url) => {
                crate::pg::PgReader::open(url).map(|r| Reader(Backend::Postgres(Box::new(r))))
            }
            #[cfg(not(feature = "scale-out"))]
            Some(url) => Err(StoreError::NoScaleOut(crate::url::shown(url))),
        }
    }

    /// Where the runs are, for messages.
    pub fn shown(&self) -> String {
        each!(self, r => r.shown())
    }

    /// Every run, oldest first.
    pub fn runs(&self) -> Result<Vec<RunRow>, StoreError> {
        each!(self, r => r.runs())
    }

    pub fn run(&self, id: RunId) -> Result<Option<RunRow>, StoreError> {
        each!(self, r => r.run(id))
    }

    /// The run whose id is `text` or starts with it (case-insensitive); exactly one must match.
    pub fn find_run(&self, text: &str) -> Result<RunId, StoreError> {
        rows::find_run(self.runs()?, text)
    }

    /// The run's events that pass `filter`, in order.
    pub fn events(&self, run: RunId, filter: &EventFilter) -> Result<Vec<Record>, StoreError> {
        each!(self, r => r.events(run, filter))
    }

    /// The run's highest sequence number (0 before its first event): a cheap "anything new?".
    pub fn last_seq(&self, run: RunId) -> Result<u64, StoreError> {
        each!(self, r => r.last_seq(run))
    }

    /// A stored blob (a tooling snapshot, a diff).
    pub fn blob(&self, id: BlobId) -> Result<Option<Vec<u8>>, StoreError> {
        each!(self, r => r.blob(id))
    }

    /// Whether a live process holds the run. With SQLite the probe takes the lock file for an
    /// instant when it is free, so a process starting that run in the same instant may see it
    /// held and retry; with PostgreSQL it asks whether the run's lease is live.
    pub fn is_held(&self, run: RunId) -> bool {
        each!(self, r => r.is_held(run))
    }
}

/// The SQLite reader.
struct SqliteReader {
    conn: Connection,
    db: PathBuf,
    locks: PathBuf,
}

impl SqliteReader {
    fn open(dir: &StateDir) -> Result<SqliteReader, StoreError> {
        let db = dir.path().join(DATABASE);
        let fail = |source| StoreError::Sqlite {
            path: db.clone(),
            source,
        };
        let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let conn = Connection::open_with_flags(&db, flags).map_err(fail)?;
        conn.busy_timeout(std::time::Duration::from_secs(10))
            .map_err(fail)?;
        Ok(SqliteReader {
            conn,
            db,
            locks: dir.path().join("locks"),
        })
    }

    fn shown(&self) -> String {
        self.db.display().to_string()
    }

    fn fail(&self) -> impl Fn(rusqlite::Error) -> StoreError + '_ {
        |source| StoreError::Sqlite {
            path: self.db.clone(),
            source,
        }
    }

    /// Every run, oldest first.
    fn runs(&self) -> Result<Vec<RunRow>, StoreError> {
        rows::runs(&self.conn, &self.db, &self.fail())
    }

    fn run(&self, id: RunId) -> Result<Option<RunRow>, StoreError> {
        rows::run(&self.conn, &self.db, &self.fail(), id)
    }

    /// The run's events that pass `filter`, in order.
    fn events(&self, run: RunId, filter: &EventFilter) -> Result<Vec<Record>, StoreError> {
        let id = run.to_string();
        let mut sql =
            String::from("SELECT seq, ts, type, step, data FROM events WHERE run = ? AND seq > ?");
        let mut args: Vec<Value> = vec![
            Value::Text(id),
            Value::Integer(i64::try_from(filter.after).unwrap_or(i64::MAX)),
        ];
        if !filter.types.is_empty() {
            let any: Vec<&str> = filter
                .types
                .iter()
                .map(|_| "(type = ? OR substr(type, 1, length(?) + 1) = ? || '.')")
                .collect();
            sql.push_str(&format!(" AND ({})", any.join(" OR ")));
            for prefix in &filter.types {
                args.extend([
                    Value::Text(prefix.clone()),
                    Value::Text(prefix.clone()),
                    Value::Text(prefix.clone()),
                ]);
            }
        }
        if let Some(step) = &filter.step {
            sql.push_str(" AND step = ?");
            args.push(Value::Text(step.as_str().to_owned()));
        }
        sql.push_str(" ORDER BY seq");
        if let Some(limit) = filter.limit {
            sql.push_str(" LIMIT ?");
            args.push(Value::Integer(i64::try_from(limit).unwrap_or(i64::MAX)));
        }
        rows::events(&self.conn, &self.fail(), run, &sql, params_from_iter(args))
    }

    /// The run's highest sequence number (0 before its first event): a cheap "anything new?".
    fn last_seq(&self, run: RunId) -> Result<u64, StoreError> {
        let last: i64 = self
            .conn
            .prepare_cached("SELECT COALESCE(MAX(seq), 0) FROM events WHERE run = ?1")
            .and_then(|mut stmt| stmt.query_row([run.to_string()], |r| r.get(0)))
            .map_err(self.fail())?;
        Ok(u64::try_from(last).unwrap_or(0))
    }

    /// A stored blob (a tooling snapshot, a diff).
    fn blob(&self, id: BlobId) -> Result<Option<Vec<u8>>, StoreError> {
        self.conn
            .prepare_cached("SELECT bytes FROM blobs WHERE id = ?1")
            .and_then(|mut stmt| {
                stmt.query_row([i64::try_from(id.0).unwrap_or(-1)], |r| r.get(0))
                    .optional()
            })
            .map_err(self.fail())
    }

    /// Whether a live process holds the run. The probe takes the lock for an instant when it
    /// is free, so a process starting that run in the same instant may see it held and retry.
    fn is_held(&self, run: RunId) -> bool {
        Lock::is_held(&self.locks.join(run.to_string()))
    }
}
