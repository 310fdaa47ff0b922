//! Batches (`cordon batch`, DESIGN §16): a batch's fixed facts — the pipeline and its tooling
//! snapshot, taken once on the machine that submitted it — and its tasks, each of which becomes
//! one run. Whoever executes a task (a local worker, a Slurm array task on another node) reads
//! it from the store, so the tasks file and the pipeline need not be on that machine.

use cordon_protocol::RunId;
use cordon_protocol::event::Timestamp;

use crate::StoreError;
use crate::lock::Lock;
use crate::store::{Backend, Store, each};
use cordon_protocol::event::BlobId;

/// One batch's fixed facts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BatchRow {
    pub id: RunId,
    pub created: Timestamp,
    /// The pipeline file as the submitter named it (shown, never opened again).
    pub pipeline: String,
    /// The pipeline's path inside the tooling snapshot (relative, `/`-separated).
    pub pipeline_file: String,
    /// The tooling snapshot: the pipeline and its agent files, as the engine encodes it.
    pub tooling: Vec<u8>,
    /// Where the tasks run (`local`).
    pub backend: String,
}

/// One task of a batch: a line of the tasks file, and the run it became.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaskRow {
    /// Its place in the tasks file, from 0.
    pub index: u32,
    pub id: String,
    /// An `https://` URL or an absolute local path.
    pub repo: String,
    pub git_ref: Option<String>,
    pub prompt: Option<String>,
    /// `vars`, in the order the line gave them.
    pub vars: Vec<(String, String)>,
    /// The run, once a worker began it.
    pub run: Option<RunId>,
}

impl TaskRow {
    pub(crate) fn vars_json(&self) -> String {
        serde_json::to_string(&self.vars).unwrap_or_else(|_| "[]".to_owned())
    }

    pub(crate) fn parse_vars(text: &str) -> Vec<(String, String)> {
        serde_json::from_str(text).unwrap_or_default()
    }
}

impl Store {
    /// Records a batch and all its tasks, in one transaction.
    pub fn create_batch(&self, batch: &BatchRow, tasks: &[TaskRow]) -> Result<(), StoreError> {
        each!(self, db => db.create_batch(batch, tasks))
    }

    pub fn batch(&self, id: RunId) -> Result<Option<BatchRow>, StoreError> {
        each!(self, db => db.batch(id))
    }

    /// Every batch id, oldest first.
    pub fn batch_ids(&self) -> Result<Vec<RunId>, StoreError> {
        each!(self, db => db.batch_ids())
    }

    /// The batch whose id is `text` or starts with it (case-insensitive); exactly one must match.
    pub fn find_batch(&self, text: &str) -> Result<RunId, StoreError> {
        let prefix = text.to_ascii_lowercase();
        let matches: Vec<RunId> = self
            .batch_ids()?
            .into_iter()
            .filter(|id| id.to_string().starts_with(&prefix))
            .collect();
        match matches.as_slice() {
            [one] if !prefix.is_empty() => Ok(*one),
            [] | [_] => Err(StoreError::UnknownBatch(text.to_owned())),
            many => Err(StoreError::AmbiguousBatch {
                prefix: text.to_owned(),
                count: many.len(),
            }),
        }
    }

    /// The batch's tasks, in file order.
    pub fn batch_tasks(&self, batch: RunId) -> Result<Vec<TaskRow>, StoreError> {
        each!(self, db => db.batch_tasks(batch))
    }

    /// Records that task `index` of `batch` is run `run`, when its run is still `expected` (a
    /// worker that died before its run was created left an id no run has). Another worker's
    /// different run → `TaskTaken`.
    pub fn set_task_run(
        &self,
        batch: RunId,
        index: u32,
        expected: Option<RunId>,
        run: RunId,
    ) -> Result<(), StoreError> {
        let changed = each!(self, db => db.set_task_run(batch, index, expected, run))?;
        if changed {
            return Ok(());
        }
        let now = self
            .batch_tasks(batch)?
            .into_iter()
            .find(|t| t.index == index)
            .and_then(|t| t.run);
        match now {
            Some(taken) if taken == run => Ok(()),
            taken => Err(StoreError::TaskTaken {
                batch: batch.to_string(),
                index,
                run: taken.map_or_else(|| "none".to_owned(), |r| r.to_string()),
            }),
        }
    }

    /// Takes this machine's lock of task `index` of `batch` (one worker per task here: it
    /// removes and makes the task's clone); another holder → `None`. A local file whichever
    /// store keeps the runs: the clone it guards is this machine's.
    pub fn lock_batch_task(&self, batch: RunId, index: u32) -> Result<Option<Lock>, StoreError> {
        Lock::try_take(
            &self
                .dir
                .join("locks")
                .join(format!("batch-{batch}-{index}")),
        )
    }

    /// Records that the blob `blob` holds `run`'s workspace as it was at the `step.finished`
    /// of sequence `seq` (once per seq: a repeat is ignored).
    pub fn put_workspace_tree(&self, run: RunId, seq: u64, blob: BlobId) -> Result<(), StoreError> {
        each!(self, db => db.put_workspace_tree(run, seq, blob))
    }

    /// The latest workspace record of `run`: the seq of its `step.finished` and its blob.
    pub fn workspace_tree(&self, run: RunId) -> Result<Option<(u64, BlobId)>, StoreError> {
        each!(self, db => db.workspace_tree(run))
    }

    /// The batch and task a run belongs to, if it is a batch's.
    pub fn task_of_run(&self, run: RunId) -> Result<Option<(RunId, TaskRow)>, StoreError> {
        each!(self, db => db.task_of_run(run))
    }
}
