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
        "refusing to use the git directory: `{0}` is a symbolic link, a special file or not what git keeps there (a step may have planted it); remove it, then resume"
    )]
    LinkedGitDir(PathBuf),
    #[error("the repository uses {0}, which cordon's git does not support; use a SHA-1 repository")]
    Unsupported(String),
    /// `allow_git_mutations` on a repository a private git directory cannot stand in for.
    #[error(
        "refusing `allow_git_mutations`: the git directory `{git_dir}` {problem}; leave \
         allow_git_mutations off (the git directory is then read-only as a whole) or run on a \
         plain clone",
        git_dir = git_dir.display()
    )]
    PrivateGit { git_dir: PathBuf, problem: String },
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
        "`{path}` takes the ignore rules past what cordon's git reads ({per_file} bytes per file, {total} bytes and {patterns} rules in all); shrink or merge the `.gitignore` files"
    , per_file = crate::ignore::MAX_RULES, total = crate::ignore::MAX_RULE_BYTES, patterns = crate::ignore::MAX_PATTERNS)]
    IgnoreTooLarge { path: String },
    #[error(
        "matching the work tree against its `.gitignore` rules would take more than cordon's git spends on it ({} units of rule length × path length); shorten the rules with many wildcards or merge them",
        crate::ignore::MAX_MATCHING
    )]
    IgnoreTooSlow,
    #[error(
        "the work tree names more than {limit} bytes of paths (deep directories make every name long); cordon's git cannot take it — move generated trees out of the workspace or ignore them"
    )]
    WorkTreeTooLarge { limit: usize },
    #[error(
        "the tree of HEAD has more than {limit} entries (or nests deeper than cordon follows); cordon's git cannot take it"
    )]
    TreeTooLarge { limit: usize },
    #[error(
        "the tree of HEAD holds {0}, which git never writes; cordon's git cannot take it (was the repository written by a step?)"
    )]
    ForgedTree(String),
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
            message: without_metadata(&err.to_string()),
        }
    }

    pub fn io(
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

/// gitoxide's message without the `key=value` details it appends (`, input="…"`): those can
/// quote the bytes of a file a step planted — the first line of whatever a link pointed at.
fn without_metadata(text: &str) -> String {
    let is_key = |rest: &str| {
        let quoted = rest.strip_prefix('"');
        let rest = quoted.unwrap_or(rest);
        let key_len = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        let after = &rest[key_len..];
        let after = if quoted.is_some() {
            after.strip_prefix('"').unwrap_or("")
        } else {
            after
        };
        key_len > 0 && after.starts_with('=')
    };
    let end = text
        .match_indices(", ")
        .map(|(at, _)| at)
        .find(|&at| is_key(&text[at + 2..]))
        .unwrap_or(text.len());
    cordon_protocol::text::escape_line(&text[..end]).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn library_details_that_could_quote_a_file_are_dropped() {
        for (text, shown) in [
            (
                "Invalid packed reference, input=\"canary secret\", line=1",
                "Invalid packed reference",
            ),
            (
                "Could not read reference, path=\"/x/refs/heads/main\"",
                "Could not read reference",
            ),
            ("plain message", "plain message"),
            ("a, b and c", "a, b and c"),
            ("line\nforged", "line\\nforged"),
        ] {
            assert_eq!(without_metadata(text), shown, "{text}");
        }
    }
}
