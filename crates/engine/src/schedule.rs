//! The scheduler: a pure function from the run's state and its pipeline to the next action.

use cordon_pipeline::{Pipeline, Route};
use cordon_protocol::event::{Outcome, Verdict};
use cordon_protocol::{Attempt, StepName};

use crate::state::{Position, RunState};

/// Which declared outputs are deleted before a step starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cleanup {
    /// None: the step runs as the run's next step.
    None,
    /// Every step's `produces` and `artifact` files: the first step after a retry.
    Hygiene,
    /// The step's own: it was interrupted and runs again from its start.
    Rerun,
}

/// What the engine does next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Start `step` at the run's current attempt, after `cleanup`.
    RunStep {
        step: StepName,
        attempt: Attempt,
        cleanup: Cleanup,
    },
    /// Log where the verdict of `from` sends the run.
    Route {
        from: StepName,
        to: Route,
    },
    /// Grow the attempt counter (feedback first) and go to `to`.
    Retry {
        to: StepName,
        attempt: Attempt,
    },
    Finish {
        outcome: Outcome,
        reason: String,
    },
    /// Nothing left: the run has this outcome.
    Done(Outcome),
}

/// The next action. Never fails: a state the pipeline cannot continue (a step name it no longer
/// has) finishes the run in failure with a reason.
pub fn next(state: &RunState, pipeline: &Pipeline) -> Action {
    let missing = |step: &StepName| Action::Finish {
        outcome: Outcome::Failure,
        reason: format!("the pipeline has no step `{step}`"),
    };
    match &state.position {
        Position::NotStarted | Position::At { step: None, .. } => match pipeline.steps.first() {
            Some(first) => Action::RunStep {
                step: first.name.clone(),
                attempt: state.attempt,
                cleanup: Cleanup::None,
            },
            None => Action::Finish {
                outcome: Outcome::Success,
                reason: "the pipeline has no steps".to_owned(),
            },
        },
        Position::At {
            step: Some(step),
            hygiene,
        } => match pipeline.step(step) {
            Some(_) => Action::RunStep {
                step: step.clone(),
                attempt: state.attempt,
                cleanup: if *hygiene {
                    Cleanup::Hygiene
                } else {
                    Cleanup::None
                },
            },
            None => missing(step),
        },
        Position::Running { step, .. } => match pipeline.step(step) {
            Some(_) => Action::RunStep {
                step: step.clone(),
                attempt: state.attempt,
                cleanup: Cleanup::Rerun,
            },
            None => missing(step),
        },
        Position::Finished { step, verdict } => match pipeline.step(step) {
            Some(s) => Action::Route {
                from: step.clone(),
                to: match verdict {
                    Verdict::Pass => s.on_pass.clone(),
                    Verdict::Fail => s.on_fail.clone(),
                    Verdict::Unverifiable => s.on_unverifiable.clone(),
                },
            },
            None => missing(step),
        },
        Position::RetryDue { step } => match state.attempt.next() {
            Some(next) if next.get() <= state.max_attempts => Action::Retry {
                to: step.clone(),
                attempt: next,
            },
            _ => Action::Finish {
                outcome: Outcome::Failure,
                reason: format!(
                    "attempt budget exhausted: retrying `{step}` would be attempt {} of {}; resume with a higher --max-attempts to continue",
                    state.attempt.get().saturating_add(1),
                    state.max_attempts
                ),
            },
        },
        Position::Ending { outcome, reason } => Action::Finish {
            outcome: *outcome,
            reason: reason.clone(),
        },
        Position::Done => Action::Done(state.outcome.unwrap_or(Outcome::Failure)),
    }
}
