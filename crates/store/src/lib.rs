//! The state directory: one SQLite database (`cordon.db`) holding runs, their append-only events,
//! blobs and setup stamps, plus `locks/` with one lock file per live run.
//!
//! The store keeps events; it never interprets them (that is the engine's fold). Its invariants:
//! a run's sequence numbers are contiguous from 1 (enforced by a trigger, not by callers), events
//! are never updated or deleted (triggers again), and an event whose type decides the route is
//! committed with `synchronous=FULL` before `append` returns.
#![forbid(unsafe_code)]

mod error;
mod lock;
mod read;
mod rows;
mod run_id;
mod schema;
mod state_dir;
mod store;

pub use error::StoreError;
pub use lock::Lock;
pub use read::{EventFilter, Reader};
pub use run_id::{new_run_id, random_hex};
pub use state_dir::{StateDir, StateDirSource};
pub use store::{RunRow, Store};
