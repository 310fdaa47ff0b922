//! Raw system calls the layer probe makes: attempts that prove a kernel feature works, each without
//! side effects on the calling process.

use std::io;

/// What happened to each namespace the probe tried to create, in a forked child that then exits.
/// `Err(errno)` is the error the kernel returned; `None` means it was not tried because the user
/// namespace that every other namespace is created in already failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct NamespaceAttempt {
    pub user: Result<(), i32>,
    pub mount: Option<Result<(), i32>>,
    pub pid: Option<Result<(), i32>>,
    pub network: Option<Result<(), i32>>,
}

/// The child reports "not tried" with this value in place of an errno.
const NOT_TRIED: i32 = -1;

/// Forks a child that unshares a user namespace and then, inside it, a mount, PID and network
/// namespace one at a time, exactly as a session does, and reports each result over a pipe.
///
/// A real attempt is the only reliable test: sysctls (`max_user_namespaces`), AppArmor
/// (`apparmor_restrict_unprivileged_userns`, which lets the user namespace be created but denies
/// every capability inside it) and container seccomp profiles all refuse at different points.
pub(crate) fn try_namespaces() -> io::Result<NamespaceAttempt> {
    let child = |closed: Result<(), i32>| {
        let mut report = [NOT_TRIED; 4];
        report[0] = match closed {
            Err(errno) => errno,
            Ok(()) => unshare_errno(libc::CLONE_NEWUSER),
        };
        if report[0] == 0 {
            report[1] = unshare_errno(libc::CLONE_NEWNS);
            report[2] = unshare_errno(libc::CLONE_NEWPID);
            report[3] = unshare_errno(libc::CLONE_NEWNET);
        }
        report
    };
    // SAFETY: the child only calls unshare, which is async-signal-safe and changes nothing but
    // the child's own namespaces.
    let report = unsafe { in_forked_child::<4>(child) }?;
    let decode = |value: i32| match value {
        NOT_TRIED => None,
        0 => Some(Ok(())),
        errno => Some(Err(errno)),
    };
    Ok(NamespaceAttempt {
        user: decode(report[0]).unwrap_or(Err(libc::EINVAL)),
        mount: decode(report[1]),
        pid: decode(report[2]),
        network: decode(report[3]),
    })
}

/// The most integers a probe child reports.
const MAX_REPORT: usize = 8;

/// Forks a child that first closes every descriptor but its report pipe, then runs `child` (told
/// whether the closing worked: `Err(errno)` if not), sends the `N` integers it returns over the
/// pipe and `_exit`s; returns them once the child is reaped. The fork copied the host's whole
/// descriptor table (lock files, other threads' sockets); the child never execs, and must not
/// hold any of it even for the moment it lives.
///
/// # Safety
/// `child` runs in a forked copy of a possibly multi-threaded process: it may make only
/// async-signal-safe system calls on memory prepared before the fork, and must not allocate,
/// lock, unwind or return into other Rust code.
unsafe fn in_forked_child<const N: usize>(
    child: impl FnOnce(Result<(), i32>) -> [i32; N],
) -> io::Result<[i32; N]> {
    const { assert!(N <= MAX_REPORT) };
    let mut fds = [0; 2];
    // SAFETY: `fds` is a valid, writable array of two ints, as pipe2 requires.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let [read_fd, write_fd] = fds;
    // SAFETY: the child runs only `child` (async-signal-safe by the caller's contract), a write
    // and `_exit`, so forking a possibly multi-threaded parent is sound.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        let mut keep = [write_fd];
        // SAFETY: this child never uses or drops anything it inherited but `write_fd`.
        let closed = if unsafe { super::fd::close_all_except(&mut keep) } {
            Ok(())
        } else {
            Err(errno())
        };
        let report = child(closed);
        let mut bytes = [0u8; 4 * MAX_REPORT];
        for (chunk, value) in bytes.chunks_exact_mut(4).zip(report) {
            chunk.copy_from_slice(&value.to_ne_bytes());
        }
        // SAFETY: `bytes` is valid for its length; write and _exit are async-signal-safe, and
        // the child never returns into the parent's Rust code.
        unsafe {
            libc::write(write_fd, bytes.as_ptr().cast(), 4 * N);
            libc::_exit(0);
        }
    }
    let fork_error = (pid < 0).then(io::Error::last_os_error);
    // SAFETY: `write_fd` is our own descriptor from pipe2 and is not used after this.
    unsafe { libc::close(write_fd) };
    let mut bytes = [0u8; 4 * MAX_REPORT];
    let want = 4 * N;
    let mut filled = 0;
    if fork_error.is_none() {
        while filled < want {
            let rest = &mut bytes[filled..want];
            // SAFETY: `rest` is valid for `rest.len()` writable bytes; `read_fd` is open.
            let n = unsafe { libc::read(read_fd, rest.as_mut_ptr().cast(), rest.len()) };
            if n > 0 {
                filled += n.unsigned_abs();
            } else if n == 0 || io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
                break;
            }
        }
        reap(pid);
    }
    // SAFETY: `read_fd` is our own descriptor from pipe2 and is not used after this.
    unsafe { libc::close(read_fd) };
    if let Some(err) = fork_error {
        return Err(err);
    }
    if filled != want {
        return Err(io::Error::other("the probe child exited without reporting"));
    }
    let mut report = [0i32; N];
    for (value, chunk) in report.iter_mut().zip(bytes.chunks_exact(4)) {
        *value = i32::from_ne_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
    }
    Ok(report)
}

/// `unshare(flags)` in the probe child: 0, or the errno it failed with.
fn unshare_errno(flags: libc::c_int) -> i32 {
    // SAFETY: unshare only changes the namespaces of the calling (child) process.
    if unsafe { libc::unshare(flags) } == 0 {
        0
    } else {
        errno()
    }
}

/// Waits for the probe child so it does not linger as a zombie.
fn reap(pid: libc::pid_t) {
    loop {
        let mut status = 0;
        // SAFETY: `status` is a valid out-pointer; `pid` is our own child.
        let rc = unsafe { libc::waitpid(pid, &mut status, libc::__WALL) };
        if rc >= 0 || errno() != libc::EINTR {
            return;
        }
    }
}

fn errno() -> i32 {
    io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EINVAL)
}

/// The Landlock ABI version, or the errno: `ENOSYS` when the kernel lacks Landlock, `EOPNOTSUPP`
/// when it is built in but not enabled at boot (`lsm=`).
pub(crate) fn landlock_abi() -> Result<u32, i32> {
    const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;
    // SAFETY: with the VERSION flag and a null attribute of size 0 the call only returns the ABI
    // version; it creates no ruleset and no file descriptor.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    u32::try_from(rc).map_err(|_| errno())
}

/// Whether seccomp filter mode can load a filter using `action` (`SECCOMP_GET_ACTION_AVAIL`).
/// `Err(ENOSYS)`: no seccomp; `Err(EINVAL)`: no filter mode or a kernel before 4.14;
/// `Err(EOPNOTSUPP)`: the action is unknown to this kernel.
pub(crate) fn seccomp_action_available(action: u32) -> Result<(), i32> {
    // SAFETY: `action` lives for the call; GET_ACTION_AVAIL only reads it and installs nothing.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_GET_ACTION_AVAIL,
            0u32,
            std::ptr::from_ref(&action),
        )
    };
    if rc == 0 { Ok(()) } else { Err(errno()) }
}

/// `PR_GET_NO_NEW_PRIVS`: whether the flag is set on this process, or the errno (`EINVAL` on a
/// kernel without it).
pub(crate) fn no_new_privs() -> Result<bool, i32> {
    // SAFETY: PR_GET_NO_NEW_PRIVS only reads a flag of the calling thread.
    let rc = unsafe { libc::prctl(libc::PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) };
    if rc < 0 { Err(errno()) } else { Ok(rc == 1) }
}

/// Whether the kernel knows `mount_setattr` (the system call that makes idmapped mounts): it is
/// called with an attribute size of 0, which a kernel that has it rejects with `EINVAL` before
/// looking at anything else; a kernel without it answers `ENOSYS`.
pub(crate) fn mount_setattr_exists() -> bool {
    // SAFETY: a null attribute with size 0 is rejected before the kernel resolves the path or
    // touches any mount.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            -1i32,
            c"".as_ptr(),
            0u32,
            std::ptr::null::<libc::c_void>(),
            0usize,
        )
    };
    !(rc < 0 && errno() == libc::ENOSYS)
}

/// The effective user id of this process.
pub(crate) fn effective_uid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// Whether this process may write to `path` with its effective ids (`faccessat(AT_EACCESS)`).
pub(crate) fn writable(path: &std::path::Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(path) = std::ffi::CString::new(path.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: `path` is a valid NUL-terminated string for the duration of the call.
    unsafe { libc::faccessat(libc::AT_FDCWD, path.as_ptr(), libc::W_OK, libc::AT_EACCESS) == 0 }
}

/// Sends SIGKILL to `pid` (a process left in a stale cgroup of a dead cordon run); errors, such as
/// the process having exited already, are ignored.
pub(crate) fn kill_process(pid: i32) {
    if pid <= 0 {
        return;
    }
    // SAFETY: kill has no memory-safety preconditions; pid > 0 addresses exactly one process.
    unsafe { libc::kill(pid, libc::SIGKILL) };
}

/// Which step of the overlay attempt failed, with its errno (`try_overlay`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct OverlayFailure {
    pub step: &'static str,
    pub errno: i32,
}

/// The steps of [`try_overlay`], in order; the child reports the index of the one that failed.
const OVERLAY_STEPS: [&str; 6] = [
    "create a user and mount namespace",
    "map the user in the new user namespace",
    "make the mounts private in the new mount namespace",
    "mount a tmpfs in the new mount namespace",
    "make the overlay's layer directories",
    "mount an overlay with `userxattr`",
];

/// Forks a child that does what an image session does with its root: in a new user and mount
/// namespace (the invoking user mapped to 0), a tmpfs holding a lower, an upper and a work
/// directory, and an overlay of them with `userxattr`. Nothing outside the child's namespace is
/// touched; the child exits at once.
pub(crate) fn try_overlay() -> io::Result<Result<(), OverlayFailure>> {
    // Everything the child writes is prepared here: after `fork` it may only make system calls.
    // SAFETY: getuid and getgid have no preconditions and cannot fail.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    let uid_map = std::ffi::CString::new(format!("0 {uid} 1")).map_err(io::Error::other)?;
    let gid_map = std::ffi::CString::new(format!("0 {gid} 1")).map_err(io::Error::other)?;
    let child = |closed: Result<(), i32>| match closed {
        Err(errno) => [0, errno],
        Ok(()) => {
            // SAFETY: this runs in the forked probe child, with strings that live until `_exit`.
            let (step, errno) = unsafe { overlay_child(uid_map.as_ptr(), gid_map.as_ptr()) };
            [step, errno]
        }
    };
    // SAFETY: the child makes only async-signal-safe system calls on the strings prepared above
    // (see `overlay_child`).
    let [step, errno] = unsafe { in_forked_child::<2>(child) }?;
    Ok(match usize::try_from(step) {
        Ok(index) if index < OVERLAY_STEPS.len() => Err(OverlayFailure {
            step: OVERLAY_STEPS[index],
            errno,
        }),
        _ => Ok(()),
    })
}

/// The forked child of [`try_overlay`]: `(index of the failed step, errno)`, or `(-1, 0)`.
///
/// # Safety
/// Only in a child forked for the probe: it changes the calling process's namespaces and mounts.
unsafe fn overlay_child(uid_map: *const libc::c_char, gid_map: *const libc::c_char) -> (i32, i32) {
    let write_file = |path: &std::ffi::CStr, text: *const libc::c_char| -> bool {
        // SAFETY: `path` and `text` are NUL-terminated strings alive for the call.
        unsafe {
            let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
            if fd < 0 {
                return false;
            }
            let len = libc::strlen(text);
            let ok = libc::write(fd, text.cast(), len) == len as isize;
            libc::close(fd);
            ok
        }
    };
    // SAFETY: unshare only changes the namespaces of this (forked probe) child.
    if unsafe { libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNS) } != 0 {
        return (0, errno());
    }
    if !write_file(c"/proc/self/setgroups", c"deny".as_ptr())
        || !write_file(c"/proc/self/uid_map", uid_map)
        || !write_file(c"/proc/self/gid_map", gid_map)
    {
        return (1, errno());
    }
    // SAFETY: changes propagation in this child's own new mount namespace; the strings are
    // NUL-terminated literals.
    if unsafe {
        libc::mount(
            std::ptr::null(),
            c"/".as_ptr(),
            std::ptr::null(),
            libc::MS_REC | libc::MS_PRIVATE,
            std::ptr::null(),
        )
    } != 0
    {
        return (2, errno());
    }
    // SAFETY: a tmpfs in this child's own new mount namespace; NUL-terminated literals.
    if unsafe {
        libc::mount(
            c"tmpfs".as_ptr(),
            c"/tmp".as_ptr(),
            c"tmpfs".as_ptr(),
            0,
            c"size=64k".as_ptr().cast(),
        )
    } != 0
    {
        return (3, errno());
    }
    for dir in [c"/tmp/l", c"/tmp/u", c"/tmp/w", c"/tmp/m"] {
        // SAFETY: a directory in the child's private tmpfs; `dir` is a NUL-terminated literal.
        if unsafe { libc::mkdir(dir.as_ptr(), 0o755) } != 0 {
            return (4, errno());
        }
    }
    // SAFETY: an overlay in this child's own new mount namespace; NUL-terminated literals.
    if unsafe {
        libc::mount(
            c"overlay".as_ptr(),
            c"/tmp/m".as_ptr(),
            c"overlay".as_ptr(),
            0,
            c"lowerdir=/tmp/l,upperdir=/tmp/u,workdir=/tmp/w,userxattr"
                .as_ptr()
                .cast(),
        )
    } != 0
    {
        return (5, errno());
    }
    (-1, 0)
}
