//! `TaskFold`: an outcome run's task graph and each task's progress, rebuilt by folding the
//! run's events in order beside [`RunState`](crate::RunState). Like the run state it is pure and
//! total: an event that makes no sense where it comes is ignored, so replay never fails.
//!
//! What it reads: `run.started{kind, outcome}`; `tasks.planned` (adopted when the `decompose`
//! step passes); `task.state` (the durable record of every transition); the phase steps'
//! `step.started` / `step.output` / `step.finished` (attempt numbers, the interrupted phase, the
//! output tail and the end a transition is due for); a `submit_plan` `tool.call` answered `ok`
//! (the plan, adopted when the plan step passes); task-scoped `policy.grant`; `commit.created`
//! of a phase step.

use std::collections::BTreeMap;

use cordon_protocol::event::{PlannedTask, RunKind, TaskPhase, Verdict};
use cordon_protocol::{Attempt, Event, Record, StepName};

use super::submit::{Plan, SUBMIT_PLAN, plan_of};
use crate::state::{push_tail, tail_of};

/// The name of the decompose step.
pub const DECOMPOSE: &str = "decompose";
/// The step an outcome run's `deliver:` runs as, once every task is done.
pub const DELIVER: &str = "deliver";

/// How a phase attempt ended, waiting for its transition (`task.state`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PhaseEnd {
    pub phase: String,
    pub attempt: Attempt,
    pub verdict: Verdict,
    pub reason: Option<String>,
    /// The attempt's output tail (stdout and stderr interleaved as logged).
    pub tail: String,
}

/// One task's progress.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaskProgress {
    pub state: TaskPhase,
    pub revision: u32,
    pub replan: u32,
    /// The reason of the last `task.state`: what the phase it moved to works on (findings,
    /// verify output) or why the task ended.
    pub reason: Option<String>,
    /// The accepted plan (the last one of the last passing plan attempt).
    pub plan: Option<Plan>,
    /// Scrutinize's findings (its last attempt's), for validate.
    pub findings: Option<String>,
    /// Patterns granted to this task (`policy.grant{task}`), in order, once each.
    pub grants: Vec<String>,
    /// The highest attempt started per phase.
    pub attempts: BTreeMap<String, Attempt>,
    /// A phase step started and not finished: re-run on resume.
    pub running: Option<(String, Attempt)>,
    /// The phase end whose transition is not logged yet.
    pub ended: Option<PhaseEnd>,
    /// The task's commit (`commit.created` of one of its steps).
    pub commit: Option<String>,
    /// The diff blob of the last execute attempt (the workspace against `HEAD`).
    pub diff: Option<cordon_protocol::event::BlobId>,
    pending_plan: Option<Plan>,
    open_plans: Vec<(String, Plan)>,
}

impl Default for TaskProgress {
    fn default() -> TaskProgress {
        TaskProgress {
            state: TaskPhase::Pending,
            revision: 0,
            replan: 0,
            reason: None,
            plan: None,
            findings: None,
            grants: Vec::new(),
            attempts: BTreeMap::new(),
            running: None,
            ended: None,
            commit: None,
            diff: None,
            pending_plan: None,
            open_plans: Vec::new(),
        }
    }
}

impl TaskProgress {
    /// The attempt a new run of `phase` gets.
    pub fn next_attempt(&self, phase: &str) -> Attempt {
        self.attempts
            .get(phase)
            .and_then(|a| a.next())
            .unwrap_or(Attempt::FIRST)
    }
}

/// The decompose step's progress.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Decompose {
    /// The highest attempt started.
    pub attempt: Option<Attempt>,
    pub running: bool,
    /// Attempts that finished without a valid graph.
    pub failed: u32,
    pub last_reason: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TaskFold {
    pub kind: RunKind,
    /// The outcome sentence (`run.started{outcome}`).
    pub outcome: Option<String>,
    /// The accepted graph, in submission order; empty until `decompose` passed.
    pub tasks: Vec<PlannedTask>,
    pub planned: bool,
    pub decompose: Decompose,
    pub progress: BTreeMap<String, TaskProgress>,
    /// The run's one commit of `commit: end`.
    pub end_commit: Option<String>,
    /// How `outcome.deliver` ended: its verdict and reason.
    pub delivered: Option<(Verdict, Option<String>)>,
    pending_graph: Option<Vec<PlannedTask>>,
    /// The output tail of the phase step running now.
    tail: String,
}

impl TaskFold {
    pub fn replay<'a>(records: impl IntoIterator<Item = &'a Record>) -> TaskFold {
        let mut fold = TaskFold::default();
        for record in records {
            fold.apply(record);
        }
        fold
    }

    /// The grants a session of `task` with `network` gets: the task's, when the network takes
    /// grants.
    pub fn grants_for(&self, task: &str, network: &cordon_pipeline::Network) -> Vec<String> {
        match network {
            cordon_pipeline::Network::Allowlist(list) if list.grants => self
                .progress
                .get(task)
                .map(|p| p.grants.clone())
                .unwrap_or_default(),
            _ => Vec::new(),
        }
    }

    pub fn task(&self, id: &str) -> Option<&PlannedTask> {
        self.tasks.iter().find(|t| t.id == id)
    }

    pub fn apply(&mut self, record: &Record) {
        let step = record.step.as_ref();
        let phase_of = |step: Option<&StepName>| {
            step.and_then(StepName::task)
                .map(|(task, phase)| (task.to_owned(), phase.to_owned()))
        };
        let is_decompose = step.is_some_and(|s| s.as_str() == DECOMPOSE);
        match &record.event {
            Event::RunStarted { kind, outcome, .. } => {
                self.kind = *kind;
                self.outcome.clone_from(outcome);
            }
            Event::TasksPlanned { tasks } if !self.planned => {
                self.pending_graph = Some(tasks.clone());
            }
            Event::StepStarted { attempt } => {
                self.tail.clear();
                if is_decompose && !self.planned {
                    self.decompose.attempt = Some(*attempt);
                    self.decompose.running = true;
                    self.pending_graph = None;
                } else if let Some((task, phase)) = phase_of(step)
                    && let Some(progress) = self.progress.get_mut(&task)
                {
                    progress.attempts.insert(phase.clone(), *attempt);
                    if phase == "plan" {
                        progress.pending_plan = None;
                        progress.open_plans.clear();
                    }
                    progress.running = Some((phase, *attempt));
                }
            }
            Event::StepOutput { text, .. } => push_tail(&mut self.tail, text),
            Event::StepFinished {
                attempt,
                verdict,
                reason,
                diff,
                ..
            } => {
                if is_decompose && !self.planned {
                    self.decompose.running = false;
                    match (verdict, self.pending_graph.take()) {
                        (Verdict::Pass, Some(tasks)) => {
                            for task in &tasks {
                                self.progress.entry(task.id.clone()).or_default();
                            }
                            self.tasks = tasks;
                            self.planned = true;
                        }
                        _ => {
                            self.decompose.failed += 1;
                            self.decompose.last_reason.clone_from(reason);
                        }
                    }
                } else if self.planned && step.is_some_and(|s| s.as_str() == DELIVER) {
                    self.delivered = Some((*verdict, reason.clone()));
                } else if let Some((task, phase)) = phase_of(step)
                    && let Some(progress) = self.progress.get_mut(&task)
                {
                    progress.running = None;
                    if phase == "execute" {
                        progress.diff = *diff;
                    }
                    if phase == "plan" && *verdict == Verdict::Pass {
                        progress.plan = progress.pending_plan.take();
                    }
                    if phase == "scrutinize" {
                        progress.findings = Some(match (verdict, reason) {
                            (Verdict::Pass, Some(findings)) => findings.clone(),
                            (Verdict::Pass, None) => "(the critic reported nothing)".to_owned(),
                            (Verdict::Fail | Verdict::Unverifiable, why) => format!(
                                "the critic did not finish: {}",
                                why.as_deref().unwrap_or("it failed")
                            ),
                        });
                    }
                    progress.ended = Some(PhaseEnd {
                        phase,
                        attempt: *attempt,
                        verdict: *verdict,
                        reason: reason.clone(),
                        tail: tail_of(&self.tail),
                    });
                }
            }
            Event::ToolCall {
                id,
                name,
                arguments,
                ..
            } if name == SUBMIT_PLAN => {
                if let Some((task, phase)) = phase_of(step)
                    && phase == "plan"
                    && let Some(progress) = self.progress.get_mut(&task)
                    && let Some(plan) = plan_of(arguments)
                {
                    progress.open_plans.push((id.clone(), plan));
                }
            }
            Event::ToolResult { id, ok, .. } => {
                if let Some((task, _)) = phase_of(step)
                    && let Some(progress) = self.progress.get_mut(&task)
                    && let Some(index) = progress.open_plans.iter().position(|(i, _)| i == id)
                {
                    let (_, plan) = progress.open_plans.remove(index);
                    if *ok {
                        progress.pending_plan = Some(plan);
                    }
                }
            }
            Event::PolicyGrant {
                domain,
                task: Some(task),
                ..
            } => {
                if let Some(progress) = self.progress.get_mut(task)
                    && !progress.grants.contains(domain)
                {
                    progress.grants.push(domain.clone());
                }
            }
            Event::TaskState {
                task,
                state,
                revision,
                replan,
                reason,
            } => {
                if let Some(progress) = self.progress.get_mut(task) {
                    progress.state = *state;
                    progress.revision = *revision;
                    progress.replan = *replan;
                    progress.reason.clone_from(reason);
                    progress.ended = None;
                    progress.running = None;
                    if *state == TaskPhase::Planning {
                        // A replan starts from a fresh plan.
                        progress.plan = None;
                    }
                }
            }
            Event::CommitCreated { sha, .. } => match phase_of(step) {
                Some((task, _)) => {
                    if let Some(progress) = self.progress.get_mut(&task) {
                        progress.commit = Some(sha.clone());
                    }
                }
                None if self.planned => self.end_commit = Some(sha.clone()),
                None => {}
            },
            _ => {}
        }
    }
}
