//! `cordon batch PIPELINE --tasks FILE.jsonl` (DESIGN §16): every task of the file becomes a run
//! of PIPELINE on a fresh clone of its repository. The submitting process checks the tasks and
//! the pipeline, records the batch (with the pipeline's tooling) in the store, and starts the
//! workers: `--backend local` runs `--jobs N` of them at once on this machine, each a `cordon
//! batch work` process that reads its task from the store — so a worker needs nothing but the
//! store — clones, and runs (or resumes the task's run). `status` and `resume` read the store.

use std::io::Read as _;
use std::num::NonZeroU32;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use cordon_engine::RunState;
use cordon_engine::batch::{self, clone};
use cordon_protocol::RunId;
use cordon_protocol::event::Timestamp;
use cordon_protocol::text::{escape_line, escape_text};
use cordon_store::{BatchRow, StateDir, Store, TaskRow};

use crate::state_dir::{StateDirArg, StoreArg};

#[cfg(feature = "scale-out")]
mod kubernetes;
#[cfg(feature = "scale-out")]
mod slurm;

/// The most workers `--jobs` runs at once.
const MAX_JOBS: u32 = 64;
/// How long a worker waits for its task's run to be let go by a previous holder (a lease
/// expires 30 s after its last renewal).
const HELD_WAIT: Duration = Duration::from_secs(40);

#[derive(Debug, clap::Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct Args {
    #[command(subcommand)]
    command: Option<Sub>,
    /// The pipeline every task runs, with its agent files in its directory or below (carried
    /// into each task's clone, committed there under .cordon-batch/)
    #[arg(value_name = "PIPELINE", required = true)]
    pipeline: Option<PathBuf>,
    /// The tasks: one JSON object per line, {"id", "repo", "ref", "prompt", "vars"}
    #[arg(long, value_name = "FILE", required = true)]
    tasks: Option<PathBuf>,
    #[command(flatten)]
    run: Workers,
}

/// How the workers run, for a new batch and for `resume`.
#[derive(Debug, clap::Args)]
struct Workers {
    /// Where the tasks run: `local`, this machine (`slurm` and `kubernetes` in a build with
    /// `--features scale-out`: one sbatch array job, or a Job per task, with a shared --store)
    #[arg(long, value_enum, default_value = "local")]
    backend: Backend,
    /// How many tasks run at once [default: the number of CPUs, at most 64]
    #[arg(long, value_name = "N", value_parser = jobs)]
    jobs: Option<NonZeroU32>,
    /// The operator policy file every run is under (as `cordon run --policy`)
    #[arg(long, value_name = "FILE")]
    policy: Option<PathBuf>,
    #[command(flatten)]
    state_dir: StateDirArg,
    #[command(flatten)]
    store: StoreArg,
}

#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum Backend {
    Local,
    /// One `sbatch` array job; needs a shared `--store`
    #[cfg(feature = "scale-out")]
    Slurm,
    /// A Job per task through the cluster's API; needs a shared `--store` and the operator
    /// policy's `[kubernetes]`
    #[cfg(feature = "scale-out")]
    Kubernetes,
}

impl Backend {
    fn name(self) -> &'static str {
        match self {
            Backend::Local => "local",
            #[cfg(feature = "scale-out")]
            Backend::Slurm => "slurm",
            #[cfg(feature = "scale-out")]
            Backend::Kubernetes => "kubernetes",
        }
    }
}

#[derive(Debug, clap::Subcommand)]
enum Sub {
    /// Print each task of a batch with its run and status
    Status(StatusArgs),
    /// Carry on with a batch: resume its interrupted runs, start the tasks not begun
    Resume(ResumeArgs),
    /// One worker: carry out task INDEX of the batch (started by `cordon batch`)
    #[command(hide = true)]
    Work(WorkArgs),
}

#[derive(Debug, clap::Args)]
struct StatusArgs {
    /// The batch (its id, or a unique prefix of it)
    #[arg(value_name = "BATCH_ID")]
    batch: String,
    /// Print one JSON object per task
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    state_dir: StateDirArg,
    #[command(flatten)]
    store: StoreArg,
}

#[derive(Debug, clap::Args)]
struct ResumeArgs {
    /// The batch (its id, or a unique prefix of it)
    #[arg(value_name = "BATCH_ID")]
    batch: String,
    #[command(flatten)]
    run: Workers,
}

#[derive(Debug, clap::Args)]
struct WorkArgs {
    #[arg(value_name = "BATCH_ID")]
    batch: String,
    #[arg(long, value_name = "INDEX")]
    task: u32,
    #[arg(long, value_name = "FILE")]
    policy: Option<PathBuf>,
    /// Exit 0 once the task's run has ended, succeeded or failed: a pod's restart policy then
    /// restarts only a worker stopped before its run ended
    #[arg(long)]
    in_pod: bool,
    #[command(flatten)]
    state_dir: StateDirArg,
    #[command(flatten)]
    store: StoreArg,
}

fn jobs(text: &str) -> Result<NonZeroU32, String> {
    text.parse::<NonZeroU32>()
        .ok()
        .filter(|n| n.get() <= MAX_JOBS)
        .ok_or_else(|| format!("expected a number of tasks from 1 to {MAX_JOBS}"))
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    match args.command {
        Some(Sub::Status(status)) => self::status(&status),
        Some(Sub::Resume(resume)) => {
            let (state_dir, store, batch) =
                match open(&resume.run.state_dir, &resume.run.store, &resume.batch)? {
                    Ok(found) => found,
                    Err(code) => return Ok(code),
                };
            drop(store);
            let signal = interrupts()?;
            workers(&resume.run, &state_dir, batch, &signal)
        }
        Some(Sub::Work(work)) => self::work(&work),
        None => submit(
            args.pipeline.unwrap_or_default(),
            args.tasks.unwrap_or_default(),
            &args.run,
        ),
    }
}

fn usage(message: &str) -> ExitCode {
    eprintln!("cordon: {}", escape_text(message));
    ExitCode::from(2)
}

/// A new batch: its tasks and tooling checked, recorded, then its workers.
fn submit(pipeline: PathBuf, tasks_file: PathBuf, run: &Workers) -> anyhow::Result<ExitCode> {
    let state_dir = match run.state_dir.resolve_with(&run.store) {
        Ok(dir) => dir,
        Err(code) => return Ok(code),
    };
    let text = match read_tasks(&tasks_file) {
        Ok(text) => text,
        Err(message) => return Ok(usage(&message)),
    };
    let shown = escape_line(&tasks_file.display().to_string()).into_owned();
    let base = std::path::absolute(&tasks_file)
        .ok()
        .and_then(|p| p.parent().map(Path::to_path_buf))
        .unwrap_or_else(|| PathBuf::from("/"));
    let tasks = match batch::parse(&text, &shown, &base) {
        Ok(tasks) => tasks,
        Err(problems) => {
            for problem in &problems {
                eprintln!("{}", escape_text(problem));
            }
            return Ok(usage(&format!(
                "{shown} has {} problem(s); fix them, then submit the batch again (nothing was \
                 created)",
                problems.len()
            )));
        }
    };
    let file = match std::fs::canonicalize(&pipeline) {
        Ok(file) => file,
        Err(err) => {
            return Ok(usage(&format!(
                "the pipeline {}: {err}; give the pipeline file every task runs",
                pipeline.display()
            )));
        }
    };
    let (_, warnings, snapshot) = match cordon_engine::run::batch_tooling(&file, &pipeline) {
        Ok(loaded) => loaded,
        Err(err) => {
            for line in &err.details {
                eprintln!("{}", escape_text(line));
            }
            return Ok(usage(&err.message));
        }
    };
    for warning in &warnings {
        eprintln!("{}", escape_text(warning));
    }
    // What the backend needs is checked before the batch is recorded.
    if let Err(message) = preflight(run, &state_dir) {
        return Ok(usage(&message));
    }
    let store = Store::open(&state_dir)?;
    let id = cordon_store::new_run_id()?;
    let row = BatchRow {
        id,
        created: Timestamp(now_millis()),
        pipeline: pipeline.display().to_string(),
        pipeline_file: file
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
        tooling: snapshot.encode(),
        backend: run.backend.name().to_owned(),
    };
    let rows: Vec<TaskRow> = tasks
        .into_iter()
        .enumerate()
        .map(|(index, task)| TaskRow {
            index: u32::try_from(index).unwrap_or(u32::MAX),
            id: task.id,
            repo: task.repo.as_text(),
            git_ref: task.git_ref,
            prompt: task.prompt,
            vars: task.vars,
            run: None,
        })
        .collect();
    // The interrupt handlers are in place before the id is printed: whoever stops cordon on
    // seeing it is told how to continue.
    let signal = interrupts()?;
    store.create_batch(&row, &rows)?;
    drop(store);
    eprintln!("batch {id}");
    workers(run, &state_dir, id, &signal)
}

/// What the chosen backend needs of the command line and the operator, before anything is made.
#[cfg_attr(not(feature = "scale-out"), expect(unused_variables))]
fn preflight(run: &Workers, state_dir: &StateDir) -> Result<(), String> {
    match run.backend {
        Backend::Local => Ok(()),
        #[cfg(feature = "scale-out")]
        Backend::Slurm => slurm::preflight(state_dir),
        #[cfg(feature = "scale-out")]
        Backend::Kubernetes => kubernetes::preflight(state_dir, run.policy.as_deref()),
    }
}

/// The tasks file's text: a regular file of at most [`batch::MAX_FILE`] bytes, UTF-8.
fn read_tasks(path: &Path) -> Result<String, String> {
    let shown = escape_line(&path.display().to_string()).into_owned();
    let unreadable = |e: std::io::Error| {
        format!(
            "the tasks file {shown}: {e}; name a readable file of task lines \
             (`{{\"id\": …, \"repo\": …}}` on each)"
        )
    };
    // Looked at before it is opened: opening a FIFO would wait for a writer.
    if !std::fs::metadata(path).map_err(unreadable)?.is_file() {
        return Err(format!(
            "the tasks file {shown} is not a regular file; write the tasks to a file and name it"
        ));
    }
    let file = std::fs::File::open(path).map_err(unreadable)?;
    if !file.metadata().map_err(unreadable)?.is_file() {
        return Err(format!(
            "the tasks file {shown} is not a regular file; write the tasks to a file and name it"
        ));
    }
    let mut bytes = Vec::new();
    file.take(u64::try_from(batch::MAX_FILE).unwrap_or(u64::MAX) + 1)
        .read_to_end(&mut bytes)
        .map_err(unreadable)?;
    if bytes.len() > batch::MAX_FILE {
        return Err(format!(
            "the tasks file {shown} is larger than {} MiB; split it into batches",
            batch::MAX_FILE >> 20
        ));
    }
    String::from_utf8(bytes)
        .map_err(|_| format!("the tasks file {shown} is not UTF-8 text; save it as UTF-8"))
}

/// The state directory, its store and the batch `text` names, or the exit to end with.
fn open(
    state_dir: &StateDirArg,
    store: &StoreArg,
    text: &str,
) -> anyhow::Result<Result<(StateDir, Store, RunId), ExitCode>> {
    let state_dir = match state_dir.resolve_with(store) {
        Ok(dir) => dir,
        Err(code) => return Ok(Err(code)),
    };
    Ok(find(&state_dir, text)?.map(|(store, batch)| (state_dir, store, batch)))
}

/// The store and the batch `text` names, or the usage exit (no store yet, no such batch).
fn find(state_dir: &StateDir, text: &str) -> anyhow::Result<Result<(Store, RunId), ExitCode>> {
    if !state_dir.has_runs_stored() {
        return Ok(Err(usage(
            &cordon_store::StoreError::UnknownBatch(text.to_owned()).to_string(),
        )));
    }
    let store = Store::open(state_dir)?;
    match store.find_batch(text) {
        Ok(batch) => Ok(Ok((store, batch))),
        Err(err) => Ok(Err(usage(&err.to_string()))),
    }
}

/// The status of a task: its run's, or `pending` before a worker began it.
fn task_status(store: &Store, task: &TaskRow) -> anyhow::Result<&'static str> {
    let Some(run) = task.run else {
        return Ok("pending");
    };
    if store.run(run)?.is_none() {
        return Ok("pending");
    }
    let state = RunState::replay(&store.events(run)?);
    Ok(super::runs::status(store, run, &state))
}

fn status(args: &StatusArgs) -> anyhow::Result<ExitCode> {
    let (_state_dir, store, batch) = match open(&args.state_dir, &args.store, &args.batch)? {
        Ok(found) => found,
        Err(code) => return Ok(code),
    };
    let tasks = store.batch_tasks(batch)?;
    let mut counts = std::collections::BTreeMap::<&str, usize>::new();
    for task in &tasks {
        let status = task_status(&store, task)?;
        *counts.entry(status).or_default() += 1;
        let run = task.run.filter(|_| status != "pending");
        if args.json {
            let line = serde_json::json!({
                "batch": batch.to_string(),
                "task": task.id,
                "index": task.index,
                "repo": task.repo,
                "run": run.map(|r| r.to_string()),
                "status": status,
            });
            println!("{}", cordon_protocol::text::escape_json(&line.to_string()));
        } else {
            println!(
                "{:<24}  {status:<11}  {}",
                escape_line(&task.id),
                run.map_or_else(|| "-".to_owned(), |r| r.to_string())
            );
        }
    }
    if !args.json {
        let summary: Vec<String> = counts.iter().map(|(s, n)| format!("{n} {s}")).collect();
        eprintln!(
            "batch {batch}: {} tasks: {}",
            tasks.len(),
            summary.join(", ")
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// Runs every task of `batch` that has not succeeded on the chosen backend; prints a line per
/// finished task and the summary. 0 when every task's run succeeded, else 1; an interrupt stops
/// starting tasks, is passed to the running workers (which leave their runs resumable) and ends
/// with 128 + the signal.
/// The flag `SIGINT` and `SIGTERM` set (to their number) from now on.
fn interrupts() -> anyhow::Result<Arc<AtomicUsize>> {
    let signal = Arc::new(AtomicUsize::new(0));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register_usize(sig, Arc::clone(&signal), sig as usize)?;
    }
    Ok(signal)
}

fn workers(
    run: &Workers,
    state_dir: &StateDir,
    batch: RunId,
    signal: &Arc<AtomicUsize>,
) -> anyhow::Result<ExitCode> {
    let store = Store::open(state_dir)?;
    let mut waiting = Vec::new();
    for task in store.batch_tasks(batch)? {
        if task_status(&store, &task)? != "success" {
            waiting.push(task);
        }
    }
    let logs = state_dir.path().join("batches").join(batch.to_string());
    make_private_dirs(&logs)?;
    let mut report = Report {
        store: &store,
        batch,
        printed: std::collections::BTreeSet::new(),
    };
    // The policy as an absolute path: workers start elsewhere (a Slurm task in the batch's log
    // directory), where a relative one would name another file — one in a task's clone, say.
    let policy = match run.policy.as_deref().map(std::path::absolute).transpose() {
        Ok(policy) => policy,
        Err(err) => return Ok(usage(&format!("the operator policy file: {err}"))),
    };
    let job = Job {
        exe: std::env::current_exe()?,
        batch,
        state_dir,
        policy: policy.as_deref(),
        logs: &logs,
    };
    let jobs = run.jobs.map_or_else(
        || {
            std::thread::available_parallelism()
                .map_or(1, |n| u32::try_from(n.get()).unwrap_or(1))
                .min(MAX_JOBS)
        },
        NonZeroU32::get,
    );
    match run.backend {
        Backend::Local => local(&job, waiting, jobs as usize, signal, &mut report)?,
        #[cfg(feature = "scale-out")]
        Backend::Slurm => match slurm::run(&job, &waiting, jobs, signal, &mut report)? {
            Ok(()) => {}
            Err(message) => return Ok(usage(&message)),
        },
        #[cfg(feature = "scale-out")]
        Backend::Kubernetes => {
            let pipeline = match batch_pipeline(&store, batch) {
                Ok(pipeline) => pipeline,
                Err(message) => return Ok(usage(&message)),
            };
            let caps = kubernetes::Caps::of(&pipeline);
            match kubernetes::run(&job, &waiting, jobs, signal, &mut report, caps)? {
                Ok(()) => {}
                Err(message) => return Ok(usage(&message)),
            }
        }
    }
    let interrupted = signal.load(Ordering::SeqCst);
    if interrupted != 0 {
        eprintln!("cordon: interrupted; continue with `cordon batch resume {batch}`");
        return Ok(ExitCode::from(u8::try_from(128 + interrupted).unwrap_or(1)));
    }
    let tasks = store.batch_tasks(batch)?;
    let mut succeeded = 0;
    for task in &tasks {
        if task_status(&store, task)? == "success" {
            succeeded += 1;
        }
    }
    let all = succeeded == tasks.len();
    eprintln!(
        "batch {batch}: {succeeded} of {} tasks succeeded{}",
        tasks.len(),
        if all {
            String::new()
        } else {
            format!("; see `cordon batch status {batch}`")
        }
    );
    Ok(if all {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// The pipeline of `batch`, from its tooling snapshot in the store.
#[cfg(feature = "scale-out")]
fn batch_pipeline(store: &Store, batch: RunId) -> Result<cordon_pipeline::Pipeline, String> {
    let row = store
        .batch(batch)
        .map_err(|err| err.to_string())?
        .ok_or_else(|| format!("batch {batch} is not in the store"))?;
    let damaged = |err: &dyn std::fmt::Display| {
        format!("batch {batch}'s tooling snapshot in the store is damaged: {err}")
    };
    batch::check_pipeline_name(&row.pipeline_file).map_err(|err| damaged(&err))?;
    let snapshot =
        cordon_engine::run::ToolingSnapshot::decode(&row.tooling).map_err(|err| damaged(&err))?;
    let root = Path::new("/batch");
    snapshot
        .pipeline(&root.join(&row.pipeline_file), root)
        .map(|loaded| loaded.pipeline)
        .map_err(|err| damaged(&err.message))
}

/// What every worker of a batch is started with.
struct Job<'a> {
    exe: PathBuf,
    batch: RunId,
    state_dir: &'a StateDir,
    policy: Option<&'a Path>,
    logs: &'a Path,
}

impl Job<'_> {
    /// The worker's arguments after the program, its task index given by `task`.
    fn args(&self, task: &str) -> Vec<std::ffi::OsString> {
        let mut args: Vec<std::ffi::OsString> =
            ["batch", "work", &self.batch.to_string(), "--task", task]
                .iter()
                .map(Into::into)
                .collect();
        args.push("--state-dir".into());
        args.push(self.state_dir.path().into());
        if let Some(url) = self.state_dir.store() {
            args.push("--store".into());
            args.push(url.into());
        }
        if let Some(policy) = self.policy {
            args.push("--policy".into());
            args.push(policy.into());
        }
        args
    }
}

/// The line per finished task, each printed once.
struct Report<'a> {
    store: &'a Store,
    batch: RunId,
    printed: std::collections::BTreeSet<u32>,
}

impl Report<'_> {
    /// Prints each task of `indexes` not printed yet (as the store has it now: one read of the
    /// batch's tasks), its log named by `log`; `only_ended`: only those whose run has ended.
    fn tasks(
        &mut self,
        indexes: &[u32],
        log: &dyn Fn(&TaskRow) -> String,
        only_ended: bool,
    ) -> anyhow::Result<()> {
        if indexes.iter().all(|i| self.printed.contains(i)) {
            return Ok(());
        }
        for task in self.store.batch_tasks(self.batch)? {
            if !indexes.contains(&task.index) || self.printed.contains(&task.index) {
                continue;
            }
            let status = task_status(self.store, &task)?;
            if only_ended && !matches!(status, "success" | "failure") {
                continue;
            }
            self.printed.insert(task.index);
            let run = task.run.filter(|_| status != "pending");
            eprintln!(
                "task {}  {status}  {}{}",
                escape_line(&task.id),
                run.map_or_else(|| "(no run)".to_owned(), |r| format!("run {r}")),
                if status == "success" {
                    String::new()
                } else {
                    format!("  (log {})", log(&task))
                }
            );
        }
        Ok(())
    }
}

/// The local backend: `jobs` workers at once, child processes of this one, each logging to
/// `<TASK_ID>.log`.
fn local(
    job: &Job<'_>,
    waiting: Vec<TaskRow>,
    jobs: usize,
    signal: &AtomicUsize,
    report: &mut Report<'_>,
) -> anyhow::Result<()> {
    let mut waiting: std::collections::VecDeque<TaskRow> = waiting.into();
    let mut running: Vec<(Child, TaskRow)> = Vec::new();
    let mut forwarded = false;
    loop {
        let interrupted = signal.load(Ordering::SeqCst);
        while interrupted == 0 && running.len() < jobs {
            let Some(task) = waiting.pop_front() else {
                break;
            };
            let log = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(job.logs.join(log_name(&task)))?;
            let mut command = Command::new(&job.exe);
            command
                .args(job.args(&task.index.to_string()))
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(log);
            // Should this process be killed outright, each worker stops its run resumably.
            cordon_sandbox::host::die_with_parent(&mut command, signal_hook::consts::SIGTERM);
            let child = command.spawn()?;
            running.push((child, task));
        }
        if interrupted != 0 && !forwarded {
            forwarded = true;
            for (child, _) in &running {
                cordon_sandbox::host::signal_child(
                    child.id(),
                    i32::try_from(interrupted).unwrap_or(15),
                );
            }
        }
        if running.is_empty() {
            return Ok(());
        }
        let mut index = 0;
        while index < running.len() {
            if running[index].0.try_wait()?.is_some() {
                let (mut child, task) = running.swap_remove(index);
                let _ = child.wait();
                report.tasks(
                    &[task.index],
                    &|t| job.logs.join(log_name(t)).display().to_string(),
                    false,
                )?;
            } else {
                index += 1;
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// One worker: task `--task` of the batch, from the store. A task whose run exists resumes it
/// (its clone must be on this machine); any other is cloned afresh and run.
fn work(args: &WorkArgs) -> anyhow::Result<ExitCode> {
    let code = work_task(args)?;
    if !args.in_pod || code == ExitCode::SUCCESS {
        return Ok(code);
    }
    // In a pod: a run that ended (failed included) is done with; anything else is left to the
    // pod's restart policy, which restarts the worker to resume the run.
    let (_state_dir, store, batch) = match open(&args.state_dir, &args.store, &args.batch)? {
        Ok(found) => found,
        Err(_) => return Ok(code),
    };
    let ended = match store
        .batch_tasks(batch)?
        .into_iter()
        .find(|t| t.index == args.task)
    {
        Some(task) => matches!(task_status(&store, &task)?, "success" | "failure"),
        None => false,
    };
    Ok(if ended { ExitCode::SUCCESS } else { code })
}

fn work_task(args: &WorkArgs) -> anyhow::Result<ExitCode> {
    let (state_dir, store, batch) = match open(&args.state_dir, &args.store, &args.batch)? {
        Ok(found) => found,
        Err(code) => return Ok(code),
    };
    let Some(row) = store.batch(batch)? else {
        return Ok(usage(&format!("batch {batch} is not in the store")));
    };
    let Some(task) = store
        .batch_tasks(batch)?
        .into_iter()
        .find(|t| t.index == args.task)
    else {
        return Ok(usage(&format!("batch {batch} has no task {}", args.task)));
    };
    // Every stored field is checked again, as the tasks file's were: the store may be shared,
    // and the id names the directory this removes and makes.
    let parsed = match batch::parse_stored(
        &task.id,
        &task.repo,
        task.git_ref.as_deref(),
        task.prompt.as_deref(),
        &task.vars,
    )
    .and_then(|parsed| batch::check_pipeline_name(&row.pipeline_file).map(|()| parsed))
    {
        Ok(parsed) => parsed,
        Err(err) => {
            return Ok(usage(&format!(
                "task {} of batch {batch} in the store is damaged: {err}",
                args.task
            )));
        }
    };
    let Some(_task_lock) = store.lock_batch_task(batch, task.index)? else {
        eprintln!(
            "cordon: task {} of batch {batch} is being carried out by another worker on this \
             machine; wait for it (`cordon batch status {batch}`)",
            parsed.id
        );
        return Ok(ExitCode::from(1));
    };
    let base = super::run::BatchRun {
        pipeline: None,
        workspace: None,
        resume: None,
        prompt: None,
        state_dir: Some(state_dir.path().to_path_buf()),
        store: state_dir.store().map(str::to_owned),
        policy: args.policy.clone(),
        link: None,
    };
    let dest = clone::workspace_dir(state_dir.path(), batch, &parsed.id);
    let home = dest.with_file_name(format!(".home-{}", parsed.id));
    if let Some(run) = task.run
        && let Some(stored) = store.run(run)?
    {
        // A requeued task may start while its previous worker's lease is still live (a node
        // that vanished): it expires 30 s after the last renewal, so this waits a little longer.
        let deadline = std::time::Instant::now() + HELD_WAIT;
        while store.is_held(run) && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(500));
        }
        let here = stored.workspace.is_dir();
        let stale = here
            && stored.workspace == dest
            && cordon_engine::run::clone_behind(&store, run, &store.events(run)?)?;
        if stale {
            eprintln!(
                "cordon: task {}: run {run} went on elsewhere after its clone here was last \
                 recorded; rebuilding the clone from the run's latest record",
                parsed.id
            );
        }
        if !here || stale {
            let rebuilt = if stored.workspace != dest {
                Err("it began outside this batch's directory".to_owned())
            } else if store.is_held(run) {
                Err(
                    "another worker still holds the run; wait for it to stop or its lease to \
                     expire, then resume the batch"
                        .to_owned(),
                )
            } else {
                rebuild(&store, run, &parsed, &dest, &home)?
            };
            if let Err(why) = rebuilt {
                let state = if here {
                    "here is older than the run"
                } else {
                    "is not on this machine"
                };
                eprintln!(
                    "cordon: task {}: run {run}'s workspace {} {state} and cannot be rebuilt \
                     here ({}); resume it with `cordon run --resume {run}` on the machine that \
                     took it last",
                    parsed.id,
                    escape_line(&stored.workspace.display().to_string()),
                    escape_text(&why)
                );
                return Ok(ExitCode::from(1));
            }
            eprintln!(
                "cordon: task {}: rebuilt run {run}'s workspace from its record in the store",
                parsed.id
            );
        }
        drop(store);
        return super::run::run_for_batch(super::run::BatchRun {
            resume: Some(run.to_string()),
            ..base
        });
    }
    let snapshot = match cordon_engine::run::ToolingSnapshot::decode(&row.tooling) {
        Ok(snapshot) => snapshot,
        Err(err) => anyhow::bail!("batch {batch}'s tooling snapshot is unreadable: {err}"),
    };
    for made in [&dest, &home] {
        // A worker that died before its run was created left these: made anew.
        if std::fs::symlink_metadata(made).is_ok() {
            std::fs::remove_dir_all(made)?;
        }
    }
    make_private_dirs(&home)?;
    if let Err(err) = clone::make(&parsed, &snapshot, &dest, &home) {
        eprintln!("cordon: task {}: {}", parsed.id, escape_text(&err));
        return Ok(ExitCode::from(1));
    }
    drop(store);
    super::run::run_for_batch(super::run::BatchRun {
        pipeline: Some(dest.join(clone::TOOLING_DIR).join(&row.pipeline_file)),
        workspace: Some(dest),
        prompt: parsed.prompt,
        link: Some(super::run::BatchLink {
            batch,
            index: task.index,
            expected: task.run,
            vars: parsed.vars,
        }),
        ..base
    })
}

/// Rebuilds `run`'s workspace at `dest` from its latest record in the store (DESIGN §16), when
/// that record is of the log's last step (`run.started` when no step has finished): an older
/// one would lose that step's work. `Ok(Err)` is why it cannot be rebuilt; nothing is left at
/// `dest` then.
fn rebuild(
    store: &Store,
    run: RunId,
    task: &batch::Task,
    dest: &Path,
    home: &Path,
) -> anyhow::Result<Result<(), String>> {
    use cordon_protocol::event::Event;
    let Some((seq, blob)) = store.workspace_tree(run)? else {
        return Ok(Err("the store holds no record of it".to_owned()));
    };
    let events = store.events(run)?;
    if cordon_engine::run::last_boundary(&events) != Some(seq) {
        // The engine says in the log when a record could not be taken (a work tree past its
        // bound); else the worker stopped between the step's end and its record.
        let refused = events.iter().rev().find_map(|r| match &r.event {
            Event::Error { message }
                if r.seq > seq && message.starts_with(cordon_engine::run::CARRY_REFUSED) =>
            {
                Some(message.clone())
            }
            _ => None,
        });
        return Ok(Err(refused.unwrap_or_else(|| {
            "its last step finished without its workspace recorded".to_owned()
        })));
    }
    let record = store.blob(blob)?.unwrap_or_default();
    for made in [dest, home] {
        if std::fs::symlink_metadata(made).is_ok() {
            std::fs::remove_dir_all(made)?;
        }
    }
    make_private_dirs(home)?;
    let made = clone::rebuild(task, &record, dest, home);
    match &made {
        // The clone here is now at the record's boundary, the log's last: noted, as the engine
        // notes each one it reaches.
        Ok(()) => cordon_engine::run::note_boundary(store.dir(), run, seq)?,
        Err(_) => {
            let _ = std::fs::remove_dir_all(dest);
        }
    }
    Ok(made)
}

/// A local worker's log: `<TASK_ID>.log`, or `task-<INDEX>.log` for an id from the store that is
/// not a task id (the worker then refuses the task as damaged).
fn log_name(task: &TaskRow) -> String {
    if batch::valid_id(&task.id) {
        format!("{}.log", task.id)
    } else {
        format!("task-{}.log", task.index)
    }
}

/// `path` and its missing parents, mode 0700 (the state directory's own files).
fn make_private_dirs(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt as _;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(path)
}

fn now_millis() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}
