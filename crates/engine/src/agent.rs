//! The seam the agent loop plugs into: [`AgentDriver`] runs one agent step attempt inside the
//! attempt's sandbox session, logging its model calls and tool calls through the engine; the
//! engine then decides the verdict ([`crate::verdict`]) from the artifact or the final message.
//! No implementation lives here: until one is given, `preflight` refuses agent steps.

use cordon_pipeline::{AgentStep, Pipeline, Step};
use cordon_protocol::{Attempt, Event};

use crate::executor::StepSession;

/// What the driver gets for one attempt.
pub struct AgentTask<'a> {
    pub pipeline: &'a Pipeline,
    pub step: &'a Step,
    pub agent: &'a AgentStep,
    pub attempt: Attempt,
    /// Every retry's feedback so far, oldest first.
    pub feedback: &'a [String],
}

/// How the agent ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AgentEnd {
    /// The model answered without tool calls; its final message.
    Finished { final_message: String },
    /// The attempt failed (`max_iterations` reached, transcript exhausted, …) with this reason.
    Failed { reason: String },
}

/// The engine asked to stop while the agent was running (the log is the truth; the driver must
/// return at once).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Interrupted;

/// Runs agent steps.
pub trait AgentDriver {
    /// Runs the attempt in `session`; every event (`llm.*`, `tool.*`, `policy.*`,
    /// `artifact.written`) goes through `log`, which scrubs secrets and appends it. An `Err`
    /// from the driver itself (a provider that kept failing) stops the run, resumable, without
    /// using up the attempt.
    fn run(
        &mut self,
        task: &AgentTask<'_>,
        session: &mut dyn StepSession,
        log: &mut dyn FnMut(Event) -> Result<(), Interrupted>,
    ) -> Result<AgentEnd, String>;
}
