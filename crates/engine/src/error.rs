//! The engine's error type, with the exit-code class each error maps to.

use crate::secrets::SecretsError;

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// The pipeline uses something this version cannot run (exit 2).
    #[error("{0}")]
    Unsupported(String),
    #[error(transparent)]
    Secrets(#[from] SecretsError),
    #[error(transparent)]
    Git(#[from] cordon_git::GitError),
    #[error(transparent)]
    Store(#[from] cordon_store::StoreError),
    /// A required sandbox layer is missing (exit 3).
    #[error("{0}")]
    Refused(cordon_protocol::Refusal),
    /// An agent step could not run or finish (a missing key, a provider that kept failing, a
    /// refused layer): the run stops, resumable; the exit class is the error's own.
    #[error(transparent)]
    Agent(#[from] crate::agent::DriverError),
    #[error("the sandbox failed: {0}")]
    Sandbox(String),
    /// A `budget` limit was reached: the run stops, resumable with a higher limit (exit 1).
    #[error("{}; resume with a higher limit: `cordon run --resume <RUN_ID> {} <LIMIT>`", .0.reason(), .0.flag())]
    Budget(crate::budget::Exhausted),
    /// `deliver` or `report` could not act: refused (exit 2), a token the forge refused (exit
    /// 2), or a forge that is down (exit 1); the run stops, resumable.
    #[error(transparent)]
    Delivery(#[from] crate::deliver::DeliveryError),
    #[error("cannot {action} `{path}`")]
    Workspace {
        action: &'static str,
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// How the cli turns an error into an exit code (Appendix A).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorClass {
    /// 2: configuration or usage.
    Usage,
    /// 3: a sandbox layer cannot be enforced.
    Layer,
    /// 1: a runtime failure.
    Runtime,
}

impl EngineError {
    pub fn class(&self) -> ErrorClass {
        match self {
            EngineError::Unsupported(_) | EngineError::Secrets(_) => ErrorClass::Usage,
            EngineError::Git(err) if err.is_usage() => ErrorClass::Usage,
            EngineError::Refused(_) => ErrorClass::Layer,
            EngineError::Delivery(err) if err.is_usage() => ErrorClass::Usage,
            EngineError::Agent(err) => err.class(),
            EngineError::Git(_)
            | EngineError::Store(_)
            | EngineError::Sandbox(_)
            | EngineError::Budget(_)
            | EngineError::Delivery(_)
            | EngineError::Workspace { .. } => ErrorClass::Runtime,
        }
    }
}

/// `err` and each of its sources on one line, joined by `: ` (how a failed step or a refused run
/// is reported: the outermost context first, the root cause last).
pub fn error_chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(next) = source {
        text.push_str(": ");
        text.push_str(&next.to_string());
        source = next.source();
    }
    text
}
