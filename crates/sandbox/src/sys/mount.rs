//! The mount system calls, old (`mount`, `umount2`, `pivot_root`) and new (`open_tree`,
//! `move_mount`, `mount_setattr`), for building a session's root.

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::path::Path;
use std::ptr;

use super::{check, check_long, cstring};

/// `mount(2)` with optional source, type and data.
pub(crate) fn mount(
    source: Option<&str>,
    target: &Path,
    fstype: Option<&str>,
    flags: libc::c_ulong,
    data: Option<&str>,
) -> io::Result<()> {
    let c = |s: Option<&str>| {
        s.map(|s| CString::new(s).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL)))
            .transpose()
    };
    let (source, fstype, data) = (c(source)?, c(fstype)?, c(data)?);
    let target = cstring(target)?;
    let opt = |s: &Option<CString>| s.as_deref().map_or(ptr::null(), CStr::as_ptr);
    // SAFETY: every pointer is either null or a NUL-terminated string alive for the call.
    check(unsafe {
        libc::mount(
            opt(&source),
            target.as_ptr(),
            opt(&fstype),
            flags,
            opt(&data).cast(),
        )
    })?;
    Ok(())
}

/// Detaches the mount at `target` lazily (`MNT_DETACH`).
pub(crate) fn unmount_detach(target: &Path) -> io::Result<()> {
    let target = cstring(target)?;
    // SAFETY: `target` is a NUL-terminated string alive for the call.
    check(unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH) })?;
    Ok(())
}

/// `pivot_root(new_root, put_old)`.
pub(crate) fn pivot_root(new_root: &Path, put_old: &Path) -> io::Result<()> {
    let new_root = cstring(new_root)?;
    let put_old = cstring(put_old)?;
    // SAFETY: both arguments are NUL-terminated strings alive for the call.
    check_long(unsafe {
        libc::syscall(libc::SYS_pivot_root, new_root.as_ptr(), put_old.as_ptr())
    })?;
    Ok(())
}

/// Whether [`clone_tree`] copies the mounts below the top one too.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Depth {
    Top,
    Recursive,
}

/// A detached copy of the mount (tree) at the object `fd` refers to: `open_tree(OPEN_TREE_CLONE)`.
/// The copy belongs to no namespace until [`attach`] puts it somewhere.
pub(crate) fn clone_tree(fd: BorrowedFd<'_>, depth: Depth) -> io::Result<OwnedFd> {
    let mut flags =
        libc::OPEN_TREE_CLONE | libc::OPEN_TREE_CLOEXEC | libc::AT_EMPTY_PATH as libc::c_uint;
    if matches!(depth, Depth::Recursive) {
        flags |= libc::AT_RECURSIVE as libc::c_uint;
    }
    // SAFETY: the path is an empty NUL-terminated string; AT_EMPTY_PATH makes `fd` the object.
    let rc = check_long(unsafe {
        libc::syscall(libc::SYS_open_tree, fd.as_raw_fd(), c"".as_ptr(), flags)
    })?;
    // SAFETY: on success the result is a fresh descriptor that we own.
    Ok(unsafe { OwnedFd::from_raw_fd(rc as libc::c_int) })
}

/// [`clone_tree`] of the mount at `path`, looked up by the call itself: one system call instead of
/// opening an `O_PATH` descriptor first (and closing it after). The lookup follows symlinks and
/// leaves automount points untriggered (`AT_NO_AUTOMOUNT`), exactly like that `open`; callers use
/// it for paths of the host tree under the old root and of the root being built, never for paths
/// the sandbox could have written.
pub(crate) fn clone_tree_at_path(path: &Path, depth: Depth) -> io::Result<OwnedFd> {
    let path = cstring(path)?;
    let mut flags =
        libc::OPEN_TREE_CLONE | libc::OPEN_TREE_CLOEXEC | libc::AT_NO_AUTOMOUNT as libc::c_uint;
    if matches!(depth, Depth::Recursive) {
        flags |= libc::AT_RECURSIVE as libc::c_uint;
    }
    // SAFETY: `path` is a NUL-terminated string alive for the call.
    let rc = check_long(unsafe {
        libc::syscall(libc::SYS_open_tree, libc::AT_FDCWD, path.as_ptr(), flags)
    })?;
    // SAFETY: on success the result is a fresh descriptor that we own.
    Ok(unsafe { OwnedFd::from_raw_fd(rc as libc::c_int) })
}

/// Creates an empty regular file at `path` with `mode` (less the umask) to mount a file on:
/// `mknod(S_IFREG)`, one call where `open(O_CREAT | O_EXCL)` needs a `close` after it. Like
/// `O_EXCL`, fails with `EEXIST` on anything already there, a symlink included (never followed).
pub(crate) fn create_file(path: &Path, mode: u32) -> io::Result<()> {
    let path = cstring(path)?;
    // SAFETY: `path` is a NUL-terminated string alive for the call; S_IFREG needs no device.
    check(unsafe { libc::mknod(path.as_ptr(), libc::S_IFREG | mode, 0) })?;
    Ok(())
}

/// The device and inode numbers of the object `fd` refers to (`fstat`, which also works on
/// `O_PATH` descriptors), without duplicating the descriptor into a `File`.
pub(crate) fn identity(fd: BorrowedFd<'_>) -> io::Result<(u64, u64)> {
    // SAFETY: `stat` is plain integers, for which all-zero is a valid value.
    let mut stat: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `fd` is a valid descriptor and `stat` is writable for the call.
    check(unsafe { libc::fstat(fd.as_raw_fd(), &mut stat) })?;
    Ok((stat.st_dev, stat.st_ino))
}

/// Attaches the detached mount `fd` at `target`: `move_mount(MOVE_MOUNT_F_EMPTY_PATH)`.
pub(crate) fn attach(fd: BorrowedFd<'_>, target: &Path) -> io::Result<()> {
    let target = cstring(target)?;
    // SAFETY: both paths are NUL-terminated strings alive for the call.
    check_long(unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            fd.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_FDCWD,
            target.as_ptr(),
            libc::MOVE_MOUNT_F_EMPTY_PATH,
        )
    })?;
    Ok(())
}

/// Mount attributes to set with [`set_attributes`].
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Attributes {
    pub set: u64,
    pub clear: u64,
    /// A user namespace whose mapping becomes the mount's idmapping (`MOUNT_ATTR_IDMAP`).
    pub userns: Option<libc::c_int>,
}

pub(crate) const READ_ONLY: u64 = libc::MOUNT_ATTR_RDONLY;
pub(crate) const NO_SUID: u64 = libc::MOUNT_ATTR_NOSUID;
pub(crate) const NO_DEV: u64 = libc::MOUNT_ATTR_NODEV;

/// `mount_setattr` on the mount `fd` refers to, and with `Depth::Recursive` every mount below it.
pub(crate) fn set_attributes(
    fd: BorrowedFd<'_>,
    depth: Depth,
    attrs: Attributes,
) -> io::Result<()> {
    let mut attr = libc::mount_attr {
        attr_set: attrs.set,
        attr_clr: attrs.clear,
        propagation: 0,
        userns_fd: 0,
    };
    if let Some(userns) = attrs.userns {
        attr.attr_set |= libc::MOUNT_ATTR_IDMAP;
        attr.userns_fd = userns as u64;
    }
    let mut flags = libc::AT_EMPTY_PATH as libc::c_uint;
    if matches!(depth, Depth::Recursive) {
        flags |= libc::AT_RECURSIVE as libc::c_uint;
    }
    // SAFETY: `attr` is a valid `mount_attr` and its size is passed; the path is empty.
    check_long(unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            fd.as_raw_fd(),
            c"".as_ptr(),
            flags,
            &attr as *const libc::mount_attr,
            size_of::<libc::mount_attr>(),
        )
    })?;
    Ok(())
}

/// Opens `path` (absolute, inside the root being built) as an `O_PATH` descriptor without
/// following any symlink on the way (`openat2` with `RESOLVE_NO_SYMLINKS | RESOLVE_BENEATH`
/// relative to `/`). Used for mount targets and self-bind sources inside the workspace, which the
/// sandbox wrote: a planted link must not redirect a mount to the host tree at `/oldroot`.
pub(crate) fn open_no_symlinks(path: &Path) -> io::Result<OwnedFd> {
    let relative = path.strip_prefix("/").unwrap_or(path);
    let relative = if relative.as_os_str().is_empty() {
        Path::new(".")
    } else {
        relative
    };
    let relative = super::cstring(relative)?;
    let root = super::cstring(Path::new("/"))?;
    // SAFETY: `root` is a NUL-terminated string alive for the call.
    let dir = check(unsafe {
        libc::open(
            root.as_ptr(),
            libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    })?;
    // SAFETY: `dir` is a fresh descriptor we own from here on.
    let dir = unsafe { OwnedFd::from_raw_fd(dir) };
    // SAFETY: `open_how` is plain integers, for which all-zero is a valid value.
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    how.flags = (libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC) as u64;
    how.resolve = libc::RESOLVE_NO_SYMLINKS | libc::RESOLVE_BENEATH | libc::RESOLVE_NO_MAGICLINKS;
    // SAFETY: `how` is a valid `open_how` whose size is passed; `relative` is a NUL-terminated
    // string alive for the call.
    let rc = check_long(unsafe {
        libc::syscall(
            libc::SYS_openat2,
            dir.as_raw_fd(),
            relative.as_ptr(),
            &how as *const libc::open_how,
            size_of::<libc::open_how>(),
        )
    })?;
    // SAFETY: on success the result is a fresh descriptor that we own.
    Ok(unsafe { OwnedFd::from_raw_fd(rc as libc::c_int) })
}

/// Attaches the detached mount `fd` on the object `target` refers to (an `O_PATH` descriptor):
/// `move_mount(MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH)`, so no path is resolved again.
pub(crate) fn attach_at(fd: BorrowedFd<'_>, target: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: both paths are empty NUL-terminated strings; the descriptors are valid.
    check_long(unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            fd.as_raw_fd(),
            c"".as_ptr(),
            target.as_raw_fd(),
            c"".as_ptr(),
            libc::MOVE_MOUNT_F_EMPTY_PATH | libc::MOVE_MOUNT_T_EMPTY_PATH,
        )
    })?;
    Ok(())
}
