//! Finding the workspace's submodules (gitlinks) and what each one's `.git` is, so the mount plan
//! can keep every submodule's git directory as read-only as the top-level one.
//!
//! Why: a submodule's `.git` lies in the work tree, which the sandbox writes. A `gitdir:` file
//! repointed at a directory the sandbox made, or a `.git` directory whose `config` gains
//! `core.fsmonitor`, runs the sandbox's program the next time the user runs `git status` on the
//! host (git inspects every checked-out submodule).
//!
//! Which paths are submodules is read from the index (entries with mode 160000), never from
//! `.gitmodules`: that is an ordinary work-tree file the sandbox can rewrite, while the index lives
//! in the git directory, read-only inside the sandbox. With `allow_git_mutations` the index is
//! writable too, so a session could drop a gitlink from it and the next session would not
//! protect that submodule; that is a documented limit of the opt-in (the sandbox may then also
//! rewrite history, which the user has accepted).
//!
//! Per gitlink path, as found when the session starts:
//! * a directory with a `.git` directory: that directory is a git directory to mount like the
//!   top-level one;
//! * a directory with a `.git` file: the file is bound read-only onto itself (it cannot be
//!   repointed), and the directory it names is mounted like a git directory when it passes the
//!   same acceptance rules as a worktree's (inside the workspace, inside an accepted git
//!   directory — git puts submodules' in `<gitdir>/modules/` — or naming the `.git` file back);
//!   otherwise it is not mounted at all, so the sandbox cannot reach it;
//! * anything else (an uninitialised submodule's empty directory, a file) with no `.git`: bound
//!   read-only onto itself as a whole, so no `.git` can be created in it. An uninitialised
//!   submodule cannot be initialised inside the sandbox anyway (that writes `.git/config`);
//! * absent: nothing exists to mount on and cordon never creates anything on the host, so the
//!   sandbox could create the directory with a `.git` in it. Not defended (see the threat model).
//!
//! A symlink anywhere on a gitlink path (or a symlinked `.git`) is refused, like `hide` and
//! `protect` paths: the mount would cover what the link names now, and the sandbox can repoint
//! the link. Submodules of submodules are found the same way through the index of the git
//! directory each `.git` names (mounted or not: reading mounts nothing), to a bounded count;
//! nesting deeper than [`MAX_DEPTH`] refuses the session rather than leave the rest unprotected.
//! Linked worktrees inside the workspace (`worktree.rs`) are treated exactly like gitlinks: their
//! `.git` file is bound read-only, and their own submodules are followed.

use std::fs;
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use super::index::IndexError;
use super::{GitError, named_dir, points_back};

/// The largest index file read. Git's index holds about 100 bytes per tracked file, so this is
/// millions of files; a larger one is refused rather than read into memory.
pub const MAX_INDEX: u64 = 256 << 20;
/// How deep submodules of submodules are followed; a repository nested deeper refuses the
/// session.
pub const MAX_DEPTH: usize = 8;
/// The most gitlinks cordon protects in one workspace, all indexes together; past it the session
/// is refused (each costs system calls and mounts, and a forged index must not make the host do
/// unbounded work).
pub const MAX_SUBMODULES: usize = super::index::MAX_GITLINKS;

/// One gitlink path of the workspace and what its `.git` is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Submodule {
    /// The gitlink's path on the host (inside the workspace; no symlink on the way).
    pub path: PathBuf,
    pub git: SubmoduleGit,
}

/// What a submodule's `.git` was when the session started.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SubmoduleGit {
    /// `<path>/.git` is a directory: a git directory.
    Dir(PathBuf),
    /// `<path>/.git` is a `gitdir:` file; `git_dir` is the directory it names when accepted.
    File {
        file: PathBuf,
        git_dir: Option<PathBuf>,
    },
    /// There is no `.git` (or the path is not a directory): the path is kept read-only whole.
    Missing { is_dir: bool },
}

/// The submodules and linked worktrees inside `workspace`, at any depth up to [`MAX_DEPTH`],
/// found from `starts` — each a work tree and its git directory, whose index lists gitlinks
/// relative to that work tree (which may lie above the workspace: only what lies inside it is
/// kept) and whose `worktrees/` lists linked worktrees. `accepted_roots` are the workspace's own
/// mounted git directories: a submodule's git directory inside one is mounted too. Paths absent
/// from the work tree are left out.
pub fn inside(
    workspace: &Path,
    accepted_roots: &[PathBuf],
    starts: Vec<(PathBuf, PathBuf)>,
) -> Result<Vec<Submodule>, GitError> {
    let mut found: Vec<Submodule> = Vec::new();
    let mut visited: Vec<PathBuf> = starts.iter().map(|(_, dir)| dir.clone()).collect();
    // (work tree, its git directory, depth)
    let mut pending: Vec<(PathBuf, PathBuf, usize)> = starts
        .into_iter()
        .map(|(tree, dir)| (tree, dir, 0))
        .collect();
    // Every gitlink and worktree read counts, found in the workspace or not.
    let mut seen = 0usize;
    let mut count = |n: usize| {
        seen += n;
        if seen > MAX_SUBMODULES {
            return Err(GitError::TooManySubmodules {
                limit: MAX_SUBMODULES,
            });
        }
        Ok(())
    };
    while let Some((work_tree, git_dir, depth)) = pending.pop() {
        let links = gitlinks(&git_dir)?;
        count(links.len())?;
        let worktrees = super::worktree::linked(&git_dir)?;
        count(worktrees.len())?;
        let mut paths = Vec::new();
        let candidates = links
            .iter()
            .map(|relative| (work_tree.join(relative), Origin::Gitlink))
            .chain(worktrees.into_iter().map(|tree| (tree, Origin::Worktree)));
        for (candidate, origin) in candidates {
            if let Some(path) = in_workspace(workspace, &candidate)? {
                paths.push((path, origin));
            }
        }
        // Fail closed: a repository nested deeper than cordon follows would otherwise be left
        // writable without a word.
        if depth >= MAX_DEPTH && !paths.is_empty() {
            return Err(GitError::TooDeep {
                path: work_tree,
                limit: MAX_DEPTH,
            });
        }
        for (path, origin) in paths {
            let (mut git, index_dir) = classify(workspace, accepted_roots, &path)?;
            // A worktree's administrative directory inside a mounted git directory is already
            // mounted with it (`<common>/worktrees/<name>`), and under `allow_git_mutations` its
            // configuration is kept read-only there (`nested.rs`); mounting it again would demand
            // the entries of a full git directory (`config`, `hooks`), which it never has.
            if origin == Origin::Worktree
                && let SubmoduleGit::File { git_dir, .. } = &mut git
                && git_dir
                    .as_ref()
                    .is_some_and(|dir| accepted_roots.iter().any(|root| dir.starts_with(root)))
            {
                *git_dir = None;
            }
            // The directory a `.git` names is read for nested submodules even when it is not
            // mounted: it is what git on the host will use for this work tree.
            if let Some(dir) = index_dir
                && !visited.contains(&dir)
            {
                visited.push(dir.clone());
                pending.push((path.clone(), dir, depth + 1));
            }
            if !found.iter().any(|s| s.path == path) {
                found.push(Submodule { path, git });
            }
        }
    }
    Ok(found)
}

/// Where a path to protect was found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Origin {
    /// A gitlink in an index.
    Gitlink,
    /// A linked worktree's record in `worktrees/`.
    Worktree,
}

/// `candidate` (a gitlink or worktree path) when it lies strictly inside the workspace, exists,
/// and has no symlink on the way from the workspace; `None` when it lies elsewhere (then the
/// sandbox cannot reach it), is the workspace itself (its `.git` is handled as the top level),
/// is absent, or is not a plain path (a hand-written worktree record with `..`: git writes
/// canonical paths).
fn in_workspace(workspace: &Path, candidate: &Path) -> Result<Option<PathBuf>, GitError> {
    let Ok(relative) = candidate.strip_prefix(workspace) else {
        return Ok(None);
    };
    let plain = relative
        .components()
        .all(|c| matches!(c, std::path::Component::Normal(_)));
    if relative.as_os_str().is_empty() || !plain {
        return Ok(None);
    }
    plain_path(workspace, relative)
}

/// The gitlink paths in `git_dir`'s index (and its shared index, when split); none when there
/// is no index (a repository where nothing was ever added).
fn gitlinks(git_dir: &Path) -> Result<Vec<PathBuf>, GitError> {
    let path = git_dir.join("index");
    let Some(bytes) = read_index(&path)? else {
        return Ok(Vec::new());
    };
    let refuse = |path: &Path| {
        let path = path.to_path_buf();
        move |source| match source {
            IndexError::TooManyGitlinks => GitError::TooManySubmodules {
                limit: MAX_SUBMODULES,
            },
            source => GitError::Index { path, source },
        }
    };
    let parsed = super::index::parse(&bytes).map_err(refuse(&path))?;
    let mut links = parsed.gitlinks;
    if let Some(shared) = parsed.shared {
        // The name is hex by construction (formatted from bytes), so it cannot climb out.
        let shared_path = git_dir.join(format!("sharedindex.{}", shared.name));
        let Some(bytes) = read_index(&shared_path)? else {
            // Git cannot read a split index without its shared part either.
            return Err(GitError::Read {
                path: shared_path,
                source: io::Error::from_raw_os_error(libc::ENOENT),
            });
        };
        // The shared index's own gitlinks, and the names of the entries the split part replaced
        // with gitlinks (a submodule whose recorded commit changed since the split).
        let base =
            super::index::parse_at(&bytes, &shared.replaced).map_err(refuse(&shared_path))?;
        // All lists are at most MAX_GITLINKS long, so this is bounded.
        for link in base.gitlinks.into_iter().chain(base.at) {
            if !links.contains(&link) {
                links.push(link);
            }
        }
    }
    Ok(links)
}

/// Reads an index file whole, bounded: `None` only when it does not exist. Opened with
/// `O_NOFOLLOW | O_NONBLOCK` and required to be a regular file: a symlink, FIFO or device in its
/// place is refused (fail closed) rather than treated as "no submodules", since git on the host
/// would follow a symlink and read whatever it names.
fn read_index(path: &Path) -> Result<Option<Vec<u8>>, GitError> {
    use std::io::Read;
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
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(error(e)),
    };
    let meta = file.metadata().map_err(error)?;
    if !meta.is_file() {
        return Err(error(io::Error::from_raw_os_error(libc::EINVAL)));
    }
    if meta.len() > MAX_INDEX {
        return Err(error(io::Error::from_raw_os_error(libc::EFBIG)));
    }
    let mut bytes = Vec::new();
    // `take` again: the file may grow between the check and the read.
    file.take(MAX_INDEX + 1)
        .read_to_end(&mut bytes)
        .map_err(error)?;
    if bytes.len() as u64 > MAX_INDEX {
        return Err(error(io::Error::from_raw_os_error(libc::EFBIG)));
    }
    Ok(Some(bytes))
}

/// `work_tree/relative` when it exists with no symlink on the way; `None` when some component
/// does not exist. The index parser already refused `..`, `.`, `.git` and absolute names.
fn plain_path(work_tree: &Path, relative: &Path) -> Result<Option<PathBuf>, GitError> {
    let mut path = work_tree.to_path_buf();
    for component in relative.components() {
        path.push(component);
        match fs::symlink_metadata(&path) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(source) => return Err(GitError::Read { path, source }),
            Ok(meta) if meta.is_symlink() => {
                return Err(GitError::SymlinkedSubmodule { path });
            }
            Ok(_) => {}
        }
    }
    Ok(Some(path))
}

/// What the `.git` of the gitlink (or worktree) at `path` is (see [`SubmoduleGit`]), and the
/// git directory to read its own submodules and worktrees from.
fn classify(
    workspace: &Path,
    accepted_roots: &[PathBuf],
    path: &Path,
) -> Result<(SubmoduleGit, Option<PathBuf>), GitError> {
    let read_error = |path: &Path| {
        let path = path.to_path_buf();
        move |source| GitError::Read { path, source }
    };
    let meta = fs::symlink_metadata(path).map_err(read_error(path))?;
    if !meta.is_dir() {
        return Ok((SubmoduleGit::Missing { is_dir: false }, None));
    }
    let dot_git = path.join(".git");
    let meta = match fs::symlink_metadata(&dot_git) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Ok((SubmoduleGit::Missing { is_dir: true }, None));
        }
        Err(source) => {
            return Err(GitError::Read {
                path: dot_git,
                source,
            });
        }
        Ok(meta) => meta,
    };
    if meta.is_symlink() {
        return Err(GitError::SymlinkedDotGit { path: dot_git });
    }
    if meta.is_dir() {
        return Ok((SubmoduleGit::Dir(dot_git.clone()), Some(dot_git)));
    }
    // A file (or something git would not read as one, which is then kept read-only as it is).
    // What it names is resolved as git will resolve it, and refused when the sandbox could
    // change that (`gitdir.rs`).
    let named = named_dir(workspace, path, &dot_git)?;
    let git_dir = match &named {
        Some(dir) => {
            let accepted = dir.starts_with(workspace)
                || accepted_roots.iter().any(|root| dir.starts_with(root))
                || points_back(dir, &dot_git)?;
            accepted.then(|| dir.clone())
        }
        None => None,
    };
    let git = SubmoduleGit::File {
        file: dot_git,
        git_dir,
    };
    Ok((git, named))
}

#[cfg(test)]
mod tests;
