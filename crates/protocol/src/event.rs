//! The closed set of run events (DESIGN Appendix A): what the engine appends, the store keeps,
//! and `logs`, `run --json` and the UI read. Adding a variant is a schema change: bump
//! [`SCHEMA_VERSION`] and every exhaustive `match` on [`Event`] shows what must handle it.

mod audit;
mod ids;
mod record;
mod timestamp;

use serde::{Deserialize, Serialize};

use crate::{Attempt, StepName};

pub use audit::AuditRecord;
pub use record::{Record, RecordError};
pub use timestamp::Timestamp;

/// The version of the event schema. A store written by a newer cordon (a higher version) is
/// refused rather than misread.
pub const SCHEMA_VERSION: u32 = 3;

/// Where a step's output chunk came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OutputStream {
    Stdout,
    Stderr,
}

/// A step attempt's result.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    Pass,
    Fail,
    /// The agent said the change cannot be verified (`verdicts.unverifiable`, DESIGN §17): routed
    /// by `on_unverifiable`.
    Unverifiable,
}

/// How a run ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    Success,
    Failure,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Success => "success",
            Outcome::Failure => "failure",
        }
    }
}

/// Which side of cordon an LLM call went through.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LlmSource {
    /// An agent step's own provider adapter.
    Agent,
    /// The model lane of a command step (DESIGN §5).
    Lane,
}

/// What a run carries out: a pipeline's `steps`, or an `outcome` through a task graph (§13).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RunKind {
    #[default]
    Steps,
    Outcome,
}

impl RunKind {
    pub fn as_str(self) -> &'static str {
        match self {
            RunKind::Steps => "steps",
            RunKind::Outcome => "outcome",
        }
    }
}

/// One task of an outcome run's graph as `submit_tasks` gave it and cordon accepted it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlannedTask {
    pub id: String,
    pub title: String,
    #[serde(default)]
    pub depends_on: Vec<String>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub acceptance: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub verify: Vec<String>,
}

/// Where an outcome task is (`task.state`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TaskPhase {
    Pending,
    Planning,
    Executing,
    Scrutinizing,
    Verifying,
    Validating,
    Done,
    Failed,
    Skipped,
}

impl TaskPhase {
    pub const ALL: [TaskPhase; 9] = [
        TaskPhase::Pending,
        TaskPhase::Planning,
        TaskPhase::Executing,
        TaskPhase::Scrutinizing,
        TaskPhase::Verifying,
        TaskPhase::Validating,
        TaskPhase::Done,
        TaskPhase::Failed,
        TaskPhase::Skipped,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            TaskPhase::Pending => "pending",
            TaskPhase::Planning => "planning",
            TaskPhase::Executing => "executing",
            TaskPhase::Scrutinizing => "scrutinizing",
            TaskPhase::Verifying => "verifying",
            TaskPhase::Validating => "validating",
            TaskPhase::Done => "done",
            TaskPhase::Failed => "failed",
            TaskPhase::Skipped => "skipped",
        }
    }

    /// The phase step a task in this state runs (`plan` for `planning`), if any.
    pub fn phase(self) -> Option<&'static str> {
        match self {
            TaskPhase::Planning => Some("plan"),
            TaskPhase::Executing => Some("execute"),
            TaskPhase::Scrutinizing => Some("scrutinize"),
            TaskPhase::Verifying => Some("verify"),
            TaskPhase::Validating => Some("validate"),
            TaskPhase::Pending | TaskPhase::Done | TaskPhase::Failed | TaskPhase::Skipped => None,
        }
    }

    /// `done`, `failed` or `skipped`: nothing more happens to the task.
    pub fn is_final(self) -> bool {
        matches!(
            self,
            TaskPhase::Done | TaskPhase::Failed | TaskPhase::Skipped
        )
    }
}

/// A stored blob (a large output, a diff), referenced from events by this number.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct BlobId(pub u64);

/// A document of `run.started{context}`: the path as given (`--context`) or in the workspace
/// (`--plan`), and the blob holding its text as it was when the run started.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContextDocument {
    pub path: String,
    pub blob: BlobId,
    /// The run's plan (`--plan`): marked done in the workspace when the run succeeds.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub plan: bool,
}

/// One event. The JSON `type` is the dotted name; the variant's fields are the `data` object.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", content = "data", deny_unknown_fields)]
pub enum Event {
    /// A fresh run began. `max_attempts` is the run's budget (pipeline or `--max-attempts`).
    #[serde(rename = "run.started")]
    RunStarted {
        pipeline: String,
        workspace: String,
        attempt: Attempt,
        max_attempts: u32,
        /// The run's task (`--prompt`, `--prompt-file`), appended to every agent step's task
        /// message and reused on resume.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        prompt: Option<String>,
        /// `steps` or `outcome` (absent in logs older than outcome runs: `steps`).
        #[serde(default)]
        kind: RunKind,
        /// An outcome run's outcome (`cordon do "OUTCOME"`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        outcome: Option<String>,
        /// The documents given with `--context` (DESIGN §17), each read once at the start and
        /// kept as a blob: every agent step's task message holds them, on resume too.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        context: Vec<ContextDocument>,
    },
    /// A process took the run over again; `max_attempts` is the budget from now on.
    #[serde(rename = "run.resumed")]
    RunResumed { attempt: Attempt, max_attempts: u32 },
    /// The process holding the run was interrupted (`SIGINT`, `SIGTERM`) and exited at once;
    /// the run is resumable.
    #[serde(rename = "run.interrupted")]
    RunInterrupted { signal: i32 },
    #[serde(rename = "run.finished")]
    RunFinished { outcome: Outcome, reason: String },
    /// Durable before the attempt's first side effect.
    #[serde(rename = "step.started")]
    StepStarted { attempt: Attempt },
    /// A chunk of a step's output, secrets scrubbed.
    #[serde(rename = "step.output")]
    StepOutput { stream: OutputStream, text: String },
    #[serde(rename = "step.finished")]
    StepFinished {
        attempt: Attempt,
        verdict: Verdict,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        exit_code: Option<i32>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
        /// The workspace's changes after this attempt (a `git diff` against the run's base).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        diff: Option<BlobId>,
        /// Output past the step's `isolation.output_limit`: counted, not stored.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        output_omitted_bytes: Option<u64>,
    },
    /// Where a verdict sent the run: a step name, `success` or `failure`.
    #[serde(rename = "route")]
    Route {
        from: StepName,
        to: String,
        retry: bool,
    },
    /// The run's attempt counter grew; `feedback` is what this retry added for the agents.
    #[serde(rename = "attempt.retry")]
    AttemptRetry { attempt: Attempt, feedback: String },
    #[serde(rename = "sandbox.session")]
    SandboxSession {
        step: StepName,
        attempt: Attempt,
        network: String,
        /// The environment image the session's root is (`sha256:<hex>`, or a directory given
        /// by path); absent on the host's system directories. A resumed run keeps it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        image: Option<String>,
    },
    #[serde(rename = "sandbox.exec")]
    SandboxExec {
        argv_digest: String,
        exit_code: i32,
        duration_ms: u64,
        timed_out: bool,
    },
    /// A setup hook ran; `stamp` is the digest it is cached under.
    #[serde(rename = "setup.ran")]
    SetupRan {
        stamp: String,
        exit_code: i32,
        duration_ms: u64,
    },
    /// A setup hook was skipped because its stamp matched.
    #[serde(rename = "setup.cached")]
    SetupCached { stamp: String },
    #[serde(rename = "egress.allow")]
    EgressAllow(AuditRecord),
    #[serde(rename = "egress.deny")]
    EgressDeny(AuditRecord),
    #[serde(rename = "egress.close")]
    EgressClose(AuditRecord),
    /// A session reached its cap of egress events: `count` more records were not stored.
    #[serde(rename = "egress.dropped")]
    EgressDropped { count: u64 },
    /// `task`: in an outcome run, the task the grant is scoped to (DESIGN §18).
    #[serde(rename = "policy.grant")]
    PolicyGrant {
        domain: String,
        reason: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        task: Option<String>,
    },
    #[serde(rename = "policy.refuse")]
    PolicyRefuse {
        domain: String,
        reason: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        task: Option<String>,
    },
    /// An outcome run's task graph, as the decompose step submitted it and cordon accepted it.
    #[serde(rename = "tasks.planned")]
    TasksPlanned { tasks: Vec<PlannedTask> },
    /// An outcome task moved: its state and counters from now on, and why.
    #[serde(rename = "task.state")]
    TaskState {
        task: String,
        state: TaskPhase,
        revision: u32,
        replan: u32,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    #[serde(rename = "llm.request")]
    LlmRequest {
        model: String,
        source: LlmSource,
        /// An agent attempt's first request: the task message it was given (bounded), so the
        /// run page can show its conversation from the start.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        task: Option<String>,
    },
    #[serde(rename = "llm.response")]
    LlmResponse {
        model: String,
        input_tokens: u64,
        output_tokens: u64,
        latency_ms: u64,
        source: LlmSource,
        /// The counts are cordon's estimate (4 bytes a token of the request and the answer):
        /// the upstream reported none.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        estimated: Option<bool>,
    },
    /// A `budget` limit was reached (DESIGN §12): no further model call is made and the run
    /// stops, resumable with a higher limit. `kind` is `tokens`, `cost_usd` or `wall_clock`
    /// (seconds).
    #[serde(rename = "budget.exhausted")]
    BudgetExhausted {
        kind: String,
        used: serde_json::Number,
        limit: serde_json::Number,
    },
    #[serde(rename = "tool.call")]
    ToolCall {
        id: String,
        name: String,
        arguments: serde_json::Value,
        /// The MCP server whose tool this is (DESIGN §17); absent for cordon's own tools.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        server: Option<String>,
    },
    #[serde(rename = "tool.result")]
    ToolResult {
        id: String,
        ok: bool,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        interrupted: Option<bool>,
        output: String,
    },
    #[serde(rename = "artifact.written")]
    ArtifactWritten { path: String },
    /// The commit action's commit and the paths it changed: the first 1,000 (cordon's git lists
    /// no more), and how many more there were.
    #[serde(rename = "commit.created")]
    CommitCreated {
        sha: String,
        #[serde(default)]
        files: Vec<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        files_omitted: Option<u64>,
    },
    /// The `deliver` action pushed the run's last commit (DESIGN §15): `remote` is the URL without
    /// credentials.
    #[serde(rename = "delivery.pushed")]
    DeliveryPushed {
        remote: String,
        branch: String,
        sha: String,
    },
    /// The `deliver` action opened, or found, the run's pull request.
    #[serde(rename = "delivery.pull_request")]
    DeliveryPullRequest { url: String, number: u64 },
    /// `report:` commented on its issue (the run's start, a step, the summary).
    #[serde(rename = "report.comment")]
    ReportComment { url: String },
    #[serde(rename = "resources.sample")]
    ResourcesSample {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        memory_bytes: Option<u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        disk_percent: Option<u8>,
    },
    #[serde(rename = "resources.warning")]
    ResourcesWarning { message: String },
    #[serde(rename = "error")]
    Error { message: String },
}

impl Event {
    /// The dotted type name, as in the JSON `type` field.
    pub fn kind(&self) -> &'static str {
        match self {
            Event::RunStarted { .. } => "run.started",
            Event::RunResumed { .. } => "run.resumed",
            Event::RunInterrupted { .. } => "run.interrupted",
            Event::RunFinished { .. } => "run.finished",
            Event::StepStarted { .. } => "step.started",
            Event::StepOutput { .. } => "step.output",
            Event::StepFinished { .. } => "step.finished",
            Event::Route { .. } => "route",
            Event::AttemptRetry { .. } => "attempt.retry",
            Event::SandboxSession { .. } => "sandbox.session",
            Event::SandboxExec { .. } => "sandbox.exec",
            Event::SetupRan { .. } => "setup.ran",
            Event::SetupCached { .. } => "setup.cached",
            Event::EgressAllow(_) => "egress.allow",
            Event::EgressDeny(_) => "egress.deny",
            Event::EgressClose(_) => "egress.close",
            Event::EgressDropped { .. } => "egress.dropped",
            Event::PolicyGrant { .. } => "policy.grant",
            Event::PolicyRefuse { .. } => "policy.refuse",
            Event::TasksPlanned { .. } => "tasks.planned",
            Event::TaskState { .. } => "task.state",
            Event::LlmRequest { .. } => "llm.request",
            Event::LlmResponse { .. } => "llm.response",
            Event::BudgetExhausted { .. } => "budget.exhausted",
            Event::ToolCall { .. } => "tool.call",
            Event::ToolResult { .. } => "tool.result",
            Event::ArtifactWritten { .. } => "artifact.written",
            Event::CommitCreated { .. } => "commit.created",
            Event::DeliveryPushed { .. } => "delivery.pushed",
            Event::DeliveryPullRequest { .. } => "delivery.pull_request",
            Event::ReportComment { .. } => "report.comment",
            Event::ResourcesSample { .. } => "resources.sample",
            Event::ResourcesWarning { .. } => "resources.warning",
            Event::Error { .. } => "error",
        }
    }

    /// Whether the run's route depends on this event, so it must be durable (`synchronous=FULL`)
    /// before anything that follows it. The others (output, samples, audit) may be lost in a
    /// crash together with the step in flight, never more.
    pub fn is_boundary(&self) -> bool {
        match self {
            Event::RunStarted { .. }
            | Event::RunResumed { .. }
            | Event::RunInterrupted { .. }
            | Event::RunFinished { .. }
            | Event::StepStarted { .. }
            | Event::StepFinished { .. }
            | Event::AttemptRetry { .. }
            | Event::SetupRan { .. }
            | Event::PolicyGrant { .. }
            | Event::PolicyRefuse { .. }
            | Event::TasksPlanned { .. }
            | Event::TaskState { .. }
            | Event::BudgetExhausted { .. }
            | Event::CommitCreated { .. }
            | Event::DeliveryPushed { .. }
            | Event::DeliveryPullRequest { .. }
            | Event::ReportComment { .. } => true,
            // A route is recomputed from `step.finished` and the pipeline when it is lost, and
            // the next `step.started` makes it durable anyway.
            Event::Route { .. }
            | Event::StepOutput { .. }
            | Event::SandboxSession { .. }
            | Event::SandboxExec { .. }
            | Event::SetupCached { .. }
            | Event::EgressAllow(_)
            | Event::EgressDeny(_)
            | Event::EgressClose(_)
            | Event::EgressDropped { .. }
            | Event::LlmRequest { .. }
            | Event::LlmResponse { .. }
            | Event::ToolCall { .. }
            | Event::ToolResult { .. }
            | Event::ArtifactWritten { .. }
            | Event::ResourcesSample { .. }
            | Event::ResourcesWarning { .. }
            | Event::Error { .. } => false,
        }
    }

    /// Whether the event has a `task` field of its own (so a phase step's record adds none).
    pub fn has_task(&self) -> bool {
        matches!(
            self,
            Event::TaskState { .. } | Event::PolicyGrant { .. } | Event::PolicyRefuse { .. }
        )
    }

    /// The `data` object alone, as JSON text, keys in declaration order.
    pub fn data_json(&self) -> String {
        // serde writes an adjacently tagged enum as `{"type":"<kind>","data":<data>}`, keys in
        // that order; cutting the frame off keeps the data's own key order (a `Value` would
        // sort them).
        let whole = serde_json::to_string(self).unwrap_or_default();
        let prefix = format!("{{\"type\":\"{}\",\"data\":", self.kind());
        whole
            .strip_prefix(&prefix)
            .and_then(|rest| rest.strip_suffix('}'))
            .map_or_else(|| "{}".to_owned(), str::to_owned)
    }

    /// Rebuilds an event from its `type` and `data` JSON text (as stored).
    pub fn from_parts(kind: &str, data: &str) -> Result<Event, serde_json::Error> {
        let kind = serde_json::to_string(kind)?;
        serde_json::from_str(&format!("{{\"type\":{kind},\"data\":{data}}}"))
    }
}

#[cfg(test)]
mod tests;
