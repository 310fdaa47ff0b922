//! The store: runs, their append-only events, blobs and setup stamps — in the state directory's
//! SQLite database (`cordon.db`, with `locks/` holding one lock file per live run), or, with the
//! `scale-out` feature and `--store postgres://…`, in a PostgreSQL database shared by many
//! machines, whose run locks are leases (DESIGN §16).
//!
//! The store keeps events; it never interprets them (that is the engine's fold). Its invariants:
//! a run's sequence numbers are contiguous from 1 (enforced by a trigger, not by callers), events
//! are never updated or deleted (triggers again), and an event whose type decides the route is
//! committed with `synchronous=FULL` before `append` returns. The PostgreSQL backend keeps the
//! same invariants with its own triggers and one append function (`pg`).
#![forbid(unsafe_code)]

mod batch;
mod error;
mod lock;
#[cfg(feature = "scale-out")]
mod pg;
mod read;
mod rows;
mod run_id;
mod schema;
mod sqlite;
mod state_dir;
mod store;
mod url;

pub use batch::{BatchRow, TaskRow};
pub use error::StoreError;
pub use lock::Lock;
#[cfg(feature = "scale-out")]
pub use pg::{LeaseTimes, on_lease_lost, release_leases, set_lease_times};
pub use read::{EventFilter, Reader};
pub use run_id::{new_run_id, random_hex};
pub use state_dir::{StateDir, StateDirSource};
pub use store::{RunRow, Store};
