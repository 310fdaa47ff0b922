//! The host's one view of workspace content (DESIGN §10). Everything in the workspace may have
//! been written by an adversary, so the host `cordon` process reads, hashes, lists, deletes and
//! writes workspace entries only through [`View`]: the workspace directory opened once, every path
//! a validated [`WsPath`] resolved beneath it without following any link, only regular files read
//! as content, every read bounded by the caller.
//!
//! **Invariant:** no other host code joins a workspace path and hands it to the kernel's normal
//! lookup (`std::fs::read(workspace.join(..))`, `remove_file`, `metadata`) — because one such
//! call is enough for a planted symbolic link to make the host read, send or delete a file outside
//! the workspace, and a planted FIFO to hang it.
#![forbid(unsafe_code)]

mod meta;
mod path;
pub mod tree;
mod view;
mod walk;

pub use meta::{Kind, Meta};
pub use path::{ENV_TEMPLATES, MAX_NAME, MAX_PATH, PathError, WsPath, is_env_secret, is_git_name};
pub use view::{Bounded, Listed, Listing, OpenFile, Removed, Resolve, View, ViewError};
pub use walk::{Limits, Visit, Visitor, WalkError};
