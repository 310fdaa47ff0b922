//! The PostgreSQL backend (`--store postgres://…`, DESIGN §16): the same tables and guarantees
//! as the SQLite store, shared by the cordon processes of many machines.
//!
//! * Appends go through one server-side function, `cordon_append`, which serialises the appends
//!   of a run (a transaction-scoped advisory lock on the run id), checks the caller's lease
//!   generation against the run's lease (the fence: a holder that lost its lease cannot append
//!   after the run was taken over), and inserts the next sequence number with the database's
//!   clock as its timestamp. Triggers refuse gaps, updates, deletes and truncation, as SQLite's do.
//! * A run lock is a lease row (`lease`): taken when free or expired, renewed by a thread.
//! * The schema is versioned in `cordon_schema` and migrated under an advisory lock, each
//!   migration and its version bump in one transaction (PostgreSQL's DDL is transactional).
//! * Event data is `bytea`: the bytes stored are the bytes read, whatever they hold.

mod lease;
mod schema;
mod session;
mod target;

use std::cell::RefCell;
use std::sync::Arc;

use cordon_protocol::event::{BlobId, Timestamp};
use cordon_protocol::{Event, Record, RunId, SCHEMA_VERSION, StepName};
use tokio_postgres::error::SqlState;

pub(crate) use lease::{Lease, held_generation};
pub use lease::{LeaseTimes, on_lease_lost, release_leases, set_lease_times};
use session::{Failure, Session as Client};
use target::Target;

use crate::StoreError;
use crate::batch::{BatchRow, TaskRow};
use crate::lock::Lock;
use crate::read::EventFilter;
use crate::store::RunRow;

/// SQLSTATE `cordon_append` raises when the run's live lease is another holder's.
const HELD: &str = "CD001";
/// SQLSTATE `cordon_append` raises when the caller's lease generation is no longer the run's.
const FENCED: &str = "CD002";

/// The open PostgreSQL store.
pub(crate) struct Postgres {
    client: RefCell<Client>,
    target: Arc<Target>,
}

impl Postgres {
    /// Connects, migrates the schema (refusing a newer one) and returns the store.
    pub(crate) fn open(url: &str) -> Result<Postgres, StoreError> {
        let target = Arc::new(Target::parse(url)?);
        let mut client = target.connect()?;
        schema::migrate(&mut client, &target)?;
        Ok(Postgres {
            client: RefCell::new(client),
            target,
        })
    }

    pub(crate) fn connect(&self) -> Result<Postgres, StoreError> {
        Ok(Postgres {
            client: RefCell::new(self.target.connect()?),
            target: Arc::clone(&self.target),
        })
    }

    pub(crate) fn shown(&self) -> String {
        self.target.shown.clone()
    }

    /// The session, made anew when the server closed the last one (a restarted store). A
    /// statement that failed with the connection is never sent again: an append may have been
    /// committed just before the connection went, and sending it again would log it twice.
    fn client(&self) -> Result<std::cell::RefMut<'_, Client>, StoreError> {
        reconnected(&self.client, &self.target)
    }

    pub(crate) fn addresses(&self) -> Vec<std::net::SocketAddr> {
        self.target.addresses()
    }

    fn fail(&self) -> impl Fn(Failure) -> StoreError + '_ {
        |err| self.target.error(&err)
    }

    pub(crate) fn create_run(&self, row: &RunRow) -> Result<(), StoreError> {
        self.client()?
            .execute(
                "INSERT INTO runs (id, pipeline, pipeline_file, workspace, started, snapshot, event_schema) VALUES ($1, $2, $3, $4, $5, $6, $7)",
                &[
                    &row.id.to_string(),
                    &row.pipeline,
                    &row.pipeline_file.to_string_lossy().as_ref(),
                    &row.workspace.to_string_lossy().as_ref(),
                    &i64_of(row.started.0),
                    &row.snapshot.map(|b| i64_of(b.0)),
                    &i32::try_from(SCHEMA_VERSION).unwrap_or(i32::MAX),
                ],
            )
            .map_err(self.fail())?;
        Ok(())
    }

    /// One round trip: `cordon_append` checks the fence, numbers and inserts the event. A
    /// boundary event's commit is durable when this returns (`synchronous_commit = on`); others
    /// commit without waiting for the flush, and the next boundary makes them durable with it —
    /// the same guarantee as the SQLite store's `NORMAL`/`FULL`.
    pub(crate) fn append(
        &self,
        run: RunId,
        step: Option<&StepName>,
        event: &Event,
    ) -> Result<Record, StoreError> {
        let generation = held_generation(&self.target, run)?;
        let data = event.data_json().into_bytes();
        let appended = self.client()?.query_one(
            "SELECT seq, ts FROM cordon_append($1, $2, $3, $4, $5, $6)",
            &[
                &run.to_string(),
                &generation,
                &event.kind(),
                &step.map(StepName::as_str),
                &data,
                &event.is_boundary(),
            ],
        );
        // (The client is borrowed again to name the holder of a refusing lease.)
        let row = appended.map_err(|err| self.refused(run, generation, &err))?;
        let (seq, ts): (i64, i64) = (row.get(0), row.get(1));
        Ok(Record {
            run,
            seq: u64::try_from(seq).unwrap_or(0),
            ts: Timestamp(u64::try_from(ts).unwrap_or(0)),
            step: step.cloned(),
            event: event.clone(),
        })
    }

    /// `cordon_append`'s refusals as the errors they mean.
    fn refused(&self, run: RunId, held: Option<i64>, err: &Failure) -> StoreError {
        let Some(db) = err.as_db_error() else {
            return self.target.error(err);
        };
        if *db.code() == SqlState::from_code(HELD) {
            return self.leased(run);
        }
        if *db.code() == SqlState::from_code(FENCED) {
            let current = db.message().parse().unwrap_or(-1);
            return StoreError::Fenced {
                run: run.to_string(),
                held: held.unwrap_or(-1),
                current,
            };
        }
        self.target.error(err)
    }

    /// `Leased`, naming the run's current holder and how long its lease runs.
    fn leased(&self, run: RunId) -> StoreError {
        let found = self.client().map(|mut c| {
            c.query_opt(
                "SELECT holder, GREATEST(0, CEIL(EXTRACT(EPOCH FROM expires - now())))::bigint FROM leases WHERE run = $1",
                &[&run.to_string()],
            )
        });
        let (holder, seconds) = match found {
            Ok(Ok(Some(row))) => (row.get::<_, String>(0), row.get::<_, i64>(1)),
            _ => ("another cordon".to_owned(), 0),
        };
        StoreError::Leased {
            run: run.to_string(),
            holder: crate::rows::printable(&holder),
            seconds: u64::try_from(seconds).unwrap_or(0),
        }
    }

    pub(crate) fn events_after(&self, run: RunId, after: u64) -> Result<Vec<Record>, StoreError> {
        let filter = EventFilter {
            after,
            ..EventFilter::default()
        };
        events(&mut *self.client()?, &self.target, run, &filter)
    }

    pub(crate) fn run(&self, id: RunId) -> Result<Option<RunRow>, StoreError> {
        run(&mut *self.client()?, &self.target, id)
    }

    pub(crate) fn runs(&self) -> Result<Vec<RunRow>, StoreError> {
        runs(&mut *self.client()?, &self.target)
    }

    pub(crate) fn put_blob(&self, run: RunId, bytes: &[u8]) -> Result<BlobId, StoreError> {
        let row = self
            .client()?
            .query_one(
                "INSERT INTO blobs (run, bytes) VALUES ($1, $2) RETURNING id",
                &[&run.to_string(), &bytes],
            )
            .map_err(self.fail())?;
        Ok(BlobId(u64::try_from(row.get::<_, i64>(0)).unwrap_or(0)))
    }

    pub(crate) fn blob(&self, id: BlobId) -> Result<Option<Vec<u8>>, StoreError> {
        blob(&mut *self.client()?, &self.target, id)
    }

    pub(crate) fn has_stamp(&self, stamp: &str) -> Result<bool, StoreError> {
        self.client()?
            .query_opt("SELECT 1 FROM setup_stamps WHERE stamp = $1", &[&stamp])
            .map(|found| found.is_some())
            .map_err(self.fail())
    }

    pub(crate) fn put_stamp(&self, stamp: &str) -> Result<(), StoreError> {
        self.client()?
            .execute(
                "INSERT INTO setup_stamps (stamp, created) VALUES ($1, (EXTRACT(EPOCH FROM now()) * 1000)::bigint) ON CONFLICT (stamp) DO UPDATE SET created = EXCLUDED.created",
                &[&stamp],
            )
            .map_err(self.fail())?;
        Ok(())
    }

    pub(crate) fn lock_run(&self, run: RunId) -> Result<Lock, StoreError> {
        let taken = Lease::take(&mut *self.client()?, &self.target, run);
        match taken? {
            Some(lease) => Ok(Lock::lease(lease)),
            None => Err(self.leased(run)),
        }
    }

    pub(crate) fn is_held(&self, run: RunId) -> bool {
        self.client()
            .is_ok_and(|mut client| is_held(&mut client, run))
    }

    pub(crate) fn check_held(&self, run: RunId) -> Result<(), StoreError> {
        let Some(held) = held_generation(&self.target, run)? else {
            return Ok(());
        };
        let current: Option<i64> = self
            .client()?
            .query_opt(
                "SELECT generation FROM leases WHERE run = $1",
                &[&run.to_string()],
            )
            .map_err(self.fail())?
            .map(|row| row.get(0));
        match current {
            Some(current) if current == held => Ok(()),
            current => Err(StoreError::Fenced {
                run: run.to_string(),
                held,
                current: current.unwrap_or(-1),
            }),
        }
    }
}

/// A read-only view of the store, for `cordon ui` and `cordon runs`: its sessions are
/// `default_transaction_read_only`, so the server refuses writes through it.
pub(crate) struct PgReader {
    client: RefCell<Client>,
    target: Target,
}

impl PgReader {
    pub(crate) fn open(url: &str) -> Result<PgReader, StoreError> {
        let target = Target::parse(url)?.read_only();
        let client = target.connect()?;
        Ok(PgReader {
            client: RefCell::new(client),
            target,
        })
    }

    pub(crate) fn shown(&self) -> String {
        self.target.shown.clone()
    }

    fn client(&self) -> Result<std::cell::RefMut<'_, Client>, StoreError> {
        reconnected(&self.client, &self.target)
    }

    pub(crate) fn runs(&self) -> Result<Vec<RunRow>, StoreError> {
        runs(&mut *self.client()?, &self.target)
    }

    pub(crate) fn run(&self, id: RunId) -> Result<Option<RunRow>, StoreError> {
        run(&mut *self.client()?, &self.target, id)
    }

    pub(crate) fn events(
        &self,
        run: RunId,
        filter: &EventFilter,
    ) -> Result<Vec<Record>, StoreError> {
        events(&mut *self.client()?, &self.target, run, filter)
    }

    pub(crate) fn last_seq(&self, run: RunId) -> Result<u64, StoreError> {
        let last: i64 = self
            .client()?
            .query_one(
                "SELECT COALESCE(MAX(seq), 0) FROM events WHERE run = $1",
                &[&run.to_string()],
            )
            .map_err(|err| self.target.error(&err))?
            .get(0);
        Ok(u64::try_from(last).unwrap_or(0))
    }

    pub(crate) fn blob(&self, id: BlobId) -> Result<Option<Vec<u8>>, StoreError> {
        blob(&mut *self.client()?, &self.target, id)
    }

    pub(crate) fn is_held(&self, run: RunId) -> bool {
        self.client()
            .is_ok_and(|mut client| is_held(&mut client, run))
    }
}

/// `cell`'s session, replaced by a new one when it is closed.
fn reconnected<'a>(
    cell: &'a RefCell<Client>,
    target: &Target,
) -> Result<std::cell::RefMut<'a, Client>, StoreError> {
    let mut client = cell.borrow_mut();
    if client.is_closed() {
        *client = target.connect()?;
    }
    Ok(client)
}

/// The batch tables (`crate::batch`).
impl Postgres {
    pub(crate) fn create_batch(
        &self,
        batch: &BatchRow,
        tasks: &[TaskRow],
    ) -> Result<(), StoreError> {
        let mut client = self.client()?;
        let fail = self.fail();
        // One transaction: an error (or a missed deadline, which ends the session) leaves no
        // half-recorded batch.
        client.batch_execute("BEGIN").map_err(&fail)?;
        let written = (|| {
            client
            .execute(
                "INSERT INTO batches (id, created, pipeline, pipeline_file, tooling, backend) VALUES ($1, $2, $3, $4, $5, $6)",
                &[
                    &batch.id.to_string(),
                    &i64_of(batch.created.0),
                    &batch.pipeline,
                    &batch.pipeline_file,
                    &batch.tooling,
                    &batch.backend,
                ],
            )
            .map_err(&fail)?;
            for task in tasks {
                client
                .execute(
                    "INSERT INTO batch_tasks (batch, idx, id, repo, ref, prompt, vars, run) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
                    &[
                        &batch.id.to_string(),
                        &i32::try_from(task.index).unwrap_or(i32::MAX),
                        &task.id,
                        &task.repo,
                        &task.git_ref,
                        &task.prompt,
                        &task.vars_json(),
                        &task.run.map(|r| r.to_string()),
                    ],
                )
                .map_err(&fail)?;
            }
            client.batch_execute("COMMIT").map_err(&fail)
        })();
        if written.is_err() {
            // The session stays usable: its failed transaction is ended here.
            let _ = client.batch_execute("ROLLBACK");
        }
        written
    }

    pub(crate) fn batch(&self, id: RunId) -> Result<Option<BatchRow>, StoreError> {
        let row = self
            .client()?
            .query_opt(
                "SELECT created, pipeline, pipeline_file, tooling, backend FROM batches WHERE id = $1",
                &[&id.to_string()],
            )
            .map_err(self.fail())?;
        Ok(row.map(|row| BatchRow {
            id,
            created: Timestamp(u64::try_from(row.get::<_, i64>(0)).unwrap_or(0)),
            pipeline: row.get(1),
            pipeline_file: row.get(2),
            tooling: row.get(3),
            backend: row.get(4),
        }))
    }

    pub(crate) fn batch_ids(&self) -> Result<Vec<RunId>, StoreError> {
        self.client()?
            .query("SELECT id FROM batches ORDER BY created, id", &[])
            .map_err(self.fail())?
            .iter()
            .map(|row| self.stored_id(&row.get::<_, String>(0)))
            .collect()
    }

    pub(crate) fn batch_tasks(&self, batch: RunId) -> Result<Vec<TaskRow>, StoreError> {
        self.tasks("batch = $1 ORDER BY idx", &batch.to_string())
            .map(|found| found.into_iter().map(|(_, task)| task).collect())
    }

    pub(crate) fn task_of_run(&self, run: RunId) -> Result<Option<(RunId, TaskRow)>, StoreError> {
        self.tasks("run = $1", &run.to_string())
            .map(|found| found.into_iter().next())
    }

    /// The tasks `filter` selects (its one parameter `value`), with their batch ids.
    fn tasks(&self, filter: &str, value: &str) -> Result<Vec<(RunId, TaskRow)>, StoreError> {
        let rows = self
            .client()?
            .query(
                &format!(
                    "SELECT batch, idx, id, repo, ref, prompt, vars, run FROM batch_tasks WHERE {filter}"
                ),
                &[&value],
            )
            .map_err(self.fail())?;
        rows.iter()
            .map(|row| {
                let run: Option<String> = row.get(7);
                Ok((
                    self.stored_id(&row.get::<_, String>(0))?,
                    TaskRow {
                        index: u32::try_from(row.get::<_, i32>(1)).unwrap_or(0),
                        id: row.get(2),
                        repo: row.get(3),
                        git_ref: row.get(4),
                        prompt: row.get(5),
                        vars: TaskRow::parse_vars(&row.get::<_, String>(6)),
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
        self.client()?
            .execute(
                "UPDATE batch_tasks SET run = $1 WHERE batch = $2 AND idx = $3 AND run IS NOT DISTINCT FROM $4",
                &[
                    &run.to_string(),
                    &batch.to_string(),
                    &i32::try_from(index).unwrap_or(i32::MAX),
                    &expected.map(|r| r.to_string()),
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
        let mut client = self.client()?;
        let fail = self.fail();
        let run = run.to_string();
        client.batch_execute("BEGIN").map_err(&fail)?;
        let written = (|| {
            client
                .execute(
                    "INSERT INTO workspace_trees (run, seq, blob) VALUES ($1, $2, $3) \
                     ON CONFLICT DO NOTHING",
                    &[
                        &run,
                        &i64::try_from(seq).unwrap_or(i64::MAX),
                        &i64::try_from(blob.0).unwrap_or(i64::MAX),
                    ],
                )
                .map_err(&fail)?;
            // Only the latest record is ever read: the older ones go, with their blobs (unless
            // the latest shares one).
            client
                .execute(
                    "WITH latest AS (SELECT seq, blob FROM workspace_trees WHERE run = $1 \
                     ORDER BY seq DESC LIMIT 1), \
                     gone AS (DELETE FROM workspace_trees WHERE run = $1 \
                     AND seq < (SELECT seq FROM latest) RETURNING blob) \
                     DELETE FROM blobs WHERE id IN (SELECT blob FROM gone) \
                     AND id <> (SELECT blob FROM latest)",
                    &[&run],
                )
                .map_err(&fail)?;
            client.batch_execute("COMMIT").map_err(&fail)
        })();
        if written.is_err() {
            let _ = client.batch_execute("ROLLBACK");
        }
        written
    }

    pub(crate) fn workspace_tree(&self, run: RunId) -> Result<Option<(u64, BlobId)>, StoreError> {
        self.client()?
            .query_opt(
                "SELECT seq, blob FROM workspace_trees WHERE run = $1 ORDER BY seq DESC LIMIT 1",
                &[&run.to_string()],
            )
            .map(|found| {
                found.map(|row| {
                    (
                        u64::try_from(row.get::<_, i64>(0)).unwrap_or(0),
                        BlobId(u64::try_from(row.get::<_, i64>(1)).unwrap_or(0)),
                    )
                })
            })
            .map_err(self.fail())
    }

    fn stored_id(&self, text: &str) -> Result<RunId, StoreError> {
        RunId::parse(text).map_err(|err| StoreError::Postgres {
            store: self.target.shown.clone(),
            detail: format!("a stored batch or run id is damaged ({err})"),
        })
    }
}

const SELECT_RUNS: &str =
    "SELECT id, pipeline, pipeline_file, workspace, started, snapshot FROM runs";

fn runs(client: &mut Client, target: &Target) -> Result<Vec<RunRow>, StoreError> {
    client
        .query(&format!("{SELECT_RUNS} ORDER BY started, id"), &[])
        .map_err(|err| target.error(&err))?
        .iter()
        .map(|row| run_row(target, row))
        .collect()
}

fn run(client: &mut Client, target: &Target, id: RunId) -> Result<Option<RunRow>, StoreError> {
    client
        .query_opt(&format!("{SELECT_RUNS} WHERE id = $1"), &[&id.to_string()])
        .map_err(|err| target.error(&err))?
        .map(|row| run_row(target, &row))
        .transpose()
}

fn run_row(target: &Target, row: &tokio_postgres::Row) -> Result<RunRow, StoreError> {
    let id: String = row.get(0);
    let id = RunId::parse(&id).map_err(|err| StoreError::Postgres {
        store: target.shown.clone(),
        detail: format!("a stored run id is damaged ({err})"),
    })?;
    let snapshot: Option<i64> = row.get(5);
    Ok(RunRow {
        id,
        pipeline: row.get(1),
        pipeline_file: row.get::<_, String>(2).into(),
        workspace: row.get::<_, String>(3).into(),
        started: Timestamp(u64::try_from(row.get::<_, i64>(4)).unwrap_or(0)),
        snapshot: snapshot.and_then(|b| u64::try_from(b).ok()).map(BlobId),
    })
}

/// The run's events that pass `filter`, in order; every value is a bound parameter.
fn events(
    client: &mut Client,
    target: &Target,
    run: RunId,
    filter: &EventFilter,
) -> Result<Vec<Record>, StoreError> {
    let id = run.to_string();
    let after = i64::try_from(filter.after).unwrap_or(i64::MAX);
    let step = filter.step.as_ref().map(StepName::as_str);
    let limit = filter.limit.map(|l| i64::try_from(l).unwrap_or(i64::MAX));
    let rows = client
        .query(
            "SELECT seq, ts, type, step, data FROM events WHERE run = $1 AND seq > $2 \
             AND (cardinality($3::text[]) = 0 OR type = ANY($3) OR EXISTS \
                 (SELECT 1 FROM unnest($3::text[]) AS p WHERE starts_with(type, p || '.'))) \
             AND ($4::text IS NULL OR step = $4) \
             ORDER BY seq LIMIT $5",
            &[&id, &after, &filter.types, &step, &limit],
        )
        .map_err(|err| target.error(&err))?;
    rows.iter()
        .map(|row| {
            let seq = u64::try_from(row.get::<_, i64>(0)).unwrap_or(0);
            let kind: String = row.get(2);
            let data: Vec<u8> = row.get(4);
            crate::rows::record(run, seq, row.get(1), &kind, row.get(3), &data)
        })
        .collect()
}

fn blob(client: &mut Client, target: &Target, id: BlobId) -> Result<Option<Vec<u8>>, StoreError> {
    client
        .query_opt(
            "SELECT bytes FROM blobs WHERE id = $1",
            &[&i64::try_from(id.0).unwrap_or(-1)],
        )
        .map(|found| found.map(|row| row.get(0)))
        .map_err(|err| target.error(&err))
}

/// Whether the run's lease is live by the database's clock (a store that cannot answer: not
/// known to be held).
fn is_held(client: &mut Client, run: RunId) -> bool {
    client
        .query_opt(
            "SELECT 1 FROM leases WHERE run = $1 AND expires > now()",
            &[&run.to_string()],
        )
        .is_ok_and(|found| found.is_some())
}

fn i64_of(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}
