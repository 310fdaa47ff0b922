//! `RunView`: what a person watching a run sees — each step's status, attempts, verdict and
//! console, the egress table, the outcome — as a total fold over the run's events. The run page,
//! the JSON API and the terminal progress view all read it; the page's script applies the same
//! rules to events that arrive live.

use std::collections::BTreeMap;

use cordon_protocol::event::{AuditRecord, Outcome, RunKind, TaskPhase, Timestamp, Verdict};
use cordon_protocol::{Event, Record, RunId, StepName};
use serde::Serialize;

use crate::console::Console;
use crate::graph::{Edge, Graph};

/// A step's status (Appendix A `data-status`): the latest attempt's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum StepStatus {
    Pending,
    Running,
    Passed,
    Failed,
    /// The latest attempt's verdict was `unverifiable` (DESIGN §17).
    Unverifiable,
}

impl StepStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            StepStatus::Pending => "pending",
            StepStatus::Running => "running",
            StepStatus::Passed => "passed",
            StepStatus::Failed => "failed",
            StepStatus::Unverifiable => "unverifiable",
        }
    }
}

/// A run's status (`runs --json`): finished runs by outcome; unfinished ones by whether a live
/// process holds them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RunStatus {
    Running,
    Interrupted,
    Success,
    Failure,
}

impl RunStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Running => "running",
            RunStatus::Interrupted => "interrupted",
            RunStatus::Success => "success",
            RunStatus::Failure => "failure",
        }
    }
}

/// One step as seen so far.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StepView {
    pub name: StepName,
    /// Times the step was started (`data-attempts`).
    pub attempts: u32,
    /// The run attempt of the step's latest start.
    pub attempt: Option<u32>,
    /// The latest start has not finished yet.
    #[serde(skip)]
    open: bool,
    pub verdict: Option<Verdict>,
    pub reason: Option<String>,
    pub exit_code: Option<i32>,
    pub started: Option<Timestamp>,
    pub finished: Option<Timestamp>,
    /// The latest attempt's output.
    pub console: Console,
    /// The latest attempt's latest `resources.sample` (the gauges of a running step); absent
    /// from the JSON until there is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceSample>,
    /// Model tokens of every attempt (`llm.response`), input and output.
    pub tokens_in: u64,
    pub tokens_out: u64,
}

/// A `resources.sample`: the session's memory (with a memory cap) and the fuller of the
/// workspace filesystem and the sandbox's `/tmp`, in percent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct ResourceSample {
    pub memory_bytes: Option<u64>,
    pub disk_percent: Option<u8>,
}

impl StepView {
    fn new(name: StepName) -> StepView {
        StepView {
            name,
            attempts: 0,
            attempt: None,
            open: false,
            verdict: None,
            reason: None,
            exit_code: None,
            started: None,
            finished: None,
            console: Console::default(),
            resources: None,
            tokens_in: 0,
            tokens_out: 0,
        }
    }

    /// `running` only while a live process holds the run; an unfinished step of a run nobody
    /// holds is `pending` (it re-runs from its start on resume).
    /// Whether its latest attempt started and did not finish.
    pub fn is_open(&self) -> bool {
        self.open
    }

    pub fn status(&self, held: bool) -> StepStatus {
        match (self.open, self.verdict) {
            (true, _) if held => StepStatus::Running,
            (true, _) | (false, None) => StepStatus::Pending,
            (false, Some(Verdict::Pass)) => StepStatus::Passed,
            (false, Some(Verdict::Fail)) => StepStatus::Failed,
            (false, Some(Verdict::Unverifiable)) => StepStatus::Unverifiable,
        }
    }
}

/// One line of the egress table: a destination a step reached or was refused, with counts.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct EgressRow {
    pub step: Option<String>,
    /// `allow`, `deny`, or `dropped` (records past a session's cap, only counted).
    pub decision: String,
    /// `host:port`, or the raw target when it did not parse.
    pub target: String,
    pub reason: Option<String>,
    pub count: u64,
    pub bytes_up: u64,
    pub bytes_down: u64,
}

/// One task of an outcome run (`[data-task][data-task-state]`), its phases being the steps
/// named `<id>.<phase>`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TaskView {
    pub id: String,
    pub title: String,
    pub depends_on: Vec<String>,
    pub state: TaskPhase,
    pub revision: u32,
    pub replan: u32,
    /// Why it is where it is (the last `task.state` reason).
    pub reason: Option<String>,
}

impl TaskView {
    /// The phase it is in (`plan` for `planning`), if any.
    pub fn phase(&self) -> Option<&'static str> {
        self.state.phase()
    }
}

/// A route the run took, with how often.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RouteTaken {
    pub from: StepName,
    pub to: String,
    pub retry: bool,
    pub count: u32,
}

/// The fold. Build it with [`RunView::new`], feed every event in order with [`RunView::apply`],
/// and tell it whether the run is held ([`RunView::set_held`]).
#[derive(Clone, Debug, PartialEq)]
pub struct RunView {
    pub id: RunId,
    pub pipeline: String,
    /// `steps` or `outcome` (`run.started{kind}`).
    pub kind: RunKind,
    /// An outcome run's outcome sentence.
    pub goal: Option<String>,
    /// An outcome run's tasks, in graph order.
    pub tasks: Vec<TaskView>,
    pub workspace: Option<String>,
    pub held: bool,
    pub attempt: u32,
    pub max_attempts: Option<u32>,
    pub started: Option<Timestamp>,
    pub finished: Option<Timestamp>,
    pub outcome: Option<Outcome>,
    pub reason: Option<String>,
    /// Model tokens of the whole run (every step's, and calls outside a step).
    pub tokens_in: u64,
    pub tokens_out: u64,
    pub last_seq: u64,
    /// Milliseconds processes held the run before the latest took it (`run.resumed`): a run's
    /// time counts only while a process held it.
    pub held_before_ms: u64,
    /// When the latest process took the run, and its latest event.
    pub held_since: Option<Timestamp>,
    last_ts: Option<Timestamp>,
    pub graph: Graph,
    steps: Vec<StepView>,
    egress: BTreeMap<(Option<String>, String, String, Option<String>), EgressRow>,
    routes: Vec<RouteTaken>,
    /// Every attempt (the latest [`attempts::MAX_ATTEMPTS`]): console, diff, commit, transcript.
    pub attempts: attempts::Attempts,
}

impl RunView {
    /// A view of run `id` before its first event. With `graph: None` the graph is derived from
    /// the events.
    pub fn new(id: RunId, pipeline: &str, graph: Option<Graph>) -> RunView {
        let graph = graph.unwrap_or_else(Graph::derived);
        let steps = graph
            .steps
            .iter()
            .map(|s| StepView::new(s.name.clone()))
            .collect();
        RunView {
            id,
            pipeline: pipeline.to_owned(),
            kind: RunKind::Steps,
            goal: None,
            tasks: Vec::new(),
            workspace: None,
            held: false,
            attempt: 1,
            max_attempts: None,
            started: None,
            finished: None,
            outcome: None,
            reason: None,
            tokens_in: 0,
            tokens_out: 0,
            last_seq: 0,
            held_before_ms: 0,
            held_since: None,
            last_ts: None,
            graph,
            steps,
            egress: BTreeMap::new(),
            routes: Vec::new(),
            attempts: attempts::Attempts::default(),
        }
    }

    pub fn set_held(&mut self, held: bool) {
        self.held = held;
    }

    pub fn status(&self) -> RunStatus {
        match self.outcome {
            Some(Outcome::Success) => RunStatus::Success,
            Some(Outcome::Failure) => RunStatus::Failure,
            None if self.held => RunStatus::Running,
            None => RunStatus::Interrupted,
        }
    }

    pub fn steps(&self) -> &[StepView] {
        &self.steps
    }

    pub fn egress(&self) -> impl Iterator<Item = &EgressRow> {
        self.egress.values()
    }

    pub fn routes(&self) -> &[RouteTaken] {
        &self.routes
    }

    fn step_mut(&mut self, name: &StepName) -> &mut StepView {
        self.graph.learn_step(name);
        let index = match self.steps.iter().position(|s| &s.name == name) {
            Some(i) => i,
            None => {
                self.steps.push(StepView::new(name.clone()));
                self.steps.len() - 1
            }
        };
        &mut self.steps[index]
    }

    /// Applies one event. Total: an event the view has no use for changes only `last_seq`.
    pub fn apply(&mut self, record: &Record) {
        self.last_seq = self.last_seq.max(record.seq);
        let ts = record.ts;
        if let Event::RunResumed { .. } = &record.event
            && let (Some(since), Some(last)) = (self.held_since, self.last_ts)
        {
            self.held_before_ms = self
                .held_before_ms
                .saturating_add(last.unix_millis().saturating_sub(since.unix_millis()));
        }
        if matches!(
            record.event,
            Event::RunStarted { .. } | Event::RunResumed { .. }
        ) {
            self.held_since = Some(ts);
        }
        self.last_ts = Some(ts);
        self.apply_event(record);
        if let Some(name) = &record.step {
            let starts = self
                .steps
                .iter()
                .find(|s| &s.name == name)
                .map_or(0, |s| s.attempts);
            self.attempts.apply(record, starts, self.attempt);
        }
    }

    fn apply_event(&mut self, record: &Record) {
        let ts = record.ts;
        match &record.event {
            Event::RunStarted {
                workspace,
                attempt,
                max_attempts,
                kind,
                outcome,
                ..
            } => {
                self.kind = *kind;
                self.goal.clone_from(outcome);
                self.workspace = Some(workspace.clone());
                self.attempt = attempt.get();
                self.max_attempts = Some(*max_attempts);
                self.started = Some(ts);
            }
            Event::RunResumed {
                attempt,
                max_attempts,
            } => {
                self.attempt = attempt.get();
                self.max_attempts = Some(*max_attempts);
                // A resumed run that had failed (or spent its budget) is running again.
                self.outcome = None;
                self.finished = None;
                self.reason = None;
            }
            Event::RunFinished { outcome, reason } => {
                self.outcome = Some(*outcome);
                self.reason = Some(reason.clone());
                self.finished = Some(ts);
            }
            Event::AttemptRetry { attempt, .. } => self.attempt = attempt.get(),
            // Why the run stopped, until a resume with a higher limit runs it again.
            Event::BudgetExhausted { kind, used, limit } => {
                self.reason = Some(format!("budget exhausted: {kind} {used} of {limit}"));
            }
            Event::LlmResponse {
                input_tokens,
                output_tokens,
                ..
            } => {
                self.tokens_in = self.tokens_in.saturating_add(*input_tokens);
                self.tokens_out = self.tokens_out.saturating_add(*output_tokens);
                if let Some(name) = &record.step {
                    let view = self.step_mut(name);
                    view.tokens_in = view.tokens_in.saturating_add(*input_tokens);
                    view.tokens_out = view.tokens_out.saturating_add(*output_tokens);
                }
            }
            Event::StepStarted { attempt } => {
                if let Some(name) = &record.step {
                    let step = self.step_mut(name);
                    step.attempts += 1;
                    step.attempt = Some(attempt.get());
                    step.open = true;
                    step.verdict = None;
                    step.reason = None;
                    step.exit_code = None;
                    step.started = Some(ts);
                    step.finished = None;
                    step.console = Console::default();
                    step.resources = None;
                }
            }
            Event::StepOutput { text, .. } => {
                if let Some(name) = &record.step {
                    self.step_mut(name).console.push(text);
                }
            }
            Event::StepFinished {
                verdict,
                exit_code,
                reason,
                ..
            } => {
                if let Some(name) = &record.step {
                    let step = self.step_mut(name);
                    step.open = false;
                    step.verdict = Some(*verdict);
                    step.exit_code = *exit_code;
                    step.reason = reason.clone();
                    step.finished = Some(ts);
                }
            }
            Event::Route { from, to, retry } => {
                let passed = self
                    .steps
                    .iter()
                    .find(|s| &s.name == from)
                    .and_then(|s| s.verdict)
                    != Some(Verdict::Fail);
                self.graph.learn_route(
                    from,
                    passed,
                    Edge {
                        to: to.clone(),
                        retry: *retry,
                    },
                );
                for step in self
                    .graph
                    .steps
                    .iter()
                    .map(|s| s.name.clone())
                    .collect::<Vec<_>>()
                {
                    if !self.steps.iter().any(|s| s.name == step) {
                        self.steps.push(StepView::new(step));
                    }
                }
                match self
                    .routes
                    .iter_mut()
                    .find(|r| &r.from == from && &r.to == to && r.retry == *retry)
                {
                    Some(taken) => taken.count += 1,
                    None => self.routes.push(RouteTaken {
                        from: from.clone(),
                        to: to.clone(),
                        retry: *retry,
                        count: 1,
                    }),
                }
            }
            Event::ResourcesSample {
                memory_bytes,
                disk_percent,
            } => {
                if let Some(name) = &record.step {
                    self.step_mut(name).resources = Some(ResourceSample {
                        memory_bytes: *memory_bytes,
                        disk_percent: *disk_percent,
                    });
                }
            }
            Event::EgressAllow(audit) | Event::EgressDeny(audit) => {
                let step = record
                    .step
                    .as_ref()
                    .map(|s| s.as_str().to_owned())
                    .or_else(|| audit.step.clone());
                let key = (
                    step.clone(),
                    audit.decision.clone(),
                    target(audit),
                    audit.reason.clone(),
                );
                let row = self.egress.entry(key).or_insert_with(|| EgressRow {
                    step,
                    decision: audit.decision.clone(),
                    target: target(audit),
                    reason: audit.reason.clone(),
                    count: 0,
                    bytes_up: 0,
                    bytes_down: 0,
                });
                row.count += audit.count;
            }
            Event::EgressDropped { count } => {
                // The session reached its cap of egress records: one row says how many more.
                let step = record.step.as_ref().map(|s| s.as_str().to_owned());
                let key = (step.clone(), "dropped".to_owned(), String::new(), None);
                let row = self.egress.entry(key).or_insert_with(|| EgressRow {
                    step,
                    decision: "dropped".to_owned(),
                    target: "(records past the session's cap, not stored)".to_owned(),
                    reason: None,
                    count: 0,
                    bytes_up: 0,
                    bytes_down: 0,
                });
                row.count += count;
            }
            Event::EgressClose(audit) => {
                let step = record
                    .step
                    .as_ref()
                    .map(|s| s.as_str().to_owned())
                    .or_else(|| audit.step.clone());
                let target = target(audit);
                if let Some(row) = self
                    .egress
                    .values_mut()
                    .find(|r| r.step == step && r.target == target && r.decision == "allow")
                {
                    row.bytes_up += audit.bytes_up;
                    row.bytes_down += audit.bytes_down;
                }
            }
            Event::TasksPlanned { tasks }
                if record
                    .step
                    .as_ref()
                    .is_some_and(|s| s.as_str() == "decompose") =>
            {
                // The graph the decompose step submitted last (it is adopted when the step
                // passes; a rerun submits it again).
                self.tasks = tasks
                    .iter()
                    .map(|t| TaskView {
                        id: t.id.clone(),
                        title: t.title.clone(),
                        depends_on: t.depends_on.clone(),
                        state: TaskPhase::Pending,
                        revision: 0,
                        replan: 0,
                        reason: None,
                    })
                    .collect();
            }
            Event::TaskState {
                task,
                state,
                revision,
                replan,
                reason,
            } => {
                if let Some(view) = self.tasks.iter_mut().find(|t| &t.id == task) {
                    view.state = *state;
                    view.revision = *revision;
                    view.replan = *replan;
                    view.reason.clone_from(reason);
                }
            }
            Event::TasksPlanned { .. }
            | Event::SandboxSession { .. }
            | Event::SandboxExec { .. }
            | Event::SetupRan { .. }
            | Event::SetupCached { .. }
            | Event::PolicyGrant { .. }
            | Event::PolicyRefuse { .. }
            | Event::LlmRequest { .. }
            | Event::ToolCall { .. }
            | Event::ToolResult { .. }
            | Event::ArtifactWritten { .. }
            | Event::CommitCreated { .. }
            | Event::DeliveryPushed { .. }
            | Event::DeliveryPullRequest { .. }
            | Event::ReportComment { .. }
            | Event::ResourcesWarning { .. }
            | Event::RunInterrupted { .. }
            | Event::Error { .. } => {}
        }
    }
}

/// The destination an audit record names: `host:port` when it parsed, else the raw target.
pub fn target(audit: &AuditRecord) -> String {
    match (&audit.host, audit.port) {
        (Some(host), Some(port)) if host.contains(':') => format!("[{host}]:{port}"),
        (Some(host), Some(port)) => format!("{host}:{port}"),
        _ => audit.raw_target.clone(),
    }
}

/// The JSON snapshot (`GET /api/runs/<id>` and the one embedded in the run page).
#[derive(Serialize)]
struct Snapshot<'a> {
    id: String,
    pipeline: &'a str,
    kind: RunKind,
    goal: Option<&'a str>,
    tasks: &'a [TaskView],
    workspace: Option<&'a str>,
    status: RunStatus,
    held: bool,
    attempt: u32,
    max_attempts: Option<u32>,
    started: Option<Timestamp>,
    finished: Option<Timestamp>,
    outcome: Option<Outcome>,
    reason: Option<&'a str>,
    tokens_in: u64,
    tokens_out: u64,
    last_seq: u64,
    graph: &'a Graph,
    steps: Vec<StepOut<'a>>,
    routes: &'a [RouteTaken],
    egress: Vec<&'a EgressRow>,
    attempts: &'a attempts::Attempts,
}

#[derive(Serialize)]
struct StepOut<'a> {
    status: StepStatus,
    #[serde(flatten)]
    step: &'a StepView,
}

impl Serialize for RunView {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        Snapshot {
            id: self.id.to_string(),
            pipeline: &self.pipeline,
            kind: self.kind,
            goal: self.goal.as_deref(),
            tasks: &self.tasks,
            workspace: self.workspace.as_deref(),
            status: self.status(),
            held: self.held,
            attempt: self.attempt,
            max_attempts: self.max_attempts,
            started: self.started,
            finished: self.finished,
            outcome: self.outcome,
            reason: self.reason.as_deref(),
            tokens_in: self.tokens_in,
            tokens_out: self.tokens_out,
            last_seq: self.last_seq,
            graph: &self.graph,
            steps: self
                .steps
                .iter()
                .map(|step| StepOut {
                    status: step.status(self.held),
                    step,
                })
                .collect(),
            routes: &self.routes,
            egress: self.egress.values().collect(),
            attempts: &self.attempts,
        }
        .serialize(s)
    }
}

pub mod attempts;

#[cfg(test)]
mod tests;
