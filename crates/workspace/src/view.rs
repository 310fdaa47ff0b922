//! `View`: the workspace directory, opened once, and every host-side access beneath it.
//!
//! Each access resolves the entry's *parent* directory beneath the workspace with
//! `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)` — or, where the kernel
//! has no `openat2`, one `O_NOFOLLOW | O_DIRECTORY` open per component, which refuses the same
//! links — and then acts on the last component relative to that descriptor with a call that does
//! not follow it (`statat(AT_SYMLINK_NOFOLLOW)`, `openat(O_NOFOLLOW)`, `unlinkat`,
//! `readlinkat`). So no access ever leaves the workspace or follows a link the sandbox made,
//! whatever the work tree holds.
//!
//! Contents are read only from regular files: the entry is `lstat`ed first and opened only when
//! it is one (a FIFO is never opened, so it cannot block; a device is never opened, so opening has
//! no side effect), the open is `O_NONBLOCK | O_NOCTTY`, and the descriptor's `fstat` must name the
//! same inode. Reads are bounded by the caller's limit, never by the size a file claims.

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, Dir, Mode, OFlags, ResolveFlags};
use rustix::io::Errno;

use crate::meta::{Kind, Meta};
use crate::path::{WsPath, is_git_name};

/// How paths are resolved beneath the workspace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Resolve {
    /// One `openat2` call with `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS`.
    Openat2,
    /// One `openat(O_NOFOLLOW | O_DIRECTORY)` per component (kernels without `openat2`, or a
    /// seccomp policy that refuses it).
    Walk,
}

/// Why an access was refused or failed. Paths are workspace-relative (escape them before a
/// terminal: they are the sandbox's names).
#[derive(Debug, thiserror::Error)]
pub enum ViewError {
    #[error("`{path}` is {kind}, not a regular file")]
    NotAFile { path: String, kind: Kind },
    #[error(
        "`{path}` lies below a symbolic link or a file, and cordon follows no link in the workspace"
    )]
    Blocked { path: String },
    #[error("`{path}` changed while cordon opened it")]
    Changed { path: String },
    #[error(
        "the workspace directory `{dir}` has more than {limit} entries, more than cordon lists"
    )]
    TooManyEntries { dir: String, limit: usize },
    #[error("cannot {action} `{path}` in the workspace")]
    Io {
        action: &'static str,
        path: String,
        #[source]
        source: io::Error,
    },
}

impl ViewError {
    fn io(action: &'static str, path: &WsPath, errno: Errno) -> ViewError {
        ViewError::Io {
            action,
            path: path.shown(),
            source: errno.into(),
        }
    }
}

/// Bytes read from the start of a regular file, at most the caller's limit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bounded {
    pub bytes: Vec<u8>,
    /// The file's size when it was opened.
    pub size: u64,
}

impl Bounded {
    /// How many bytes of the file were not read.
    pub fn omitted(&self) -> u64 {
        self.size.saturating_sub(self.bytes.len() as u64)
    }
}

/// What [`View::remove`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Removed {
    /// The entry (of this kind; a link itself, never its target) was removed.
    Removed(Kind),
    Absent,
    /// A directory where a file was expected: left alone.
    KeptDirectory,
}

/// A regular file opened for reading, with the metadata of the opened inode.
#[derive(Debug)]
pub struct OpenFile {
    pub file: File,
    pub meta: Meta,
}

/// One entry of a listed directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Listed {
    pub name: Vec<u8>,
    pub meta: Meta,
}

/// A directory's entries (`.`, `..` and any `.git` left out), sorted by name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Listing {
    pub entries: Vec<Listed>,
    /// The directory holds a `.git` entry (it is the top of a repository).
    pub has_git: bool,
}

/// The workspace, opened once; see the module documentation.
#[derive(Debug)]
pub struct View {
    root: OwnedFd,
    path: PathBuf,
    resolve: Resolve,
}

/// A directory's descriptor: the workspace's own or one resolved beneath it.
enum DirFd<'a> {
    Root(BorrowedFd<'a>),
    Owned(OwnedFd),
}

impl AsFd for DirFd<'_> {
    fn as_fd(&self) -> BorrowedFd<'_> {
        match self {
            DirFd::Root(fd) => *fd,
            DirFd::Owned(fd) => fd.as_fd(),
        }
    }
}

const RESOLVE: ResolveFlags = ResolveFlags::BENEATH
    .union(ResolveFlags::NO_SYMLINKS)
    .union(ResolveFlags::NO_MAGICLINKS);

/// How often an `openat2` that reports a concurrent rename (`EAGAIN`) is retried.
const RETRIES: usize = 4;

impl View {
    /// Opens the workspace directory `path` (its last component is not followed) and picks the
    /// resolution this kernel supports.
    pub fn open(path: &Path) -> io::Result<View> {
        let root = rustix::fs::open(
            path,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        let resolve = match rustix::fs::openat2(
            &root,
            ".",
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
            RESOLVE,
        ) {
            Ok(_) => Resolve::Openat2,
            Err(Errno::NOSYS | Errno::PERM | Errno::INVAL) => Resolve::Walk,
            Err(err) => return Err(err.into()),
        };
        Ok(View {
            root,
            path: path.to_path_buf(),
            resolve,
        })
    }

    /// The same view resolving with `resolve` (tests exercise the walk on kernels that have
    /// `openat2`).
    pub fn with_resolve(mut self, resolve: Resolve) -> View {
        self.resolve = resolve;
        self
    }

    pub fn resolve(&self) -> Resolve {
        self.resolve
    }

    /// The workspace's host path (for messages; never joined and opened).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `(device, inode)` of the workspace directory as opened.
    pub fn id(&self) -> io::Result<(u64, u64)> {
        let stat = rustix::fs::fstat(&self.root)?;
        Ok((stat.st_dev, stat.st_ino))
    }

    /// Resolves the directory `dir` (the workspace itself for `None`) with `flags` added to
    /// `O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC`.
    fn dir(&self, dir: Option<&[u8]>, flags: OFlags) -> Result<DirFd<'_>, Errno> {
        let flags = flags | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let Some(dir) = dir else {
            if flags.contains(OFlags::PATH) {
                return Ok(DirFd::Root(self.root.as_fd()));
            }
            return rustix::fs::openat(&self.root, ".", flags, Mode::empty()).map(DirFd::Owned);
        };
        match self.resolve {
            Resolve::Openat2 => {
                let mut last = Errno::AGAIN;
                for _ in 0..RETRIES {
                    match rustix::fs::openat2(&self.root, dir, flags, Mode::empty(), RESOLVE) {
                        Err(Errno::AGAIN) => last = Errno::AGAIN,
                        other => return other.map(DirFd::Owned),
                    }
                }
                Err(last)
            }
            Resolve::Walk => {
                let mut names = dir.split(|&b| b == b'/').peekable();
                let mut current = DirFd::Root(self.root.as_fd());
                while let Some(name) = names.next() {
                    let step = if names.peek().is_some() {
                        OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC
                    } else {
                        flags
                    };
                    let next = rustix::fs::openat(&current, name, step, Mode::empty())?;
                    current = DirFd::Owned(next);
                }
                Ok(current)
            }
        }
    }

    /// The parent of `path`, resolved for `*at` calls on its last component; `None` when a
    /// directory on the way does not exist.
    fn parent(&self, path: &WsPath, flags: OFlags) -> Result<Option<DirFd<'_>>, ViewError> {
        match self.dir(path.split().0, flags) {
            Ok(fd) => Ok(Some(fd)),
            Err(Errno::NOENT) => Ok(None),
            Err(Errno::LOOP | Errno::NOTDIR | Errno::XDEV) => {
                Err(ViewError::Blocked { path: path.shown() })
            }
            Err(errno) => Err(ViewError::io("resolve", path, errno)),
        }
    }

    /// The entry at `path` as `lstat` sees it; `None` when it does not exist.
    pub fn meta(&self, path: &WsPath) -> Result<Option<Meta>, ViewError> {
        let Some(parent) = self.parent(path, OFlags::PATH)? else {
            return Ok(None);
        };
        stat_name(&parent, path.file_name()).map_err(|errno| ViewError::io("inspect", path, errno))
    }

    /// Opens the regular file at `path` for reading; `None` when nothing is there. Anything but
    /// a regular file is refused without being opened.
    pub fn open_file(&self, path: &WsPath) -> Result<Option<OpenFile>, ViewError> {
        let Some(parent) = self.parent(path, OFlags::PATH)? else {
            return Ok(None);
        };
        let name = path.file_name();
        let Some(before) =
            stat_name(&parent, name).map_err(|errno| ViewError::io("inspect", path, errno))?
        else {
            return Ok(None);
        };
        if before.kind != Kind::File {
            return Err(ViewError::NotAFile {
                path: path.shown(),
                kind: before.kind,
            });
        }
        let changed = || ViewError::Changed { path: path.shown() };
        let fd = match rustix::fs::openat(
            &parent,
            name,
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC,
            Mode::empty(),
        ) {
            Ok(fd) => fd,
            Err(Errno::NOENT | Errno::LOOP) => return Err(changed()),
            Err(errno) => return Err(ViewError::io("open", path, errno)),
        };
        let stat = rustix::fs::fstat(&fd).map_err(|errno| ViewError::io("inspect", path, errno))?;
        let meta = Meta::from_stat(&stat);
        if meta.kind != Kind::File || (meta.dev, meta.ino) != (before.dev, before.ino) {
            return Err(changed());
        }
        Ok(Some(OpenFile {
            file: File::from(fd),
            meta,
        }))
    }

    /// At most `limit` bytes from the start of the regular file at `path`; `None` when nothing
    /// is there.
    pub fn read(&self, path: &WsPath, limit: usize) -> Result<Option<Bounded>, ViewError> {
        let Some(open) = self.open_file(path)? else {
            return Ok(None);
        };
        let capacity = usize::try_from(open.meta.size)
            .unwrap_or(usize::MAX)
            .min(limit);
        let mut bytes = Vec::with_capacity(capacity);
        open.file
            .take(limit as u64)
            .read_to_end(&mut bytes)
            .map_err(|source| ViewError::Io {
                action: "read",
                path: path.shown(),
                source,
            })?;
        Ok(Some(Bounded {
            bytes,
            size: open.meta.size,
        }))
    }

    /// Feeds the whole regular file at `path` to `sink` in pieces of at most 64 KiB, never
    /// holding more; returns its metadata, or `None` when nothing is there.
    pub fn stream(
        &self,
        path: &WsPath,
        sink: &mut dyn FnMut(&[u8]),
    ) -> Result<Option<Meta>, ViewError> {
        let Some(mut open) = self.open_file(path)? else {
            return Ok(None);
        };
        let mut buffer = vec![0u8; 64 << 10];
        loop {
            match open.file.read(&mut buffer) {
                Ok(0) => break,
                Ok(n) => sink(&buffer[..n]),
                Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
                Err(source) => {
                    return Err(ViewError::Io {
                        action: "read",
                        path: path.shown(),
                        source,
                    });
                }
            }
        }
        Ok(Some(open.meta))
    }

    /// The target of the symbolic link at `path` (its bytes, as the link holds them; never
    /// followed); `None` when nothing is there.
    pub fn read_link(&self, path: &WsPath) -> Result<Option<Vec<u8>>, ViewError> {
        let Some(parent) = self.parent(path, OFlags::PATH)? else {
            return Ok(None);
        };
        match rustix::fs::readlinkat(&parent, path.file_name(), Vec::new()) {
            Ok(target) => Ok(Some(target.into_bytes())),
            Err(Errno::NOENT) => Ok(None),
            Err(Errno::INVAL) => {
                let kind = stat_name(&parent, path.file_name())
                    .ok()
                    .flatten()
                    .map_or(Kind::Unknown, |m| m.kind);
                Err(ViewError::NotAFile {
                    path: path.shown(),
                    kind,
                })
            }
            Err(errno) => Err(ViewError::io("read the link", path, errno)),
        }
    }

    /// Removes the entry at `path` — a file, a link (never what it points to), a FIFO or a
    /// socket. A directory is left alone; a path below a link is refused.
    pub fn remove(&self, path: &WsPath) -> Result<Removed, ViewError> {
        let Some(parent) = self.parent(path, OFlags::PATH)? else {
            return Ok(Removed::Absent);
        };
        let name = path.file_name();
        let Some(meta) =
            stat_name(&parent, name).map_err(|errno| ViewError::io("inspect", path, errno))?
        else {
            return Ok(Removed::Absent);
        };
        if meta.kind == Kind::Directory {
            return Ok(Removed::KeptDirectory);
        }
        match rustix::fs::unlinkat(&parent, name, AtFlags::empty()) {
            Ok(()) => Ok(Removed::Removed(meta.kind)),
            Err(Errno::NOENT) => Ok(Removed::Absent),
            Err(Errno::ISDIR) => Ok(Removed::KeptDirectory),
            Err(errno) => Err(ViewError::io("delete", path, errno)),
        }
    }

    /// The entries of the directory `dir` (the workspace itself for `None`), at most `limit`.
    pub fn list(&self, dir: Option<&WsPath>, limit: usize) -> Result<Listing, ViewError> {
        let shown = || dir.map_or_else(|| ".".to_owned(), WsPath::shown);
        let fd = match self.dir(dir.map(WsPath::as_bytes), OFlags::RDONLY) {
            Ok(fd) => fd,
            Err(Errno::LOOP | Errno::NOTDIR | Errno::XDEV) => {
                return Err(ViewError::Blocked { path: shown() });
            }
            Err(errno) => {
                return Err(ViewError::Io {
                    action: "list",
                    path: shown(),
                    source: errno.into(),
                });
            }
        };
        let io = |errno: Errno| ViewError::Io {
            action: "list",
            path: shown(),
            source: errno.into(),
        };
        let fd = match fd {
            DirFd::Owned(fd) => fd,
            DirFd::Root(root) => rustix::fs::openat(
                root,
                ".",
                OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
                Mode::empty(),
            )
            .map_err(io)?,
        };
        let mut reader = Dir::new(fd).map_err(io)?;
        let mut names = Vec::new();
        let mut listing = Listing::default();
        while let Some(entry) = reader.read() {
            let entry = entry.map_err(io)?;
            let name = entry.file_name().to_bytes();
            if name == b"." || name == b".." {
                continue;
            }
            if is_git_name(name) {
                listing.has_git = true;
                continue;
            }
            if names.len() == limit {
                return Err(ViewError::TooManyEntries {
                    dir: shown(),
                    limit,
                });
            }
            names.push(name.to_vec());
        }
        let dir_fd = reader.fd().map_err(io)?;
        for name in names {
            // Gone between the listing and the stat: nothing to report.
            if let Some(meta) = stat_name(&dir_fd, &name).map_err(io)? {
                listing.entries.push(Listed { name, meta });
            }
        }
        listing.entries.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(listing)
    }

    /// Replaces the regular file at `path` (or creates it) with `bytes`: written to a new file
    /// beside it, then renamed over it, so a reader sees the old or the new content. Refused when
    /// something other than a regular file is there; the parent must exist.
    pub fn write(&self, path: &WsPath, bytes: &[u8]) -> Result<(), ViewError> {
        self.write_with(path, bytes, None)
    }

    /// [`View::write`] with the permissions `0o755` (`executable`) or `0o644`, whatever the
    /// file had: what a checkout or a merge writes is what git records.
    pub fn write_file(
        &self,
        path: &WsPath,
        bytes: &[u8],
        executable: bool,
    ) -> Result<(), ViewError> {
        self.write_with(path, bytes, Some(if executable { 0o755 } else { 0o644 }))
    }

    /// Creates the regular file `path` with `bytes` (`0o755` when `executable`, else `0o644`);
    /// refused when anything is there already. Not `fsync`ed: for a directory being filled
    /// that the caller makes durable at once with [`View::sync_filesystem`] (a task's worktree
    /// checkout). The parent must exist.
    pub fn create_file(
        &self,
        path: &WsPath,
        bytes: &[u8],
        executable: bool,
    ) -> Result<(), ViewError> {
        let Some(parent) = self.parent(path, OFlags::PATH)? else {
            return Err(ViewError::io("create", path, Errno::NOENT));
        };
        let fd = rustix::fs::openat(
            &parent,
            path.file_name(),
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(if executable { 0o755 } else { 0o644 }),
        )
        .map_err(|errno| ViewError::io("create", path, errno))?;
        File::from(fd)
            .write_all(bytes)
            .map_err(|source| ViewError::Io {
                action: "write",
                path: path.shown(),
                source,
            })
    }

    /// `syncfs` of the filesystem the workspace is on: everything written there is durable.
    pub fn sync_filesystem(&self) -> io::Result<()> {
        let fd = rustix::fs::openat(
            &self.root,
            ".",
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        rustix::fs::syncfs(&fd)?;
        Ok(())
    }

    /// Makes the directory `path` and every missing one above it, each beneath the workspace
    /// without following a link; an existing directory is kept, anything else in the way is
    /// refused.
    pub fn create_dirs(&self, path: &WsPath) -> Result<(), ViewError> {
        let mut done: Option<WsPath> = None;
        for name in path.components() {
            let here = WsPath::child(done.as_ref(), name)
                .map_err(|_| ViewError::Blocked { path: path.shown() })?;
            let Some(parent) = self.parent(&here, OFlags::PATH)? else {
                return Err(ViewError::io("create", &here, Errno::NOENT));
            };
            match rustix::fs::mkdirat(&parent, name, Mode::from_raw_mode(0o755)) {
                Ok(()) => {}
                Err(Errno::EXIST) => {
                    let meta = stat_name(&parent, name)
                        .map_err(|errno| ViewError::io("inspect", &here, errno))?;
                    if meta.map(|m| m.kind) != Some(Kind::Directory) {
                        return Err(ViewError::Blocked { path: path.shown() });
                    }
                }
                Err(errno) => return Err(ViewError::io("create", &here, errno)),
            }
            done = Some(here);
        }
        Ok(())
    }

    /// Makes `path` a symbolic link to `target` (the link is made, never followed), replacing
    /// a file or link there; a directory in the way is refused. The parent must exist.
    pub fn symlink(&self, path: &WsPath, target: &[u8]) -> Result<(), ViewError> {
        let Some(parent) = self.parent(path, OFlags::PATH)? else {
            return Err(ViewError::io("link", path, Errno::NOENT));
        };
        let name = path.file_name();
        if let Some(meta) =
            stat_name(&parent, name).map_err(|errno| ViewError::io("inspect", path, errno))?
        {
            if meta.kind == Kind::Directory {
                return Err(ViewError::NotAFile {
                    path: path.shown(),
                    kind: meta.kind,
                });
            }
            rustix::fs::unlinkat(&parent, name, AtFlags::empty())
                .map_err(|errno| ViewError::io("replace", path, errno))?;
        }
        rustix::fs::symlinkat(target, &parent, name)
            .map_err(|errno| ViewError::io("link", path, errno))
    }

    /// Makes the directory `path` with `mode` (whatever the umask); `false` when a directory is
    /// there already. Anything else in the way is refused; the parent must exist.
    pub fn create_dir(&self, path: &WsPath, mode: u32) -> Result<bool, ViewError> {
        let Some(parent) = self.parent(path, OFlags::PATH)? else {
            return Err(ViewError::io("create", path, Errno::NOENT));
        };
        let name = path.file_name();
        match rustix::fs::mkdirat(&parent, name, Mode::from_raw_mode(mode)) {
            Ok(()) => {}
            Err(Errno::EXIST) => {
                let meta = stat_name(&parent, name)
                    .map_err(|errno| ViewError::io("inspect", path, errno))?;
                return match meta.map(|m| m.kind) {
                    Some(Kind::Directory) => Ok(false),
                    _ => Err(ViewError::Blocked { path: path.shown() }),
                };
            }
            Err(errno) => return Err(ViewError::io("create", path, errno)),
        }
        self.set_dir_mode(Some(path), mode)?;
        Ok(true)
    }

    /// Creates the regular file `path` (refused when anything is there, a link included), fills
    /// it from `from` and gives it `mode` whatever the umask; returns the bytes copied. Not
    /// `fsync`ed (see [`View::create_file`]). The parent must exist.
    pub fn create_from(
        &self,
        path: &WsPath,
        mode: u32,
        from: &mut dyn Read,
    ) -> Result<u64, ViewError> {
        let Some(parent) = self.parent(path, OFlags::PATH)? else {
            return Err(ViewError::io("create", path, Errno::NOENT));
        };
        let fd = rustix::fs::openat(
            &parent,
            path.file_name(),
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )
        .map_err(|errno| ViewError::io("create", path, errno))?;
        let mut file = File::from(fd);
        let copied = io::copy(from, &mut file).map_err(|source| ViewError::Io {
            action: "write",
            path: path.shown(),
            source,
        })?;
        rustix::fs::fchmod(&file, Mode::from_raw_mode(mode))
            .map_err(|errno| ViewError::io("set the mode of", path, errno))?;
        Ok(copied)
    }

    /// Makes `new` a hard link to the regular file `existing` (neither is followed if it is a
    /// link; anything but a regular file at `existing` is refused). `new` must not exist.
    pub fn hard_link(&self, existing: &WsPath, new: &WsPath) -> Result<(), ViewError> {
        let Some(from) = self.parent(existing, OFlags::PATH)? else {
            return Err(ViewError::io("link to", existing, Errno::NOENT));
        };
        match stat_name(&from, existing.file_name())
            .map_err(|errno| ViewError::io("inspect", existing, errno))?
        {
            Some(meta) if meta.kind == Kind::File => {}
            Some(meta) => {
                return Err(ViewError::NotAFile {
                    path: existing.shown(),
                    kind: meta.kind,
                });
            }
            None => return Err(ViewError::io("link to", existing, Errno::NOENT)),
        }
        let Some(to) = self.parent(new, OFlags::PATH)? else {
            return Err(ViewError::io("link", new, Errno::NOENT));
        };
        rustix::fs::linkat(
            &from,
            existing.file_name(),
            &to,
            new.file_name(),
            AtFlags::empty(),
        )
        .map_err(|errno| ViewError::io("link", new, errno))
    }

    /// Sets the permission bits of the directory `path` (the workspace itself for `None`),
    /// opened without following a link.
    pub fn set_dir_mode(&self, path: Option<&WsPath>, mode: u32) -> Result<(), ViewError> {
        let shown = || path.map_or_else(|| ".".to_owned(), WsPath::shown);
        let fd = self
            .dir(path.map(WsPath::as_bytes), OFlags::RDONLY)
            .map_err(|errno| match errno {
                Errno::LOOP | Errno::NOTDIR | Errno::XDEV => ViewError::Blocked { path: shown() },
                errno => ViewError::Io {
                    action: "open",
                    path: shown(),
                    source: errno.into(),
                },
            })?;
        rustix::fs::fchmod(&fd, Mode::from_raw_mode(mode)).map_err(|errno| ViewError::Io {
            action: "set the mode of",
            path: shown(),
            source: errno.into(),
        })
    }

    /// Sets the access and modification times of the entry at `path` to `seconds` since the
    /// epoch — of a link itself, never of its target.
    pub fn set_mtime(&self, path: &WsPath, seconds: i64) -> Result<(), ViewError> {
        let Some(parent) = self.parent(path, OFlags::PATH)? else {
            return Err(ViewError::io("set the time of", path, Errno::NOENT));
        };
        let time = rustix::fs::Timespec {
            tv_sec: seconds,
            tv_nsec: 0,
        };
        let times = rustix::fs::Timestamps {
            last_access: time,
            last_modification: time,
        };
        rustix::fs::utimensat(&parent, path.file_name(), &times, AtFlags::SYMLINK_NOFOLLOW)
            .map_err(|errno| ViewError::io("set the time of", path, errno))
    }

    /// Removes the entry at `path` and, when it is a directory, everything below it, never
    /// following a link; a directory without write or search permission for its owner is given
    /// them first (what an image unpacks may be read-only). At most `limit` entries are removed:
    /// past it the removal stops and is refused, having removed some. Returns how many were
    /// removed; `0` when nothing was there.
    pub fn remove_all(&self, path: &WsPath, limit: u64) -> Result<u64, ViewError> {
        let Some(parent) = self.parent(path, OFlags::PATH)? else {
            return Ok(0);
        };
        let mut budget = limit;
        match remove_tree(&parent, path.file_name(), &mut budget, 0) {
            Ok(()) => Ok(limit - budget),
            Err(Removal::Full) => Err(ViewError::TooManyEntries {
                dir: path.shown(),
                limit: usize::try_from(limit).unwrap_or(usize::MAX),
            }),
            Err(Removal::Failed(errno)) => Err(ViewError::io("delete", path, errno)),
        }
    }

    fn write_with(&self, path: &WsPath, bytes: &[u8], mode: Option<u32>) -> Result<(), ViewError> {
        static SERIAL: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let Some(parent) = self.parent(path, OFlags::PATH)? else {
            return Err(ViewError::io("write", path, Errno::NOENT));
        };
        let name = path.file_name();
        let existing =
            stat_name(&parent, name).map_err(|errno| ViewError::io("inspect", path, errno))?;
        let permissions = match existing {
            Some(meta) if meta.kind != Kind::File => {
                return Err(ViewError::NotAFile {
                    path: path.shown(),
                    kind: meta.kind,
                });
            }
            Some(meta) => mode.unwrap_or(meta.permissions & 0o777),
            None => mode.unwrap_or(0o644),
        };
        let serial = SERIAL.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let temporary = format!(".cordon-write-{}-{serial}", std::process::id());
        let fd = rustix::fs::openat(
            &parent,
            temporary.as_str(),
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(permissions),
        )
        .map_err(|errno| ViewError::io("write", path, errno))?;
        let mut file = File::from(fd);
        let written = file
            .write_all(bytes)
            .and_then(|()| file.sync_all())
            .map_err(|source| ViewError::Io {
                action: "write",
                path: path.shown(),
                source,
            })
            .and_then(|()| {
                rustix::fs::renameat(&parent, temporary.as_str(), &parent, name)
                    .map_err(|errno| ViewError::io("replace", path, errno))
            });
        if written.is_err() {
            let _ = rustix::fs::unlinkat(&parent, temporary.as_str(), AtFlags::empty());
        }
        written
    }
}

/// Why [`remove_tree`] stopped.
enum Removal {
    Full,
    Failed(Errno),
}

impl From<Errno> for Removal {
    fn from(errno: Errno) -> Removal {
        Removal::Failed(errno)
    }
}

/// The deepest directory [`remove_tree`] descends into: a path of [`crate::path::MAX_PATH`]
/// bytes has at most this many components.
const MAX_DEPTH: usize = crate::path::MAX_PATH / 2 + 1;

/// Removes `name` in `parent` and everything below it, one `*at` call at a time relative to
/// descriptors opened with `O_NOFOLLOW`, so no link is followed; `budget` entries at most.
fn remove_tree(
    parent: &impl AsFd,
    name: &[u8],
    budget: &mut u64,
    depth: usize,
) -> Result<(), Removal> {
    let Some(meta) = stat_name(parent, name)? else {
        return Ok(());
    };
    *budget = budget.checked_sub(1).ok_or(Removal::Full)?;
    if meta.kind != Kind::Directory {
        return match rustix::fs::unlinkat(parent, name, AtFlags::empty()) {
            Ok(()) | Err(Errno::NOENT) => Ok(()),
            Err(errno) => Err(errno.into()),
        };
    }
    if depth > MAX_DEPTH {
        return Err(Removal::Failed(Errno::NAMETOOLONG));
    }
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let fd = match rustix::fs::openat(parent, name, flags, Mode::empty()) {
        Err(Errno::ACCESS) => {
            // Unreadable for its owner: the entry was just seen to be a directory, and
            // `fchmodat` would follow only a link, which this is not.
            rustix::fs::chmodat(parent, name, Mode::from_raw_mode(0o700), AtFlags::empty())?;
            rustix::fs::openat(parent, name, flags, Mode::empty())?
        }
        other => other?,
    };
    if meta.permissions & 0o700 != 0o700 {
        rustix::fs::fchmod(&fd, Mode::from_raw_mode(meta.permissions | 0o700))?;
    }
    let mut names = Vec::new();
    let mut reader = Dir::read_from(&fd)?;
    while let Some(entry) = reader.read() {
        let entry = entry?;
        let child = entry.file_name().to_bytes();
        if child != b"." && child != b".." {
            if names.len() as u64 >= *budget {
                return Err(Removal::Full);
            }
            names.push(child.to_vec());
        }
    }
    for child in names {
        remove_tree(&fd, &child, budget, depth + 1)?;
    }
    match rustix::fs::unlinkat(parent, name, AtFlags::REMOVEDIR) {
        Ok(()) | Err(Errno::NOENT) => Ok(()),
        Err(errno) => Err(errno.into()),
    }
}

/// `lstat` of one name in `dir`; `None` when it does not exist.
fn stat_name(dir: &impl AsFd, name: &[u8]) -> Result<Option<Meta>, Errno> {
    match rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(stat) => Ok(Some(Meta::from_stat(&stat))),
        Err(Errno::NOENT) => Ok(None),
        Err(errno) => Err(errno),
    }
}
