//! The seam between the engine and the sandbox: open a session for a step attempt (or a setup
//! hook) with its egress proxy when it has a network, run commands in it with streamed output,
//! collect the proxy's audit events, close it. [`sandbox::SandboxExecutor`] is the
//! real implementation over `cordon-sandbox`; tests use a scripted fake.

pub mod sandbox;

use std::path::PathBuf;
use std::time::Duration;

use cordon_protocol::event::OutputStream;
use cordon_protocol::{Attempt, StepName};

/// What a session is opened for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Purpose {
    Step,
    Setup,
}

/// One session's settings, resolved by the engine from the pipeline.
#[derive(Clone, Debug)]
pub struct SessionSpec {
    pub step: StepName,
    pub attempt: Attempt,
    pub purpose: Purpose,
    /// The session's network (logged in words): anything but `none` gets its egress proxy.
    pub network: cordon_pipeline::Network,
    /// The run's grants (`policy.grant` patterns) when the network takes them, else empty.
    pub grants: Vec<String>,
    /// The session gets the model lane on `127.0.0.1:3129` (a command step with
    /// `model_lane: true`; never its setup hook).
    pub model_lane: bool,
    /// The session gets a host-side listener of its egress proxy, under the same policy, for
    /// the step's streamable-HTTP MCP servers, which cordon dials on the host (DESIGN §18).
    pub host_proxy: bool,
    /// Declared variables and injected secrets.
    pub env: Vec<(String, String)>,
    pub timeout: Option<Duration>,
    /// Workspace-relative paths masked inside the sandbox (`isolation.hide`, root `.env*`).
    pub hide: Vec<PathBuf>,
    /// Extra host paths mounted read-only.
    pub read_only: Vec<PathBuf>,
    /// Workspace-relative paths kept read-only inside the sandbox: the run's tooling files
    /// (DESIGN §3), so no step can change what a later check or resume reads.
    pub protect: Vec<PathBuf>,
    pub tmp_size: Option<u64>,
    /// `isolation.memory`, `pids` and `cpus`: enforced through a cgroup, or the session is
    /// refused.
    pub caps: cordon_sandbox::cgroup::Caps,
    pub allow_git_mutations: bool,
    /// The workspace is read-only in this session (an outcome run's scrutinize).
    pub workspace_read_only: bool,
    /// The environment image the session's root is; `Err` names a reference the run did not
    /// resolve (the session then fails to open rather than run on the host's directories).
    pub image: Option<Result<crate::images::SessionImage, String>>,
}

/// How a command ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CommandResult {
    /// With Appendix A's conventions: 124 timeout, 126/127, 128+N.
    pub exit_code: i32,
    pub timed_out: bool,
    /// The watch stopped it (its tree was killed): the disk was exhausted.
    pub stopped: bool,
    pub duration: Duration,
}

/// What a session measures on its own for the guardrails: its memory against its cap (only
/// with a memory cap) and how full its tmpfs is; `None` for what it cannot measure.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Gauges {
    pub memory: Option<Memory>,
    /// Percent used of the session's `/tmp`.
    pub tmp_percent: Option<u8>,
}

/// A session's memory use against its cap, in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Memory {
    pub used: u64,
    pub cap: u64,
}

impl Memory {
    pub(crate) fn percent(self) -> u64 {
        if self.cap == 0 {
            return 0;
        }
        u64::try_from((u128::from(self.used) * 100) / u128::from(self.cap)).unwrap_or(u64::MAX)
    }
}

/// A periodic callback while a command runs ([`StepSession::run_watched`]): called every
/// `every` with the session's gauges; [`Tick::Stop`] kills the command's tree.
pub struct Watch<'w> {
    pub every: Duration,
    pub tick: &'w mut dyn FnMut(&Gauges) -> Tick,
}

/// What a watch answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tick {
    Continue,
    Stop,
}

/// Why a session could not be opened or a command not run.
#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    /// A required sandbox layer is missing (exit 3).
    #[error("{0}")]
    Refused(cordon_protocol::Refusal),
    #[error("{0}")]
    Failed(String),
}

/// Opens sessions.
pub trait Executor {
    fn open(&mut self, spec: &SessionSpec) -> Result<Box<dyn StepSession>, ExecError>;

    /// The same executor opening its sessions on `workspace` instead — an outcome run's parallel
    /// task's worktree, a linked worktree cordon made whose common git directory is `common` —
    /// for another thread. Executors that cannot refuse.
    fn fork(
        &self,
        workspace: &std::path::Path,
        common: &std::path::Path,
    ) -> Result<Box<dyn Executor + Send>, ExecError> {
        let _ = common;
        Err(ExecError::Failed(format!(
            "this executor cannot open sessions in a task's worktree ({}); run with `parallel: 1`",
            workspace.display()
        )))
    }
}

/// A live session.
pub trait StepSession {
    /// Runs `argv` (with the session's env and timeout), passing output chunks as they arrive.
    fn run(
        &mut self,
        argv: &[String],
        on_output: &mut dyn FnMut(OutputStream, &[u8]),
    ) -> Result<CommandResult, ExecError>;
    /// [`StepSession::run`] with `watch` called while the command runs. Sessions that cannot
    /// measure anything (test fakes) may ignore it: the default does.
    fn run_watched(
        &mut self,
        argv: &[String],
        watch: Watch<'_>,
        on_output: &mut dyn FnMut(OutputStream, &[u8]),
    ) -> Result<CommandResult, ExecError> {
        let _ = watch;
        self.run(argv, on_output)
    }
    /// The session's gauges now (taken once more after a step's last command).
    fn gauges(&self) -> Gauges {
        Gauges::default()
    }
    /// Events the session produces on its own (the egress proxy's audit records), for the
    /// engine to append; `None` when it produces none.
    fn side_events(&self) -> Option<crate::side::SideEvents> {
        None
    }
    /// Starts `argv`, with `env` added to the session's environment, in the background of the
    /// session (an MCP server, DESIGN §17): workload like any command, its standard streams
    /// piped to the host. It lives until it exits or the session closes. Sessions that cannot
    /// (test fakes) say so.
    fn spawn_background(
        &mut self,
        argv: &[String],
        env: &[(String, String)],
    ) -> Result<Background, ExecError> {
        let _ = (argv, env);
        Err(ExecError::Failed(
            "this session cannot start background processes".to_owned(),
        ))
    }
    /// The host-side listener of the session's egress proxy ([`SessionSpec::host_proxy`]), when
    /// it has one.
    fn host_proxy(&self) -> Option<HostProxy> {
        None
    }
    /// Ends the session and everything in it.
    fn close(self: Box<Self>);
}

/// A session's host-side proxy listener: where it listens on the host's loopback, and the
/// `Proxy-Authorization` value it takes (random per session; it never leaves this process).
#[derive(Clone, Debug)]
pub struct HostProxy {
    pub addr: std::net::SocketAddr,
    pub credential: String,
}

/// The host's ends of a background process's standard streams
/// ([`StepSession::spawn_background`]).
#[derive(Debug)]
pub struct Background {
    pub stdin: std::os::fd::OwnedFd,
    pub stdout: std::os::fd::OwnedFd,
    pub stderr: std::os::fd::OwnedFd,
}
