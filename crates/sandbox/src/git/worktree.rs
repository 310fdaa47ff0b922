//! Finding the linked worktrees a git directory has registered (`git worktree add`), so that one
//! placed inside the workspace gets its `.git` file protected like a submodule's.
//!
//! Why: a linked worktree's `.git` is a `gitdir:` file in its work tree. Inside the workspace the
//! sandbox could repoint it at a directory it made, with a `core.fsmonitor` that `git status` in
//! that worktree on the host would run. Git records every linked worktree in the common directory
//! as `worktrees/<name>/gitdir`, holding the absolute path of the worktree's `.git` file. That
//! record lives in the git directory — read-only inside the sandbox, and with
//! `allow_git_mutations` `worktrees/` stays read-only as a whole (`PROTECTED_IF_PRESENT`) — so
//! it cannot be erased to drop a worktree from the next session's protection.

use std::fs;
use std::path::{Path, PathBuf};

use super::{GitError, MAX_SUBMODULES, read_pointer};

/// The work trees of the linked worktrees registered in `git_dir` and in its common directory
/// (which `git_dir/commondir` names, for a worktree's or submodule's own git directory). Whether
/// each lies inside the workspace is the caller's to decide; a record that is not an absolute
/// path naming a `.git` is not one git wrote and is skipped.
pub fn linked(git_dir: &Path) -> Result<Vec<PathBuf>, GitError> {
    let mut commons = vec![git_dir.to_path_buf()];
    // Reading only: the common directory chooses which workspace paths get protected, never
    // what is mounted, so it is followed wherever it points.
    if let Some(text) = read_pointer(&git_dir.join("commondir"))?
        && let Ok(common) = git_dir
            .join(text.trim_end_matches(['\n', '\r']))
            .canonicalize()
        && !commons.contains(&common)
    {
        commons.push(common);
    }
    let mut found = Vec::new();
    let mut read = 0usize;
    for common in commons {
        let Ok(entries) = fs::read_dir(common.join("worktrees")) else {
            continue;
        };
        for entry in entries {
            let entry = entry.map_err(|source| GitError::Read {
                path: common.join("worktrees"),
                source,
            })?;
            // A forged directory with millions of entries must not make the host do unbounded
            // work: past the limit the session is refused like too many gitlinks.
            read += 1;
            if read > MAX_SUBMODULES {
                return Err(GitError::TooManySubmodules {
                    limit: MAX_SUBMODULES,
                });
            }
            let Some(text) = read_pointer(&entry.path().join("gitdir"))? else {
                continue;
            };
            let dot_git = PathBuf::from(text.trim_end_matches(['\n', '\r']));
            if dot_git.is_absolute()
                && dot_git.file_name().is_some_and(|name| name == ".git")
                && let Some(work_tree) = dot_git.parent()
                && !found.iter().any(|p: &PathBuf| p == work_tree)
            {
                found.push(work_tree.to_path_buf());
            }
        }
    }
    Ok(found)
}
