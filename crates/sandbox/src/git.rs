//! Finding the workspace's git directories: `.git` itself, or the directory a `.git` file names
//! (worktrees, submodules), and the common directory a `commondir` file names.
//!
//! The workspace is writable by the sandbox, so a `.git` file is attacker-controlled between
//! sessions: `gitdir: /home/me/.ssh` must not get that directory mounted into the next session. A
//! git directory outside the workspace is therefore accepted only when it points back at this
//! workspace's `.git` file (git writes that back-reference into `<gitdir>/gitdir` for worktrees),
//! and the sandbox cannot write there.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// The git directories of a workspace, canonical.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GitDirs {
    /// The `.git` entry in the workspace, when it is a file (not a directory).
    pub dot_git_file: Option<PathBuf>,
    pub git_dir: PathBuf,
    /// The common directory when it differs from `git_dir`.
    pub common_dir: Option<PathBuf>,
}

/// The entries that stay read-only even with `allow_git_mutations`, relative to a git directory.
pub const PROTECTED: [&str; 6] = [
    "config",
    "config.worktree",
    "commondir",
    "hooks",
    "info",
    "objects/info/alternates",
];

/// Finds the git directories of `workspace` (canonical); `None` when it is not a git work tree or
/// its `.git` file does not check out.
pub fn discover(workspace: &Path) -> io::Result<Option<GitDirs>> {
    let dot_git = workspace.join(".git");
    let Ok(meta) = fs::symlink_metadata(&dot_git) else {
        return Ok(None);
    };
    let (dot_git_file, git_dir) = if meta.is_dir() {
        (None, dot_git.clone())
    } else if meta.is_file() {
        let text = fs::read_to_string(&dot_git)?;
        let Some(named) = gitdir_line(&text) else {
            return Ok(None);
        };
        let Ok(git_dir) = workspace.join(named).canonicalize() else {
            return Ok(None);
        };
        if !git_dir.starts_with(workspace) && !points_back(&git_dir, &dot_git) {
            return Ok(None);
        }
        (Some(dot_git.clone()), git_dir)
    } else {
        // A symlinked `.git` is followed only when it stays inside the workspace.
        match dot_git.canonicalize() {
            Ok(target) if target.starts_with(workspace) && target.is_dir() => (None, target),
            _ => return Ok(None),
        }
    };
    let common_dir = match fs::read_to_string(git_dir.join("commondir")) {
        Ok(text) => match git_dir.join(text.trim()).canonicalize() {
            Ok(common) if common != git_dir => Some(common),
            _ => None,
        },
        Err(_) => None,
    };
    Ok(Some(GitDirs {
        dot_git_file,
        git_dir,
        common_dir,
    }))
}

/// The path in a `.git` file (`gitdir: PATH`).
pub fn gitdir_line(text: &str) -> Option<&str> {
    let path = text.lines().next()?.strip_prefix("gitdir:")?.trim();
    (!path.is_empty()).then_some(path)
}

/// Whether `git_dir/gitdir` names `dot_git` (git's worktree back-reference).
fn points_back(git_dir: &Path, dot_git: &Path) -> bool {
    let Ok(text) = fs::read_to_string(git_dir.join("gitdir")) else {
        return false;
    };
    let named = git_dir.join(text.trim());
    match (named.canonicalize(), dot_git.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gitdir_line_reads_the_first_line() {
        let rows: [(&str, Option<&str>); 5] = [
            (
                "gitdir: ../main/.git/worktrees/a\n",
                Some("../main/.git/worktrees/a"),
            ),
            ("gitdir:/abs\n", Some("/abs")),
            ("gitdir: \n", None),
            ("nonsense\n", None),
            ("", None),
        ];
        for (text, expected) in rows {
            assert_eq!(gitdir_line(text), expected, "{text:?}");
        }
    }

    #[test]
    fn a_git_file_pointing_outside_without_back_reference_is_ignored() {
        let outside = tempfile::tempdir().unwrap();
        let workspace = tempfile::tempdir().unwrap();
        let ws = workspace.path().canonicalize().unwrap();
        fs::write(
            ws.join(".git"),
            format!("gitdir: {}\n", outside.path().display()),
        )
        .unwrap();
        assert_eq!(discover(&ws).unwrap(), None);
        // With git's back-reference in place it is a worktree.
        fs::write(
            outside.path().join("gitdir"),
            format!("{}\n", ws.join(".git").display()),
        )
        .unwrap();
        let dirs = discover(&ws).unwrap().expect("a worktree");
        assert_eq!(dirs.git_dir, outside.path().canonicalize().unwrap());
        assert_eq!(dirs.dot_git_file, Some(ws.join(".git")));
    }
}
