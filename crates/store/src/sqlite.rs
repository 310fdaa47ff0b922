//! The SQLite backend: `cordon.db` in the state directory and the lock files beside it.

use std::cell::Cell;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use cordon_protocol::event::{BlobId, Timestamp};
use cordon_protocol::{Event, Record, RunId, SCHEMA_VERSION, StepName};
use rusqlite::{Connection, ErrorCode, OptionalExtension, TransactionBehavior, params};

use crate::StoreError;
use crate::batch::{BatchRow, TaskRow};
use crate::lock::Lock;
use crate::rows;
use crate::schema;
use crate::store::{DATABASE, RunRow};

/// How long a writer waits for another process's transaction (runs of different pipelines may
/// share a state directory).
const BUSY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Sync {
    Normal,
    Full,
}

/// The open SQLite store.
pub(crate) struct Sqlite {
    conn: Connection,
    dir: PathBuf,
    db: PathBuf,
    sync: Cell<Sync>,
    /// Held around every write, and shared with the connections [`Sqlite::connect`] makes:
    /// writers of this process take turns here instead of in SQLite's busy handler, which
    /// sleeps (up to 100 ms a try) whenever a write lock is taken.
    writing: Arc<Mutex<()>>,
}

impl Sqlite {
    /// Opens (creating when missing) the database in the state directory `root` (made by
    /// [`crate::Store::open`]), migrates the schema, and checks the file's integrity so a damaged
    /// database is named at once.
    pub(crate) fn open(root: &Path) -> Result<Sqlite, StoreError> {
        let db = root.join(DATABASE);
        let fail = |source| classify(&db, source);
        let mut conn = Connection::open(&db).map_err(fail)?;
        conn.busy_timeout(BUSY_TIMEOUT).map_err(fail)?;
        // `quick_check` reads every page: a truncated or overwritten file fails here, with the
        // file named, rather than in the middle of a run.
        let check: String = conn
            .query_row("PRAGMA quick_check", [], |r| r.get(0))
            .map_err(fail)?;
        if check != "ok" {
            return Err(StoreError::Corrupt {
                path: db,
                detail: check,
            });
        }
        let mode: String = conn
            .query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))
            .map_err(fail)?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(StoreError::Corrupt {
                path: db,
                detail: format!("journal mode `{mode}` instead of WAL"),
            });
        }
        conn.pragma_update(None, "synchronous", "FULL")
            .map_err(fail)?;
        let version: i64 = conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .map_err(fail)?;
        if version > schema::latest() {
            return Err(StoreError::TooNew {
                path: db,
                found: version,
                known: schema::latest(),
            });
        }
        schema::migrate(&mut conn, version).map_err(fail)?;
        Ok(Sqlite {
            conn,
            dir: root.to_path_buf(),
            db,
            sync: Cell::new(Sync::Full),
            writing: Arc::default(),
        })
    }

    /// Another connection to the same database, for a thread of this process (an outcome run's
    /// parallel task): checked and migrated already by [`Sqlite::open`], so only its settings
    /// are made.
    pub(crate) fn connect(&self) -> Result<Sqlite, StoreError> {
        let fail = |source| classify(&self.db, source);
        let conn = Connection::open(&self.db).map_err(fail)?;
        conn.busy_timeout(BUSY_TIMEOUT).map_err(fail)?;
        conn.pragma_update(None, "synchronous", "FULL")
            .map_err(fail)?;
        Ok(Sqlite {
            conn,
            dir: self.dir.clone(),
            db: self.db.clone(),
            sync: Cell::new(Sync::Full),
            writing: Arc::clone(&self.writing),
        })
    }

    pub(crate) fn shown(&self) -> String {
        self.db.display().to_string()
    }

    fn fail(&self) -> impl Fn(rusqlite::Error) -> StoreError + '_ {
        |source| classify(&self.db, source)
    }

    /// Records a new run's fixed facts. Its events follow through `append`.
    pub(crate) fn create_run(&self, row: &RunRow) -> Result<(), StoreError> {
        let _writing = self.writing();
        self.set_sync(Sync::Full)?;
        self.conn
            .execute(
                "INSERT INTO runs (id, pipeline, pipeline_file, workspace, started, snapshot, event_schema) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                params![
                    row.id.to_string(),
                    row.pipeline,
                    row.pipeline_file.to_string_lossy(),
                    row.workspace.to_string_lossy(),
                    millis_i64(row.started.0),
                    row.snapshot.map(|b| b.0 as i64),
                    SCHEMA_VERSION,
                ],
            )
            .map_err(self.fail())?;
        Ok(())
    }

    /// Appends one event as the run's next sequence number and returns it as stored. A boundary
    /// event ([`Event::is_boundary`]) is durable (`synchronous=FULL`, the WAL fsynced) when this
    /// returns; other events are committed with `synchronous=NORMAL`. Because the WAL is one
    /// append-only file replayed as a prefix, the next FULL commit makes every earlier frame
    /// durable too: a crash can lose only events after the last boundary, i.e. the output of
    /// the step in flight, which resume re-runs from its start anyway.
    pub(crate) fn append(
        &self,
        run: RunId,
        step: Option<&StepName>,
        event: &Event,
    ) -> Result<Record, StoreError> {
        let _writing = self.writing();
        self.set_sync(if event.is_boundary() {
            Sync::Full
        } else {
            Sync::Normal
        })?;
        let ts = Timestamp(now_millis());
        let id = run.to_string();
        // `IMMEDIATE`: the write lock is taken before the last sequence number is read, so two
        // connections appending to one run (an outcome run's parallel tasks) queue behind each
        // other instead of reading the same number.
        let tx = rusqlite::Transaction::new_unchecked(&self.conn, TransactionBehavior::Immediate)
            .map_err(self.fail())?;
        let last: i64 = tx
            .query_row(
                "SELECT COALESCE(MAX(seq), 0) FROM events WHERE run = ?1",
                [&id],
                |r| r.get(0),
            )
            .map_err(self.fail())?;
        let seq = last + 1;
        tx.execute(
            "INSERT INTO events (run, seq, ts, type, step, data) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            params![
                id,
                seq,
                millis_i64(ts.0),
                event.kind(),
                step.map(StepName::as_str),
                event.data_json()
            ],
        )
        .map_err(self.fail())?;
        tx.commit().map_err(self.fail())?;
        Ok(Record {
            run,
            seq: u64::try_from(seq).unwrap_or(0),
            ts,
            step: step.cloned(),
            event: event.clone(),
        })
    }

    /// This process's turn to write (a poisoned lock is still a turn: it guards no data).
    fn writing(&self) -> std::sync::MutexGuard<'_, ()> {
        self.writing
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn set_sync(&self, want: Sync) -> Result<(), StoreError> {
        if self.sync.get() != want {
            let value = match want {
                Sync::Normal => "NORMAL",
                Sync::Full => "FULL",
            };
            self.conn
                .pragma_update(None, "synchronous", value)
                .map_err(self.fail())?;
            self.sync.set(want);
        }
        Ok(())
    }

    /// The run's events with a sequence number above `after`, in order.
    pub(crate) fn events_after(&self, run: RunId, after: u64) -> Result<Vec<Record>, StoreError> {
        rows::events(
            &self.conn,
            &self.fail(),
            run,
            "SELECT seq, ts, type, step, data FROM events WHERE run = ?1 AND seq > ?2 ORDER BY seq",
            params![run.to_string(), i64::try_from(after).unwrap_or(i64::MAX)],
        )
    }

    pub(crate) fn run(&self, id: RunId) -> Result<Option<RunRow>, StoreError> {
        rows::run(&self.conn, &self.db, &self.fail(), id)
    }

    /// Every run, oldest first.
    pub(crate) fn runs(&self) -> Result<Vec<RunRow>, StoreError> {
        rows::runs(&self.conn, &self.db, &self.fail())
    }

    /// Stores bytes (a large output, a diff, a snapshot) for the run.
    pub(crate) fn put_blob(&self, run: RunId, bytes: &[u8]) -> Result<BlobId, StoreError> {
        let _writing = self.writing();
        self.conn
            .execute(
                "INSERT INTO blobs (run, bytes) VALUES (?1, ?2)",
                params![run.to_string(), bytes],
            )
            .map_err(self.fail())?;
        Ok(BlobId(
            u64::try_from(self.conn.last_insert_rowid()).unwrap_or(0),
        ))
    }

    pub(crate) fn blob(&self, id: BlobId) -> Result<Option<Vec<u8>>, StoreError> {
        self.conn
            .query_row(
                "SELECT bytes FROM blobs WHERE id = ?1",
                [i64::try_from(id.0).unwrap_or(-1)],
                |r| r.get(0),
            )
            .optional()
            .map_err(self.fail())
    }

    /// Whether a setup hook with this stamp has succeeded before.
    pub(crate) fn has_stamp(&self, stamp: &str) -> Result<bool, StoreError> {
        self.conn
            .query_row(
                "SELECT 1 FROM setup_stamps WHERE stamp = ?1",
                [stamp],
                |_| Ok(()),
            )
            .optional()
            .map(|found| found.is_some())
            .map_err(self.fail())
    }

    /// Records a successful setup hook.
    pub(crate) fn put_stamp(&self, stamp: &str) -> Result<(), StoreError> {
        let _writing = self.writing();
        self.set_sync(Sync::Full)?;
        self.conn
            .execute(
                "INSERT OR REPLACE INTO setup_stamps (stamp, created) VALUES (?1, ?2)",
                params![stamp, millis_i64(now_millis())],
            )
            .map_err(self.fail())?;
        Ok(())
    }

    fn lock_path(&self, name: &str) -> PathBuf {
        self.dir.join("locks").join(name)
    }

    /// Takes `locks/<RUN_ID>` for the life of the returned guard; another holder → `Held`.
    pub(crate) fn lock_run(&self, run: RunId) -> Result<Lock, StoreError> {
        let path = self.lock_path(&run.to_string());
        Lock::try_take(&path)?.ok_or_else(|| StoreError::Held(run.to_string(), path))
    }

    /// Whether a live process holds the run.
    pub(crate) fn is_held(&self, run: RunId) -> bool {
        Lock::is_held(&self.lock_path(&run.to_string()))
    }
}

/// The batch tables (`crate::batch`).
impl Sqlite {
    pub(crate) fn create_batch(
        &self,
        batch: &BatchRow,
        tasks: &[TaskRow],
    ) -> Result<(), StoreError> {
        let _writing = self.writing();
        self.set_sync(Sync::Full)?;
        let tx = rusqlite::Transaction::new_unchecked(&self.conn, TransactionBehavior::Immediate)
            .map_err(self.fail())?;
        tx.execute(
            "INSERT INTO batches (id, created, pipeline, pipeline_file, tooling, backend) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            params![
                batch.id.to_string(),
                millis_i64(batch.created.0),
                batch.pipeline,
                batch.pipeline_file,
                batch.tooling,
                batch.backend,
            ],
        )
        .map_err(self.fail())?;
        for task in tasks {
            tx.execute(
                "INSERT INTO batch_tasks (batch, idx, id, repo, ref, prompt, vars, run) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                params![
                    batch.id.to_string(),
                    task.index,
                    task.id,
                    task.repo,
                    task.git_ref,
                    task.prompt,
                    task.vars_json(),
                    task.run.map(|r| r.to_string()),
                ],
            )
            .map_err(self.fail())?;
        }
        tx.commit().map_err(self.fail())
    }

    pub(crate) fn batch(&self, id: RunId) -> Result<Option<BatchRow>, StoreError> {
        self.conn
            .query_row(
                "SELECT created, pipeline, pipeline_file, tooling, backend FROM batches WHERE id = ?1",
                [id.to_string()],
                |r| {
                    Ok(BatchRow {
                        id,
                        created: Timestamp(u64::try_from(r.get::<_, i64>(0)?).unwrap_or(0)),
                        pipeline: r.get(1)?,
                        pipeline_file: r.get(2)?,
                        tooling: r.get(3)?,
                        backend: r.get(4)?,
                    })
                },
            )
            .optional()
            .map_err(self.fail())
    }

    pub(crate) fn batch_ids(&self) -> Result<Vec<RunId>, StoreError> {
        let mut stmt = self
            .conn
            .prepare_cached("SELECT id FROM batches ORDER BY created, id")
            .map_err(self.fail())?;
        let ids = stmt
            .query_map([], |r| r.get::<_, String>(0))
            .map_err(self.fail())?
            .collect::<Result<Vec<String>, _>>()
            .map_err(self.fail())?;
        ids.iter().map(|id| self.stored_id(id)).collect()
    }

    pub(crate) fn batch_tasks(&self, batch: RunId) -> Result<Vec<TaskRow>, StoreError> {
        self.tasks("batch = ?1 ORDER BY idx", &batch.to_string())
            .map(|found| found.into_iter().map(|(_, task)| task).collect())
    }

    pub(crate) fn task_of_run(&self, run: RunId) -> Result<Option<(RunId, TaskRow)>, StoreError> {
        self.tasks("run = ?1", &run.to_string())
            .map(|found| found.into_iter().next())
    }

    /// The tasks `filter` selects (its one parameter `value`), with their batch ids.
    fn tasks(&self, filter: &str, value: &str) -> Result<Vec<(RunId, TaskRow)>, StoreError> {
        let mut stmt = self
            .conn
            .prepare_cached(&format!(
                "SELECT batch, idx, id, repo, ref, prompt, vars, run FROM batch_tasks WHERE {filter}"
            ))
            .map_err(self.fail())?;
        let rows = stmt
            .query_map([value], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, u32>(1)?,
                    r.get::<_, String>(2)?,
                    r.get::<_, String>(3)?,
                    r.get::<_, Option<String>>(4)?,
                    r.get::<_, Option<String>>(5)?,
                    r.get::<_, String>(6)?,
                    r.get::<_, Option<String>>(7)?,
                ))
            })
            .map_err(self.fail())?
            .collect::<Result<Vec<_>, _>>()
            .map_err(self.fail())?;
        rows.into_iter()
            .map(|(batch, index, id, repo, git_ref, prompt, vars, run)| {
                Ok((
                    self.stored_id(&batch)?,
                    TaskRow {
                        index,
                        id,
                        repo,
                        git_ref,
                        prompt,
                        vars: TaskRow::parse_vars(&vars),
                        run: run.as_deref().map(|r| self.stored_id(r)).transpose()?,
                    },
                ))
            })
            .collect()
    }

    pub(crate) fn set_task_run(
        &self,
        batch: RunId,
        index: u32,
        expected: Option<RunId>,
        run: RunId,
    ) -> Result<bool, StoreError> {
        let _writing = self.writing();
        self.set_sync(Sync::Full)?;
        self.conn
            .execute(
                "UPDATE batch_tasks SET run = ?1 WHERE batch = ?2 AND idx = ?3 AND run IS ?4",
                params![
                    run.to_string(),
                    batch.to_string(),
                    index,
                    expected.map(|r| r.to_string())
                ],
            )
            .map(|changed| changed == 1)
            .map_err(self.fail())
    }

    pub(crate) fn put_workspace_tree(
        &self,
        run: RunId,
        seq: u64,
        blob: BlobId,
    ) -> Result<(), StoreError> {
        let _writing = self.writing();
        self.set_sync(Sync::Full)?;
        let tx = rusqlite::Transaction::new_unchecked(&self.conn, TransactionBehavior::Immediate)
            .map_err(self.fail())?;
        let run = run.to_string();
        tx.execute(
            "INSERT OR IGNORE INTO workspace_trees (run, seq, blob) VALUES (?1, ?2, ?3)",
            params![
                run,
                i64::try_from(seq).unwrap_or(i64::MAX),
                i64::try_from(blob.0).unwrap_or(i64::MAX)
            ],
        )
        .map_err(self.fail())?;
        // Only the latest record is ever read: the older ones go, with their blobs (unless the
        // latest shares one).
        for sql in [
            "CREATE TEMP TABLE IF NOT EXISTS carried_old (blob INTEGER)",
            "DELETE FROM carried_old",
            "INSERT INTO carried_old SELECT blob FROM workspace_trees WHERE run = ?1 AND seq < \
             (SELECT MAX(seq) FROM workspace_trees WHERE run = ?1) AND blob <> \
             (SELECT blob FROM workspace_trees WHERE run = ?1 ORDER BY seq DESC LIMIT 1)",
            "DELETE FROM workspace_trees WHERE run = ?1 AND seq < \
             (SELECT MAX(seq) FROM workspace_trees WHERE run = ?1)",
            "DELETE FROM blobs WHERE id IN (SELECT blob FROM carried_old)",
        ] {
            let with_run = sql.contains("?1");
            if with_run {
                tx.execute(sql, [&run])
            } else {
                tx.execute(sql, [])
            }
            .map_err(self.fail())?;
        }
        tx.commit().map_err(self.fail())
    }

    pub(crate) fn workspace_tree(&self, run: RunId) -> Result<Option<(u64, BlobId)>, StoreError> {
        self.conn
            .query_row(
                "SELECT seq, blob FROM workspace_trees WHERE run = ?1 ORDER BY seq DESC LIMIT 1",
                [run.to_string()],
                |r| Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?)),
            )
            .optional()
            .map(|found| {
                found.map(|(seq, blob)| {
                    (
                        u64::try_from(seq).unwrap_or(0),
                        BlobId(u64::try_from(blob).unwrap_or(0)),
                    )
                })
            })
            .map_err(self.fail())
    }

    fn stored_id(&self, text: &str) -> Result<RunId, StoreError> {
        RunId::parse(text).map_err(|err| StoreError::Corrupt {
            path: self.db.clone(),
            detail: format!("a stored batch or run id is damaged ({err})"),
        })
    }
}

/// Damage reported by SQLite becomes `Corrupt` (naming the file); anything else stays a
/// SQLite error with its source.
fn classify(db: &Path, source: rusqlite::Error) -> StoreError {
    if let rusqlite::Error::SqliteFailure(err, ref message) = source
        && matches!(
            err.code,
            ErrorCode::DatabaseCorrupt | ErrorCode::NotADatabase
        )
    {
        let detail = message.clone().unwrap_or_else(|| err.to_string());
        return StoreError::Corrupt {
            path: db.to_path_buf(),
            detail,
        };
    }
    StoreError::Sqlite {
        path: db.to_path_buf(),
        source,
    }
}

fn now_millis() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

fn millis_i64(millis: u64) -> i64 {
    i64::try_from(millis).unwrap_or(i64::MAX)
}
