//! `GitError`: what the host's git refuses or fails at, each message naming the file and the fix.

use std::path::PathBuf;

use cordon_workspace::{Kind, ViewError, WalkError};

#[derive(Debug, thiserror::Error)]
pub enum GitError {
    #[error(
        "the workspace `{0}` is not a git work tree cordon can use (no .git, or a .git file that does not check out); run `git init` there or pass the top of the work tree with -w"
    )]
    NotGit(PathBuf),
    #[error(
        "the repository has no commit yet; commit the pipeline and its tooling files first (`git add` + `git commit`)"
    )]
    NoHead,
    #[error(
        "tooling file `{0}` is not tracked by git; commit it first (`git add {0} && git commit`)"
    )]
    Untracked(String),
    #[error("tooling file `{0}` has uncommitted changes; commit or restore it before `cordon run`")]
    Modified(String),
    #[error(
        "tooling file `{path}` is {kind} in the work tree, not a regular file; restore it with `git checkout -- {path}`"
    )]
    ToolingNotAFile { path: String, kind: Kind },
    #[error(
        "the pipeline has a commit action and the worktree is dirty; commit or stash these paths first:\n{0}"
    )]
    Dirty(String),
    #[error(
        "refusing to commit: `{0}` changed since the run started (a step may have planted git configuration); inspect it, then resume"
    )]
    Tampered(PathBuf),
    #[error("refusing to use git: `{0}` was replaced since the run started; inspect the workspace")]
    Replaced(PathBuf),
    #[error(
        "refusing to write into the git directory: `{0}` is a symbolic link or not a directory (a step may have planted it); remove it, then resume"
    )]
    LinkedGitDir(PathBuf),
    #[error("the repository uses {0}, which cordon's git does not support; use a SHA-1 repository")]
    Unsupported(String),
    #[error("the repository's objects are unusable: {0}")]
    Objects(String),
    #[error("git cannot {action}: {message}")]
    Library {
        action: &'static str,
        message: String,
    },
    #[error(transparent)]
    View(#[from] ViewError),
    #[error(transparent)]
    Walk(#[from] WalkError),
    #[error(
        "`{path}` is larger than {limit} bytes, more than cordon reads as a `.gitignore`; shrink it"
    )]
    IgnoreTooLarge { path: String, limit: usize },
    #[error(
        "the tree of HEAD has more than {limit} entries (or nests deeper than cordon follows); cordon's git cannot take it"
    )]
    TreeTooLarge { limit: usize },
    #[error("cannot {action} `{path}`")]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl GitError {
    /// Errors that are the user's configuration to fix (exit 2).
    pub fn is_usage(&self) -> bool {
        matches!(
            self,
            GitError::NotGit(_)
                | GitError::NoHead
                | GitError::Untracked(_)
                | GitError::Modified(_)
                | GitError::ToolingNotAFile { .. }
                | GitError::Dirty(_)
                | GitError::Unsupported(_)
        )
    }

    pub(crate) fn library(action: &'static str) -> impl FnOnce(gix_error::Error) -> GitError {
        move |err| GitError::Library {
            action,
            message: err.to_string(),
        }
    }

    pub(crate) fn io(
        action: &'static str,
        path: impl Into<PathBuf>,
    ) -> impl FnOnce(std::io::Error) -> GitError {
        let path = path.into();
        move |source| GitError::Io {
            action,
            path,
            source,
        }
    }
}
