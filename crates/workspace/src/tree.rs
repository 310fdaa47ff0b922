//! Directory trees outside the workspace that a sandbox wrote and the host must size or empty
//! (the persistent caches of DESIGN §11): as hostile as the workspace, so they are handled the
//! same way — every entry reached through its parent's descriptor with `O_NOFOLLOW`, a link
//! removed and never followed, nothing opened as content. Unlike [`crate::View::walk`] nothing is
//! special about `.git` here (cargo's git checkouts hold one), and removal copes with what a
//! sandbox can build to get in its way: read-only or unreadable directories (the Go module cache
//! makes its directories read-only on purpose) and chains deeper than there are descriptors.

use std::collections::HashSet;
use std::ffi::{CStr, CString};
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};

use rustix::fs::{AtFlags, Dir, FileType, Mode, OFlags, RenameFlags};
use rustix::io::Errno;

/// How much [`usage`] visits; past a limit it stops with an error naming it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TreeLimits {
    /// Entries visited in all.
    pub entries: u64,
    /// Directories below the top.
    pub depth: usize,
}

impl Default for TreeLimits {
    fn default() -> TreeLimits {
        TreeLimits {
            entries: 1_000_000,
            depth: 64,
        }
    }
}

/// What a tree holds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    /// Bytes allocated on disk (`st_blocks × 512`, each inode once): a sparse file counts what it
    /// occupies, a hard-linked file once.
    pub bytes: u64,
    /// Entries below the top, of any kind.
    pub entries: u64,
}

#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
pub enum TreeError {
    #[error("it holds more than {limit} entries")]
    TooManyEntries { limit: u64 },
    #[error("it nests more than {limit} directories deep")]
    TooDeep { limit: usize },
    #[error("cannot {action}: {}", std::io::Error::from(*errno))]
    Io { action: &'static str, errno: Errno },
}

fn io(action: &'static str) -> impl FnOnce(Errno) -> TreeError {
    move |errno| TreeError::Io { action, errno }
}

/// Opens the directory `name` in `parent` for listing, never following a link. A directory the
/// owner cannot list (mode `0o000`, `0o300`) is given `u+rwx` first, through the very inode
/// opened with `O_PATH` (its `/proc/self/fd` entry), so no rename in between can redirect it.
fn open_dir(parent: BorrowedFd<'_>, name: &CStr) -> Result<OwnedFd, Errno> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    match rustix::fs::openat(parent, name, flags, Mode::empty()) {
        Err(Errno::ACCESS) => {
            let path_only = OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
            let pinned = rustix::fs::openat(parent, name, path_only, Mode::empty())?;
            let magic = format!("/proc/self/fd/{}", pinned.as_raw_fd());
            rustix::fs::chmod(magic.as_str(), Mode::RWXU)?;
            // The magic link is followed on purpose (`O_NOFOLLOW` would refuse it): it names the
            // very inode pinned above.
            rustix::fs::open(
                magic.as_str(),
                flags.difference(OFlags::NOFOLLOW),
                Mode::empty(),
            )
        }
        other => other,
    }
}

/// A listing of `dir` itself, from a descriptor of its own.
fn listing(dir: BorrowedFd<'_>) -> Result<Dir, TreeError> {
    let top = rustix::fs::openat(
        dir,
        c".",
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(io("open the cache directory"))?;
    Dir::new(top).map_err(io("list the cache directory"))
}

/// What `dir` holds below it, within `limits`.
pub fn usage(dir: BorrowedFd<'_>, limits: &TreeLimits) -> Result<Usage, TreeError> {
    let top = listing(dir)?;
    let mut total = Usage::default();
    let mut seen: HashSet<(u64, u64)> = HashSet::new();
    let mut stack = vec![top];
    loop {
        let depth = stack.len();
        let Some(current) = stack.last_mut() else {
            break;
        };
        let Some(entry) = current.read() else {
            stack.pop();
            continue;
        };
        let entry = entry.map_err(io("list a directory"))?;
        let name = entry.file_name();
        if name == c"." || name == c".." {
            continue;
        }
        total.entries += 1;
        if total.entries > limits.entries {
            return Err(TreeError::TooManyEntries {
                limit: limits.entries,
            });
        }
        let parent = current.fd().map_err(io("list a directory"))?;
        let stat = match rustix::fs::statat(parent, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(stat) => stat,
            // Gone since it was listed.
            Err(Errno::NOENT) => continue,
            Err(errno) => return Err(io("inspect an entry")(errno)),
        };
        if stat.st_nlink <= 1 || seen.insert((stat.st_dev, stat.st_ino)) {
            total.bytes += (stat.st_blocks as u64).saturating_mul(512);
        }
        if FileType::from_raw_mode(stat.st_mode) == FileType::Directory {
            if depth > limits.depth {
                return Err(TreeError::TooDeep {
                    limit: limits.depth,
                });
            }
            let child = open_dir(parent, name).map_err(io("open a directory"))?;
            stack.push(Dir::new(child).map_err(io("list a directory"))?);
        }
    }
    Ok(total)
}

/// Directories held open at once while emptying; a deeper one is moved up to the top first.
const OPEN_DIRS: usize = 32;

/// Removes everything below `dir`, leaving `dir` itself, and returns how many entries it removed.
/// Nothing is followed: a link is unlinked, a directory entered only through `O_NOFOLLOW`.
/// Directories without owner write or search permission get it first. One listing stream per
/// open directory, read once (each directory is listed again only when entries appeared in it
/// meanwhile), so the work is linear in the entries. A chain deeper than [`OPEN_DIRS`] is cut:
/// its deeper part is renamed into `dir` (a fresh name, never replacing one) and emptied from
/// there, so the descriptors held stay bounded whatever the depth.
pub fn empty(dir: BorrowedFd<'_>) -> Result<u64, TreeError> {
    let top = listing(dir)?;
    let mut removed = 0u64;
    let mut moved = 0u64;
    // Each level: the directory's listing and its name in the level above.
    let mut stack: Vec<(Dir, CString)> = vec![(top, CString::default())];
    // Passes over the top that removed something; a pass that removes nothing ends the work.
    let mut top_progress = false;
    loop {
        let depth = stack.len();
        let Some((current, _)) = stack.last_mut() else {
            break;
        };
        let entry = match current.read() {
            Some(entry) => entry.map_err(io("list a directory"))?,
            None => {
                // The end of this directory's listing.
                let (done, name) = stack.pop().unwrap_or_else(|| unreachable!());
                let Some((parent, _)) = stack.last_mut() else {
                    // The top: listed again while a pass still removed something (deep chains
                    // moved up arrive after the listing passed their place).
                    let mut done = done;
                    if std::mem::take(&mut top_progress) {
                        done.rewind();
                        stack.push((done, name));
                    }
                    continue;
                };
                let parent_fd = parent.fd().map_err(io("list a directory"))?;
                match rustix::fs::unlinkat(parent_fd, name.as_c_str(), AtFlags::REMOVEDIR) {
                    Ok(()) => removed += 1,
                    Err(Errno::NOENT) => {}
                    // Something appeared in it since it was listed: list it again.
                    Err(Errno::NOTEMPTY | Errno::EXIST) => {
                        let mut done = done;
                        done.rewind();
                        stack.push((done, name));
                    }
                    Err(errno) => return Err(io("remove a directory")(errno)),
                }
                continue;
            }
        };
        let name = entry.file_name();
        if name == c"." || name == c".." {
            continue;
        }
        let name = name.to_owned();
        let parent = current.fd().map_err(io("list a directory"))?;
        let kind = match entry.file_type() {
            FileType::Unknown => {
                match rustix::fs::statat(parent, name.as_c_str(), AtFlags::SYMLINK_NOFOLLOW) {
                    Ok(stat) => FileType::from_raw_mode(stat.st_mode),
                    Err(Errno::NOENT) => continue,
                    Err(errno) => return Err(io("inspect an entry")(errno)),
                }
            }
            known => known,
        };
        if kind != FileType::Directory {
            match rustix::fs::unlinkat(parent, name.as_c_str(), AtFlags::empty()) {
                Ok(()) => {
                    removed += 1;
                    if depth == 1 {
                        top_progress = true;
                    }
                    continue;
                }
                Err(Errno::NOENT) => continue,
                // A directory after all (the listed type was stale): entered below.
                Err(Errno::ISDIR) => {}
                Err(errno) => return Err(io("remove an entry")(errno)),
            }
        }
        if depth == 1 {
            top_progress = true;
        }
        if depth >= OPEN_DIRS {
            // Too deep to hold open: move the subtree up to the top, under a name nothing has.
            loop {
                moved += 1;
                let to = CString::new(format!(".cordon-deep-{moved}")).unwrap_or_default();
                let top = stack[0].0.fd().map_err(io("list a directory"))?;
                let parent = stack[depth - 1].0.fd().map_err(io("list a directory"))?;
                match rustix::fs::renameat_with(
                    parent,
                    name.as_c_str(),
                    top,
                    to.as_c_str(),
                    RenameFlags::NOREPLACE,
                ) {
                    Err(Errno::EXIST) => continue,
                    Err(Errno::NOENT) => break,
                    other => {
                        other.map_err(io("move a deep directory"))?;
                        break;
                    }
                }
            }
            continue;
        }
        match open_dir(parent, name.as_c_str()) {
            Ok(child) => {
                // Removing its entries needs write and search permission on it.
                rustix::fs::fchmod(&child, Mode::RWXU).map_err(io("open a directory"))?;
                let listing = Dir::new(child).map_err(io("list a directory"))?;
                stack.push((listing, name));
            }
            // Replaced by a link or a file since it was listed: removed as one.
            Err(Errno::LOOP | Errno::NOTDIR) => {
                rustix::fs::unlinkat(parent, name.as_c_str(), AtFlags::empty())
                    .map_err(io("remove an entry"))?;
                removed += 1;
            }
            Err(Errno::NOENT) => {}
            Err(errno) => return Err(io("open a directory")(errno)),
        }
    }
    Ok(removed)
}
