//! The outcome scheduler: a pure function from the task fold (and whether the run finished) to
//! the next action. Every transition it decides is logged as `task.state` before anything
//! else happens, so a resumed run decides the same thing again.

use std::collections::BTreeSet;

use cordon_pipeline::{OutcomeCommit, OutcomeSpec};
use cordon_protocol::event::{Outcome, TaskPhase, Verdict};
use cordon_protocol::{Attempt, PHASES};

use super::state::{PhaseEnd, TaskFold, TaskProgress};

/// What the engine does next in an outcome run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Next {
    /// Run the decompose step (`rerun`: it was interrupted and starts again).
    Decompose {
        attempt: Attempt,
        rerun: bool,
    },
    /// Run `task`'s `phase` step.
    Phase {
        task: String,
        phase: &'static str,
        attempt: Attempt,
        rerun: bool,
    },
    /// Log `task.state`.
    Move {
        task: String,
        state: TaskPhase,
        revision: u32,
        replan: u32,
        reason: Option<String>,
    },
    /// The validator accepted `task`: commit it (with `commit: per_task`), then it is done.
    Accept {
        task: String,
    },
    /// Every task is done and `commit: end` has not committed yet.
    CommitEnd,
    /// Every task is done and committed, and `outcome.deliver` has not delivered yet.
    Deliver,
    Finish {
        outcome: Outcome,
        reason: String,
    },
    /// Nothing to do until a busy task's phase ends (parallel tasks).
    Wait,
}

/// The prefix of a validate phase's reason that sends its task back to plan.
pub const REPLAN: &str = "REPLAN";

/// The next action, or `None` when the run has finished. `max_attempts` bounds the decompose
/// step (the run's attempts apply to it).
pub fn next(fold: &TaskFold, spec: &OutcomeSpec, max_attempts: u32) -> Next {
    next_with(fold, spec, max_attempts, &BTreeSet::new())
}

/// [`next`] while the tasks in `busy` have a phase running on a thread of their own (`parallel`
/// above 1): they are left alone, at most `parallel` tasks are between pending and an end at
/// once, and the run does not finish while any is busy. With nothing busy and `parallel: 1`
/// this is the sequential schedule.
pub fn next_with(
    fold: &TaskFold,
    spec: &OutcomeSpec,
    max_attempts: u32,
    busy: &BTreeSet<String>,
) -> Next {
    if !fold.planned {
        let decompose = &fold.decompose;
        if decompose.running {
            return Next::Decompose {
                attempt: decompose.attempt.unwrap_or(Attempt::FIRST),
                rerun: true,
            };
        }
        if decompose.failed >= max_attempts {
            return Next::Finish {
                outcome: Outcome::Failure,
                reason: format!(
                    "decompose ended without a valid task graph in {} attempts ({}); resume with \
                     a higher --max-attempts to try again",
                    decompose.failed,
                    decompose
                        .last_reason
                        .as_deref()
                        .unwrap_or("no reason given")
                ),
            };
        }
        return Next::Decompose {
            attempt: decompose
                .attempt
                .and_then(Attempt::next)
                .unwrap_or(Attempt::FIRST),
            rerun: false,
        };
    }
    // A phase that ended is moved on first; then an interrupted phase runs again; then the
    // task in a phase runs it.
    let free = |id: &str| !busy.contains(id);
    for task in fold.tasks.iter().filter(|t| free(&t.id)) {
        let Some(progress) = fold.progress.get(&task.id) else {
            continue;
        };
        if let Some(ended) = &progress.ended {
            return transition(&task.id, progress, ended, spec);
        }
    }
    for task in fold.tasks.iter().filter(|t| free(&t.id)) {
        let Some(progress) = fold.progress.get(&task.id) else {
            continue;
        };
        if let Some((phase, attempt)) = &progress.running
            && let Some(phase) = PHASES.iter().find(|p| *p == phase)
        {
            return Next::Phase {
                task: task.id.clone(),
                phase,
                attempt: *attempt,
                rerun: true,
            };
        }
        if let Some(phase) = progress.state.phase() {
            return Next::Phase {
                task: task.id.clone(),
                phase,
                attempt: progress.next_attempt(phase),
                rerun: false,
            };
        }
    }
    // Nothing in flight: skip what cannot run, start what is ready, in graph order.
    let state_of = |id: &str| fold.progress.get(id).map(|p| p.state);
    for task in &fold.tasks {
        if state_of(&task.id) != Some(TaskPhase::Pending) {
            continue;
        }
        let blocked = task.depends_on.iter().find(|dep| {
            matches!(
                state_of(dep),
                Some(TaskPhase::Failed | TaskPhase::Skipped) | None
            )
        });
        if let Some(dep) = blocked {
            return Next::Move {
                task: task.id.clone(),
                state: TaskPhase::Skipped,
                revision: 0,
                replan: 0,
                reason: Some(format!(
                    "it depends on `{dep}`, which {}",
                    match state_of(dep) {
                        Some(TaskPhase::Skipped) => "was skipped",
                        _ => "failed",
                    }
                )),
            };
        }
    }
    let active = fold
        .tasks
        .iter()
        .filter(|t| state_of(&t.id).is_some_and(|s| s != TaskPhase::Pending && !s.is_final()))
        .count();
    let room = usize::try_from(spec.parallel.get()).unwrap_or(usize::MAX);
    for task in fold.tasks.iter().filter(|_| active < room) {
        if state_of(&task.id) == Some(TaskPhase::Pending)
            && task
                .depends_on
                .iter()
                .all(|dep| state_of(dep) == Some(TaskPhase::Done))
        {
            return Next::Move {
                task: task.id.clone(),
                state: TaskPhase::Planning,
                revision: 0,
                replan: 0,
                reason: None,
            };
        }
    }
    if !busy.is_empty() {
        return Next::Wait;
    }
    let ids = |wanted: TaskPhase| -> Vec<String> {
        fold.tasks
            .iter()
            .filter(|t| state_of(&t.id) == Some(wanted))
            .map(|t| format!("`{}`", t.id))
            .collect()
    };
    let (failed, skipped) = (ids(TaskPhase::Failed), ids(TaskPhase::Skipped));
    if failed.is_empty() && skipped.is_empty() {
        if spec.commit == OutcomeCommit::End && fold.end_commit.is_none() {
            return Next::CommitEnd;
        }
        if spec.deliver.is_some() {
            match &fold.delivered {
                None => return Next::Deliver,
                Some((Verdict::Pass, _)) => {}
                Some((_, reason)) => {
                    return Next::Finish {
                        outcome: Outcome::Failure,
                        reason: format!(
                            "every task is done, but delivery failed: {}",
                            reason.as_deref().unwrap_or("it failed")
                        ),
                    };
                }
            }
        }
        return Next::Finish {
            outcome: Outcome::Success,
            reason: format!(
                "every task is done ({})",
                fold.tasks
                    .iter()
                    .map(|t| t.id.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        };
    }
    let mut reason = format!("failed: {}", failed.join(", "));
    if !skipped.is_empty() {
        reason.push_str(&format!("; skipped: {}", skipped.join(", ")));
    }
    Next::Finish {
        outcome: Outcome::Failure,
        reason,
    }
}

/// `task` goes back to execute with `reason` as a revision, or fails once `max_revisions` is
/// used up.
pub fn revise(task: &str, progress: &TaskProgress, reason: String, spec: &OutcomeSpec) -> Next {
    let (revision, replan) = (progress.revision, progress.replan);
    let next = revision.saturating_add(1);
    let (state, revision, reason) = if next > spec.max_revisions {
        (
            TaskPhase::Failed,
            revision,
            format!(
                "{reason}; `max_revisions` ({}) is used up",
                spec.max_revisions
            ),
        )
    } else {
        (TaskPhase::Executing, next, reason)
    };
    Next::Move {
        task: task.to_owned(),
        state,
        revision,
        replan,
        reason: Some(reason),
    }
}

/// Where a phase's end sends its task.
fn transition(task: &str, progress: &TaskProgress, ended: &PhaseEnd, spec: &OutcomeSpec) -> Next {
    let (revision, replan) = (progress.revision, progress.replan);
    let why = ended.reason.as_deref().unwrap_or("it failed");
    let goto = |state: TaskPhase, revision: u32, replan: u32, reason: Option<String>| Next::Move {
        task: task.to_owned(),
        state,
        revision,
        replan,
        reason,
    };
    let revise = |reason: String| revise(task, progress, reason, spec);
    let replan_with = |reason: String| {
        let next = replan.saturating_add(1);
        if next > spec.max_replans {
            goto(
                TaskPhase::Failed,
                revision,
                replan,
                Some(format!(
                    "{reason}; `max_replans` ({}) is used up",
                    spec.max_replans
                )),
            )
        } else {
            goto(TaskPhase::Planning, revision, next, Some(reason))
        }
    };
    match (ended.phase.as_str(), ended.verdict) {
        ("plan", Verdict::Pass) => goto(TaskPhase::Executing, revision, replan, None),
        ("plan", Verdict::Fail) => replan_with(format!("planning failed: {why}")),
        ("execute", Verdict::Pass) => goto(TaskPhase::Scrutinizing, revision, replan, None),
        ("execute", Verdict::Fail) => revise(format!("execution failed: {why}")),
        // The critic has no verdict: what it found (or why it did not finish) goes to validate.
        ("scrutinize", _) => goto(TaskPhase::Verifying, revision, replan, None),
        ("verify", Verdict::Pass) => goto(TaskPhase::Validating, revision, replan, None),
        ("verify", Verdict::Fail) => {
            let mut reason = format!("verify failed: {why}");
            if !ended.tail.trim().is_empty() {
                reason.push_str("\n--- output tail ---\n");
                reason.push_str(&ended.tail);
            }
            revise(reason)
        }
        ("validate", Verdict::Pass) => Next::Accept {
            task: task.to_owned(),
        },
        ("validate", Verdict::Fail) if why.starts_with(REPLAN) => {
            replan_with(format!("the validator asked for a new plan: {why}"))
        }
        ("validate", Verdict::Fail) => revise(format!("the validator asked for a revision: {why}")),
        // A step of no known phase (a log from another version): the task fails, saying so.
        (other, _) => goto(
            TaskPhase::Failed,
            revision,
            replan,
            Some(format!("its phase `{other}` is unknown to this cordon")),
        ),
    }
}
