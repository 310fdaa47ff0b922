//! The scratch top levels of git directories under `allow_git_mutations` (DESIGN §11): how a
//! session can change an ordinary repository without being able to create the names that would
//! reconfigure the host's git, and without cordon writing anything into the host's `.git` to get
//! there.
//!
//! A mount can keep an *existing* entry read-only, but git must create files at the top of its
//! directory (`index.lock`, `HEAD.lock`, …), and Landlock cannot refuse one name in a directory
//! where others may be created — so a missing `commondir` or `config.worktree` could be created.
//! Instead the session sees the top level of each git directory as a scratch directory of the
//! host's (fresh per session, outside the repository): the directories in it are the host's own
//! (`objects/`, `refs/`, `logs/` writable; `hooks/`, `info/` read-only), `config`, `commondir`,
//! `config.worktree` and `gitdir` are the host's, read-only, and the other files are copies.
//! Whatever the session creates at the top level stays in the scratch. When the session ends
//! (every process in it gone), the files git keeps its state in — [`SYNCED`], nothing else — are
//! written back to the host's git directory through a view (regular files only, bounded, no link
//! followed); a synced name the session removed is removed. `objects/info` is covered the same
//! way when it has no `alternates` (its existing entries kept read-only, nothing written back).

use std::fs;
use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use cordon_workspace::{Kind as EntryKind, View, WsPath};

use crate::mounts::{Access, Kept, Kind};

/// The files of a git directory's top level that hold git's state and are written back when a
/// session changed them. Everything else the session writes there is dropped with the scratch.
pub const SYNCED: [&str; 16] = [
    "HEAD",
    "ORIG_HEAD",
    "FETCH_HEAD",
    "MERGE_HEAD",
    "MERGE_MSG",
    "MERGE_MODE",
    "CHERRY_PICK_HEAD",
    "REVERT_HEAD",
    "REBASE_HEAD",
    "AUTO_MERGE",
    "COMMIT_EDITMSG",
    "SQUASH_MSG",
    "TAG_EDITMSG",
    "index",
    "packed-refs",
    "shallow",
];

/// Configuration files at a git directory's top level: the host's own, read-only.
const CONFIGURATION: [&str; 4] = ["config", "config.worktree", "commondir", "gitdir"];

/// Directories at the top level kept read-only (the others are writable).
const READ_ONLY_DIRS: [&str; 2] = ["hooks", "info"];

/// The largest file copied into (or back from) a scratch top level.
pub const MAX_FILE: usize = 256 << 20;
/// The most entries a git directory's top level may have.
const MAX_ENTRIES: usize = 10_000;

/// A covered git directory: its host path, its scratch, and the files copied in.
#[derive(Debug)]
pub struct Covered {
    pub host: PathBuf,
    pub scratch: PathBuf,
    /// The [`SYNCED`] names that existed when the session started.
    pub copied: Vec<String>,
    /// Written back at the end (`false` for `objects/info`).
    pub sync: bool,
    /// As root: who the copies and the written-back files belong to (the git directory's
    /// owner, whom the workspace idmapping shows as the sandbox user).
    pub owner: Option<(u32, u32)>,
}

/// Why a cover could not be made or written back.
#[derive(Debug, thiserror::Error)]
pub enum CoverError {
    #[error("cannot {action} `{}`: {source}", path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot read the git directory `{}`: {source}", path.display())]
    View {
        path: PathBuf,
        #[source]
        source: cordon_workspace::ViewError,
    },
    #[error(
        "`{}` is larger than {} MiB, more than cordon copies for allow_git_mutations",
        path.display(),
        MAX_FILE >> 20
    )]
    TooLarge { path: PathBuf },
    #[error(
        "the git directory `{}` has more than {MAX_ENTRIES} entries at its top level",
        path.display()
    )]
    TooManyEntries { path: PathBuf },
}

fn io_error(action: &'static str, path: &Path) -> impl FnOnce(io::Error) -> CoverError {
    let path = path.to_path_buf();
    move |source| CoverError::Io {
        action,
        path,
        source,
    }
}

/// Makes `scratch` (which must not exist) the cover of the git directory `host`: mount points
/// for what is kept, copies of the other regular files, owned by `owner` when given (as root:
/// the git directory's owner, whom the workspace idmapping shows as the sandbox user). Returns
/// what to keep and the record for writing back.
pub fn prepare(
    host: &Path,
    scratch: &Path,
    owner: Option<(u32, u32)>,
) -> Result<(Vec<Kept>, Covered), CoverError> {
    let view = View::open(host).map_err(io_error("open", host))?;
    let listing = view
        .list(None, MAX_ENTRIES + 1)
        .map_err(|source| CoverError::View {
            path: host.to_path_buf(),
            source,
        })?;
    if listing.entries.len() > MAX_ENTRIES {
        return Err(CoverError::TooManyEntries {
            path: host.to_path_buf(),
        });
    }
    new_dir(scratch, owner)?;
    let mut keep = Vec::new();
    let mut copied = Vec::new();
    for entry in listing.entries {
        // Git's own names are ASCII; anything else is not git's and stays out of the session.
        let Ok(name) = String::from_utf8(entry.name.clone()) else {
            continue;
        };
        let at = scratch.join(&name);
        match entry.meta.kind {
            EntryKind::Directory => {
                new_dir(&at, owner)?;
                let access = if READ_ONLY_DIRS.contains(&name.as_str()) {
                    Access::ReadOnly
                } else {
                    Access::ReadWrite
                };
                keep.push(Kept {
                    name,
                    kind: Kind::Dir,
                    access,
                });
            }
            EntryKind::File if CONFIGURATION.contains(&name.as_str()) => {
                new_file(&at, b"", owner)?;
                keep.push(Kept {
                    name,
                    kind: Kind::File,
                    access: Access::ReadOnly,
                });
            }
            EntryKind::File => {
                let path = WsPath::name(&entry.name).map_err(|_| CoverError::TooManyEntries {
                    path: host.to_path_buf(),
                })?;
                let Some(read) =
                    view.read(&path, MAX_FILE + 1)
                        .map_err(|source| CoverError::View {
                            path: host.join(&name),
                            source,
                        })?
                else {
                    continue;
                };
                if read.bytes.len() > MAX_FILE || read.omitted() > 0 {
                    return Err(CoverError::TooLarge {
                        path: host.join(&name),
                    });
                }
                new_file(&at, &read.bytes, owner)?;
                if SYNCED.contains(&name.as_str()) {
                    copied.push(name);
                }
            }
            // Links, FIFOs, sockets, devices: git keeps none at its top level; the session does
            // not see them.
            _ => {}
        }
    }
    Ok((
        keep,
        Covered {
            host: host.to_path_buf(),
            scratch: scratch.to_path_buf(),
            copied,
            sync: true,
            owner,
        },
    ))
}

/// Makes `scratch` the cover of `objects/info` (without `alternates`): its existing entries kept
/// read-only, nothing written back.
pub fn prepare_objects_info(
    host: &Path,
    scratch: &Path,
    owner: Option<(u32, u32)>,
) -> Result<(Vec<Kept>, Covered), CoverError> {
    let view = View::open(host).map_err(io_error("open", host))?;
    let listing = view
        .list(None, MAX_ENTRIES + 1)
        .map_err(|source| CoverError::View {
            path: host.to_path_buf(),
            source,
        })?;
    if listing.entries.len() > MAX_ENTRIES {
        return Err(CoverError::TooManyEntries {
            path: host.to_path_buf(),
        });
    }
    new_dir(scratch, owner)?;
    let mut keep = Vec::new();
    for entry in listing.entries {
        let Ok(name) = String::from_utf8(entry.name.clone()) else {
            continue;
        };
        let kind = match entry.meta.kind {
            EntryKind::Directory => Kind::Dir,
            EntryKind::File => Kind::File,
            _ => continue,
        };
        let at = scratch.join(&name);
        match kind {
            Kind::Dir => new_dir(&at, owner)?,
            _ => new_file(&at, b"", owner)?,
        }
        keep.push(Kept {
            name,
            kind,
            access: Access::ReadOnly,
        });
    }
    Ok((
        keep,
        Covered {
            host: host.to_path_buf(),
            scratch: scratch.to_path_buf(),
            copied: Vec::new(),
            sync: false,
            owner,
        },
    ))
}

/// Writes the session's changes to the [`SYNCED`] files back to the host's git directory, once
/// nothing runs in the session any more: a changed regular file replaces the host's (a new file
/// beside it, then a rename), a removed one is removed; anything else the session left there
/// (links, FIFOs, files over [`MAX_FILE`]) is skipped and named in the result. As root, a written
/// file is given to `owner`.
pub fn write_back(covered: &Covered) -> Result<Vec<String>, CoverError> {
    let owner = covered.owner;
    let mut skipped = Vec::new();
    if !covered.sync {
        return Ok(skipped);
    }
    let scratch = View::open(&covered.scratch).map_err(io_error("open", &covered.scratch))?;
    let host = View::open(&covered.host).map_err(io_error("open", &covered.host))?;
    let view_error = |name: &str| {
        let path = covered.host.join(name);
        move |source| CoverError::View { path, source }
    };
    for name in SYNCED {
        let path = WsPath::name(name.as_bytes()).map_err(|_| CoverError::TooManyEntries {
            path: covered.host.clone(),
        })?;
        let now = match scratch.read(&path, MAX_FILE + 1) {
            Ok(now) => now,
            // Not a regular file: left out (it never reaches the host).
            Err(_) => {
                skipped.push(name.to_owned());
                continue;
            }
        };
        match now {
            Some(now) if now.bytes.len() > MAX_FILE || now.omitted() > 0 => {
                skipped.push(name.to_owned());
            }
            Some(now) => {
                let before = host.read(&path, MAX_FILE + 1).ok().flatten();
                if before.is_some_and(|b| b.bytes == now.bytes) {
                    continue;
                }
                host.write(&path, &now.bytes).map_err(view_error(name))?;
                if let Some((uid, gid)) = owner
                    && let Ok(Some(opened)) = host.open_file(&path)
                {
                    std::os::unix::fs::fchown(&opened.file, Some(uid), Some(gid))
                        .map_err(io_error("hand back", &covered.host.join(name)))?;
                }
            }
            None if covered.copied.iter().any(|c| c == name) => {
                host.remove(&path).map_err(view_error(name))?;
            }
            None => {}
        }
    }
    Ok(skipped)
}

/// The owner of `path` (for the scratch files' owner as root).
pub fn owner_of(path: &Path) -> Result<(u32, u32), CoverError> {
    let meta = fs::symlink_metadata(path).map_err(io_error("inspect", path))?;
    Ok((meta.uid(), meta.gid()))
}

fn new_dir(path: &Path, owner: Option<(u32, u32)>) -> Result<(), CoverError> {
    fs::DirBuilder::new()
        .mode(0o755)
        .create(path)
        .map_err(io_error("create", path))?;
    chown(path, owner)
}

fn new_file(path: &Path, bytes: &[u8], owner: Option<(u32, u32)>) -> Result<(), CoverError> {
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .map_err(io_error("create", path))?;
    io::Write::write_all(&mut file, bytes).map_err(io_error("write", path))?;
    chown(path, owner)
}

fn chown(path: &Path, owner: Option<(u32, u32)>) -> Result<(), CoverError> {
    match owner {
        Some((uid, gid)) => std::os::unix::fs::lchown(path, Some(uid), Some(gid))
            .map_err(io_error("hand over", path)),
        None => Ok(()),
    }
}

/// A session's scratch directories (one per covered directory, below one root in the host's
/// temporary directory), removed when dropped.
#[derive(Debug, Default)]
pub struct Scratch {
    root: Option<PathBuf>,
    next: usize,
    pub covered: Vec<Covered>,
}

impl Scratch {
    /// A fresh, empty directory for the next cover.
    pub fn next_dir(&mut self) -> Result<PathBuf, CoverError> {
        let root = match &self.root {
            Some(root) => root.clone(),
            None => {
                let root = fresh_root()?;
                self.root = Some(root.clone());
                root
            }
        };
        self.next += 1;
        Ok(root.join(self.next.to_string()))
    }

    /// Writes every covered directory back (see [`write_back`]); the messages of what failed or
    /// was skipped.
    pub fn write_back(&self) -> Vec<String> {
        let mut problems = Vec::new();
        for covered in &self.covered {
            match write_back(covered) {
                Ok(skipped) => problems.extend(skipped.into_iter().map(|name| {
                    format!(
                        "the sandbox left `{}` in {} as something other than a regular file \
                         (or over {} MiB); the host's is unchanged",
                        name,
                        covered.host.display(),
                        MAX_FILE >> 20
                    )
                })),
                Err(err) => problems.push(err.to_string()),
            }
        }
        problems
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if let Some(root) = self.root.take()
            && let Ok(dir) = fs::File::open(&root)
        {
            // What the session wrote there is hostile: emptied without following anything.
            let _ = cordon_workspace::tree::empty(std::os::fd::AsFd::as_fd(&dir));
            let _ = fs::remove_dir(&root);
        }
    }
}

/// `<tmp>/cordon-git-<pid>-<n>`, made 0700 and new.
fn fresh_root() -> Result<PathBuf, CoverError> {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let base = std::env::temp_dir();
    let mut last = None;
    for _ in 0..16 {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let path = base.join(format!(
            "cordon-git-{}-{}-{nanos}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        match fs::DirBuilder::new().mode(0o700).create(&path) {
            Ok(()) => return Ok(path),
            Err(err) if err.kind() == io::ErrorKind::AlreadyExists => last = Some(err),
            Err(err) => return Err(io_error("create", &path)(err)),
        }
    }
    Err(io_error("create a scratch directory in", &base)(
        last.unwrap_or_else(|| io::Error::from(io::ErrorKind::AlreadyExists)),
    ))
}
