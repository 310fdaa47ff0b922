//! Identifiers and wire types shared by every other cordon crate. No IO.
#![forbid(unsafe_code)]

mod attempt;
pub mod event;
mod refusal;
mod run_id;
mod step_name;
pub mod terminal;
pub mod text;

pub use attempt::Attempt;
pub use event::{Event, Record, SCHEMA_VERSION};
pub use refusal::Refusal;
pub use run_id::{RunId, RunIdError};
pub use step_name::{MAX_TASK_ID, PHASES, StepName, StepNameError, is_task_id};
