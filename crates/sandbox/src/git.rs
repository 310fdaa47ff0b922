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
//! * not accepting a directory never leaves the `.git` file writable: whatever it names, it is
//!   bound read-only onto itself (see [`protection`]), so it cannot be repointed at a directory
//!   the sandbox made;
//! * a symlinked `.git` is refused, since the link itself could be swapped between sessions;
//! * every file is read with `O_NOFOLLOW | O_NONBLOCK`, must be a regular file, and at most
//!   [`MAX_POINTER`] bytes are read, so a FIFO cannot hang the host nor `/dev/zero` exhaust it.
//!
//! A `.git` file is parsed exactly as git parses it and the path in it resolved on a route the
//! sandbox cannot change (`gitdir.rs`). Submodules (gitlinks) and linked worktrees inside the
//! workspace get the same treatment through [`protection`]: gitlink paths come from the index
//! (`index.rs`), worktrees from `worktrees/*/gitdir` (`worktree.rs`), what their `.git` is from
//! `submodule.rs`.

mod gitdir;
mod index;
mod nested;
mod submodule;
mod worktree;

pub use gitdir::GitFileProblem;
pub use index::{IndexError, MAX_NAME};
pub use nested::protected_below;
pub use submodule::{
    MAX_COMPONENTS, MAX_DEPTH, MAX_DIRECTORIES, MAX_INDEX, MAX_INDEX_BYTES, MAX_SUBMODULES,
    Submodule, SubmoduleGit,
};

use std::fs;
use std::io::{self, Read};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use submodule::{Reach, Start};

/// The most bytes read from a `.git`, `commondir` or `gitdir` file; git writes one short line.
pub const MAX_POINTER: u64 = 4096;

/// Why the workspace's git layout cannot be used; the session must not start.
#[derive(Debug, thiserror::Error)]
pub enum GitError {
    #[error(
        "`{shown}` is a symbolic link; cordon cannot keep a linked `.git` from being repointed by \
         the sandbox. Replace it with the directory it names or with a `gitdir:` file",
        shown = Short(.path)
    )]
    SymlinkedDotGit { path: PathBuf },
    #[error(
        "cannot read `{shown}` to find the workspace's git directories",
        shown = Short(.path)
    )]
    Read {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error(
        "the submodule path `{shown}` is (or passes through) a symbolic link, which the sandbox \
         could repoint; remove the link (the sandbox may have planted it) or, if you made it, \
         replace it with the directory it names",
        shown = Short(.path)
    )]
    SymlinkedSubmodule { path: PathBuf },
    /// A `.git` file whose target the sandbox could change (see `git/gitdir.rs`).
    #[error(
        "the `.git` file `{shown}` {problem}, so the sandbox could redirect the git on the host; \
         rewrite it on the host as `gitdir: ` and the git directory's absolute path, or remove it",
        shown = Short(.path)
    )]
    UnsafeGitFile {
        path: PathBuf,
        // Part of the message above, so not also a `#[source]`: a reporter printing the chain
        // would say it twice (review 3, finding 7).
        problem: GitFileProblem,
    },
    /// The index cannot be parsed: cordon cannot tell which submodules to protect, so it refuses
    /// rather than leave one writable.
    #[error(
        "cannot parse the git index `{shown}` to find the submodules to protect; rewrite it on \
         the host with `git update-index --no-split-index --index-version 2` (or \
         `git read-tree HEAD` if it is damaged)",
        shown = Short(.path)
    )]
    Index {
        path: PathBuf,
        #[source]
        source: IndexError,
    },
    #[error(
        "the workspace has more than {limit} submodules and linked worktrees, more than cordon \
         protects; split the work tree, deinitialise some with `git submodule deinit` or remove \
         worktrees with `git worktree remove`"
    )]
    TooManySubmodules { limit: usize },
    #[error(
        "submodules nest more than {limit} levels deep below `{shown}`, deeper than cordon \
         follows; deinitialise the deepest with `git submodule deinit`",
        shown = Short(.path)
    )]
    TooDeep { path: PathBuf, limit: usize },
    #[error(
        "the submodule or worktree path `{shown}` is more than {limit} directories below the \
         workspace, deeper than cordon protects; move it higher, deinitialise it with `git \
         submodule deinit` or remove it with `git worktree remove`",
        shown = Short(.path)
    )]
    PathTooDeep { path: PathBuf, limit: usize },
    #[error(
        "the workspace's submodules and linked worktrees lie below more than {limit} distinct \
         directories, more than cordon keeps as mount points; deinitialise some with `git \
         submodule deinit` or remove worktrees with `git worktree remove`"
    )]
    TooManyDirectories { limit: usize },
    #[error(
        "the git index `{shown}` is larger than {limit} bytes, more than cordon reads to find the \
         submodules to protect; shrink it on the host (`git sparse-checkout`, \
         `git update-index --index-version 4`) or use a workspace outside that work tree",
        shown = Short(.path)
    )]
    IndexTooLarge { path: PathBuf, limit: u64 },
    #[error(
        "the workspace's git indexes (its own, its submodules' and those of the repositories \
         above it) together exceed {limit} bytes, more than cordon reads to find the submodules \
         to protect; deinitialise nested submodules with `git submodule deinit` or use a \
         workspace outside the large work tree"
    )]
    IndexesTooLarge { limit: u64 },
    #[error(
        "the linked worktree record `{shown}` names no `.git` cordon can locate, so it cannot \
         tell which worktree to protect; run `git worktree prune` or `git worktree repair` on \
         the host",
        shown = Short(.path)
    )]
    WorktreeRecord { path: PathBuf },
}

/// The longest path shown whole in an error message, in bytes; a longer one (a forged gitlink
/// name can be 4096 bytes) is shown by its start and end.
const SHOWN: usize = 160;

/// A path for an error message: whole when short, else its first and last [`SHOWN`]`/2` bytes
/// around ` … `, cut at character boundaries.
struct Short<'a>(&'a Path);

impl std::fmt::Display for Short<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let text = self.0.to_string_lossy();
        if text.len() <= SHOWN {
            return f.write_str(&text);
        }
        let mut head = SHOWN / 2;
        while !text.is_char_boundary(head) {
            head -= 1;
        }
        let mut tail = text.len() - SHOWN / 2;
        while !text.is_char_boundary(tail) {
            tail += 1;
        }
        write!(f, "{} … {}", &text[..head], &text[tail..])
    }
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

/// Finds the git directories of `workspace` (canonical); `None` when it is not the top of a git
/// work tree or its `.git` file names a directory cordon would not mount. A symlinked `.git` is
/// an error, and so is a `.git` file whose target the sandbox could change (see [`GitError`]).
pub fn discover(workspace: &Path) -> Result<Option<GitDirs>, GitError> {
    Ok(match find(workspace, None)? {
        Top::Accepted(dirs) => Some(dirs),
        Top::Unaccepted { .. } | Top::Absent => None,
    })
}

/// Everything in (and around) the workspace that git on the host would read and the sandbox
/// must not be able to change. See [`protection`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Protection {
    /// The `.git` at the workspace root when it is not a directory: bound read-only onto itself
    /// whether or not the directory it names is mounted.
    pub dot_git_file: Option<PathBuf>,
    /// The workspace's own git directories to mount (git directory, then common directory);
    /// empty when the `.git` file names a directory cordon does not accept, or there is no `.git`.
    pub dirs: Vec<PathBuf>,
    /// The submodules and linked worktrees inside the workspace, at any depth.
    pub submodules: Vec<Submodule>,
}

/// What `cordon exec` protects in `workspace` (canonical), whatever its git layout:
/// * the top of a work tree with an accepted git directory: that directory, read-only;
/// * a `.git` file whose directory cordon does not accept (a submodule's own work tree names
///   `../.git/modules/<name>`, which does not name it back; `git init --separate-git-dir`):
///   the file itself, read-only, so it cannot be repointed at a directory the sandbox made.
///   The directory is not mounted (git inside the sandbox then fails, which is safe);
/// * no `.git` at all: nothing of the workspace's own to keep. A `.git` the sandbox creates at the
///   workspace root cannot be prevented (there is nothing to mount over); see the threat model.
///
/// In every case the workspace may also lie inside a work tree above it, whose git on the host
/// inspects the submodules under the workspace — so the index of every repository above the
/// workspace is read for gitlinks inside it, whatever the workspace's own `.git` is.
///
/// In every case, the gitlinks and linked worktrees inside the workspace are found through the
/// indexes and `worktrees/` of every git directory involved, mounted or not: reading one cannot
/// mount anything, and it is outside the sandbox's reach unless it was mounted writable.
pub fn protection(workspace: &Path) -> Result<Protection, GitError> {
    protection_trusting(workspace, None)
}

/// [`protection`] of a worktree cordon made, whose `.git` names a git directory whose
/// `commondir` is `trusted` (the host says so: `Workspace::with_common_dir`). `trusted` is
/// accepted as the common directory only when that is what the `commondir` names.
pub fn protection_trusting(
    workspace: &Path,
    trusted: Option<&Path>,
) -> Result<Protection, GitError> {
    // Where gitlinks and worktrees are read from.
    let mut starts: Vec<Start> = Vec::new();
    let own = |git_dir: PathBuf| Start {
        work_tree: workspace.to_path_buf(),
        git_dir,
        reach: Reach::Own,
    };
    let (dot_git_file, dirs) = match find(workspace, trusted)? {
        Top::Accepted(found) => {
            starts.push(own(found.git_dir.clone()));
            let dirs = [Some(found.git_dir), found.common_dir];
            (found.dot_git_file, dirs.into_iter().flatten().collect())
        }
        Top::Unaccepted { file, named } => {
            starts.extend(named.map(own));
            (Some(file), Vec::new())
        }
        Top::Absent => (None, Vec::new()),
    };
    // The repositories above the workspace, whatever its own `.git` is: a superproject's git on
    // the host inspects the submodules under the workspace through its own index, and a `.git`
    // at the workspace root — which the sandbox itself may have planted in an earlier session
    // (`mkdir .git`, `echo junk > .git`) — changes nothing about that. Reading them only when
    // there is no `.git` let a session switch the protection of those submodules off (review 3,
    // finding 1).
    starts.extend(
        enclosing(workspace)?
            .into_iter()
            .map(|(work_tree, git_dir)| Start {
                work_tree,
                git_dir,
                reach: Reach::Above,
            }),
    );
    let submodules = submodule::inside(workspace, &dirs, starts)?;
    Ok(Protection {
        dot_git_file,
        dirs,
        submodules,
    })
}

/// What the workspace root's `.git` is.
enum Top {
    /// There is none.
    Absent,
    /// A `.git` directory, or a `.git` file naming a directory cordon accepts (see the module
    /// documentation).
    Accepted(GitDirs),
    /// A `.git` that is not a directory and names no directory cordon accepts; `named` is the
    /// existing directory it names, if any.
    Unaccepted {
        file: PathBuf,
        named: Option<PathBuf>,
    },
}

/// What a `.git` entry is, without following it: `None` when absent; a symlink is refused, since the
/// sandbox could repoint it between sessions.
pub(crate) fn dot_git_metadata(dot_git: &Path) -> Result<Option<fs::Metadata>, GitError> {
    match fs::symlink_metadata(dot_git) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(GitError::Read {
            path: dot_git.to_path_buf(),
            source,
        }),
        Ok(meta) if meta.is_symlink() => Err(GitError::SymlinkedDotGit {
            path: dot_git.to_path_buf(),
        }),
        Ok(meta) => Ok(Some(meta)),
    }
}

fn find(workspace: &Path, trusted: Option<&Path>) -> Result<Top, GitError> {
    let dot_git = workspace.join(".git");
    let Some(meta) = dot_git_metadata(&dot_git)? else {
        return Ok(Top::Absent);
    };
    let (dot_git_file, git_dir) = if meta.is_dir() {
        (None, dot_git.clone())
    } else {
        // A file — or anything else that is not a directory (a FIFO): git skips those, but the
        // sandbox could replace it with a `gitdir:` file, so it is kept read-only all the same.
        match named_dir(workspace, workspace, &dot_git)? {
            Some(dir) if dir.starts_with(workspace) || points_back(&dir, &dot_git)? => {
                (Some(dot_git.clone()), dir)
            }
            named => {
                return Ok(Top::Unaccepted {
                    file: dot_git,
                    named,
                });
            }
        }
    };
    let common_dir = common_dir(workspace, &git_dir, trusted)?;
    Ok(Top::Accepted(GitDirs {
        dot_git_file,
        git_dir,
        common_dir,
    }))
}

/// The directory the `.git` file `file` (in the directory `base`) names, resolved as git on the
/// host will resolve it (`gitdir.rs`); `None` when git could not use it either. Refused when
/// the file is over-long (cordon would read less of it than git) or its route is the sandbox's
/// to change.
fn named_dir(workspace: &Path, base: &Path, file: &Path) -> Result<Option<PathBuf>, GitError> {
    let Some(bytes) = read_bounded(file)? else {
        return Ok(None);
    };
    if bytes.len() as u64 > MAX_POINTER {
        let problem = GitFileProblem::TooLong { limit: MAX_POINTER };
        return Err(GitError::unsafe_file(file, problem));
    }
    let Some(named) = gitdir::parse(&bytes) else {
        return Ok(None);
    };
    match gitdir::resolve(workspace, base, named) {
        Ok(gitdir::Named::Dir(dir)) => Ok(Some(dir)),
        Ok(gitdir::Named::Nothing) => Ok(None),
        Err(problem) => Err(GitError::unsafe_file(file, problem)),
    }
}

/// The work trees above the workspace (the nearest first) that have a `.git`, with the git
/// directory each names. Every one is listed, not only the nearest: git skips a `.git` that is
/// not a repository and looks further up, and cordon need not decide which one git settles on
/// when reading all of them only protects more. Their `.git` lies outside the workspace, where
/// the sandbox cannot write, so following links there is safe.
fn enclosing(workspace: &Path) -> Result<Vec<(PathBuf, PathBuf)>, GitError> {
    let mut found = Vec::new();
    for top in workspace.ancestors().skip(1) {
        let dot_git = top.join(".git");
        let Ok(meta) = fs::metadata(&dot_git) else {
            continue;
        };
        let git_dir = if meta.is_dir() {
            dot_git.canonicalize().ok()
        } else if meta.is_file() {
            match named_dir(workspace, top, &dot_git) {
                Ok(dir) => dir,
                // A `.git` file above the workspace that this user cannot read: git run by this
                // user cannot use it either, and it lies outside the sandbox's reach. Skipped
                // rather than refusing every session below it.
                Err(GitError::Read { .. }) => None,
                Err(other) => return Err(other),
            }
        } else {
            None
        };
        found.extend(git_dir.map(|dir| (top.to_path_buf(), dir)));
    }
    Ok(found)
}

/// The common directory `git_dir/commondir` names, when it is one cordon may mount: inside the
/// workspace, or the `<common>` of a git directory at `<common>/worktrees/<name>` (the layout git
/// itself creates for linked worktrees). Anything else is ignored — the sandbox then works with
/// the git directory alone, and git inside may fail, which is safe.
fn common_dir(
    workspace: &Path,
    git_dir: &Path,
    trusted: Option<&Path>,
) -> Result<Option<PathBuf>, GitError> {
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
    let accepted = named.starts_with(workspace)
        || worktree_parent == Some(named.as_path())
        || trusted.is_some_and(|t| t == named);
    Ok(accepted.then_some(named))
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
    Ok(read_bounded(path)?.and_then(|mut bytes| {
        bytes.truncate(MAX_POINTER as usize);
        String::from_utf8(bytes).ok()
    }))
}

/// Opens a file the sandbox may have written, for reading: never through a symlink (`ELOOP`),
/// never blocking on a FIFO, never becoming the controlling terminal.
pub(crate) fn open_untrusted(path: &Path) -> io::Result<fs::File> {
    fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC | libc::O_NOCTTY)
        .open(path)
}

/// Reads a pointer file like [`read_pointer`], as bytes, one byte past [`MAX_POINTER`] so that
/// the caller can tell an over-long file from one of exactly the limit.
fn read_bounded(path: &Path) -> Result<Option<Vec<u8>>, GitError> {
    let error = |source| GitError::Read {
        path: path.to_path_buf(),
        source,
    };
    let file = match open_untrusted(path) {
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
    file.take(MAX_POINTER + 1)
        .read_to_end(&mut bytes)
        .map_err(error)?;
    Ok(Some(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

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
            common_dir(&ws, git_dir, None).unwrap()
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
        // The host's word (a task worktree cordon made): exactly the directory it names, and
        // only when the `commondir` names that one.
        let repo = out.join("repo/.git");
        fs::write(ws.join(".git/commondir"), format!("{}\n", repo.display())).unwrap();
        assert_eq!(
            common_dir(&ws, &ws.join(".git"), Some(&repo)).unwrap(),
            Some(repo.clone())
        );
        assert_eq!(common_dir(&ws, &ws.join(".git"), None).unwrap(), None);
        assert_eq!(
            common_dir(&ws, &ws.join(".git"), Some(&out.join("repo"))).unwrap(),
            None,
            "another directory than the one trusted is not accepted"
        );
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

    #[test]
    fn a_root_git_file_the_sandbox_could_redirect_refuses_the_session() {
        let workspace = tempfile::tempdir().unwrap();
        let ws = workspace.path().canonicalize().unwrap();
        fs::create_dir_all(ws.join("real/git")).unwrap();
        std::os::unix::fs::symlink(ws.join("real"), ws.join("link")).unwrap();
        let long = format!("gitdir: {}\n", "a/".repeat(MAX_POINTER as usize));
        // Each row: the `.git` file, the problem it must be refused for.
        let rows: [(&str, GitFileProblem); 3] = [
            (&long, GitFileProblem::TooLong { limit: MAX_POINTER }),
            (
                "gitdir: link/git\n",
                GitFileProblem::Symlink {
                    path: ws.join("link"),
                },
            ),
            (
                "gitdir: .gitsub\n",
                GitFileProblem::Missing {
                    path: ws.join(".gitsub"),
                },
            ),
        ];
        for (text, want) in rows {
            fs::write(ws.join(".git"), text).unwrap();
            let refused = protection(&ws);
            if let Err(error) = &refused {
                // The message names the file, the problem and the fix.
                let message = error.to_string();
                // The problem is said once, in the message, not again as a source.
                assert!(std::error::Error::source(error).is_none(), "{message}");
                assert!(message.contains(".git` file `"), "{message}");
                assert!(message.contains("rewrite it on the host"), "{message}");
            }
            match refused {
                Err(GitError::UnsafeGitFile { path, problem }) => {
                    assert_eq!((path, problem), (ws.join(".git"), want), "{text:.40}");
                }
                other => panic!("{text:.40}: must refuse, got {other:?}"),
            }
        }
        // The control: the direct path is accepted and mounted.
        fs::write(ws.join(".git"), "gitdir: real/git\n").unwrap();
        let found = protection(&ws).unwrap();
        assert_eq!(found.dirs, vec![ws.join("real/git")]);
        assert_eq!(found.dot_git_file, Some(ws.join(".git")));
    }

    #[test]
    fn a_git_file_naming_an_unaccepted_directory_is_still_kept() {
        let outside = tempfile::tempdir().unwrap();
        let workspace = tempfile::tempdir().unwrap();
        let ws = workspace.path().canonicalize().unwrap();
        for text in [
            format!("gitdir: {}\n", outside.path().display()),
            "gitdir: /nonexistent/x\n".to_owned(),
            "not a pointer\n".to_owned(),
        ] {
            fs::write(ws.join(".git"), &text).unwrap();
            let found = protection(&ws).unwrap();
            assert_eq!(found.dot_git_file, Some(ws.join(".git")), "{text}");
            assert!(found.dirs.is_empty(), "{text}");
            assert_eq!(discover(&ws).unwrap(), None, "{text}");
        }
    }

    #[test]
    fn long_paths_are_shortened_in_error_messages() {
        let long = format!("/ws/{}end", "a/".repeat(2000));
        let accented = format!("/ws/{}", "é".repeat(200));
        assert_eq!(Short(Path::new("/ws/sub")).to_string(), "/ws/sub");
        for path in [&long, &accented] {
            let shown = Short(Path::new(path)).to_string();
            // The start and the end are kept, each at most half the budget, cut between
            // characters (`é` is two bytes).
            assert!(shown.len() <= SHOWN + " … ".len(), "{shown}");
            let (head, tail) = shown.split_once(" … ").expect("elided");
            assert!(path.starts_with(head) && path.ends_with(tail), "{shown}");
            assert!(
                head.len() > SHOWN / 2 - 2 && tail.len() > SHOWN / 2 - 2,
                "{shown}"
            );
        }
        // The reviewer's case: a gitlink name past PATH_MAX made a 4000-character message.
        let error = GitError::Read {
            path: PathBuf::from(&long),
            source: io::Error::from_raw_os_error(libc::ENAMETOOLONG),
        };
        assert!(error.to_string().len() < 250, "{error}");
    }
}
