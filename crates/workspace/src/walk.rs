//! A bounded walk over the workspace through the view: every entry below the top (none inside a
//! `.git`), parents before their children, each directory's entries sorted by name. Links are
//! reported, never followed; a directory holding its own `.git` (a nested repository or a
//! submodule's work tree) is reported and not entered.

use crate::meta::{Kind, Meta};
use crate::path::{MAX_PATH, WsPath};
use crate::view::{View, ViewError};

/// How much a walk may visit; past a limit it stops with an error naming it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Entries visited in all.
    pub entries: usize,
    /// Directories below the top.
    pub depth: usize,
    /// Entries of one directory.
    pub per_directory: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            entries: 1_000_000,
            depth: 256,
            per_directory: 1_000_000,
        }
    }
}

/// What the visitor wants done with a directory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Visit {
    Descend,
    Skip,
}

/// Receives the walk's entries.
pub trait Visitor {
    /// An entry (of any kind). [`Visit::Descend`] on a directory lists it next.
    fn entry(&mut self, path: &WsPath, meta: &Meta) -> Visit;
    /// A directory holding its own `.git`: not entered.
    fn repository(&mut self, _path: &WsPath) {}
}

#[derive(Debug, thiserror::Error)]
pub enum WalkError {
    #[error(transparent)]
    View(#[from] ViewError),
    #[error(
        "the workspace has more than {limit} entries outside ignored directories, more than \
         cordon walks; list generated directories in .gitignore or use a smaller workspace"
    )]
    TooManyEntries { limit: usize },
    #[error(
        "`{path}` lies more than {limit} directories (or {MAX_PATH} bytes) below the workspace, \
         deeper than cordon walks; move or remove it, or list it in .gitignore"
    )]
    TooDeep { path: String, limit: usize },
}

impl View {
    /// Walks the workspace within `limits`, handing every entry to `visitor`; returns how many
    /// entries it visited.
    pub fn walk(&self, limits: &Limits, visitor: &mut dyn Visitor) -> Result<usize, WalkError> {
        let top = self.list(None, limits.per_directory)?;
        // Entries listed (held in memory until visited) count against the limit too, so a deep
        // chain of full directories cannot hold `depth × per_directory` names at once.
        let mut listed = top.entries.len();
        let too_many = || WalkError::TooManyEntries {
            limit: limits.entries,
        };
        if listed > limits.entries {
            return Err(too_many());
        }
        let mut stack = vec![(None::<WsPath>, top.entries.into_iter())];
        let mut visited = 0usize;
        while let Some((dir, entries)) = stack.last_mut() {
            let Some(entry) = entries.next() else {
                stack.pop();
                continue;
            };
            let path =
                WsPath::child(dir.as_ref(), &entry.name).map_err(|_| WalkError::TooDeep {
                    path: dir.as_ref().map_or_else(String::new, WsPath::shown),
                    limit: limits.depth,
                })?;
            visited += 1;
            if visitor.entry(&path, &entry.meta) == Visit::Skip
                || entry.meta.kind != Kind::Directory
            {
                continue;
            }
            if stack.len() > limits.depth {
                return Err(WalkError::TooDeep {
                    path: path.shown(),
                    limit: limits.depth,
                });
            }
            let listing = self.list(Some(&path), limits.per_directory)?;
            listed += listing.entries.len();
            if listed > limits.entries {
                return Err(too_many());
            }
            if listing.has_git {
                visitor.repository(&path);
                continue;
            }
            stack.push((Some(path), listing.entries.into_iter()));
        }
        Ok(visited)
    }
}
