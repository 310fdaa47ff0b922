//! The seam the agent loop plugs into: an [`AgentDriver`] runs one agent step attempt inside the
//! attempt's sandbox session, logging its model and tool calls through a [`Journal`] the engine
//! provides, and decides the attempt's verdict. [`crate::agent_step::LoopDriver`] is the real
//! driver (`cordon-agent`'s loop); engine tests script their own.

use std::path::Path;

use cordon_agent::Journal;
use cordon_pipeline::{AgentStep, Pipeline, Step};
use cordon_protocol::event::Verdict;
use cordon_protocol::{Attempt, Record};

use crate::agent_step::AgentStepError;
use crate::executor::StepSession;

/// What the driver gets for one attempt.
pub struct AgentTask<'a> {
    pub pipeline: &'a Pipeline,
    pub step: &'a Step,
    pub agent: &'a AgentStep,
    pub attempt: Attempt,
    /// The workspace path (the same inside the sandbox).
    pub workspace: &'a Path,
    /// Every retry's feedback so far, oldest first.
    pub feedback: &'a [String],
}

/// How an attempt ended: the `step.finished` fields the driver decides.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AgentVerdict {
    pub verdict: Verdict,
    /// Why it failed (`None` for a pass).
    pub reason: Option<String>,
}

impl AgentVerdict {
    pub fn pass() -> AgentVerdict {
        AgentVerdict {
            verdict: Verdict::Pass,
            reason: None,
        }
    }

    pub fn fail(reason: impl Into<String>) -> AgentVerdict {
        AgentVerdict {
            verdict: Verdict::Fail,
            reason: Some(reason.into()),
        }
    }
}

/// Runs agent steps.
pub trait AgentDriver {
    /// On resume, before anything runs: the run's records so far (a replay provider learns
    /// which turns finished attempts were already served).
    fn restore(&mut self, _records: &[Record]) {}

    /// Runs the attempt in `session` and decides its verdict. Every event (`llm.*`, `tool.*`,
    /// `policy.*`, `sandbox.exec`, `artifact.written`) goes through `journal`, which scrubs
    /// secrets and appends it; a journal error means the engine stopped, and the driver
    /// returns it at once. An `Err` from the driver itself (a provider that kept failing, a
    /// refused sandbox layer) stops the run, resumable, without using up the attempt.
    fn run(
        &mut self,
        task: &AgentTask<'_>,
        session: &mut dyn StepSession,
        journal: &mut dyn Journal,
    ) -> Result<AgentVerdict, AgentStepError>;
}
