//! The seam the agent loop plugs into: an [`AgentDriver`] runs one agent step attempt inside the
//! attempt's sandbox session, logging its model and tool calls through a [`Journal`] the engine
//! provides, and decides the attempt's verdict. [`crate::agent_step::LoopDriver`] is the real
//! driver (`cordon-agent`'s loop); engine tests script their own.

use std::path::Path;

use cordon_agent::Journal;
use cordon_agent::provider::SetupError;
use cordon_agent::{ProviderError, ToolHostError};
use cordon_pipeline::{AgentStep, Pipeline, Step};
use cordon_protocol::event::Verdict;
use cordon_protocol::{Attempt, Record, Refusal};

use crate::ErrorClass;

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
    /// Tools the engine answers itself (an outcome phase's `submit_tasks` / `submit_plan`).
    pub custom: Option<&'a std::cell::RefCell<dyn cordon_agent::CustomTools>>,
    /// The run's secrets, for the values MCP servers' `env` names.
    pub secrets: &'a crate::Secrets,
}

/// How an attempt ended: the `step.finished` fields the driver decides.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AgentVerdict {
    pub verdict: Verdict,
    /// Why it failed (`None` for a pass).
    pub reason: Option<String>,
    /// The agent's final message, when it finished (an outcome phase judges it).
    pub text: Option<String>,
}

impl AgentVerdict {
    pub fn pass() -> AgentVerdict {
        AgentVerdict {
            verdict: Verdict::Pass,
            reason: None,
            text: None,
        }
    }

    pub fn fail(reason: impl Into<String>) -> AgentVerdict {
        AgentVerdict {
            verdict: Verdict::Fail,
            reason: Some(reason.into()),
            text: None,
        }
    }

    /// The agent said the change cannot be verified (`verdicts.unverifiable`).
    pub fn unverifiable(reason: impl Into<String>) -> AgentVerdict {
        AgentVerdict {
            verdict: Verdict::Unverifiable,
            reason: Some(reason.into()),
            text: None,
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
    ) -> Result<AgentVerdict, DriverError>;

    /// A driver for another thread running the same run's agent steps (an outcome run's
    /// parallel task): it shares this one's provider (so a replay serves each turn once) and
    /// grant bounds, and is already restored. `None`: this driver cannot be shared, and
    /// `parallel` above 1 is refused.
    fn fork(&self) -> Option<Box<dyn AgentDriver + Send>> {
        None
    }
}

/// Why an agent step could not run or finish — the seam's own error, whatever the driver. Not a
/// failed attempt: those are verdicts.
#[derive(Debug, thiserror::Error)]
pub enum DriverError {
    /// The provider cannot be built (missing key variable, bad `base_url`, `SSL_CERT_FILE`,
    /// unreadable transcript): exit 2 before any sandbox starts.
    #[error(transparent)]
    Setup(#[from] SetupError),
    /// A context file is not in the run's tooling snapshot.
    #[error(
        "the context file `{0}` is not in the run's tooling snapshot; commit it and start a new run"
    )]
    ContextFile(String),
    /// The step names an agent file the pipeline did not load.
    #[error("the agent `{0}` has no agent file in the pipeline")]
    UnknownAgent(String),
    /// 401/403 from the provider: exit 2.
    #[error(transparent)]
    Auth(ProviderError),
    /// The provider still failed after its retries: the run stops, resumable, without using up
    /// an attempt (exit 1).
    #[error("{0}")]
    Provider(ProviderError),
    /// A sandbox layer is missing (exit 3).
    #[error("{0}")]
    Refused(Refusal),
    /// The session broke under the agent.
    #[error(transparent)]
    Host(ToolHostError),
    /// The store failed (or an observer stopped the run).
    #[error(transparent)]
    Journal(cordon_agent::JournalError),
}

impl DriverError {
    /// The exit-code class of Appendix A.
    pub fn class(&self) -> ErrorClass {
        match self {
            DriverError::Setup(_)
            | DriverError::ContextFile(_)
            | DriverError::UnknownAgent(_)
            | DriverError::Auth(_) => ErrorClass::Usage,
            // An untrusted certificate is configuration (`SSL_CERT_FILE`), not a passing outage.
            DriverError::Provider(ProviderError::Tls { .. }) => ErrorClass::Usage,
            DriverError::Refused(_) => ErrorClass::Layer,
            DriverError::Provider(_) | DriverError::Host(_) | DriverError::Journal(_) => {
                ErrorClass::Runtime
            }
        }
    }
}
