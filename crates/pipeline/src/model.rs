//! The validated pipeline: what the engine consumes. Every value here has passed every rule of
//! DESIGN §3, implicit routes are filled in and inherited settings are resolved per step.

use std::collections::BTreeMap;
use std::num::{NonZeroU32, NonZeroU64};

pub use cordon_protocol::StepName;

use crate::{Agent, AgentName, EnvName, Isolation, Llm, Network, RelPath, Secret, SecretName};

/// The attempt budget when `max_attempts` is not given.
pub const DEFAULT_MAX_ATTEMPTS: u32 = 3;
/// The model-call budget of an agent step when neither the step nor its agent file sets one.
pub const DEFAULT_MAX_ITERATIONS: u32 = 40;
/// `agents_dir` when not given.
pub const DEFAULT_AGENTS_DIR: &str = "agents";

#[derive(Clone, Debug, PartialEq)]
pub struct Pipeline {
    pub name: String,
    pub llm: Option<Llm>,
    /// Relative to the pipeline file's directory.
    pub agents_dir: RelPath,
    /// Relative to the pipeline file's directory.
    pub context_files: Vec<RelPath>,
    pub max_attempts: NonZeroU32,
    pub isolation: Isolation,
    /// The pipeline-level default; each step's `network` below is already resolved.
    pub network: Network,
    pub secrets: BTreeMap<SecretName, Secret>,
    pub steps: Vec<Step>,
    /// Every agent file a step refers to, by name.
    pub agents: BTreeMap<AgentName, Agent>,
    /// The run's limits (`budget`); all unset when not given.
    pub budget: Budget,
    /// `llm.pricing`: what the model costs, for cost and `budget.cost_usd`.
    pub pricing: Option<Pricing>,
    /// `outcome:` instead of `steps:` (DESIGN §13): `steps` is then empty.
    pub outcome: Option<OutcomeSpec>,
    /// `report:` (DESIGN §15): the issue the run comments on.
    pub report: Option<crate::Report>,
}

/// `max_tasks` when not given.
pub const DEFAULT_MAX_TASKS: u32 = 20;
/// `max_revisions` when not given.
pub const DEFAULT_MAX_REVISIONS: u32 = 2;
/// `max_replans` when not given.
pub const DEFAULT_MAX_REPLANS: u32 = 1;

/// An outcome pipeline (DESIGN §13): the agents of the five phases, the commands every task must
/// pass, and the bounds. Each phase is a resolved agent step (`prompt` is appended after the
/// task message cordon writes for the phase).
#[derive(Clone, Debug, PartialEq)]
pub struct OutcomeSpec {
    pub decompose: AgentStep,
    pub plan: AgentStep,
    pub execute: AgentStep,
    pub scrutinize: AgentStep,
    pub validate: AgentStep,
    /// Commands every task's verify runs first, in order.
    pub verify: Vec<CommandStep>,
    pub max_tasks: u32,
    /// Returns to `execute` a task may make (from verify or validate).
    pub max_revisions: u32,
    /// Returns to `plan` a task may make (from validate).
    pub max_replans: u32,
    /// Independent ready tasks at once.
    pub parallel: NonZeroU32,
    pub commit: OutcomeCommit,
    /// `deliver:` (DESIGN §15): once every task is done and committed, the run's commits are
    /// pushed and the pull request found or opened, as a steps pipeline's `deliver` action does.
    pub deliver: Option<Box<crate::Deliver>>,
}

impl OutcomeSpec {
    /// The phase agent steps with their phase names, in the order a task meets them
    /// (`decompose` first).
    pub fn phases(&self) -> [(&'static str, &AgentStep); 5] {
        [
            ("decompose", &self.decompose),
            ("plan", &self.plan),
            ("execute", &self.execute),
            ("scrutinize", &self.scrutinize),
            ("validate", &self.validate),
        ]
    }

    /// The agent step of a phase name.
    pub fn phase(&self, name: &str) -> Option<&AgentStep> {
        self.phases()
            .into_iter()
            .find_map(|(phase, step)| (phase == name).then_some(step))
    }
}

/// `commit:` of an outcome pipeline.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutcomeCommit {
    /// One commit per accepted task: `<task id>: <title>`.
    PerTask,
    /// One commit when the run succeeds.
    End,
    /// The worktree is left as it is.
    None,
}

impl OutcomeCommit {
    pub const NAMES: &'static [&'static str] = &["per_task", "end", "none"];

    pub fn as_str(self) -> &'static str {
        match self {
            OutcomeCommit::PerTask => "per_task",
            OutcomeCommit::End => "end",
            OutcomeCommit::None => "none",
        }
    }
}

/// `budget: {tokens, cost_usd, wall_clock}` (DESIGN §12): each limit bounds the whole run.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Budget {
    /// Input + output tokens of every model call.
    pub tokens: Option<NonZeroU64>,
    /// US dollars, at `llm.pricing`.
    pub cost_usd: Option<f64>,
    /// Time during which a cordon process held the run, whole seconds.
    pub wall_clock: Option<NonZeroU64>,
}

/// `llm.pricing: {input, output}`: US dollars per million tokens.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Pricing {
    pub input: f64,
    pub output: f64,
}

impl Pricing {
    /// What `input` and `output` tokens cost, in US dollars.
    pub fn cost(&self, input: u64, output: u64) -> f64 {
        (input as f64 * self.input + output as f64 * self.output) / 1_000_000.0
    }
}

impl Pipeline {
    pub fn step(&self, name: &StepName) -> Option<&Step> {
        self.steps.iter().find(|s| &s.name == name)
    }

    /// Every agent step the pipeline can run: its agent steps, or an outcome's phases.
    pub fn agent_steps(&self) -> Vec<&AgentStep> {
        let mut all: Vec<&AgentStep> = self
            .steps
            .iter()
            .filter_map(|s| match &s.kind {
                StepKind::Agent(agent) => Some(agent),
                StepKind::Command(_) | StepKind::Action(_) => None,
            })
            .collect();
        if let Some(outcome) = &self.outcome {
            all.extend(outcome.phases().into_iter().map(|(_, step)| step));
        }
        all
    }

    /// The sandbox settings of everything the pipeline can run in a sandbox: its steps, or an
    /// outcome's phases and verify commands.
    pub fn sandboxed(&self) -> Vec<&Sandboxed> {
        let mut all: Vec<&Sandboxed> = self.steps.iter().filter_map(|s| s.kind.sandbox()).collect();
        if let Some(outcome) = &self.outcome {
            all.extend(outcome.phases().into_iter().map(|(_, step)| &step.sandbox));
            all.extend(outcome.verify.iter().map(|c| &c.sandbox));
        }
        all
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Step {
    pub name: StepName,
    pub kind: StepKind,
    /// Where a pass goes; an omitted `on_pass` is already the next step (or `success`).
    pub on_pass: Route,
    /// Where a fail goes; an omitted `on_fail` is already `failure`.
    pub on_fail: Route,
    /// Where an `unverifiable` verdict goes; an omitted `on_unverifiable` is already the
    /// `on_fail` route.
    pub on_unverifiable: Route,
}

#[derive(Clone, Debug, PartialEq)]
pub enum StepKind {
    Agent(AgentStep),
    Command(CommandStep),
    Action(Action),
}

impl StepKind {
    /// `agent`, `command` or `action`, as written in YAML.
    pub fn as_str(&self) -> &'static str {
        match self {
            StepKind::Agent(_) => "agent",
            StepKind::Command(_) => "command",
            StepKind::Action(_) => "action",
        }
    }

    /// The sandbox settings of a step that runs in a sandbox; host actions have none.
    pub fn sandbox(&self) -> Option<&Sandboxed> {
        match self {
            StepKind::Agent(a) => Some(&a.sandbox),
            StepKind::Command(c) => Some(&c.sandbox),
            StepKind::Action(_) => None,
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct AgentStep {
    pub agent: AgentName,
    /// Resolved: the step's `model`, else the agent file's, else `llm.model`. `None` only for a
    /// replay provider without a model.
    pub model: Option<String>,
    /// Resolved: the step's, else the agent file's, else 40.
    pub max_iterations: NonZeroU32,
    /// Appended to the agent's task message.
    pub prompt: Option<String>,
    /// The file whose last `VERDICT:` line decides the step (workspace-relative).
    pub artifact: Option<RelPath>,
    pub verdicts: Option<Verdicts>,
    /// Resolved: the agent file's MCP servers, then the step's (names unique across both).
    pub mcp: Vec<crate::mcp::McpServer>,
    pub sandbox: Sandboxed,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verdicts {
    pub pass: String,
    pub fail: String,
    /// The third keyword (`VERDICT: <unverifiable>`): the agent could not verify the change.
    pub unverifiable: Option<String>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct CommandStep {
    pub command: CommandSpec,
    /// The step gets the model lane on `127.0.0.1:3129` inside its namespace.
    pub model_lane: bool,
    pub sandbox: Sandboxed,
}

/// A `command:` string runs under `/bin/sh -c`; a list runs without a shell.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CommandSpec {
    Shell(String),
    Argv(Vec<String>),
}

/// What every sandboxed step (agent or command) carries.
#[derive(Clone, Debug, PartialEq)]
pub struct Sandboxed {
    /// Resolved: the step's `network`, else the pipeline's.
    pub network: Network,
    pub setup: Option<Setup>,
    pub secrets: Vec<SecretName>,
    pub env: BTreeMap<EnvName, String>,
    pub timeout: Option<Timeout>,
    /// Files that must exist after the step (workspace-relative).
    pub produces: Vec<RelPath>,
    /// Resolved: the step's `image`, else `isolation.image`; `None` runs on the host's system
    /// directories.
    pub image: Option<cordon_protocol::ImageRef>,
}

/// A step's `setup` hook and the network it runs with (`setup_network`, default `none`).
#[derive(Clone, Debug, PartialEq)]
pub struct Setup {
    pub command: CommandSpec,
    pub network: Network,
}

/// A positive number of seconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timeout(pub NonZeroU64);

impl Timeout {
    pub fn seconds(self) -> u64 {
        self.0.get()
    }
}

/// A host action (runs outside the sandbox, in cordon itself).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// `action: commit`; `message` may hold `{name}` and `{run_id}`.
    Commit { message: String },
    /// `action: deliver` (DESIGN §15): push the run's last commit, find or open its pull request.
    Deliver(Box<crate::Deliver>),
}

impl Action {
    pub const NAMES: &'static [&'static str] = &["commit", "deliver"];
    pub const DEFAULT_COMMIT_MESSAGE: &'static str = "cordon: {name} ({run_id})";

    pub fn as_str(&self) -> &'static str {
        match self {
            Action::Commit { .. } => "commit",
            Action::Deliver(_) => "deliver",
        }
    }
}

/// Where a verdict sends the run.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Route {
    /// To a step; with `retry` the run's attempt counter grows first.
    Goto {
        step: StepName,
        retry: bool,
    },
    Success,
    Failure,
}

impl std::fmt::Display for Route {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Route::Goto { step, retry: false } => write!(f, "{step}"),
            Route::Goto { step, retry: true } => write!(f, "{step} (retry)"),
            Route::Success => f.write_str("success"),
            Route::Failure => f.write_str("failure"),
        }
    }
}
