//! The host's git for a run, in process (DESIGN §10): no host `git` process runs on behalf of a
//! run, no workspace path name passes through a line-based protocol, and every read of the work
//! tree goes through the workspace view ([`cordon_workspace::View`]) — so nothing a step planted
//! in the work tree (a link, a FIFO, a file name with a newline, a filter in `.gitattributes`, a
//! `git` on `PATH`) can make the host read, follow, run or commit something else.
//!
//! Entry points: [`Repo::open`], then [`Repo::diff`] after each step attempt, [`Repo::commit`]
//! for the commit action, [`Repo::check_tooling`] and [`Repo::dirty_paths`] at run start,
//! [`Repo::status_short`] on resume; [`user_identity`] for the author.
//!
//! Formats are gitoxide's (objects, packs, refs, the index, ignore rules, config); the work tree
//! and the git directory's writable parts are cordon's to read and check.
#![forbid(unsafe_code)]

mod carry;
mod checks;
mod commit;
mod deliver;
mod diff;
mod error;
mod fuzzing;
mod identity;
mod ignore;
mod pack;
mod parallel;
pub mod private;
mod refs;
mod repo;
mod tree;
mod worktree;

pub use carry::{Carried, MAX_CARRIED, MAX_CARRIED_OBJECTS};
pub use checks::WorkDiff;
pub use commit::{Committed, MAX_FILES};
pub use deliver::Changed;
pub use diff::{Change, PatchLimits, changes, quote, status};
pub use error::GitError;
pub use fuzzing::fuzz_stage;
/// A git object id (a run's accepted commit, for the engine).
pub use gix_hash::ObjectId;
pub use identity::user_identity;
pub use ignore::{MAX_RULE_BYTES, MAX_RULES};
pub use parallel::{MAX_CONFLICT_REPORT, Merged, Worktree};
pub use repo::{Dirs, Guard, Identity, Repo};
pub use tree::{Entry, Flat, Mode};
pub use worktree::{Ignoring, MAX_BLOB, SPARSE_FROM, Seen, Skip, Skipped, Snapshot, StatCache};
