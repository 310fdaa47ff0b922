//! Outcome runs (DESIGN §13): one sentence of intent becomes a task graph (`decompose`), and
//! each task goes through plan → execute → scrutinize → verify → validate under the run's
//! budgets. [`state`] folds the task graph and progress from the log, [`schedule`] decides the
//! next action purely, [`submit`] holds the engine's own tools and [`message`] the phases' task
//! messages; the engine (`engine/outcome.rs`) carries the actions out with the attempt
//! machinery of a steps run.

pub mod message;
pub mod schedule;
pub mod state;
pub mod submit;

pub use schedule::{Next, next};
pub use state::{TaskFold, TaskProgress};
