//! The loop: a run is a fold over its events ([`RunState::apply`]), a pure scheduler picks the
//! next action from that state and the pipeline ([`schedule::next`]), and the [`Engine`] carries
//! the action out — appending `step.started` durably before any side effect, running commands
//! through an [`Executor`], routing on verdicts, retrying with feedback, committing through the
//! host's git in process ([`cordon_git::Repo`], through [`workspace::HostWorkspace`]).
//!
//! The engine renders nothing: observers ([`Observer`]) see every appended record.
#![forbid(unsafe_code)]

pub mod agent;
pub mod agent_step;
pub mod batch;
pub mod budget;
pub mod deliver;
pub mod egress;
mod engine;
mod error;
pub mod executor;
mod host_program;
pub mod images;
pub mod lane;
pub mod mcp;
pub mod outcome;
mod output;
mod preflight;
pub mod resources;
pub mod run;
pub mod schedule;
mod secrets;
mod setup;
pub mod side;
mod state;
pub mod workspace;

pub use agent::{AgentDriver, AgentTask, AgentVerdict, DriverError};
pub use engine::{Control, Delivery, Ending, Engine, Observer, RunContext};
pub use error::{EngineError, ErrorClass, error_chain};
pub use executor::{CommandResult, Executor, SessionSpec, StepSession};
pub use outcome::TaskFold;
pub use preflight::preflight;
pub use schedule::{Action, Cleanup};
pub use secrets::{Secrets, SecretsError};
pub use setup::stamp;
pub use state::{Position, RunState, StepStatus};
