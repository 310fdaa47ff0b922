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

use std::collections::HashSet;
use std::fs;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use super::index::IndexError;
use super::{GitError, named_dir, points_back};

/// The largest index file read. Git's index holds about 100 bytes per tracked file, so this is
/// millions of files; a larger one is refused rather than read into memory.
pub const MAX_INDEX: u64 = 256 << 20;
/// How deep submodules of submodules are followed; a repository nested deeper refuses the
/// session.
pub const MAX_DEPTH: usize = 8;
/// The most gitlinks and linked worktrees cordon protects in one workspace, all indexes
/// together, counting only those inside the workspace; past it the session is refused (each
/// costs system calls and mounts, and a forged index must not make the host do unbounded work).
pub const MAX_SUBMODULES: usize = super::index::MAX_GITLINKS;
/// The most path components of a gitlink or worktree path below the workspace. Every directory
/// on the way becomes a mount point (`mounts::plan` pins them), so the depth multiplies the
/// work; deeper is refused.
pub const MAX_COMPONENTS: usize = 256;
/// The most distinct directories between the workspace and its gitlinks and worktrees (each
/// becomes a mount point); more is refused.
pub const MAX_DIRECTORIES: usize = 4 * MAX_SUBMODULES;
/// The most index bytes read for one session, all indexes together.
pub const MAX_INDEX_BYTES: u64 = 4 * MAX_INDEX;

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

/// Where a repository whose gitlinks and worktrees are read was found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reach {
    /// The workspace's own `.git`, or a submodule or worktree inside the workspace: its index
    /// lists paths inside the workspace only, and anything wrong with it refuses the session.
    Own,
    /// A work tree above the workspace: only its gitlinks inside the workspace matter.
    Above,
}

/// A work tree and its git directory, whose index lists gitlinks relative to that work tree
/// and whose `worktrees/` lists linked worktrees.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Start {
    pub work_tree: PathBuf,
    pub git_dir: PathBuf,
    pub reach: Reach,
}

/// The submodules and linked worktrees inside `workspace`, at any depth up to [`MAX_DEPTH`],
/// found from `starts` (see [`Start`]). `accepted_roots` are the workspace's own mounted git
/// directories: a submodule's git directory inside one is mounted too. Paths absent from the
/// work tree are left out.
///
/// The work is bounded whatever the (hostile) input: at most [`MAX_SUBMODULES`] paths, each at
/// most [`MAX_COMPONENTS`] deep, below at most [`MAX_DIRECTORIES`] distinct directories, from at
/// most [`MAX_INDEX_BYTES`] of index; duplicates are dropped through hash sets, never by scanning
/// a list (a list scan per path made a forged index hang the host for minutes, review 3).
pub fn inside(
    workspace: &Path,
    accepted_roots: &[PathBuf],
    starts: Vec<Start>,
) -> Result<Vec<Submodule>, GitError> {
    let mut found: Vec<Submodule> = Vec::new();
    let mut found_paths: HashSet<PathBuf> = HashSet::new();
    let mut directories = Directories::new(workspace);
    let mut budget = IndexBudget::default();
    let mut read = 0usize;
    let mut visited: HashSet<PathBuf> = starts.iter().map(|s| s.git_dir.clone()).collect();
    // (start, depth)
    let mut pending: Vec<(Start, usize)> = starts.into_iter().map(|start| (start, 0)).collect();
    while let Some((start, depth)) = pending.pop() {
        let Start {
            work_tree,
            git_dir,
            reach,
        } = start;
        let within = match reach {
            Reach::Own => PathBuf::new(),
            // Only the gitlinks at or below the workspace, relative to the work tree above it.
            Reach::Above => workspace
                .strip_prefix(&work_tree)
                .map(Path::to_path_buf)
                .unwrap_or_default(),
        };
        let links = match gitlinks(&git_dir, &within, &mut budget) {
            Ok(links) => links,
            // An index above the workspace that this user cannot read: git run by this user
            // cannot use it either, and — its git directory lying outside the workspace — the
            // sandbox cannot have made it so. Skipped rather than refusing every session below
            // it (like an unreadable `.git` file above, see `enclosing`). One inside the
            // workspace is the sandbox's to break, so it still refuses.
            Err(GitError::Read { source, .. })
                if reach == Reach::Above
                    && source.kind() == io::ErrorKind::PermissionDenied
                    && !git_dir.starts_with(workspace) =>
            {
                Vec::new()
            }
            Err(other) => return Err(other),
        };
        let worktrees = super::worktree::linked(workspace, &git_dir)?;
        // Every gitlink and worktree read that lies (lexically) inside the workspace counts,
        // whether it exists or not: otherwise thousands of nested indexes, each listing
        // thousands of absent paths, would cost a lookup each without ever reaching the limit.
        // Those outside the workspace (a repository above's other gitlinks, already left out by
        // the parser, and worktrees elsewhere) do not count, so they cannot refuse the session.
        read = read.saturating_add(links.len()).saturating_add(
            worktrees
                .iter()
                .filter(|t| t.starts_with(workspace))
                .count(),
        );
        if read > MAX_SUBMODULES {
            return Err(GitError::TooManySubmodules {
                limit: MAX_SUBMODULES,
            });
        }
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
            // Counted when first found, before any more work is done for it.
            if !found_paths.insert(path.clone()) {
                continue;
            }
            if found_paths.len() > MAX_SUBMODULES {
                return Err(GitError::TooManySubmodules {
                    limit: MAX_SUBMODULES,
                });
            }
            directories.add(&path)?;
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
            // mounted: it is what git on the host will use for this work tree. Its work tree is
            // inside the workspace, so all of its gitlinks are too.
            if let Some(dir) = index_dir
                && visited.insert(dir.clone())
            {
                let start = Start {
                    work_tree: path.clone(),
                    git_dir: dir,
                    reach: Reach::Own,
                };
                pending.push((start, depth + 1));
            }
            found.push(Submodule { path, git });
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

/// The distinct directories strictly between the workspace and the paths found, which the mount
/// plan pins as mount points (see `mounts::plan`): capped at [`MAX_DIRECTORIES`], so that a
/// forged set of deep, disjoint paths cannot make the plan (and the mounts) huge. Each path's
/// directories are added from the deepest up, stopping at the first one already known — whose
/// own directories are then known too — so the cost is one hash per new directory plus one per
/// path, not one per (path, depth).
struct Directories<'a> {
    workspace: &'a Path,
    known: HashSet<PathBuf>,
}

impl<'a> Directories<'a> {
    fn new(workspace: &'a Path) -> Self {
        Directories {
            workspace,
            known: HashSet::new(),
        }
    }

    fn add(&mut self, path: &Path) -> Result<(), GitError> {
        for dir in path.ancestors().skip(1) {
            if dir == self.workspace || !dir.starts_with(self.workspace) {
                break;
            }
            if !self.known.insert(dir.to_path_buf()) {
                break;
            }
            if self.known.len() > MAX_DIRECTORIES {
                return Err(GitError::TooManyDirectories {
                    limit: MAX_DIRECTORIES,
                });
            }
        }
        Ok(())
    }
}

/// How many index bytes one session start may read, all indexes together.
#[derive(Default)]
struct IndexBudget {
    read: u64,
}

/// `candidate` (a gitlink or worktree path) when it lies strictly inside the workspace, exists,
/// and has no symlink on the way from the workspace; `None` when it lies elsewhere (then the
/// sandbox cannot reach it), is the workspace itself (its `.git` is handled as the top level),
/// is absent, or is not a plain path (`worktree.rs` resolves `..` in records before this).
/// Deeper than [`MAX_COMPONENTS`] below the workspace is refused: every directory on the way
/// becomes a mount point, and no work tree git can check out nests that deep in practice.
fn in_workspace(workspace: &Path, candidate: &Path) -> Result<Option<PathBuf>, GitError> {
    let Ok(relative) = candidate.strip_prefix(workspace) else {
        return Ok(None);
    };
    let mut depth = 0usize;
    for component in relative.components() {
        if !matches!(component, std::path::Component::Normal(_)) {
            return Ok(None);
        }
        depth += 1;
        if depth > MAX_COMPONENTS {
            return Err(GitError::PathTooDeep {
                path: candidate.to_path_buf(),
                limit: MAX_COMPONENTS,
            });
        }
    }
    if depth == 0 {
        return Ok(None);
    }
    plain_path(workspace, relative)
}

/// The gitlink paths at or below `within` (relative to the work tree; empty for all) in
/// `git_dir`'s index (and its shared index, when split), each once; none when there is no index
/// (a repository where nothing was ever added).
fn gitlinks(
    git_dir: &Path,
    within: &Path,
    budget: &mut IndexBudget,
) -> Result<Vec<PathBuf>, GitError> {
    let within = within.as_os_str().as_bytes();
    let path = git_dir.join("index");
    let Some(bytes) = read_index(&path, budget)? else {
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
    let parsed = super::index::parse_at(&bytes, &[], within).map_err(refuse(&path))?;
    let mut links = parsed.gitlinks;
    if let Some(shared) = parsed.shared {
        // The name is hex by construction (formatted from bytes), so it cannot climb out.
        let shared_path = git_dir.join(format!("sharedindex.{}", shared.name));
        let Some(bytes) = read_index(&shared_path, budget)? else {
            // Git cannot read a split index without its shared part either.
            return Err(GitError::Read {
                path: shared_path,
                source: io::Error::from_raw_os_error(libc::ENOENT),
            });
        };
        // The shared index's own gitlinks, and the names of the entries the split part replaced
        // with gitlinks (a submodule whose recorded commit changed since the split).
        let base = super::index::parse_at(&bytes, &shared.replaced, within)
            .map_err(refuse(&shared_path))?;
        // The union, each path once: a hash set on the names, and the limit checked as each
        // one is added, so a forged pair of lists costs one hash per name (review 3, finding 3:
        // a scan of the list per name, over thousands of ~4000-byte names, took minutes).
        let mut seen: HashSet<PathBuf> = links.iter().cloned().collect();
        let replaced = base
            .at
            .into_iter()
            .filter(|link| super::index::is_within(link.as_os_str().as_bytes(), within));
        for link in base.gitlinks.into_iter().chain(replaced) {
            if seen.insert(link.clone()) {
                links.push(link);
                if links.len() > MAX_SUBMODULES {
                    return Err(GitError::TooManySubmodules {
                        limit: MAX_SUBMODULES,
                    });
                }
            }
        }
    }
    Ok(links)
}

/// Reads an index file whole, bounded: `None` only when it does not exist. Opened with
/// `O_NOFOLLOW | O_NONBLOCK` and required to be a regular file: a symlink, FIFO or device in its
/// place is refused (fail closed) rather than treated as "no submodules", since git on the host
/// would follow a symlink and read whatever it names.
fn read_index(path: &Path, budget: &mut IndexBudget) -> Result<Option<Vec<u8>>, GitError> {
    use std::io::Read;
    let error = |source| GitError::Read {
        path: path.to_path_buf(),
        source,
    };
    let file = match super::open_untrusted(path) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(error(e)),
    };
    let meta = file.metadata().map_err(error)?;
    if !meta.is_file() {
        return Err(error(io::Error::from_raw_os_error(libc::EINVAL)));
    }
    let too_large = || GitError::IndexTooLarge {
        path: path.to_path_buf(),
        limit: MAX_INDEX,
    };
    if meta.len() > MAX_INDEX {
        return Err(too_large());
    }
    // All indexes together: a forged tree of thousands of nested repositories, each with a
    // large index, must not make the host read without end.
    budget.read = budget.read.saturating_add(meta.len());
    if budget.read > MAX_INDEX_BYTES {
        return Err(GitError::IndexesTooLarge {
            limit: MAX_INDEX_BYTES,
        });
    }
    let mut bytes = Vec::new();
    // `take` again: the file may grow between the check and the read.
    file.take(MAX_INDEX + 1)
        .read_to_end(&mut bytes)
        .map_err(error)?;
    if bytes.len() as u64 > MAX_INDEX {
        return Err(too_large());
    }
    Ok(Some(bytes))
}

/// `work_tree/relative` when it exists with no symlink on the way; `None` when some component
/// does not exist. The index parser already refused `..`, `.`, `.git` and absolute names.
///
/// One `openat2(RESOLVE_NO_SYMLINKS)` of the whole path, not a `stat` of every prefix: the
/// kernel walks the path once, and a symlink anywhere on it fails the lookup (`ELOOP`). `stat`ing
/// each prefix cost a lookup of every component per component — quadratic in the depth, which a
/// forged deep gitlink turned into a host hang (review 3, finding 4). The work tree is canonical,
/// so no link above the workspace can trip this.
fn plain_path(work_tree: &Path, relative: &Path) -> Result<Option<PathBuf>, GitError> {
    let path = work_tree.join(relative);
    match crate::sys::mount::open_no_symlinks(&path) {
        Ok(_) => Ok(Some(path)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            Err(GitError::SymlinkedSubmodule { path })
        }
        Err(source) => Err(GitError::Read { path, source }),
    }
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
    let Some(meta) = super::dot_git_metadata(&dot_git)? else {
        return Ok((SubmoduleGit::Missing { is_dir: true }, None));
    };
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
