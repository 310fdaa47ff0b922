//! Run assembly: from "a pipeline file and flags" to an engine ready to drive, fresh and resumed
//! runs alike — the workspace and its view, the host boundary at start (tooling committed and
//! unchanged, a clean worktree for a commit action), the tooling snapshot every later read comes
//! from, the run's locks (run first, then workspace, on both paths), secrets, keys, the operator
//! policy, the sandbox executor with its egress — and then driving it.
//!
//! The cli keeps flags, exit codes, printing and the page: [`prepare`] does every check and
//! takes the locks without creating anything; the caller binds its page, then [`Ready::create`]
//! records a fresh run and [`Ready::drive`] runs it.

mod tooling;

use std::ffi::OsString;
use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use cordon_pipeline::policy::OperatorPolicy;
use cordon_pipeline::{Action, Pipeline, StepKind};
use cordon_protocol::event::{Outcome, Timestamp};
use cordon_protocol::{Record, RunId};
use cordon_store::{Lock, RunRow, StateDir, Store, StoreError};
use cordon_workspace::{View, WsPath};

use crate::agent_step::LoopDriver;
use crate::egress::{Egress, OperatorGrants};
use crate::executor::sandbox::SandboxExecutor;
use crate::resources::{DiskLimits, Limits, ResourceGuard};
use crate::workspace::HostWorkspace;
use crate::{
    AgentDriver, Ending, Engine, EngineError, ErrorClass, Observer, RunContext, RunState, Secrets,
    error_chain,
};

pub use tooling::{ToolingSnapshot, tooling_paths};

/// Why a run cannot be prepared or driven, with the exit class it gets (Appendix A).
#[derive(Debug)]
pub struct RunError {
    pub class: ErrorClass,
    pub message: String,
    /// Lines to print before the message (a pipeline's diagnostics).
    pub details: Vec<String>,
}

impl RunError {
    pub fn usage(message: impl Into<String>) -> RunError {
        RunError::new(ErrorClass::Usage, message)
    }

    fn runtime(message: impl Into<String>) -> RunError {
        RunError::new(ErrorClass::Runtime, message)
    }

    fn new(class: ErrorClass, message: impl Into<String>) -> RunError {
        RunError {
            class,
            message: message.into(),
            details: Vec::new(),
        }
    }
}

impl From<&EngineError> for RunError {
    fn from(err: &EngineError) -> RunError {
        RunError::new(err.class(), error_chain(err))
    }
}

impl From<EngineError> for RunError {
    fn from(err: EngineError) -> RunError {
        RunError::from(&err)
    }
}

impl From<StoreError> for RunError {
    fn from(err: StoreError) -> RunError {
        let class = match &err {
            StoreError::InsideWorkspace { .. }
            | StoreError::NoStateDir
            | StoreError::RelativeStateDir(_)
            | StoreError::UnknownRun(_)
            | StoreError::AmbiguousRun { .. }
            | StoreError::Held(..)
            | StoreError::Leased { .. }
            | StoreError::StoreUrl { .. }
            | StoreError::PasswordInUrl(_)
            | StoreError::PasswordFile { .. }
            | StoreError::NoScaleOut(_) => ErrorClass::Usage,
            _ => ErrorClass::Runtime,
        };
        RunError::new(class, error_chain(&err))
    }
}

impl From<cordon_git::GitError> for RunError {
    fn from(err: cordon_git::GitError) -> RunError {
        RunError::from(EngineError::from(err))
    }
}

/// The operator policy a run is under, and the file it came from (masked in every sandbox).
pub struct Operator {
    pub policy: OperatorPolicy,
    pub path: Option<PathBuf>,
}

/// Which run.
pub enum Start {
    /// A new run of `pipeline` in `workspace` (default: the top of the git work tree holding
    /// the pipeline).
    Fresh {
        pipeline: PathBuf,
        workspace: Option<PathBuf>,
    },
    /// A stored run (`None`: the latest); `pipeline`, when given, must be the run's own.
    Resume {
        run: Option<String>,
        pipeline: Option<PathBuf>,
    },
}

/// What the command line asks for.
pub struct Request<'a> {
    pub start: Start,
    pub state_dir: &'a StateDir,
    /// The attempt budget instead of the pipeline's (`--max-attempts`).
    pub max_attempts: Option<NonZeroU32>,
    /// Rerun setup hooks whose stamp matches (`--refresh`).
    pub refresh: bool,
    /// Write every model turn as a replay transcript (`--record FILE`).
    pub record: Option<PathBuf>,
    /// The run's task (`--prompt`, `--prompt-file`): appended to every agent step's task
    /// message, recorded in `run.started`; a resumed run keeps its own.
    pub prompt: Option<String>,
    /// The budget limits instead of the pipeline's (`--budget-*`), for this process.
    pub budget: crate::budget::Overrides,
    /// `cordon do "OUTCOME"`: the outcome a fresh outcome run carries out.
    pub outcome: Option<String>,
    /// Loads the operator policy for a workspace (refused inside it).
    pub operator: &'a dyn Fn(&Path) -> Result<Operator, String>,
    /// The host environment: key variables, `SSL_CERT_FILE`, the user's git config location.
    pub env: &'a dyn Fn(&str) -> Option<OsString>,
    /// The documents of `--context FILE`, read by the caller (bounded), for a fresh run.
    pub context: Vec<Document>,
    /// `--plan FILE`: a workspace file, read at the start of a fresh run through the workspace
    /// view and marked done when the run succeeds (DESIGN §17).
    pub plan: Option<PathBuf>,
    /// A batch task's `vars` (DESIGN §16), for a fresh run: every step sees each as
    /// `CORDON_VAR_<NAME>`. A resumed run takes its task's from the store.
    pub vars: Vec<(String, String)>,
}

/// A batch task's `vars` as the step environment's `CORDON_VAR_<NAME>` variables.
pub fn var_env(vars: &[(String, String)]) -> Vec<(OsString, OsString)> {
    vars.iter()
        .map(|(name, value)| {
            (
                OsString::from(format!("CORDON_VAR_{name}")),
                OsString::from(value),
            )
        })
        .collect()
}

/// A document of `--context` (the path as given) or the plan (`--plan`, its workspace path),
/// and its text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Document {
    pub path: String,
    pub text: String,
    pub plan: bool,
}

/// The most bytes a `--context` or `--plan` document may hold.
pub const MAX_DOCUMENT: usize = 1 << 20;
/// The most documents a run takes (`--context` and `--plan` together).
pub const MAX_DOCUMENTS: usize = 16;

/// What [`prepare`] found.
pub enum Prepared {
    /// The run already finished and cannot continue (`run <id> already finished: …`).
    Finished {
        run: RunId,
        outcome: Outcome,
    },
    Ready(Box<Ready>),
}

/// How the engine begins.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Begin {
    /// `run.started` with this budget.
    Fresh(u32),
    /// `run.resumed` with this budget.
    Resume(u32),
}

/// A run whose checks passed and whose locks are held.
pub struct Ready {
    pub run: RunId,
    pub pipeline: Pipeline,
    /// The pipeline's warnings (fresh runs), to print.
    pub warnings: Vec<String>,
    store: Store,
    workspace: HostWorkspace,
    secrets: Secrets,
    tooling: Vec<WsPath>,
    agents: Option<LoopDriver>,
    operator: Operator,
    lane: Option<cordon_egress::lane::LaneConfig>,
    /// `isolation.toolchains`, found on the host once for every session of the run.
    toolchains: cordon_sandbox::toolchain::Exposure,
    /// The operator's `[env] pass` values, and the files they name.
    passed: cordon_sandbox::environment::Passed,
    /// The environment images the steps name, resolved (a resumed run's pinned to the digests
    /// it recorded).
    images: crate::images::RunImages,
    /// `isolation.caches`, opened for the whole run (their shared lock held until it ends).
    caches: Option<cordon_sandbox::cache::Opened>,
    /// The run's task (`--prompt`), for `run.started` of a fresh run.
    prompt: Option<String>,
    /// A fresh run's documents (`--context`), stored as blobs by [`Ready::create`] and recorded
    /// in `run.started{context}`.
    documents: Vec<Document>,
    context: Vec<cordon_protocol::event::ContextDocument>,
    /// The run's plan (`--plan`) in the workspace, marked done when the run succeeds.
    plan: Option<WsPath>,
    /// An outcome run's outcome (`cordon do`), for `run.started` of a fresh run.
    outcome: Option<String>,
    /// `--budget-*`: the limits instead of the pipeline's.
    budget: crate::budget::Overrides,
    begin: Begin,
    /// The run to record (fresh runs), with the tooling snapshot.
    row: Option<(RunRow, ToolingSnapshot)>,
    refresh: bool,
    // Taken run first, then workspace; released in the reverse order (fields drop in order).
    _workspace_lock: Lock,
    _run_lock: Lock,
}

/// What the caller passes to [`Ready::drive`].
pub struct Drive<'a> {
    /// Addresses this process listens on (the run's page): never an egress destination.
    pub listening: Vec<SocketAddr>,
    /// Called once `run.started` / `run.resumed` is durable, with the workspace changes a
    /// resumed run keeps (`git status --short` lines; empty for a fresh run).
    pub started: &'a mut dyn FnMut(RunId, &str),
}

/// Refuses (exit 3) when a required sandbox layer is missing, before anything is created.
fn refuse_missing_layers() -> Result<(), RunError> {
    let probe = cordon_sandbox::probe::Probe::detect();
    match probe.missing_required().first() {
        None => Ok(()),
        Some(status) => Err(RunError::new(
            ErrorClass::Layer,
            format!(
                "refusing to run: the sandbox layer `{}` is not available ({}); {}",
                status.layer.as_str(),
                status.detail,
                status.remedy.as_deref().unwrap_or("run `cordon doctor`")
            ),
        )),
    }
}

/// `flag` (which must be the top of a git work tree), or the top of the git work tree
/// containing the pipeline, found by walking up to a `.git` entry. `pipeline_file` is absolute.
pub fn locate_workspace(
    flag: Option<&Path>,
    pipeline_arg: &Path,
    pipeline_file: &Path,
) -> Result<PathBuf, String> {
    let pipeline_dir = pipeline_file.parent().unwrap_or(Path::new("/"));
    let pipeline_dir = pipeline_dir.canonicalize().map_err(|err| {
        format!(
            "cannot resolve the pipeline's directory {}: {err}",
            pipeline_dir.display()
        )
    })?;
    let workspace = match flag {
        Some(dir) => {
            let dir = dir.canonicalize().map_err(|err| {
                format!(
                    "workspace {} cannot be opened: {err}; pass an existing directory to -w",
                    dir.display()
                )
            })?;
            if std::fs::symlink_metadata(dir.join(".git")).is_err() {
                return Err(format!(
                    "workspace {} is not the top of a git work tree (it has no .git); pass the \
                     work tree's top directory to -w, or run `git init` there",
                    dir.display()
                ));
            }
            dir
        }
        None => pipeline_dir
            .ancestors()
            .find(|dir| std::fs::symlink_metadata(dir.join(".git")).is_ok())
            .map(Path::to_path_buf)
            .ok_or_else(|| {
                format!(
                    "{} is not inside a git work tree; pass the workspace with -w DIR, or run \
                     `git init` in the project's top directory",
                    pipeline_arg.display()
                )
            })?,
    };
    if !pipeline_dir.starts_with(&workspace) {
        return Err(format!(
            "the pipeline {} is outside the workspace {}; tooling files must be tracked in the \
             workspace, so move the pipeline there or pass its work tree with -w",
            pipeline_arg.display(),
            workspace.display()
        ));
    }
    Ok(workspace)
}

/// The pipeline at `pipeline_file` (canonical, inside `workspace`) and its agent files, read
/// through the workspace view, with its warnings; `shown` is the path as the user gave it.
pub fn load_pipeline(
    workspace: &Path,
    pipeline_file: &Path,
    shown: &Path,
) -> Result<(Pipeline, Vec<String>), RunError> {
    let view = View::open(workspace).map_err(|err| {
        RunError::runtime(format!(
            "cannot open the workspace {}: {err}",
            workspace.display()
        ))
    })?;
    let loaded = tooling::load(&view, workspace, pipeline_file, shown)?;
    Ok((loaded.pipeline, loaded.warnings))
}

/// A batch's tooling (DESIGN §16): the pipeline at `pipeline_file` (canonical) and its agent,
/// context and transcript files, read through a view of the pipeline's directory, each of which
/// must be in that directory or below it (the tasks' clones get that directory, nothing else).
/// Returns the pipeline, its warnings and the snapshot.
pub fn batch_tooling(
    pipeline_file: &Path,
    shown: &Path,
) -> Result<(Pipeline, Vec<String>, ToolingSnapshot), RunError> {
    let dir = pipeline_file.parent().unwrap_or(Path::new("/"));
    let (pipeline, warnings) = load_pipeline(dir, pipeline_file, shown)?;
    let paths = tooling_paths(&pipeline, pipeline_file, dir);
    if !tooling::all_inside(&pipeline, pipeline_file, dir) {
        return Err(RunError::usage(format!(
            "{}: a batch's pipeline takes its agent, context and transcript files from its own \
             directory or below it; move them there (a path with `..` is not carried to the \
             tasks' clones)",
            shown.display()
        )));
    }
    let view = View::open(dir)
        .map_err(|err| RunError::runtime(format!("cannot open {}: {err}", dir.display())))?;
    let snapshot = ToolingSnapshot::read(&view, &paths)?;
    Ok((pipeline, warnings, snapshot))
}

/// What the host's git must never read and must check, from the pipeline's isolation: its
/// `hide` paths (masked in every sandbox) and whether steps can write the git directory.
///
/// No mask is dropped: a `hide` path is held normalised within the view's bounds, so the one
/// path the view refuses is one inside `.git`, which no snapshot reads; anything else refuses
/// the run.
pub fn git_guard(pipeline: &Pipeline) -> Result<cordon_git::Guard, RunError> {
    let mut hidden = Vec::new();
    for path in &pipeline.isolation.hide {
        match WsPath::new(path.as_str()) {
            Ok(path) => hidden.push(path),
            Err(cordon_workspace::PathError::GitDir) => {}
            Err(err) => {
                return Err(RunError::usage(format!(
                    "`hide` path {} cannot be masked on the host ({err}); name it without \
                     empty, `.` or `..` components",
                    cordon_protocol::text::escape_line(path.as_str())
                )));
            }
        }
    }
    Ok(cordon_git::Guard {
        hidden,
        git_writable: pipeline.isolation.allow_git_mutations,
    })
}

/// The workspace's view and repository, guarded for `pipeline`. `scratch`: the run's private
/// directory (`None`: a dry run, which writes nothing).
pub fn open_workspace(
    path: &Path,
    pipeline: &Pipeline,
    scratch: Option<&Path>,
    env: &dyn Fn(&str) -> Option<OsString>,
) -> Result<HostWorkspace, RunError> {
    let not_git = || RunError::from(cordon_git::GitError::NotGit(path.to_path_buf()));
    let dirs = cordon_sandbox::git::discover(path)
        .map_err(|err| RunError::usage(err.to_string()))?
        .ok_or_else(not_git)?;
    let view = View::open(path).map_err(|err| {
        RunError::runtime(format!(
            "cannot open the workspace {}: {err}",
            path.display()
        ))
    })?;
    let dirs = cordon_git::Dirs {
        common_dir: dirs.common_dir.unwrap_or_else(|| dirs.git_dir.clone()),
        git_dir: dirs.git_dir,
    };
    let identity = cordon_git::user_identity(env).unwrap_or_default();
    let repo = cordon_git::Repo::open(&view, dirs, scratch, identity, git_guard(pipeline)?)?;
    Ok(HostWorkspace::new(view, Some(repo)))
}

/// What the host boundary refuses a run for, in order: tooling not committed or changed (the
/// first such file), a dirty worktree when the pipeline commits. A run stops at the first;
/// `run --dry-run` shows them all.
pub fn host_refusals(
    workspace: &HostWorkspace,
    pipeline: &Pipeline,
    tooling: &[WsPath],
) -> Vec<cordon_git::GitError> {
    let Some(git) = workspace.git() else {
        return vec![cordon_git::GitError::NotGit(workspace.path().to_path_buf())];
    };
    let mut refusals = Vec::new();
    if let Err(err) = git.check_tooling(workspace.view(), tooling) {
        refusals.push(err);
    }
    if has_commit(pipeline) {
        match git.dirty_paths(workspace.view(), &mut cordon_git::StatCache::default()) {
            Ok(dirty) if !dirty.is_empty() => {
                let list: Vec<String> = dirty
                    .iter()
                    .map(|p| format!("  {}", cordon_protocol::text::escape_line(p)))
                    .collect();
                refusals.push(cordon_git::GitError::Dirty(list.join("\n")));
            }
            Ok(_) => {}
            Err(err) => refusals.push(err),
        }
    }
    refusals
}

/// What `run --dry-run` warns about: the real run's host checks, run without writing anything.
pub fn dry_run_refusals(
    pipeline: &Pipeline,
    pipeline_file: &Path,
    workspace: &Path,
    env: &dyn Fn(&str) -> Option<OsString>,
) -> Vec<String> {
    let host = match open_workspace(workspace, pipeline, None, env) {
        Ok(host) => host,
        Err(err) => return vec![err.message],
    };
    let pipeline_file = pipeline_file
        .canonicalize()
        .unwrap_or_else(|_| pipeline_file.to_path_buf());
    let tooling = tooling_paths(pipeline, &pipeline_file, workspace);
    host_refusals(&host, pipeline, &tooling)
        .iter()
        .map(|err| error_chain(err))
        .collect()
}

/// The operator's `[env] pass` with the host's values, and the files they name (exposed
/// read-only). Refused when it names a variable the pipeline keeps from the sandbox — its API key
/// variable or a secret's key — since passing it would hand every step what only the host (or
/// the steps that list the secret) may hold.
pub fn passed_env(
    pipeline: &Pipeline,
    policy: &OperatorPolicy,
    env: &dyn Fn(&str) -> Option<OsString>,
) -> Result<cordon_sandbox::environment::Passed, RunError> {
    let mut kept: Vec<(String, String)> = pipeline
        .secrets
        .iter()
        .map(|(name, cordon_pipeline::Secret::Env { key })| {
            (
                key.as_str().to_owned(),
                format!("the key of the secret `{}`", name.as_str()),
            )
        })
        .collect();
    match &pipeline.llm {
        Some(cordon_pipeline::Llm::OpenAi { api_key_env, .. }) => kept.push((
            api_key_env
                .as_ref()
                .map_or("OPENAI_API_KEY", |k| k.as_str())
                .to_owned(),
            "the llm's `api_key_env`".to_owned(),
        )),
        Some(cordon_pipeline::Llm::Anthropic { api_key_env, .. }) => {
            kept.push((
                api_key_env.as_str().to_owned(),
                "the llm's `api_key_env`".to_owned(),
            ));
        }
        Some(cordon_pipeline::Llm::Replay { .. }) | None => {}
    }
    for name in &policy.env_pass {
        if let Some((_, what)) = kept.iter().find(|(key, _)| key == name.as_str()) {
            return Err(RunError::usage(format!(
                "the operator policy's `[env] pass` names `{}`, which is {what}; it is never \
                 passed to every sandbox — remove it from `pass`",
                name.as_str()
            )));
        }
    }
    let names: Vec<&str> = policy.env_pass.iter().map(|n| n.as_str()).collect();
    Ok(cordon_sandbox::environment::passed(&names, env))
}

/// The host toolchains `isolation.toolchains` names, found now: a missing one is exit 2 naming
/// where cordon looked, before anything runs.
pub fn toolchains(
    pipeline: &Pipeline,
    workspace: &Path,
    env: &dyn Fn(&str) -> Option<OsString>,
) -> Result<cordon_sandbox::toolchain::Exposure, RunError> {
    use cordon_sandbox::toolchain::{self, Toolchain};
    let names: Vec<Toolchain> = pipeline
        .isolation
        .toolchains
        .iter()
        .map(|name| {
            Toolchain::parse(name).ok_or_else(|| {
                RunError::usage(format!(
                    "`isolation.toolchains` names `{name}`; use rust, python, node or go"
                ))
            })
        })
        .collect::<Result<_, _>>()?;
    toolchain::expose(&names, env, Some(workspace))
        .map_err(|err| RunError::usage(format!("`isolation.toolchains`: {err}")))
}

/// The caches `isolation.caches` names, opened for the run in the state directory and keyed by
/// the pipeline file; one over `isolation.cache_limit` is emptied now, with a warning.
fn caches(
    pipeline: &Pipeline,
    store: &Store,
    pipeline_file: &Path,
    warnings: &mut Vec<String>,
) -> Result<Option<cordon_sandbox::cache::Opened>, RunError> {
    use cordon_sandbox::cache::{self, Cache, Owner};
    if pipeline.isolation.caches.is_empty() {
        return Ok(None);
    }
    let names: Vec<Cache> = pipeline
        .isolation
        .caches
        .iter()
        .map(|name| {
            Cache::parse(name).ok_or_else(|| {
                RunError::usage(format!(
                    "`isolation.caches` names `{name}`; use {}",
                    cache::NAMES
                ))
            })
        })
        .collect::<Result<_, _>>()?;
    let opened = cache::Store::new(store.dir())
        .open(
            &Owner::Pipeline(pipeline_file.to_path_buf()),
            &names,
            pipeline.isolation.cache_limit_bytes(),
        )
        .map_err(|err| RunError::runtime(format!("`isolation.caches`: {}", error_chain(&err))))?;
    warnings.extend(
        opened
            .emptied
            .iter()
            .map(|e| e.message("isolation.cache_limit")),
    );
    Ok(Some(opened))
}

/// Appends the run's task to every agent step's `prompt` (DESIGN §12: the step's own first).
fn with_run_prompt(pipeline: &mut Pipeline, prompt: Option<&str>) {
    let Some(prompt) = prompt else {
        return;
    };
    for step in &mut pipeline.steps {
        if let StepKind::Agent(agent) = &mut step.kind {
            agent.prompt = Some(match agent.prompt.take() {
                Some(own) => format!("{}\n\n{}", own.trim_end(), prompt.trim_end()),
                None => prompt.trim_end().to_owned(),
            });
        }
    }
}

/// Whether the run commits: a `commit` action, or an outcome that commits its tasks.
fn has_commit(pipeline: &Pipeline) -> bool {
    pipeline
        .steps
        .iter()
        .any(|s| matches!(s.kind, StepKind::Action(Action::Commit { .. })))
        || pipeline
            .outcome
            .as_ref()
            .is_some_and(|o| o.commit != cordon_pipeline::OutcomeCommit::None)
}

/// The outcome a fresh run carries out: `cordon do`'s, which only an outcome pipeline takes
/// (and always needs).
fn outcome_of(
    request: &Request<'_>,
    pipeline: &Pipeline,
    file: &Path,
) -> Result<Option<String>, RunError> {
    let given = request.outcome.clone().filter(|o| !o.trim().is_empty());
    match (&pipeline.outcome, given) {
        (Some(_), Some(outcome)) => Ok(Some(outcome)),
        (Some(_), None) => Err(RunError::usage(format!(
            "{} is an outcome pipeline (`outcome:`); start it with `cordon do \"OUTCOME\" \
             --pipeline {}`",
            file.display(),
            file.display()
        ))),
        (None, Some(_)) => Err(RunError::usage(format!(
            "{} has `steps`, not `outcome`; `cordon do` needs an outcome pipeline (`cordon init \
             --outcome` writes one), or run this one with `cordon run`",
            file.display()
        ))),
        (None, None) => Ok(None),
    }
}

/// The run's private directory in the state dir (the git baseline).
fn scratch_dir(store: &Store, run: RunId) -> PathBuf {
    run_dir(store.dir(), run)
}

fn run_dir(state_dir: &Path, run: RunId) -> PathBuf {
    state_dir.join("runs").join(run.to_string())
}

/// Set by the binary's signal handler when an interrupt (`SIGINT`, `SIGTERM`) is stopping the
/// run: a step's command killed by a signal meanwhile is not judged (see [`stopping_kill`]).
static STOPPING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Marks this process as stopping on an interrupt (the signal handler, before it appends
/// `run.interrupted`).
pub fn note_stopping() {
    STOPPING.store(true, std::sync::atomic::Ordering::SeqCst);
}

/// How long a step's command killed by a signal waits for the interrupt that may have sent it.
const STOPPING_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

/// Whether a command that ended by `SIGTERM`, `SIGINT`, `SIGHUP` or `SIGKILL` (or a shell's
/// 128 + one of them) did so because the whole process is being stopped: a scheduler stopping
/// or requeuing a job (Slurm's `scancel`, `scontrol requeue`) signals every process of the job,
/// the step's commands as well as cordon. Such an end is not the command's verdict; the run is
/// interrupted (the signal handler records it and ends the process). Waits up to 2 s for the
/// handler to have noted the interrupt, since the command's end may be seen first.
pub fn stopping_kill(exit_code: i32) -> bool {
    const SIGNALS: [i32; 4] = [1, 2, 9, 15];
    if !SIGNALS.iter().any(|s| exit_code == 128 + s) {
        return false;
    }
    let deadline = std::time::Instant::now() + STOPPING_GRACE;
    loop {
        if STOPPING.load(std::sync::atomic::Ordering::SeqCst) {
            return true;
        }
        if std::time::Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// How the `error` event a batch run's engine appends when it cannot take a workspace record
/// begins (a resume elsewhere then names it as the reason it cannot rebuild).
pub const CARRY_REFUSED: &str =
    "the workspace could not be recorded for a resume on another machine";

/// Where this machine notes the seq of the last step boundary (`run.started`, `step.finished`)
/// its clone of a batch run reached (DESIGN §16): a clone here whose run's log has a later one
/// was left behind by a machine the run moved away from, and is rebuilt rather than resumed.
pub fn carried_marker(state_dir: &Path, run: RunId) -> PathBuf {
    run_dir(state_dir, run).join("carried")
}

/// Notes that this machine's clone of `run` reached the step boundary `seq` ([`carried_marker`]).
pub fn note_boundary(state_dir: &Path, run: RunId, seq: u64) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt as _;
    let marker = carried_marker(state_dir, run);
    if let Some(dir) = marker.parent() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)?;
    }
    std::fs::write(&marker, seq.to_string())
}

/// Whether this machine's clone of batch run `run` is behind its log (`records`): the run has
/// workspace records and this machine's note of the last step boundary its clone reached
/// ([`carried_marker`]) is missing or not the log's last `run.started`/`step.finished` — the
/// run went on elsewhere, and resuming this clone would drop that work. A run without records
/// (not a batch's steps run) is never behind.
pub fn clone_behind(
    store: &Store,
    run: RunId,
    records: &[Record],
) -> Result<bool, cordon_store::StoreError> {
    use std::io::Read as _;
    if store.workspace_tree(run)?.is_none() {
        return Ok(false);
    }
    let mut noted = String::new();
    let _ = std::fs::File::open(carried_marker(store.dir(), run))
        .and_then(|file| file.take(32).read_to_string(&mut noted));
    Ok(noted.trim().parse::<u64>().ok() != last_boundary(records))
}

/// The seq of the last `run.started` or `step.finished` of `records`.
pub fn last_boundary(records: &[Record]) -> Option<u64> {
    records
        .iter()
        .rev()
        .find(|r| {
            matches!(
                r.event,
                cordon_protocol::Event::StepFinished { .. }
                    | cordon_protocol::Event::RunStarted { .. }
            )
        })
        .map(|r| r.seq)
}

/// Where a run's delivery keeps its scratch repository while it pushes (removed when the push
/// ends, by the signal handler of an interrupted cordon, and at resume after a `kill -9`).
pub fn delivery_scratch(state_dir: &Path, run: RunId) -> PathBuf {
    run_dir(state_dir, run).join("delivery")
}

/// Checks everything a run needs and takes its locks, creating nothing.
pub fn prepare(request: &Request<'_>) -> Result<Prepared, RunError> {
    match &request.start {
        Start::Fresh {
            pipeline,
            workspace,
        } => fresh(request, pipeline, workspace.as_deref()),
        Start::Resume { run, pipeline } => resume(request, run.as_deref(), pipeline.as_deref()),
    }
}

fn fresh(
    request: &Request<'_>,
    pipeline_arg: &Path,
    workspace_flag: Option<&Path>,
) -> Result<Prepared, RunError> {
    let pipeline_file = std::path::absolute(pipeline_arg)
        .and_then(|p| p.canonicalize())
        .map_err(|e| RunError::usage(format!("cannot resolve {}: {e}", pipeline_arg.display())))?;
    let workspace_path =
        locate_workspace(workspace_flag, pipeline_arg, &pipeline_file).map_err(RunError::usage)?;
    // The pipeline and its agent files are read through the workspace view, like every later
    // read of the tooling.
    let view = View::open(&workspace_path).map_err(|err| {
        RunError::runtime(format!(
            "cannot open the workspace {}: {err}",
            workspace_path.display()
        ))
    })?;
    let first = tooling::load(&view, &workspace_path, &pipeline_file, pipeline_arg)?;
    let prompt = request.prompt.clone().filter(|p| !p.trim().is_empty());
    let outcome = outcome_of(request, &first.pipeline, pipeline_arg)?;
    crate::preflight(&first.pipeline)?;
    refuse_missing_layers()?;
    request
        .state_dir
        .refuse_inside(&workspace_path)
        .map_err(RunError::from)?;
    let operator = (request.operator)(&workspace_path).map_err(RunError::usage)?;
    let secrets = Secrets::resolve(&first.pipeline, &|key| {
        (request.env)(key).and_then(|v| v.into_string().ok())
    })
    .map_err(|e| RunError::from(EngineError::from(e)))?;
    // The lane's key is read now, host-side: a missing one is exit 2 before anything runs.
    let lane = crate::lane::lane_config(&first.pipeline, request.env)?;
    let toolchains = toolchains(&first.pipeline, &workspace_path, request.env)?;
    let mut passed = passed_env(&first.pipeline, &operator.policy, request.env)?;
    passed.0.extend(var_env(&request.vars));
    let images = run_images(&first.pipeline, request.state_dir, &operator.policy, &[])?;
    let store = Store::open(request.state_dir)?;
    let mut warnings = first.warnings;
    let caches = caches(&first.pipeline, &store, &pipeline_file, &mut warnings)?;
    let run = cordon_store::new_run_id()?;
    let workspace = open_workspace(
        &workspace_path,
        &first.pipeline,
        Some(&scratch_dir(&store, run)),
        request.env,
    )?;
    // Host boundary at start: tooling committed and unmodified; a clean worktree for a commit.
    let tooling = tooling_paths(&first.pipeline, &pipeline_file, &workspace_path);
    if let Some(refusal) = host_refusals(&workspace, &first.pipeline, &tooling)
        .into_iter()
        .next()
    {
        return Err(refusal.into());
    }
    let run_lock = store.lock_run(run)?;
    let workspace_lock = lock_workspace(&store, &workspace_path)?;
    // Everything from here on reads the tooling from its snapshot, never the workspace again.
    let snapshot = ToolingSnapshot::read(workspace.view(), &tooling)?;
    let loaded = snapshot.pipeline(&pipeline_file, &workspace_path)?;
    let mut pipeline = loaded.pipeline;
    with_run_prompt(&mut pipeline, prompt.as_deref());
    let (documents, plan) = given_documents(request, &workspace, &tooling)?;
    let agents = agent_driver(
        request,
        &pipeline,
        &pipeline_file,
        &workspace_path,
        &snapshot,
        &operator,
        &documents,
    )?;
    let max_attempts = request.max_attempts.unwrap_or(pipeline.max_attempts).get();
    let row = RunRow {
        id: run,
        pipeline: pipeline.name.clone(),
        pipeline_file,
        workspace: workspace_path,
        started: Timestamp(run.unix_millis()),
        snapshot: None,
    };
    Ok(Prepared::Ready(Box::new(Ready {
        run,
        warnings,
        pipeline,
        store,
        workspace,
        secrets,
        tooling,
        agents,
        operator,
        lane,
        toolchains,
        passed,
        images,
        caches,
        prompt,
        documents,
        context: Vec::new(),
        plan,
        outcome,
        budget: request.budget,
        begin: Begin::Fresh(max_attempts),
        row: Some((row, snapshot)),
        refresh: request.refresh,
        _workspace_lock: workspace_lock,
        _run_lock: run_lock,
    })))
}

fn lock_workspace(store: &Store, workspace: &Path) -> Result<Lock, RunError> {
    store.lock_workspace(workspace)?.ok_or_else(|| {
        RunError::usage(format!(
            "the workspace {} is held by a live run; wait for it to finish or stop it",
            workspace.display()
        ))
    })
}

fn resume(
    request: &Request<'_>,
    which: Option<&str>,
    given: Option<&Path>,
) -> Result<Prepared, RunError> {
    let store = Store::open(request.state_dir)?;
    let run = match which {
        Some(text) => store.find_run(text)?,
        None => store
            .last_run()?
            .ok_or_else(|| RunError::usage("no run to resume"))?,
    };
    let row = store
        .run(run)?
        .ok_or_else(|| RunError::usage(format!("no run matches `{run}`")))?;
    if let Some(given) = given {
        let given = given.canonicalize().unwrap_or_else(|_| given.to_path_buf());
        if given != row.pipeline_file {
            return Err(RunError::usage(format!(
                "run {run} belongs to {}, not {}; resume it with its own pipeline or without PIPELINE",
                row.pipeline_file.display(),
                given.display()
            )));
        }
    }
    let snapshot = ToolingSnapshot::stored(&store, &row)?;
    let mut pipeline = snapshot
        .pipeline(&row.pipeline_file, &row.workspace)
        .map_err(|mut err| {
            err.class = ErrorClass::Runtime;
            err.message = format!(
                "the stored pipeline of run {} no longer loads:\n{}",
                row.id,
                err.details.join("\n")
            );
            err.details.clear();
            err
        })?
        .pipeline;
    let records = store.events(run)?;
    let state = RunState::replay(&records);
    // A run killed between its creation and `run.started` has no events: it starts afresh.
    let fresh = records.is_empty();
    // An outcome run keeps its outcome; one that never started takes the one given now.
    let outcome = if fresh {
        outcome_of(request, &pipeline, &row.pipeline_file)?
    } else {
        crate::outcome::TaskFold::replay(&records).outcome
    };
    // The task is the run's own: the one `run.started` recorded (or, for a run that never
    // started, the one given now).
    let given = request.prompt.clone().filter(|p| !p.trim().is_empty());
    let prompt = if fresh {
        given
    } else {
        if given.is_some() && given != state.prompt {
            return Err(RunError::usage(format!(
                "run {run} keeps the task it started with; resume it without --prompt / \
                 --prompt-file (see its `run.started` event for the task)"
            )));
        }
        state.prompt.clone()
    };
    if !fresh && (!request.context.is_empty() || request.plan.is_some()) {
        return Err(RunError::usage(format!(
            "run {run} keeps the documents it started with; resume it without --context and \
             --plan (its `run.started` event lists them)"
        )));
    }
    with_run_prompt(&mut pipeline, prompt.as_deref());
    let budget = if fresh {
        pipeline.max_attempts.get()
    } else {
        state.max_attempts
    };
    let max_attempts = request.max_attempts.map_or(budget, NonZeroU32::get);
    if let Some(outcome) = state.outcome {
        let continues = state.exhausted.is_some() && max_attempts > state.attempt.get();
        if !continues {
            return Ok(Prepared::Finished { run, outcome });
        }
    }
    refuse_missing_layers()?;
    // A batch's run that went on on another machine is not resumed on the clone left here:
    // `cordon batch resume` rebuilds it from the run's record first.
    if let Some((batch, _)) = store.task_of_run(run)?
        && clone_behind(&store, run, &records)?
    {
        return Err(RunError::usage(format!(
            "run {run} went on on another machine after its workspace here was last used; \
             resume it with `cordon batch resume {batch}`, which rebuilds the workspace from \
             the run's record in the store"
        )));
    }
    let run_lock = store.lock_run(run)?;
    let workspace_lock = lock_workspace(&store, &row.workspace)?;
    // A push cut short by `kill -9` left its scratch repository (the run is held now, so no
    // delivery of it is under way): it goes before anything else.
    let _ = std::fs::remove_dir_all(delivery_scratch(store.dir(), run));
    let operator = (request.operator)(&row.workspace).map_err(RunError::usage)?;
    let secrets = Secrets::resolve(&pipeline, &|key| {
        (request.env)(key).and_then(|v| v.into_string().ok())
    })
    .map_err(|e| RunError::from(EngineError::from(e)))?;
    let lane = crate::lane::lane_config(&pipeline, request.env)?;
    let toolchains = toolchains(&pipeline, &row.workspace, request.env)?;
    let mut passed = passed_env(&pipeline, &operator.policy, request.env)?;
    // A batch's run keeps its task's `vars` (the events do not carry them).
    if let Some((_, task)) = store.task_of_run(run)? {
        passed.0.extend(var_env(&task.vars));
    }
    let images = run_images(&pipeline, request.state_dir, &operator.policy, &records)?;
    let workspace = open_workspace(
        &row.workspace,
        &pipeline,
        Some(&scratch_dir(&store, run)),
        request.env,
    )?;
    let tooling = tooling_paths(&pipeline, &row.pipeline_file, &row.workspace);
    let mut warnings = Vec::new();
    let caches = caches(&pipeline, &store, &row.pipeline_file, &mut warnings)?;
    let (documents, plan) = if fresh {
        given_documents(request, &workspace, &tooling)?
    } else {
        stored_documents(&store, run, &state.context)?
    };
    let agents = agent_driver(
        request,
        &pipeline,
        &row.pipeline_file,
        &row.workspace,
        &snapshot,
        &operator,
        &documents,
    )?;
    Ok(Prepared::Ready(Box::new(Ready {
        run,
        warnings,
        pipeline,
        store,
        workspace,
        secrets,
        tooling,
        agents,
        operator,
        lane,
        toolchains,
        passed,
        images,
        caches,
        prompt,
        context: if fresh {
            Vec::new()
        } else {
            state.context.clone()
        },
        documents,
        plan,
        outcome,
        budget: request.budget,
        begin: if fresh {
            Begin::Fresh(max_attempts)
        } else {
            Begin::Resume(max_attempts)
        },
        row: None,
        refresh: request.refresh,
        _workspace_lock: workspace_lock,
        _run_lock: run_lock,
    })))
}

/// The run's agent driver (`None` without agent steps): its provider, its files from the tooling
/// snapshot, grants bounded by the operator, and the `--record` file.
fn agent_driver(
    request: &Request<'_>,
    pipeline: &Pipeline,
    pipeline_file: &Path,
    workspace: &Path,
    snapshot: &ToolingSnapshot,
    operator: &Operator,
    documents: &[Document],
) -> Result<Option<LoopDriver>, RunError> {
    let base = pipeline_file
        .parent()
        .and_then(|p| p.strip_prefix(workspace).ok())
        .unwrap_or(Path::new(""))
        .to_path_buf();
    let lookup = |rel: &cordon_pipeline::RelPath| {
        snapshot.text(&base.join(rel.as_path())).map(str::to_owned)
    };
    // A resumed run adds to its recording; a fresh run starts a new one.
    let resuming = matches!(request.start, Start::Resume { .. });
    let record: Option<Box<dyn std::io::Write + Send>> = match &request.record {
        Some(path) => Some(Box::new(
            std::fs::OpenOptions::new()
                .create(true)
                .write(true)
                .append(resuming)
                .truncate(!resuming)
                .open(path)
                .map_err(|e| {
                    RunError::usage(format!(
                        "cannot open {} for --record: {e}; pass a writable file path",
                        path.display()
                    ))
                })?,
        )),
        None => None,
    };
    let mut driver = LoopDriver::prepare(pipeline, &lookup, request.env, record)
        .map_err(|e| RunError::from(EngineError::Agent(e)))?;
    if let Some(driver) = driver.as_mut() {
        driver.set_grants(Box::new(OperatorGrants::new(&operator.policy)));
        driver.add_documents(documents.iter().map(|d| cordon_agent::ContextFile {
            path: d.path.clone(),
            text: d.text.clone(),
        }));
    }
    Ok(driver)
}

impl Ready {
    /// Whether this continues a run that had begun.
    pub fn resumed(&self) -> bool {
        matches!(self.begin, Begin::Resume(_))
    }

    /// The store the run is in.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Records a fresh run (with its tooling snapshot); nothing for a resumed one. Call once the
    /// caller is ready to drive (its page bound), so a failure before leaves no run behind.
    pub fn create(&mut self) -> Result<(), RunError> {
        let Some((mut row, snapshot)) = self.row.take() else {
            return Ok(());
        };
        let blob = self.store.put_blob(self.run, &snapshot.encode())?;
        row.snapshot = Some(blob);
        for document in &self.documents {
            let blob = self.store.put_blob(self.run, document.text.as_bytes())?;
            self.context.push(cordon_protocol::event::ContextDocument {
                path: document.path.clone(),
                blob,
                plan: document.plan,
            });
        }
        self.store.create_run(&row)?;
        Ok(())
    }

    /// Runs the run until it finishes or `observer` stops it.
    pub fn drive(
        &mut self,
        drive: Drive<'_>,
        observer: &mut dyn Observer,
    ) -> Result<Ending, RunError> {
        let sandbox_workspace = cordon_sandbox::Workspace::open(self.workspace.path())
            .map_err(|e| RunError::runtime(error_chain(&e)))?;
        let init = cordon_sandbox::InitProgram::current_exe()
            .map_err(|e| RunError::runtime(error_chain(&e)))?;
        // Usage so far (a resumed run's earlier processes included) against the limits of
        // this process.
        let records = self.store.events(self.run)?;
        let meter = crate::budget::Meter::new(
            crate::budget::Limits::of(&self.pipeline, &self.budget),
            self.pipeline.pricing,
            &records,
        );
        drop(records);
        let mut mask = vec![self.store.dir().to_path_buf()];
        mask.extend(self.operator.path.clone());
        let mut executor = SandboxExecutor::new(sandbox_workspace, init, mask)
            .with_toolchains(self.toolchains.clone())
            .with_caches(self.caches.clone())
            .with_passed(self.passed.clone())
            .with_private_git(self.store.dir().to_path_buf());
        if needs_egress(&self.pipeline) || self.lane.is_some() {
            // The shared store is cordon's own, like its listeners: refused as `self`.
            let mut listening = drive.listening;
            listening.extend(self.store.addresses());
            let mut egress =
                Egress::new(self.run, &self.operator.policy, listening).map_err(|e| {
                    RunError::runtime(format!("cannot start the egress proxy's runtime: {e}"))
                })?;
            if let Some(config) = self.lane.take() {
                egress = egress
                    .with_lane(config)
                    .map_err(|e| RunError::usage(error_chain(&e)))?;
            }
            executor = executor.with_egress(Arc::new(egress.with_meter(meter.clone())));
        }
        let limits = self.operator.policy.limits;
        let cx = RunContext {
            store: &self.store,
            run: self.run,
            pipeline: &self.pipeline,
            workspace: &self.workspace,
            executor: &mut executor,
            secrets: &self.secrets,
            refresh: self.refresh,
            tooling: self.tooling.clone(),
            agents: self.agents.as_mut().map(|d| d as &mut dyn AgentDriver),
            meter,
            images: self.images.clone(),
            plan: self.plan.clone(),
        };
        let mut engine = Engine::new(cx, observer)?;
        // A batch's run may be resumed on another machine: its workspace is recorded at every
        // step's end (an outcome run's worktrees stay on this machine, and are not).
        if self.pipeline.outcome.is_none() && self.store.task_of_run(self.run)?.is_some() {
            engine.record_workspace_for_resume()?;
        }
        engine.set_resource_guard(ResourceGuard::new(Limits {
            disk: DiskLimits {
                warn: limits.disk_warn,
                abort: limits.disk_abort,
            },
            mem_warn: limits.mem_warn,
        }));
        let policy = &self.operator.policy;
        engine.set_delivery(crate::Delivery {
            destinations: crate::deliver::Destinations::new(
                &policy.delivery.allow,
                &policy.delivery.allow_insecure,
                &policy.deny,
                &policy.allow_private,
                &policy.resolve,
            ),
            scratch: Some(delivery_scratch(self.store.dir(), self.run)),
            limits: crate::engine::DeliveryLimits::from(&policy.delivery),
        });
        match self.begin {
            Begin::Fresh(max) => engine.start_run(
                max,
                self.prompt.clone(),
                self.outcome.clone(),
                self.context.clone(),
            ),
            Begin::Resume(max) => engine.resume(max),
        }?;
        let kept = match (self.begin, self.workspace.git()) {
            (Begin::Resume(_), Some(git)) => git
                .status_short(self.workspace.view(), &mut cordon_git::StatCache::default())
                .unwrap_or_else(|err| {
                    let err = crate::error_chain(&err);
                    format!(
                        "(cannot list them: {})\n",
                        cordon_protocol::text::escape_line(&err)
                    )
                }),
            _ => String::new(),
        };
        (drive.started)(self.run, &kept);
        Ok(engine.drive()?)
    }

    /// The records of the run so far (a resumed run's progress view catches up on them).
    pub fn records(&self) -> Result<Vec<Record>, RunError> {
        Ok(self.store.events(self.run)?)
    }
}

/// Whether any step or setup hook has a network, and so needs the egress proxy.
fn needs_egress(pipeline: &Pipeline) -> bool {
    let networked =
        |network: &cordon_pipeline::Network| !matches!(network, cordon_pipeline::Network::None);
    pipeline.sandboxed().into_iter().any(|sandbox| {
        networked(&sandbox.network)
            || sandbox
                .setup
                .as_ref()
                .is_some_and(|setup| networked(&setup.network))
    })
}

/// The run's environment images resolved through the state directory's image store: a missing
/// image, or a directory the operator policy does not list, is exit 2 before anything runs.
fn run_images(
    pipeline: &Pipeline,
    state_dir: &StateDir,
    policy: &OperatorPolicy,
    log: &[Record],
) -> Result<crate::images::RunImages, RunError> {
    let images = cordon_image::Images::at(state_dir.path());
    crate::images::RunImages::resolve(pipeline, &images, &policy.image_paths, log)
        .map_err(|e| RunError::usage(error_chain(&e)))
}

/// A fresh run's documents: `--context` as read by the caller, then the plan (`--plan`) read
/// from the workspace, with the plan's workspace path.
fn given_documents(
    request: &Request<'_>,
    workspace: &HostWorkspace,
    tooling: &[WsPath],
) -> Result<(Vec<Document>, Option<WsPath>), RunError> {
    let mut documents = request.context.clone();
    let plan = match &request.plan {
        Some(given) => {
            let (path, document) = plan_document(given, workspace, tooling)?;
            documents.push(document);
            Some(path)
        }
        None => None,
    };
    if documents.len() > MAX_DOCUMENTS {
        return Err(RunError::usage(format!(
            "a run takes at most {MAX_DOCUMENTS} documents (--context and --plan together), \
             {} were given; join some of them into one file",
            documents.len()
        )));
    }
    Ok((documents, plan))
}

/// The documents `run.started{context}` recorded, read back from their blobs, with the plan's
/// workspace path.
fn stored_documents(
    store: &Store,
    run: RunId,
    context: &[cordon_protocol::event::ContextDocument],
) -> Result<(Vec<Document>, Option<WsPath>), RunError> {
    let mut plan = None;
    let documents = context
        .iter()
        .map(|document| {
            let shown = cordon_protocol::text::escape_line(&document.path);
            let bytes = store.blob(document.blob)?.ok_or_else(|| {
                RunError::runtime(format!(
                    "run {run} lost the blob of its document {shown}; it cannot be resumed"
                ))
            })?;
            if document.plan {
                plan = Some(WsPath::new(&document.path).map_err(|err| {
                    RunError::runtime(format!(
                        "run {run} recorded an unusable plan path {shown}: {err}"
                    ))
                })?);
            }
            Ok(Document {
                path: document.path.clone(),
                text: String::from_utf8_lossy(&bytes).into_owned(),
                plan: document.plan,
            })
        })
        .collect::<Result<Vec<_>, RunError>>()?;
    Ok((documents, plan))
}

/// The plan of `--plan FILE`: a regular file inside the workspace, tracked and unmodified (its
/// mark is committed with the run's work), not one of the run's tooling files; read through the
/// workspace view, bounded.
fn plan_document(
    given: &Path,
    workspace: &HostWorkspace,
    tooling: &[WsPath],
) -> Result<(WsPath, Document), RunError> {
    let shown = cordon_protocol::text::escape_line(&given.display().to_string()).into_owned();
    let fail = |what: String| RunError::usage(format!("--plan {shown}: {what}"));
    let absolute = std::path::absolute(given).map_err(|err| fail(err.to_string()))?;
    let Ok(relative) = absolute.strip_prefix(workspace.path()) else {
        return Err(fail(format!(
            "is not inside the workspace {}; the plan is a file of the work tree (it is marked \
             done and committed), so give one there or use --context for a file elsewhere",
            workspace.path().display()
        )));
    };
    let path = WsPath::from_bytes(relative.as_os_str().as_encoded_bytes())
        .map_err(|err| fail(err.to_string()))?;
    if tooling.contains(&path) {
        return Err(fail(
            "is one of the run's tooling files (the pipeline, an agent file or a context file), \
             which the run never changes; give the plan a file of its own"
                .to_owned(),
        ));
    }
    if let Some(git) = workspace.git() {
        git.check_tooling(workspace.view(), std::slice::from_ref(&path))
            .map_err(|err| {
                fail(match err {
                    cordon_git::GitError::Untracked(_) => format!(
                        "is not tracked by git; commit it first (`git add {shown} && git commit`)"
                    ),
                    cordon_git::GitError::Modified(_) => {
                        "has uncommitted changes; commit or restore it before `cordon run`"
                            .to_owned()
                    }
                    cordon_git::GitError::ToolingNotAFile { kind, .. } => {
                        format!("is {kind} in the work tree, not a regular file")
                    }
                    other => error_chain(&other),
                })
            })?;
    }
    let read = workspace
        .view()
        .read(&path, MAX_DOCUMENT + 1)
        .map_err(|err| fail(err.to_string()))?
        .ok_or_else(|| fail("does not exist".to_owned()))?;
    if read.bytes.len() > MAX_DOCUMENT || read.omitted() > 0 {
        return Err(fail(format!("is larger than {} KiB", MAX_DOCUMENT >> 10)));
    }
    let text = String::from_utf8(read.bytes).map_err(|_| fail("is not UTF-8 text".to_owned()))?;
    let document = Document {
        path: path.to_string_lossy(),
        text,
        plan: true,
    };
    Ok((path, document))
}
