//! Starting a session's init: `clone` into fresh namespaces and `execve` the init program.
//!
//! The caller is a thread of a multi-threaded process, so between `clone` and `execve` the child
//! may only make raw system calls on memory prepared before the clone: no allocation, no locks, no
//! glibc wrappers that talk to other threads (glibc's `setuid` family signals every thread it
//! believes exists, and those threads do not exist in the child). [`InitImage`] is that memory.

use std::ffi::{CString, c_char};
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

use super::check_long;

/// Where the child's descriptors land: 0 and 1 are `/dev/null`, 2 stays the host's stderr (init's
/// own last-resort diagnostics), the control socket is 3.
pub(crate) const CONTROL_FD: RawFd = 3;
const REPORT_FD: RawFd = 4;
const EXE_FD: RawFd = 5;
const FIRST_FREE: RawFd = 6;

/// What happens to the host's supplementary groups in the child.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Groups {
    /// `setgroups(0)`: possible only when the host is root (CAP_SETGID over the parent namespace
    /// was inherited) and `setgroups` was not denied. Drops e.g. root's group 0, which would
    /// otherwise still grant access to group-readable root files.
    Clear,
    /// Unprivileged: `setgroups` is denied in the namespace, the groups stay (shown as nogroup).
    Keep,
}

/// Everything the child needs, prepared before the clone.
pub(crate) struct InitImage {
    exe: RawFd,
    control: RawFd,
    sync: RawFd,
    report: RawFd,
    null: RawFd,
    uid: u32,
    gid: u32,
    groups: Groups,
    _argv: Vec<CString>,
    argv_ptrs: Vec<*const c_char>,
    envp_ptrs: [*const c_char; 1],
}

// SAFETY: the raw pointers point into `_argv`, which the image owns and never mutates; moving the
// image to the spawner thread moves that ownership along.
unsafe impl Send for InitImage {}

/// The descriptors an [`InitImage`] borrows, all alive until [`clone_init`] returns.
pub(crate) struct ImageFds<'a> {
    pub exe: BorrowedFd<'a>,
    pub control: BorrowedFd<'a>,
    pub sync: BorrowedFd<'a>,
    pub report: BorrowedFd<'a>,
    pub null: BorrowedFd<'a>,
}

impl InitImage {
    pub(crate) fn new(
        fds: &ImageFds<'_>,
        argv0: &str,
        uid: u32,
        gid: u32,
        groups: Groups,
    ) -> InitImage {
        let argv = vec![CString::new(argv0).unwrap_or_else(|_| c"cordon-init".to_owned())];
        let mut argv_ptrs: Vec<*const c_char> = argv.iter().map(|a| a.as_ptr()).collect();
        argv_ptrs.push(std::ptr::null());
        InitImage {
            exe: fds.exe.as_raw_fd(),
            control: fds.control.as_raw_fd(),
            sync: fds.sync.as_raw_fd(),
            report: fds.report.as_raw_fd(),
            null: fds.null.as_raw_fd(),
            uid,
            gid,
            groups,
            _argv: argv,
            argv_ptrs,
            envp_ptrs: [std::ptr::null()],
        }
    }
}

/// A started init: its pid in our namespace and a pidfd for signalling and waiting without pid
/// reuse races.
pub(crate) struct Spawned {
    pub pid: i32,
    pub pidfd: OwnedFd,
}

/// Why the child failed before `execve`, as written to the report pipe.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Stage {
    DeathSignal = 1,
    WaitForMaps,
    Groups,
    Gid,
    Uid,
    Capabilities,
    Descriptors,
    Exec,
}

impl Stage {
    pub(crate) fn from_code(code: u32) -> Option<Stage> {
        use Stage::*;
        [
            DeathSignal,
            WaitForMaps,
            Groups,
            Gid,
            Uid,
            Capabilities,
            Descriptors,
            Exec,
        ]
        .into_iter()
        .find(|s| *s as u32 == code)
    }
}

/// Clones a child into the namespaces in `flags` (CLONE_NEW*) and execs the init program in it.
/// The child waits for one byte on the sync pipe (the parent writes its uid/gid maps first), then
/// takes the sandbox identity and every capability as ambient (so they survive its `execve` as a
/// non-zero uid), and execs. A failure before `execve` is written to the report pipe.
pub(crate) fn clone_init(image: &InitImage, flags: libc::c_int) -> io::Result<Spawned> {
    let mut pidfd: libc::c_int = -1;
    // SAFETY: a raw clone without CLONE_VM and without a new stack behaves like fork: the child
    // gets a copy of our memory and returns here on a copy of this stack. The child then runs
    // only `child()`, which never returns and makes only raw system calls on `image`.
    let pid = check_long(unsafe {
        libc::syscall(
            libc::SYS_clone,
            (flags | libc::CLONE_PIDFD | libc::SIGCHLD) as libc::c_ulong,
            0usize,
            &mut pidfd as *mut libc::c_int,
            0usize,
            0usize,
        )
    })?;
    if pid == 0 {
        child(image);
    }
    // SAFETY: CLONE_PIDFD stored a fresh close-on-exec descriptor that we own.
    let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd) };
    Ok(Spawned {
        pid: pid as i32,
        pidfd,
    })
}

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: libc::c_int,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

const CAP_VERSION_3: u32 = 0x2008_0522;

fn child(image: &InitImage) -> ! {
    let mut report = image.report;
    // SAFETY: raw system calls only, on integers, on stack memory, or on the pre-built argv/envp
    // arrays in `image`; nothing allocates or takes a lock. Every failure ends in `fail`, which
    // writes 8 bytes and calls _exit.
    unsafe {
        // Die with the spawner thread (the "parent" for PDEATHSIG), which lives as long as the
        // host process. Init also treats EOF on the control socket as the host's death.
        if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) != 0 {
            fail(report, Stage::DeathSignal);
        }
        let mut byte = 0u8;
        loop {
            let n = libc::read(image.sync, (&mut byte as *mut u8).cast(), 1);
            if n == 1 {
                break;
            }
            if n < 0 && *libc::__errno_location() == libc::EINTR {
                continue;
            }
            fail(report, Stage::WaitForMaps);
        }
        if image.groups == Groups::Clear
            && libc::syscall(libc::SYS_setgroups, 0usize, std::ptr::null::<libc::gid_t>()) != 0
        {
            fail(report, Stage::Groups);
        }
        let (uid, gid) = (image.uid, image.gid);
        if libc::syscall(libc::SYS_setresgid, gid, gid, gid) != 0 {
            fail(report, Stage::Gid);
        }
        if libc::syscall(libc::SYS_setresuid, uid, uid, uid) != 0 {
            fail(report, Stage::Uid);
        }
        // The namespace's creator holds every capability in it, but `execve` as a non-zero uid
        // would drop them. Copying permitted into inheritable and raising each into the ambient
        // set keeps them across exactly this one execve; init's workloads drop all five sets.
        let header = CapHeader {
            version: CAP_VERSION_3,
            pid: 0,
        };
        let mut data = [CapData::default(); 2];
        if libc::syscall(
            libc::SYS_capget,
            &header as *const CapHeader,
            data.as_mut_ptr(),
        ) != 0
        {
            fail(report, Stage::Capabilities);
        }
        for d in &mut data {
            d.inheritable = d.permitted;
        }
        if libc::syscall(libc::SYS_capset, &header as *const CapHeader, data.as_ptr()) != 0 {
            fail(report, Stage::Capabilities);
        }
        for cap in 0..64 {
            // Capabilities beyond the kernel's last one fail with EINVAL; that is expected.
            libc::prctl(libc::PR_CAP_AMBIENT, libc::PR_CAP_AMBIENT_RAISE, cap, 0, 0);
        }
        // Descriptors: move every source above all targets first, so no dup2 clobbers a source.
        let sources = [image.null, image.control, image.report, image.exe];
        let mut high = FIRST_FREE;
        for fd in sources {
            high = high.max(fd + 1);
        }
        let mut moved = [0 as RawFd; 4];
        for (slot, fd) in moved.iter_mut().zip(sources) {
            *slot = libc::fcntl(fd, libc::F_DUPFD, high);
            if *slot < 0 {
                fail(report, Stage::Descriptors);
            }
        }
        let [null, control, rep, exe] = moved;
        for (from, to) in [
            (null, 0),
            (null, 1),
            (control, CONTROL_FD),
            (rep, REPORT_FD),
            (exe, EXE_FD),
        ] {
            if libc::dup2(from, to) < 0 {
                fail(report, Stage::Descriptors);
            }
        }
        report = REPORT_FD;
        // The report pipe and the program must vanish at execve; nothing else may reach init.
        for fd in [REPORT_FD, EXE_FD] {
            if libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) != 0 {
                fail(report, Stage::Descriptors);
            }
        }
        if libc::syscall(
            libc::SYS_close_range,
            FIRST_FREE as libc::c_uint,
            libc::c_uint::MAX,
            0,
        ) != 0
        {
            fail(report, Stage::Descriptors);
        }
        libc::syscall(
            libc::SYS_execveat,
            EXE_FD,
            c"".as_ptr(),
            image.argv_ptrs.as_ptr(),
            image.envp_ptrs.as_ptr(),
            libc::AT_EMPTY_PATH,
        );
        fail(report, Stage::Exec);
    }
}

/// Writes `(stage, errno)` to the report pipe and exits. Async-signal-safe.
fn fail(report: RawFd, stage: Stage) -> ! {
    // SAFETY: reads this thread's errno, writes 8 bytes from the stack, exits without running
    // any atexit handler or destructor.
    unsafe {
        let errno = *libc::__errno_location();
        let mut record = [0u8; 8];
        record[..4].copy_from_slice(&(stage as u32).to_le_bytes());
        record[4..].copy_from_slice(&errno.to_le_bytes());
        libc::write(report, record.as_ptr().cast(), record.len());
        libc::_exit(127)
    }
}

/// A throwaway user namespace with the given maps, for idmapped mounts: clones a child into a new
/// user namespace that waits on a pipe, writes its maps, opens `/proc/PID/ns/user`, then lets the
/// child exit. The namespace lives on as long as the returned descriptor.
pub(crate) fn mapped_user_namespace(uid_map: &str, gid_map: &str) -> io::Result<OwnedFd> {
    let (read, write) = super::fd::pipe()?;
    let (read_raw, write_raw) = (read.as_raw_fd(), write.as_raw_fd());
    // SAFETY: as in `clone_init`: fork-like clone; the child only closes, reads and exits.
    let pid = check_long(unsafe {
        libc::syscall(
            libc::SYS_clone,
            (libc::CLONE_NEWUSER | libc::SIGCHLD) as libc::c_ulong,
            0usize,
            0usize,
            0usize,
            0usize,
        )
    })?;
    if pid == 0 {
        // SAFETY: raw system calls on integers and a stack byte; _exit never returns.
        unsafe {
            libc::close(write_raw);
            let mut byte = 0u8;
            libc::read(read_raw, (&mut byte as *mut u8).cast(), 1);
            libc::_exit(0);
        }
    }
    drop(read);
    let pid = pid as i32;
    let result = (|| {
        std::fs::write(format!("/proc/{pid}/uid_map"), uid_map)?;
        std::fs::write(format!("/proc/{pid}/setgroups"), "deny")?;
        std::fs::write(format!("/proc/{pid}/gid_map"), gid_map)?;
        let file = std::fs::File::open(format!("/proc/{pid}/ns/user"))?;
        Ok(OwnedFd::from(file))
    })();
    drop(write);
    super::process::wait_pid(pid)?;
    result
}

/// Init's end of the control socket, installed at [`CONTROL_FD`] by [`clone_init`]. Call once.
pub(crate) fn control_socket() -> OwnedFd {
    // SAFETY: init's parent placed the control socket at CONTROL_FD before exec, and nothing else
    // in init owns that descriptor.
    unsafe { OwnedFd::from_raw_fd(CONTROL_FD) }
}

/// Reads the 8-byte `(stage, errno)` record the child wrote before failing; `None` when the pipe
/// closed empty (the child reached `execve`).
pub(crate) fn read_report(fd: BorrowedFd<'_>) -> io::Result<Option<(u32, i32)>> {
    let mut record = [0u8; 8];
    let mut got = 0;
    while got < record.len() {
        let n = super::fd::read(fd, &mut record[got..])?;
        if n == 0 {
            break;
        }
        got += n;
    }
    if got < record.len() {
        return Ok(None);
    }
    let [s0, s1, s2, s3, e0, e1, e2, e3] = record;
    Ok(Some((
        u32::from_le_bytes([s0, s1, s2, s3]),
        i32::from_le_bytes([e0, e1, e2, e3]),
    )))
}
