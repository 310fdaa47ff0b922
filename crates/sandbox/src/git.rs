//! Finding the workspace's git directories: `.git` itself, or the directory a `.git` file names
//! (worktrees, submodules), and the common directory of a linked worktree.
//!
//! Everything in the workspace is written by the sandbox between sessions, so every file read here
//! is hostile input, and nothing read from one may choose a host directory to mount:
//! * a `.git` file naming a directory outside the workspace is accepted only when that directory
//!   names this workspace's `.git` back (git's `<gitdir>/gitdir` worktree back-reference), which
//!   lives outside the workspace where the sandbox cannot write — unless it was itself mounted
//!   writable, and then it is already the sandbox's to read;
//! * `commondir` is never followed to an arbitrary path: the common directory is accepted only when
//!   it lies inside the workspace, or when the git directory is `<common>/worktrees/<name>` — then
//!   the common directory is derived from the (already accepted) git directory's own path and the
//!   file merely confirms it;
//! * a symlinked `.git` is refused, since the link itself could be swapped between sessions;
//! * every file is read with `O_NOFOLLOW | O_NONBLOCK`, must be a regular file, and at most
//!   [`MAX_POINTER`] bytes are read, so a FIFO cannot hang the host nor `/dev/zero` exhaust it.
//!
//! Submodules (gitlinks) get the same treatment through [`submodules`]: their paths come from the
//! index (`index.rs`), what their `.git` is from `submodule.rs`.

mod index;
mod submodule;

pub use index::IndexError;
pub use submodule::{MAX_DEPTH, MAX_INDEX, MAX_SUBMODULES, Submodule, SubmoduleGit, submodules};

use std::fs;
use std::io::{self, Read};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// The most bytes read from a `.git`, `commondir` or `gitdir` file; git writes one short line.
pub const MAX_POINTER: u64 = 4096;

/// Why the workspace's git layout cannot be used; the session must not start.
#[derive(Debug, thiserror::Error)]
pub enum GitError {
    #[error(
        "`{path}` is a symbolic link; cordon cannot keep a linked `.git` from being repointed by \
         the sandbox. Replace it with the directory it names or with a `gitdir:` file"
    )]
    SymlinkedDotGit { path: PathBuf },
    #[error("cannot read `{path}` to find the workspace's git directories")]
    Read {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error(
        "the submodule path `{path}` is (or passes through) a symbolic link, which the sandbox \
         could repoint; replace the link with the directory it names"
    )]
    SymlinkedSubmodule { path: PathBuf },
    /// The index cannot be parsed: cordon cannot tell which submodules to protect, so it refuses
    /// rather than leave one writable.
    #[error(
        "cannot parse the git index `{path}` to find the submodules to protect; rewrite it on \
         the host with `git update-index --index-version 2` (or `git read-tree HEAD` if it is \
         damaged)"
    )]
    Index {
        path: PathBuf,
        #[source]
        source: IndexError,
    },
    #[error(
        "the workspace has more than {limit} submodules, more than cordon protects; split the \
         work tree or deinitialise some with `git submodule deinit`"
    )]
    TooManySubmodules { limit: usize },
}

/// Parses `bytes` as a git index and returns its gitlink paths: the entry point of the
/// `git_index` fuzz target, not an API.
#[doc(hidden)]
pub fn fuzz_index(bytes: &[u8]) -> Option<Vec<PathBuf>> {
    index::parse(bytes).ok().map(|parsed| parsed.gitlinks)
}

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
/// its `.git` file does not check out. A symlinked `.git` is an error (see [`GitError`]).
pub fn discover(workspace: &Path) -> Result<Option<GitDirs>, GitError> {
    let dot_git = workspace.join(".git");
    let Ok(meta) = fs::symlink_metadata(&dot_git) else {
        return Ok(None);
    };
    let (dot_git_file, git_dir) = if meta.is_symlink() {
        return Err(GitError::SymlinkedDotGit { path: dot_git });
    } else if meta.is_dir() {
        (None, dot_git.clone())
    } else if meta.is_file() {
        let Some(text) = read_pointer(&dot_git)? else {
            return Ok(None);
        };
        let Some(named) = gitdir_line(&text) else {
            return Ok(None);
        };
        let Ok(git_dir) = workspace.join(named).canonicalize() else {
            return Ok(None);
        };
        if !git_dir.is_dir()
            || (!git_dir.starts_with(workspace) && !points_back(&git_dir, &dot_git)?)
        {
            return Ok(None);
        }
        (Some(dot_git.clone()), git_dir)
    } else {
        return Ok(None);
    };
    let common_dir = common_dir(workspace, &git_dir)?;
    Ok(Some(GitDirs {
        dot_git_file,
        git_dir,
        common_dir,
    }))
}

/// The common directory `git_dir/commondir` names, when it is one cordon may mount: inside the
/// workspace, or the `<common>` of a git directory at `<common>/worktrees/<name>` (the layout git
/// itself creates for linked worktrees). Anything else is ignored — the sandbox then works with
/// the git directory alone, and git inside may fail, which is safe.
fn common_dir(workspace: &Path, git_dir: &Path) -> Result<Option<PathBuf>, GitError> {
    let Some(text) = read_pointer(&git_dir.join("commondir"))? else {
        return Ok(None);
    };
    let Ok(named) = git_dir.join(text.trim()).canonicalize() else {
        return Ok(None);
    };
    if named == git_dir || !named.is_dir() {
        return Ok(None);
    }
    let worktree_parent = git_dir
        .parent()
        .filter(|parent| parent.file_name().is_some_and(|name| name == "worktrees"))
        .and_then(Path::parent);
    let accepted = named.starts_with(workspace) || worktree_parent == Some(named.as_path());
    Ok(accepted.then_some(named))
}

/// The path in a `.git` file (`gitdir: PATH`).
pub fn gitdir_line(text: &str) -> Option<&str> {
    let path = text.lines().next()?.strip_prefix("gitdir:")?.trim();
    (!path.is_empty()).then_some(path)
}

/// Whether `git_dir/gitdir` names `dot_git` (git's worktree back-reference).
fn points_back(git_dir: &Path, dot_git: &Path) -> Result<bool, GitError> {
    let Some(text) = read_pointer(&git_dir.join("gitdir"))? else {
        return Ok(false);
    };
    let named = git_dir.join(text.trim());
    Ok(match (named.canonicalize(), dot_git.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    })
}

/// Reads a small pointer file without following a final symlink, without blocking on a FIFO and
/// never more than [`MAX_POINTER`] bytes; `None` when it is absent, not a regular file, or not
/// UTF-8 (none of which git would accept either).
fn read_pointer(path: &Path) -> Result<Option<String>, GitError> {
    let error = |source| GitError::Read {
        path: path.to_path_buf(),
        source,
    };
    let file = match fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC | libc::O_NOCTTY)
        .open(path)
    {
        Ok(file) => file,
        // Absent, or a symlink (ELOOP): neither is a pointer git wrote.
        Err(e)
            if matches!(
                e.raw_os_error(),
                Some(libc::ENOENT | libc::ENOTDIR | libc::ELOOP)
            ) =>
        {
            return Ok(None);
        }
        Err(e) => return Err(error(e)),
    };
    if !file.metadata().map_err(error)?.is_file() {
        return Ok(None);
    }
    let mut bytes = Vec::new();
    file.take(MAX_POINTER)
        .read_to_end(&mut bytes)
        .map_err(error)?;
    Ok(String::from_utf8(bytes).ok())
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

    #[test]
    fn commondir_is_accepted_only_inside_the_workspace_or_as_the_worktree_parent() {
        let outside = tempfile::tempdir().unwrap();
        let out = outside.path().canonicalize().unwrap();
        let workspace = tempfile::tempdir().unwrap();
        let ws = workspace.path().canonicalize().unwrap();
        fs::create_dir_all(ws.join(".git")).unwrap();
        fs::create_dir_all(ws.join("inner")).unwrap();
        fs::create_dir_all(out.join("repo/.git/worktrees/wt")).unwrap();
        let common = |git_dir: &Path, text: &str| {
            fs::write(git_dir.join("commondir"), text).unwrap();
            common_dir(&ws, git_dir).unwrap()
        };
        // Each row: the commondir text, what is accepted.
        let rows: [(String, Option<PathBuf>); 4] = [
            (format!("{}\n", out.display()), None),
            ("/proc\n".into(), None),
            ("../inner\n".into(), Some(ws.join("inner"))),
            (".\n".into(), None),
        ];
        for (text, expected) in rows {
            assert_eq!(common(&ws.join(".git"), &text), expected, "{text:?}");
        }
        // A worktree's admin directory: only its own `<common>` is accepted.
        let admin = out.join("repo/.git/worktrees/wt");
        assert_eq!(common(&admin, "../..\n"), Some(out.join("repo/.git")));
        assert_eq!(common(&admin, &format!("{}\n", out.display())), None);
    }

    #[test]
    fn pointer_files_are_read_bounded_and_never_through_fifos_or_links() {
        let dir = tempfile::tempdir().unwrap();
        let path = |name: &str| dir.path().join(name);
        fs::write(path("plain"), "gitdir: x\n").unwrap();
        fs::write(path("huge"), vec![b'a'; 10 * MAX_POINTER as usize]).unwrap();
        std::os::unix::fs::symlink("/dev/zero", path("zero")).unwrap();
        std::os::unix::fs::symlink("plain", path("link")).unwrap();
        let made = std::process::Command::new("mkfifo")
            .arg(path("fifo"))
            .status()
            .unwrap();
        assert!(made.success());
        assert_eq!(
            read_pointer(&path("plain")).unwrap().as_deref(),
            Some("gitdir: x\n")
        );
        assert_eq!(
            read_pointer(&path("huge")).unwrap().map(|t| t.len() as u64),
            Some(MAX_POINTER)
        );
        for name in ["zero", "link", "fifo", "absent"] {
            assert_eq!(read_pointer(&path(name)).unwrap(), None, "{name}");
        }
    }
}
