//! Identifiers and wire types shared by every other cordon crate. No IO.
#![forbid(unsafe_code)]

mod attempt;
pub mod event;
mod image_ref;
mod refusal;
mod run_id;
pub mod secret;
mod step_name;
pub mod terminal;
pub mod text;

pub use attempt::Attempt;
pub use event::{Event, Record, SCHEMA_VERSION};
pub use image_ref::{ImageRef, ImageRefError, MAX_IMAGE_NAME, check_name as check_image_name};
pub use refusal::Refusal;
pub use run_id::{RunId, RunIdError};
pub use step_name::{MAX_TASK_ID, PHASES, StepName, StepNameError, is_task_id};
