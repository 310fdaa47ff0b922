//! Running and resuming: everything between the command line and the engine — the workspace,
//! the state directory, secrets, the host boundary checks, locks, the tooling snapshot — and the
//! exit codes of DESIGN Appendix A.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use std::io::Write as _;

use std::sync::Arc;

use cordon_engine::agent_step::LoopDriver;
use cordon_engine::egress::{Egress, OperatorGrants};
use cordon_engine::executor::sandbox::SandboxExecutor;
use cordon_engine::host::{self, HostGit};
use cordon_engine::resources::{DiskLimits, Limits, ResourceGuard};
use cordon_engine::{
    AgentDriver, Control, Ending, Engine, EngineError, ErrorClass, RunContext, RunState, Secrets,
    error_chain,
};
use cordon_pipeline::{Action, Pipeline, StepKind};
use cordon_protocol::event::{Outcome, Timestamp};
use cordon_protocol::{Record, RunId};
use cordon_sandbox::{InitProgram, Workspace};
use cordon_store::{RunRow, StateDir, StateDirSource, Store};

use super::{Args, workspace};
use crate::commands::ui;
use crate::operator::Operator;
use crate::progress::{Mode, Progress};

const USAGE: u8 = 2;

/// A failure with the exit code it gets.
struct Exit(u8, String);

impl Exit {
    fn usage(message: impl Into<String>) -> Exit {
        Exit(USAGE, message.into())
    }
}

fn engine_exit(err: &EngineError) -> Exit {
    let code = match err.class() {
        ErrorClass::Usage => USAGE,
        ErrorClass::Layer => 3,
        ErrorClass::Runtime => 1,
    };
    Exit(code, error_chain(err))
}

fn store_exit(err: &cordon_store::StoreError) -> Exit {
    use cordon_store::StoreError as E;
    let code = match err {
        E::InsideWorkspace { .. }
        | E::NoStateDir
        | E::RelativeStateDir(_)
        | E::UnknownRun(_)
        | E::AmbiguousRun { .. }
        | E::Held(..) => USAGE,
        _ => 1,
    };
    Exit(code, error_chain(err))
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    match execute(&args) {
        Ok(code) => Ok(code),
        Err(Exit(code, message)) => {
            eprintln!("cordon: {message}");
            Ok(ExitCode::from(code))
        }
    }
}

/// Refuses (exit 3) before anything is created when a required sandbox layer is missing, so a
/// run never starts that could not run a single step.
fn refuse_missing_layers() -> Result<(), Exit> {
    let probe = cordon_sandbox::probe::Probe::detect();
    match probe.missing_required().first() {
        None => Ok(()),
        Some(status) => Err(Exit(
            3,
            format!(
                "refusing to run: the sandbox layer `{}` is not available ({}); {}",
                status.layer.as_str(),
                status.detail,
                status.remedy.as_deref().unwrap_or("run `cordon doctor`")
            ),
        )),
    }
}

fn execute(args: &Args) -> Result<ExitCode, Exit> {
    let source = StateDirSource::from_env(args.state_dir.clone());
    let state_dir = StateDir::resolve(&source).map_err(|e| store_exit(&e))?;
    if args.resume.is_some() || args.resume_last {
        return resume(args, &state_dir);
    }
    let Some(pipeline_arg) = &args.pipeline else {
        return Err(Exit::usage(
            "give a PIPELINE, or --resume RUN_ID / --resume-last",
        ));
    };
    let loaded = crate::pipeline_file::load(pipeline_arg).map_err(Exit::usage)?;
    for warning in &loaded.warnings {
        eprintln!("{warning}");
    }
    let pipeline = loaded.pipeline;
    cordon_engine::preflight(&pipeline).map_err(|e| engine_exit(&e))?;
    refuse_missing_layers()?;
    let pipeline_file = std::path::absolute(pipeline_arg)
        .and_then(|p| p.canonicalize())
        .map_err(|e| Exit::usage(format!("cannot resolve {}: {e}", pipeline_arg.display())))?;
    let workspace =
        workspace(args.workspace.as_deref(), pipeline_arg, &pipeline_file).map_err(Exit::usage)?;
    state_dir
        .refuse_inside(&workspace)
        .map_err(|e| store_exit(&e))?;
    let operator = operator_policy(args, &workspace)?;
    let secrets = Secrets::resolve(&pipeline, &|key| std::env::var(key).ok())
        .map_err(|e| engine_exit(&EngineError::from(e)))?;
    // The lane's key is read now, host-side: a missing one is exit 2 before anything runs.
    let lane = cordon_engine::lane::lane_config(&pipeline, &|name| std::env::var_os(name))
        .map_err(|e| engine_exit(&e))?;
    let store = Store::open(&state_dir).map_err(|e| store_exit(&e))?;
    let run = cordon_store::new_run_id().map_err(|e| store_exit(&e))?;
    let scratch = scratch_dir(&store, run);
    let host = HostGit::open(&workspace, &scratch, host::user_identity())
        .map_err(|e| engine_exit(&e.into()))?;

    // Host boundary at start: tooling tracked and unmodified; a clean worktree for a commit.
    let tooling = tooling_paths(&pipeline, &pipeline_file, &workspace);
    if let Some(refusal) = host_refusals(&host, &pipeline, &tooling).into_iter().next() {
        return Err(engine_exit(&refusal.into()));
    }
    let _workspace_lock = store
        .lock_workspace(&workspace)
        .map_err(|e| store_exit(&e))?
        .ok_or_else(|| {
            Exit::usage(format!(
                "the workspace {} is held by a live run; wait for it to finish or stop it",
                workspace.display()
            ))
        })?;
    let _run_lock = store.lock_run(run).map_err(|e| store_exit(&e))?;
    let files = snapshot(&workspace, &tooling).map_err(Exit::usage)?;
    // Keys are read and the provider built before anything runs: a missing key is exit 2.
    let mut agents = agent_driver(args, &pipeline, &pipeline_file, &workspace, &files)?;
    if let Some(driver) = agents.as_mut() {
        driver.set_grants(Box::new(OperatorGrants::new(&operator.policy)));
    }
    // The page listens before the run exists, so an address that cannot be bound leaves no run
    // behind.
    let page = serve_page(args, &state_dir, run, &pipeline)?;
    let bytes = serde_json::to_vec(&files).map_err(|e| Exit(1, e.to_string()))?;
    let blob = store.put_blob(run, &bytes).map_err(|e| store_exit(&e))?;
    store
        .create_run(&RunRow {
            id: run,
            pipeline: pipeline.name.clone(),
            pipeline_file: pipeline_file.clone(),
            workspace: workspace.clone(),
            started: Timestamp(run.unix_millis()),
            snapshot: Some(blob),
        })
        .map_err(|e| store_exit(&e))?;
    let max_attempts = args.max_attempts.unwrap_or(pipeline.max_attempts).get();
    let parts = Parts {
        lane,
        page,
        operator,
        store: &store,
        run,
        pipeline: &pipeline,
        workspace: &workspace,
        host: &host,
        secrets: &secrets,
        tooling,
        agents: agents.as_mut(),
    };
    drive(args, parts, Start::Fresh(max_attempts))
}

/// The run's live page, unless `--no-ui`. A `--ui ADDR` that cannot be bound is a usage error.
fn serve_page(
    args: &Args,
    state_dir: &StateDir,
    run: RunId,
    pipeline: &Pipeline,
) -> Result<Option<ui::RunUi>, Exit> {
    if args.no_ui {
        return Ok(None);
    }
    ui::serve_run(state_dir, run, pipeline, args.ui)
        .map(Some)
        .map_err(|err| {
            let code = if args.ui.is_some() { USAGE } else { 1 };
            Exit(
                code,
                format!(
                    "the run's page cannot be served: {err:#}; pass another --ui ADDR, or --no-ui"
                ),
            )
        })
}

/// The run's agent driver (`None` without agent steps), its files from the tooling snapshot
/// (`files`: workspace-relative path → text).
fn agent_driver(
    args: &Args,
    pipeline: &Pipeline,
    pipeline_file: &Path,
    workspace: &Path,
    files: &BTreeMap<String, String>,
) -> Result<Option<LoopDriver>, Exit> {
    let base = pipeline_file
        .parent()
        .and_then(|p| p.strip_prefix(workspace).ok())
        .unwrap_or(Path::new(""))
        .to_path_buf();
    let lookup = |rel: &cordon_pipeline::RelPath| {
        files
            .get(&base.join(rel.as_path()).display().to_string())
            .cloned()
    };
    // A resumed run adds to its recording; a fresh run starts a new one.
    let resuming = args.resume.is_some() || args.resume_last;
    let record: Option<Box<dyn std::io::Write + Send>> = match &args.record {
        Some(path) => Some(Box::new(
            std::fs::OpenOptions::new()
                .create(true)
                .write(true)
                .append(resuming)
                .truncate(!resuming)
                .open(path)
                .map_err(|e| {
                    Exit::usage(format!(
                        "cannot open {} for --record: {e}; pass a writable file path",
                        path.display()
                    ))
                })?,
        )),
        None => None,
    };
    LoopDriver::prepare(pipeline, &lookup, &|name| std::env::var_os(name), record)
        .map_err(|e| engine_exit(&EngineError::Agent(e)))
}

enum Start {
    Fresh(u32),
    Resume(u32),
}

/// The run's parts, assembled once by the fresh and the resume path.
struct Parts<'a> {
    /// The run's live page (`None` with `--no-ui`).
    page: Option<ui::RunUi>,
    operator: Operator,
    store: &'a Store,
    run: RunId,
    pipeline: &'a Pipeline,
    workspace: &'a Path,
    host: &'a HostGit,
    secrets: &'a Secrets,
    tooling: Vec<String>,
    agents: Option<&'a mut LoopDriver>,
    /// The model lane's upstream, when a step has `model_lane: true`.
    lane: Option<cordon_egress::lane::LaneConfig>,
}

fn drive(args: &Args, parts: Parts<'_>, start: Start) -> Result<ExitCode, Exit> {
    let Parts {
        page,
        operator,
        store,
        run,
        pipeline,
        workspace,
        host,
        secrets,
        tooling,
        agents,
        lane,
    } = parts;
    let sandbox_workspace = Workspace::open(workspace).map_err(|e| Exit(1, error_chain(&e)))?;
    let init = InitProgram::current_exe().map_err(|e| Exit(1, error_chain(&e)))?;
    let mut mask = vec![store.dir().to_path_buf()];
    mask.extend(operator.path.clone());
    let limits = operator.policy.limits;
    let mut executor = SandboxExecutor::new(sandbox_workspace, init, mask);
    if needs_egress(pipeline) || lane.is_some() {
        let listening = page.iter().map(|p| p.addr).collect();
        let mut egress = Egress::new(run, &operator.policy, listening)
            .map_err(|e| Exit(1, format!("cannot start the egress proxy's runtime: {e}")))?;
        if let Some(config) = lane {
            egress = egress
                .with_lane(config)
                .map_err(|e| Exit::usage(error_chain(&e)))?;
        }
        executor = executor.with_egress(Arc::new(egress));
    }
    let progress = Progress::new(
        run,
        &pipeline.name,
        ui::graph(pipeline),
        Mode::detect(args.json),
    );
    progress.set_memory_cap(pipeline.isolation.memory.map(|m| m.bytes()));
    if let Start::Resume(_) = start {
        progress.catch_up(&store.events(run).map_err(|e| store_exit(&e))?);
    }
    let json = args.json;
    let mut observer = |record: &Record| {
        if json {
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "{}", record.to_json_line());
            let _ = out.flush();
        }
        progress.record(record);
        Control::Continue
    };
    let cx = RunContext {
        store,
        run,
        pipeline,
        workspace: workspace.to_path_buf(),
        executor: &mut executor,
        host: Some(host),
        secrets,
        refresh: args.refresh,
        tooling,
        agents: agents.map(|driver| driver as &mut dyn AgentDriver),
    };
    let mut engine = Engine::new(cx, &mut observer).map_err(|e| engine_exit(&e))?;
    engine.set_resource_guard(ResourceGuard::new(Limits {
        disk: DiskLimits {
            warn: limits.disk_warn,
            abort: limits.disk_abort,
        },
        mem_warn: limits.mem_warn,
    }));
    match start {
        Start::Fresh(max) => engine.start(max),
        Start::Resume(max) => engine.resume(max),
    }
    .map_err(|e| engine_exit(&e))?;
    // `run.started` / `run.resumed` is durable: signals from now on leave a resumable run, and
    // the id can be printed (after the handler is in place, so whoever reads it may signal).
    exit_on_signals(run);
    eprintln!("run {run}");
    if let Some(page) = &page {
        eprintln!("ui {}", page.url);
    }
    if let Start::Resume(_) = start {
        match host.status_short() {
            Ok(status) if !status.is_empty() => {
                eprint!("workspace changes kept from before the interruption:\n{status}")
            }
            Ok(_) => {}
            Err(err) => eprintln!("cordon: cannot list the workspace changes: {err}"),
        }
    }
    progress.show();
    let ending = engine.drive();
    drop(engine);
    progress.finish();
    if let Some(page) = page {
        page.finish();
    }
    match ending.map_err(|e| engine_exit(&e))? {
        Ending::Finished(Outcome::Success) => Ok(ExitCode::SUCCESS),
        Ending::Finished(Outcome::Failure) => Ok(ExitCode::from(1)),
        Ending::Stopped => Ok(ExitCode::from(1)),
    }
}

/// SIGINT → 130, SIGTERM → 143. The process exits at once: every event that matters is already
/// durable, the lock dies with the process, and the session's init dies with it (its parent
/// death signal), so the run is exactly as resumable as after `kill -9`.
fn exit_on_signals(run: RunId) {
    let Ok(mut signals) = signal_hook::iterator::Signals::new([
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGTERM,
    ]) else {
        return;
    };
    std::thread::spawn(move || {
        if let Some(signal) = signals.forever().next() {
            eprintln!("cordon: interrupted; continue with `cordon run --resume {run}`");
            std::process::exit(128 + signal);
        }
    });
}

fn resume(args: &Args, state_dir: &StateDir) -> Result<ExitCode, Exit> {
    let store = Store::open(state_dir).map_err(|e| store_exit(&e))?;
    let run = match &args.resume {
        Some(text) => store.find_run(text).map_err(|e| store_exit(&e))?,
        None => store
            .last_run()
            .map_err(|e| store_exit(&e))?
            .ok_or_else(|| Exit::usage("no run to resume"))?,
    };
    let row = store
        .run(run)
        .map_err(|e| store_exit(&e))?
        .ok_or_else(|| Exit::usage(format!("no run matches `{run}`")))?;
    if let Some(given) = &args.pipeline {
        let given = given.canonicalize().unwrap_or_else(|_| given.clone());
        if given != row.pipeline_file {
            return Err(Exit::usage(format!(
                "run {run} belongs to {}, not {}; resume it with its own pipeline or without PIPELINE",
                row.pipeline_file.display(),
                given.display()
            )));
        }
    }
    let files = snapshot_files(&store, &row)?;
    let pipeline = snapshot_pipeline(&row, &files)?;
    let records = store.events(run).map_err(|e| store_exit(&e))?;
    let state = RunState::replay(&records);
    // A run killed between its creation and `run.started` has no events: it starts afresh.
    let fresh = records.is_empty();
    let budget = if fresh {
        pipeline.max_attempts.get()
    } else {
        state.max_attempts
    };
    let max_attempts = args.max_attempts.map_or(budget, std::num::NonZeroU32::get);
    if let Some(outcome) = state.outcome {
        let continues = state.exhausted.is_some() && max_attempts > state.attempt.get();
        if !continues {
            eprintln!("run {run} already finished: {}", outcome.as_str());
            return Ok(ExitCode::from(match outcome {
                Outcome::Success => 0,
                Outcome::Failure => 1,
            }));
        }
    }
    refuse_missing_layers()?;
    let _run_lock = store.lock_run(run).map_err(|e| store_exit(&e))?;
    let _workspace_lock = store
        .lock_workspace(&row.workspace)
        .map_err(|e| store_exit(&e))?
        .ok_or_else(|| {
            Exit::usage(format!(
                "the workspace {} is held by a live run; wait for it to finish or stop it",
                row.workspace.display()
            ))
        })?;
    let operator = operator_policy(args, &row.workspace)?;
    let secrets = Secrets::resolve(&pipeline, &|key| std::env::var(key).ok())
        .map_err(|e| engine_exit(&EngineError::from(e)))?;
    // The lane's key is read now, host-side: a missing one is exit 2 before anything runs.
    let lane = cordon_engine::lane::lane_config(&pipeline, &|name| std::env::var_os(name))
        .map_err(|e| engine_exit(&e))?;
    let host = HostGit::open(
        &row.workspace,
        &scratch_dir(&store, run),
        host::user_identity(),
    )
    .map_err(|e| engine_exit(&e.into()))?;
    let tooling = tooling_paths(&pipeline, &row.pipeline_file, &row.workspace);
    let mut agents = agent_driver(args, &pipeline, &row.pipeline_file, &row.workspace, &files)?;
    if let Some(driver) = agents.as_mut() {
        driver.set_grants(Box::new(OperatorGrants::new(&operator.policy)));
    }
    let page = serve_page(args, state_dir, run, &pipeline)?;
    let parts = Parts {
        lane,
        page,
        operator,
        store: &store,
        run,
        pipeline: &pipeline,
        workspace: &row.workspace,
        host: &host,
        secrets: &secrets,
        tooling,
        agents: agents.as_mut(),
    };
    let start = if fresh {
        Start::Fresh(max_attempts)
    } else {
        Start::Resume(max_attempts)
    };
    drive(args, parts, start)
}

/// The run's private directory in the state dir (pinned git config, baseline, scratch index).
fn scratch_dir(store: &Store, run: RunId) -> PathBuf {
    store.dir().join("runs").join(run.to_string())
}

/// What the host boundary refuses a run for, in order: tooling not tracked or modified (the
/// first such file), a dirty worktree when the pipeline commits. `run` stops at the first;
/// `run --dry-run` shows them all.
pub(super) fn host_refusals(
    host: &HostGit,
    pipeline: &Pipeline,
    tooling: &[String],
) -> Vec<host::HostError> {
    let mut refusals = Vec::new();
    if let Err(err) = host.check_tooling(tooling) {
        refusals.push(err);
    }
    if has_commit(pipeline) {
        match host.dirty_paths() {
            Ok(dirty) if !dirty.is_empty() => {
                let list: Vec<String> = dirty.iter().map(|p| format!("  {p}")).collect();
                refusals.push(host::HostError::Dirty(list.join("\n")));
            }
            Ok(_) => {}
            Err(err) => refusals.push(err),
        }
    }
    refusals
}

fn has_commit(pipeline: &Pipeline) -> bool {
    pipeline
        .steps
        .iter()
        .any(|s| matches!(s.kind, StepKind::Action(Action::Commit { .. })))
}

/// Workspace-relative tooling paths: the pipeline, its agent files, its context files and a
/// replay transcript.
pub(super) fn tooling_paths(
    pipeline: &Pipeline,
    pipeline_file: &Path,
    workspace: &Path,
) -> Vec<String> {
    let base = pipeline_file.parent().unwrap_or(workspace);
    let mut paths = vec![pipeline_file.to_path_buf()];
    for step in &pipeline.steps {
        if let StepKind::Agent(agent) = &step.kind {
            paths.push(
                base.join(pipeline.agents_dir.as_path())
                    .join(agent.agent.file_name()),
            );
        }
    }
    paths.extend(
        pipeline
            .context_files
            .iter()
            .map(|p| base.join(p.as_path())),
    );
    if let Some(cordon_pipeline::Llm::Replay { transcript, .. }) = &pipeline.llm {
        paths.push(base.join(transcript.as_path()));
    }
    let mut relative: Vec<String> = paths
        .iter()
        .filter_map(|p| p.strip_prefix(workspace).ok())
        .map(|p| p.display().to_string())
        .collect();
    relative.sort();
    relative.dedup();
    relative
}

/// The tooling files' contents, `{workspace-relative path: text}`, stored as JSON: the pipeline,
/// agent files, context files and transcript are read from this for the whole run (and on
/// resume), never from the agent-writable workspace again.
fn snapshot(workspace: &Path, tooling: &[String]) -> Result<BTreeMap<String, String>, String> {
    let mut files = BTreeMap::new();
    for path in tooling {
        let text = std::fs::read_to_string(workspace.join(path))
            .map_err(|e| format!("cannot read tooling file {path}: {e}"))?;
        files.insert(path.clone(), text);
    }
    Ok(files)
}

/// The run's stored tooling snapshot.
fn snapshot_files(store: &Store, row: &RunRow) -> Result<BTreeMap<String, String>, Exit> {
    let bytes = row
        .snapshot
        .and_then(|id| store.blob(id).ok().flatten())
        .ok_or_else(|| {
            Exit(
                1,
                format!(
                    "run {} has no tooling snapshot; it cannot be resumed",
                    row.id
                ),
            )
        })?;
    serde_json::from_slice(&bytes).map_err(|e| {
        Exit(
            1,
            format!("the tooling snapshot of run {} is unreadable: {e}", row.id),
        )
    })
}

/// The pipeline as it was when the run started, from its tooling snapshot.
fn snapshot_pipeline(row: &RunRow, files: &BTreeMap<String, String>) -> Result<Pipeline, Exit> {
    let files: BTreeMap<PathBuf, String> = files
        .iter()
        .map(|(k, v)| (row.workspace.join(k), v.clone()))
        .collect();
    cordon_pipeline::load(&row.pipeline_file, &files)
        .map(|l| l.pipeline)
        .map_err(|diagnostics| {
            let text: Vec<String> = diagnostics.iter().map(ToString::to_string).collect();
            Exit(
                1,
                format!(
                    "the stored pipeline of run {} no longer loads:\n{}",
                    row.id,
                    text.join("\n")
                ),
            )
        })
}

/// Loads the operator policy for a run in `workspace` (see `crate::operator`).
fn operator_policy(args: &Args, workspace: &Path) -> Result<Operator, Exit> {
    crate::operator::load(args.policy.as_deref(), Some(workspace)).map_err(Exit::usage)
}

/// Whether any step or setup hook has a network, and so needs the egress proxy.
fn needs_egress(pipeline: &Pipeline) -> bool {
    let networked =
        |network: &cordon_pipeline::Network| !matches!(network, cordon_pipeline::Network::None);
    pipeline.steps.iter().any(|step| {
        step.kind.sandbox().is_some_and(|sandbox| {
            networked(&sandbox.network)
                || sandbox
                    .setup
                    .as_ref()
                    .is_some_and(|setup| networked(&setup.network))
        })
    })
}
