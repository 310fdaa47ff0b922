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
use cordon_engine::batch::{self, Repo, clone};
use cordon_protocol::RunId;
use cordon_protocol::event::Timestamp;
use cordon_protocol::text::{escape_line, escape_text};
use cordon_store::{BatchRow, StateDir, Store, TaskRow};

use crate::state_dir::{StateDirArg, StoreArg};

/// The most workers `--jobs` runs at once.
const MAX_JOBS: u32 = 64;

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
    /// Where the tasks run: `local`, this machine
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
}

impl Backend {
    fn name(self) -> &'static str {
        match self {
            Backend::Local => "local",
        }
    }
}

#[derive(Debug, clap::Subcommand)]
enum Sub {
    /// Print each task of a batch with its run and status
    Status(StatusArgs),
    /// Run a batch's tasks that have not succeeded yet: resume their runs, start the others
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
            let state_dir = match resume.run.state_dir.resolve_with(&resume.run.store) {
                Ok(dir) => dir,
                Err(code) => return Ok(code),
            };
            let (store, batch) = match find(&state_dir, &resume.batch)? {
                Ok(found) => found,
                Err(code) => return Ok(code),
            };
            drop(store);
            workers(&resume.run, &state_dir, batch)
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
    store.create_batch(&row, &rows)?;
    drop(store);
    eprintln!("batch {id}");
    workers(run, &state_dir, id)
}

/// The tasks file's text: a regular file of at most [`batch::MAX_FILE`] bytes, UTF-8.
fn read_tasks(path: &Path) -> Result<String, String> {
    let shown = escape_line(&path.display().to_string()).into_owned();
    let file = std::fs::File::open(path).map_err(|e| format!("the tasks file {shown}: {e}"))?;
    let meta = file
        .metadata()
        .map_err(|e| format!("the tasks file {shown}: {e}"))?;
    if !meta.is_file() {
        return Err(format!("the tasks file {shown} is not a regular file"));
    }
    let mut bytes = Vec::new();
    file.take(u64::try_from(batch::MAX_FILE).unwrap_or(u64::MAX) + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("the tasks file {shown}: {e}"))?;
    if bytes.len() > batch::MAX_FILE {
        return Err(format!(
            "the tasks file {shown} is larger than {} MiB; split it into batches",
            batch::MAX_FILE >> 20
        ));
    }
    String::from_utf8(bytes).map_err(|_| format!("the tasks file {shown} is not UTF-8 text"))
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
    let state_dir = match args.state_dir.resolve_with(&args.store) {
        Ok(dir) => dir,
        Err(code) => return Ok(code),
    };
    let (store, batch) = match find(&state_dir, &args.batch)? {
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
                task.id,
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

/// Runs every task of `batch` that has not succeeded, `--jobs` at once, each in a worker
/// process; prints a line per finished task. 0 when every task's run succeeded, else 1; an
/// interrupt stops starting tasks, is passed to the running workers (which leave their runs
/// resumable) and ends with 128 + the signal.
fn workers(run: &Workers, state_dir: &StateDir, batch: RunId) -> anyhow::Result<ExitCode> {
    match run.backend {
        Backend::Local => local(run, state_dir, batch),
    }
}

/// The local backend: the workers are child processes of this one.
fn local(run: &Workers, state_dir: &StateDir, batch: RunId) -> anyhow::Result<ExitCode> {
    let jobs = run.jobs.map_or_else(
        || {
            std::thread::available_parallelism()
                .map_or(1, |n| u32::try_from(n.get()).unwrap_or(1))
                .min(MAX_JOBS)
        },
        NonZeroU32::get,
    ) as usize;
    let store = Store::open(state_dir)?;
    let tasks = store.batch_tasks(batch)?;
    let mut waiting: std::collections::VecDeque<TaskRow> = std::collections::VecDeque::new();
    for task in tasks {
        if task_status(&store, &task)? != "success" {
            waiting.push_back(task);
        }
    }
    let signal = Arc::new(AtomicUsize::new(0));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register_usize(sig, Arc::clone(&signal), sig as usize)?;
    }
    let logs = state_dir.path().join("batches").join(batch.to_string());
    make_private_dirs(&logs)?;
    let exe = std::env::current_exe()?;
    let mut running: Vec<(Child, TaskRow)> = Vec::new();
    let mut forwarded = false;
    let mut failed = 0usize;
    loop {
        let interrupted = signal.load(Ordering::SeqCst);
        while interrupted == 0 && running.len() < jobs {
            let Some(task) = waiting.pop_front() else {
                break;
            };
            let log = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(logs.join(format!("{}.log", task.id)))?;
            let mut command = Command::new(&exe);
            command
                .args(["batch", "work", &batch.to_string(), "--task"])
                .arg(task.index.to_string())
                .arg("--state-dir")
                .arg(state_dir.path())
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(log);
            if let Some(url) = state_dir.store() {
                command.arg("--store").arg(url);
            }
            if let Some(policy) = &run.policy {
                command.arg("--policy").arg(policy);
            }
            running.push((command.spawn()?, task));
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
            break;
        }
        let mut index = 0;
        while index < running.len() {
            if running[index].0.try_wait()?.is_some() {
                let (mut child, task) = running.swap_remove(index);
                let _ = child.wait();
                let task = store
                    .batch_tasks(batch)?
                    .into_iter()
                    .find(|t| t.index == task.index)
                    .unwrap_or(task);
                let status = task_status(&store, &task)?;
                let run = task.run.filter(|_| status != "pending");
                if status != "success" {
                    failed += 1;
                }
                let log = logs.join(format!("{}.log", task.id));
                eprintln!(
                    "task {}  {status}  {}{}",
                    task.id,
                    run.map_or_else(|| "(no run)".to_owned(), |r| format!("run {r}")),
                    if status == "success" {
                        String::new()
                    } else {
                        format!("  (log {})", log.display())
                    }
                );
            } else {
                index += 1;
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let interrupted = signal.load(Ordering::SeqCst);
    if interrupted != 0 {
        eprintln!("cordon: interrupted; continue with `cordon batch resume {batch}`");
        return Ok(ExitCode::from(u8::try_from(128 + interrupted).unwrap_or(1)));
    }
    let total = store.batch_tasks(batch)?.len();
    eprintln!(
        "batch {batch}: {} of {total} tasks succeeded{}",
        total - failed - waiting.len(),
        if failed == 0 {
            String::new()
        } else {
            format!("; see `cordon batch status {batch}`")
        }
    );
    Ok(if failed == 0 && waiting.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// One worker: task `--task` of the batch, from the store. A task whose run exists resumes it
/// (its clone must be on this machine); any other is cloned afresh and run.
fn work(args: &WorkArgs) -> anyhow::Result<ExitCode> {
    let state_dir = match args.state_dir.resolve_with(&args.store) {
        Ok(dir) => dir,
        Err(code) => return Ok(code),
    };
    let (store, batch) = match find(&state_dir, &args.batch)? {
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
    if let Some(run) = task.run
        && let Some(stored) = store.run(run)?
    {
        if !stored.workspace.is_dir() {
            eprintln!(
                "cordon: task {}: run {run}'s workspace {} is not on this machine; resume it \
                 with `cordon run --resume {run}` on the machine that began it",
                task.id,
                stored.workspace.display()
            );
            return Ok(ExitCode::from(1));
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
    let repo = match Repo::parse_stored(&task.repo) {
        Ok(repo) => repo,
        Err(err) => anyhow::bail!("task {}: {err}", task.id),
    };
    let prompt = match task
        .prompt
        .as_deref()
        .map(|p| batch::fill(p, &task.vars))
        .transpose()
    {
        Ok(prompt) => prompt,
        Err(err) => anyhow::bail!("task {}: {err}", task.id),
    };
    let dest = clone::workspace_dir(state_dir.path(), batch, &task.id);
    let home = dest.with_file_name(format!(".home-{}", task.id));
    for made in [&dest, &home] {
        // A worker that died before its run was created left these: made anew.
        if std::fs::symlink_metadata(made).is_ok() {
            std::fs::remove_dir_all(made)?;
        }
    }
    make_private_dirs(&home)?;
    let parsed = batch::Task {
        id: task.id.clone(),
        repo,
        git_ref: task.git_ref.clone(),
        prompt: None,
        vars: task.vars.clone(),
    };
    if let Err(err) = clone::make(&parsed, &snapshot, &dest, &home) {
        eprintln!("cordon: task {}: {}", task.id, escape_text(&err));
        return Ok(ExitCode::from(1));
    }
    drop(store);
    super::run::run_for_batch(super::run::BatchRun {
        pipeline: Some(dest.join(clone::TOOLING_DIR).join(&row.pipeline_file)),
        workspace: Some(dest),
        prompt,
        link: Some(super::run::BatchLink {
            batch,
            index: task.index,
            expected: task.run,
            vars: task.vars,
        }),
        ..base
    })
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
