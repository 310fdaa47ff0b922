//! Starting a session's init: `clone` into fresh namespaces, then either `execve` the init
//! program or, when the caller is the process's only thread, run init's code in the child itself.
//!
//! In general the caller is a thread of a multi-threaded process, so between `clone` and `execve`
//! the child may only make raw system calls on memory prepared before the clone: no allocation, no
//! locks, no glibc wrappers that talk to other threads (glibc's `setuid` family signals every
//! thread it believes exists, and those threads do not exist in the child). [`InitImage`] is that
//! memory.
//!
//! [`Start::InProcess`] skips the `execve` (loading the `cordon` binary a second time is the
//! largest single cost of a one-shot `cordon exec`). It is sound only when the clone is made by a
//! process's only thread: the child is then an ordinary fork of a single-threaded process, no lock
//! can be held by a thread that does not exist in it, and Rust code (allocation included) runs
//! there as safely as after `fork` in a single-threaded program. The child still ends up like an
//! exec'd init: non-dumpable (right after its last credential change, before it runs any of
//! init's code), no descriptor besides `/dev/null`, the control socket and stderr, and the binary
//! masked by the mount plan as before.
//!
//! Either way the child makes its namespaces other than user and PID itself (see [`clone_init`]),
//! so the host must not enter init's namespaces (`setns` on its pidfd, `/proc/PID/ns/*`) before
//! init has reported ready: until the child's `unshare` they are the host's own.

use std::ffi::{CString, c_char};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

use super::check_long;

/// Where the child's descriptors land: 0 and 1 are `/dev/null`, 2 stays the host's stderr (init's
/// own last-resort diagnostics), the control socket is 3.
pub(crate) const CONTROL_FD: RawFd = 3;
const REPORT_FD: RawFd = 4;
const EXE_FD: RawFd = 5;
/// The sync pipe's read end, until the maps are written (then closed).
const SYNC_FD: RawFd = 6;
const FIRST_FREE: RawFd = 7;

/// How the cloned child becomes init.
#[derive(Clone, Copy)]
pub(crate) enum Start {
    /// `execveat` the init program (any caller; the child makes only raw system calls).
    Exec,
    /// Call this function in the child, which never returns. Only for a clone made by the
    /// process's only thread (see the module documentation); the spawner decides.
    InProcess(fn() -> !),
}

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
    start: Start,
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
            start: Start::Exec,
            _argv: argv,
            argv_ptrs,
            envp_ptrs: [std::ptr::null()],
        }
    }

    /// Makes the child run `start` instead of the default [`Start::Exec`].
    pub(crate) fn set_start(&mut self, start: Start) {
        self.start = start;
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
    NonDumpable,
    Namespaces,
    Affinity,
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
            NonDumpable,
            Namespaces,
            Affinity,
        ]
        .into_iter()
        .find(|s| *s as u32 == code)
    }
}

/// Clones a child into the namespaces in `flags` (CLONE_NEW*) and starts init in it. The child
/// waits for one byte on the sync pipe (the parent writes its uid/gid maps first), takes the
/// sandbox identity, and then either (with [`Start::Exec`]) raises every capability as ambient (so
/// they survive its `execve` as a non-zero uid) and execs, or (with [`Start::InProcess`]) keeps
/// them — no `execve` drops them — and calls init's entry point. A failure before that is written
/// to the report pipe.
pub(crate) fn clone_init(image: &InitImage, flags: libc::c_int) -> io::Result<Spawned> {
    // Only the user and PID namespaces are made by the clone itself (a PID namespace can only be
    // entered by a new process). The others — the network namespace above all, the costliest to
    // create — the child makes with `unshare` as its first act, holding every capability of its
    // new user namespace, which then owns them exactly as if the clone had made them. That work
    // runs on the child's CPU while the host writes the maps and gathers the host facts, instead
    // of before either can start. The child reports a failure on the report pipe.
    let at_clone = flags & (libc::CLONE_NEWUSER | libc::CLONE_NEWPID);
    let in_child = flags & !at_clone;
    let placement = Placement::here();
    let mut pidfd: libc::c_int = -1;
    // SAFETY: a raw clone without CLONE_VM and without a new stack behaves like fork: the child
    // gets a copy of our memory and returns here on a copy of this stack. The child then runs
    // only `child()`, which never returns and makes only raw system calls on `image`.
    let pid = check_long(unsafe {
        libc::syscall(
            libc::SYS_clone,
            (at_clone | libc::CLONE_PIDFD | libc::SIGCHLD) as libc::c_ulong,
            0usize,
            &mut pidfd as *mut libc::c_int,
            0usize,
            0usize,
        )
    })?;
    if pid == 0 {
        child(image, in_child, placement.as_ref());
    }
    if let Some(placement) = &placement {
        placement.send_away(pid as libc::pid_t);
    }
    // SAFETY: CLONE_PIDFD stored a fresh close-on-exec descriptor that we own.
    let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd) };
    Ok(Spawned {
        pid: pid as i32,
        pidfd,
    })
}

/// Where a cloned child starts. The scheduler queues a new child on its parent's CPU, and on the
/// benchmark VM an idle CPU pulled it over only after the parent stopped: measured, a child
/// forked by a parent that kept running for 0.5 ms first ran 0.52 ms after the fork, against
/// 18 µs after a parent that waited at once. The host goes on working right after the clone
/// (probe, maps, host facts: ~0.3 ms) while the child has its own costliest step to take (the
/// network namespace), so the child is sent to the caller's other CPUs at once and takes the
/// whole set back (restored from this, copied into it by the clone) once it has read the sync
/// byte — written long after the move, so the move cannot undo the restore. A hint only: with one
/// CPU nothing is moved, and a host that refuses `sched_setaffinity` (a systemd
/// `SystemCallFilter=~@resources`, an SELinux domain without `setsched`) leaves the child where it
/// is, which the child sees and then restores nothing. A move that did happen is undone before
/// init (or anything it starts) runs a single instruction of its own, and a failed undo ends the
/// child, so no workload inherits the narrowed set.
struct Placement {
    /// Every CPU the caller may run on: restored by the child.
    all: libc::cpu_set_t,
    /// The same without the CPU the caller runs on now.
    elsewhere: libc::cpu_set_t,
}

impl Placement {
    /// `None` when there is no other CPU to send the child to.
    fn here() -> Option<Placement> {
        // SAFETY: `cpu_set_t` is a plain bit array, for which all-zero is a valid value;
        // sched_getaffinity writes at most `size_of::<cpu_set_t>()` bytes into it, and the CPU_*
        // helpers index it within bounds (they check `cpu` against its size).
        unsafe {
            let mut all: libc::cpu_set_t = std::mem::zeroed();
            if libc::sched_getaffinity(0, size_of::<libc::cpu_set_t>(), &mut all) != 0 {
                return None;
            }
            let cpu = usize::try_from(libc::sched_getcpu()).ok()?;
            if libc::CPU_COUNT(&all) < 2 || !libc::CPU_ISSET(cpu, &all) {
                return None;
            }
            let mut elsewhere = all;
            libc::CPU_CLR(cpu, &mut elsewhere);
            Some(Placement { all, elsewhere })
        }
    }

    /// In the parent, right after the clone: move the child off this CPU (best effort).
    fn send_away(&self, pid: libc::pid_t) {
        // SAFETY: `elsewhere` is a valid cpu_set_t of the size passed.
        unsafe { libc::sched_setaffinity(pid, size_of::<libc::cpu_set_t>(), &self.elsewhere) };
    }

    /// In the child, after the sync byte: every CPU again, when the parent's move took effect.
    /// Raw system calls on stack memory and on memory copied by the clone; when a needed restore
    /// fails the child reports and exits rather than leave init, and every workload, one CPU
    /// short.
    fn restore(&self, report: RawFd) {
        const SIZE: usize = size_of::<libc::cpu_set_t>();
        // SAFETY: `now` is a plain bit array (all-zero is valid) of the size passed; `all` is a
        // valid cpu_set_t of that size; CPU_EQUAL only reads both.
        unsafe {
            let mut now: libc::cpu_set_t = std::mem::zeroed();
            if libc::sched_getaffinity(0, SIZE, &mut now) == 0 && libc::CPU_EQUAL(&now, &self.all) {
                return;
            }
            if libc::sched_setaffinity(0, SIZE, &self.all) != 0 {
                fail(report, Stage::Affinity);
            }
        }
    }
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

fn child(image: &InitImage, unshare: libc::c_int, placement: Option<&Placement>) -> ! {
    let mut report = image.report;
    // SAFETY: raw system calls only, on integers, on stack memory, or on the pre-built argv/envp
    // arrays in `image`; nothing allocates or takes a lock. Every failure ends in `fail`, which
    // writes 8 bytes and calls _exit. The one exception is `entry` of `Start::InProcess`, which
    // runs ordinary Rust code: the spawner chooses it only when the clone was made by the
    // process's only thread, so this child is a plain fork of a single-threaded process.
    unsafe {
        // Descriptors first of all: the clone copied the host's whole table (lock files, the
        // sockets of other sessions, anything another thread just opened), and this child lives
        // on — waiting for its maps, and as init itself when started in-process — so it keeps
        // only what it needs, at fixed numbers, before doing anything else. Every source is moved
        // above all targets first, so no dup2 clobbers a source.
        let sources = [
            image.null,
            image.control,
            image.report,
            image.exe,
            image.sync,
        ];
        let mut high = FIRST_FREE;
        for fd in sources {
            high = high.max(fd + 1);
        }
        let mut moved = [0 as RawFd; 5];
        for (slot, fd) in moved.iter_mut().zip(sources) {
            *slot = libc::fcntl(fd, libc::F_DUPFD, high);
            if *slot < 0 {
                fail(report, Stage::Descriptors);
            }
        }
        let [null, control, rep, exe, sync] = moved;
        for (from, to) in [
            (null, 0),
            (null, 1),
            (control, CONTROL_FD),
            (rep, REPORT_FD),
            (exe, EXE_FD),
            (sync, SYNC_FD),
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
        // Everything from FIRST_FREE up (the moved copies and all the host's) goes; 0-2 and the
        // fixed slots stay. The child never drops an object it inherited (it execs, or runs
        // init's entry point, which never returns), so no owner sees its descriptor vanish.
        let mut keep = [0, 1, 2, CONTROL_FD, REPORT_FD, EXE_FD, SYNC_FD];
        if !super::fd::close_all_except(&mut keep) {
            fail(report, Stage::Descriptors);
        }
        // Die with the thread that cloned us (the "parent" for PDEATHSIG): the spawner thread,
        // or the process's only thread for an in-process init; either lives as long as the host
        // process. Init also treats EOF on the control socket as the host's death.
        if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) != 0 {
            fail(report, Stage::DeathSignal);
        }
        if unshare != 0 && libc::unshare(unshare) != 0 {
            fail(report, Stage::Namespaces);
        }
        let mut byte = 0u8;
        loop {
            let n = libc::read(SYNC_FD, (&mut byte as *mut u8).cast(), 1);
            if n == 1 {
                break;
            }
            if n < 0 && *libc::__errno_location() == libc::EINTR {
                continue;
            }
            fail(report, Stage::WaitForMaps);
        }
        libc::close(SYNC_FD);
        if let Some(placement) = placement {
            placement.restore(report);
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
        // Non-dumpable from here on: an in-process init holds a copy of the host's memory. Set
        // after the last credential change, which resets dumpability to `fs.suid_dumpable`; until
        // then the child is the host user's own process and nothing in the sandbox exists yet (an
        // exec'd init sets it again first thing, since `execve` resets it too).
        if libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) != 0 {
            fail(report, Stage::NonDumpable);
        }
        // The namespace's creator holds every capability in it, and changing between non-zero
        // uids keeps them; but `execve` as a non-zero uid would drop them. Copying permitted
        // into inheritable and raising each into the ambient set keeps them across exactly this
        // one execve; init's workloads drop all five sets. An in-process init does not exec.
        if matches!(image.start, Start::Exec) {
            raise_ambient(report);
        }
        if let Start::InProcess(entry) = image.start {
            // What `execve` would have closed: the program (init must hold no descriptor to the
            // binary) and the report pipe (its end of file tells the host init is running).
            libc::close(EXE_FD);
            libc::close(REPORT_FD);
            entry();
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

/// Copies the permitted capabilities into the inheritable and ambient sets, so they survive the
/// coming `execve` as a non-zero uid. Raw system calls only (runs between clone and exec).
fn raise_ambient(report: RawFd) {
    // SAFETY: capget/capset on stack structs, prctl on integers.
    unsafe {
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

/// A child making a throwaway user namespace of its own, for idmapped mounts; [`Self::map`]
/// writes its maps and returns the namespace. Started early (as root, before init is cloned), so
/// that creating the namespace — the costliest host-side step of opening a session as root — runs
/// on the child's CPU while the host clones init and writes its maps. Once mapped, the child is
/// released but reaped later ([`reap_released`]), off the host's way to the setup message.
///
/// The child shares our memory (`CLONE_VM`, on a small stack of its own) instead of getting a
/// copy: a fork would copy the page tables of the whole process and leave every page it touches
/// afterwards to a copy-on-write fault. It makes the user namespace with `unshare` (allowed: it is
/// not part of our thread group and shares no filesystem information), reports on one pipe, waits
/// for the other to close, and exits. Its only call that can fail in practice is the `unshare`
/// (the session's probe found user namespaces available just before); a failure is reported on
/// the pipe and becomes an error of [`Self::map`].
pub(crate) struct PendingUserNamespace {
    pid: i32,
    /// Readable once the child has made its namespace: one byte, 0 or the errno.
    made: OwnedFd,
    /// Closed to let the child exit.
    release: Option<OwnedFd>,
    /// The child's pipe ends and stack, alive until it has been reaped.
    _ends: Box<[RawFd; 3]>,
    _stack: Vec<u8>,
}

/// Starts a [`PendingUserNamespace`].
pub(crate) fn start_user_namespace() -> io::Result<PendingUserNamespace> {
    const STACK: usize = 16 << 10;
    let (made_read, made_write) = super::fd::pipe()?;
    let (release_read, release_write) = super::fd::pipe()?;
    let mut ends = Box::new([
        made_write.as_raw_fd(),
        release_read.as_raw_fd(),
        release_write.as_raw_fd(),
    ]);
    let mut stack = vec![0u8; STACK];
    // The stack grows down; keep 16-byte alignment.
    let top = (stack.as_mut_ptr() as usize + STACK) & !15;
    // SAFETY: `ends` and `stack` are moved into the returned value, which reaps the child before
    // dropping them (the heap memory does not move with the box and vector). The child runs only
    // `make_user_namespace`: raw system calls on its own descriptor table and stack, then _exit.
    let pid = super::check(unsafe {
        libc::clone(
            make_user_namespace,
            top as *mut libc::c_void,
            libc::CLONE_VM | libc::SIGCHLD,
            ends.as_mut_ptr().cast(),
        )
    })?;
    drop((made_write, release_read));
    Ok(PendingUserNamespace {
        pid,
        made: made_read,
        release: Some(release_write),
        _ends: ends,
        _stack: stack,
    })
}

impl PendingUserNamespace {
    /// Waits for the namespace, writes its maps, and returns it; it lives on as long as the
    /// returned descriptor. The child is released to exit and reaped later, by
    /// [`reap_released`] (or the next call of it).
    pub(crate) fn map(mut self, uid_map: &str, gid_map: &str) -> io::Result<OwnedFd> {
        let mut byte = [0u8; 1];
        match super::fd::read(self.made.as_fd(), &mut byte)? {
            1 if byte[0] == 0 => {}
            1 => return Err(io::Error::from_raw_os_error(i32::from(byte[0]))),
            _ => return Err(io::Error::other("the user namespace child ended early")),
        }
        let pid = self.pid;
        let result = (|| {
            std::fs::write(format!("/proc/{pid}/uid_map"), uid_map)?;
            std::fs::write(format!("/proc/{pid}/setgroups"), "deny")?;
            std::fs::write(format!("/proc/{pid}/gid_map"), gid_map)?;
            let file = std::fs::File::open(format!("/proc/{pid}/ns/user"))?;
            Ok(OwnedFd::from(file))
        })();
        // The namespace lives on through the descriptor: let the child exit now, but leave
        // reaping it to `reap_released`, off the path to the session's setup message — waiting
        // here would cost two wake-ups (the child's, then ours) on a busy machine.
        self.release();
        RELEASED
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .push(self);
        result
    }

    /// Lets the child exit (it then needs nothing more from us but its stack).
    fn release(&mut self) {
        if let Some(release) = self.release.take() {
            // Release with a byte, not only by closing: another helper cloned at the same moment
            // by another thread holds a copy of this write end (a clone copies the descriptor
            // table, and these helpers never exec), so end of file alone could come only when
            // that one exits — two sessions opening at once would wait for each other forever.
            // A child that already died makes this fail; ignore it.
            let _ = super::fd::write_all(release.as_fd(), &[0]);
        }
    }
}

impl Drop for PendingUserNamespace {
    /// Releases the child if that was not done yet, and reaps it: its stack (ours) is freed
    /// right after, so it must be gone first.
    fn drop(&mut self) {
        self.release();
        let _ = super::process::wait_pid(self.pid);
    }
}

/// Helpers released by [`PendingUserNamespace::map`] and not reaped yet; each keeps its stack
/// until [`reap_released`] has waited for it.
static RELEASED: std::sync::Mutex<Vec<PendingUserNamespace>> = std::sync::Mutex::new(Vec::new());

/// Reaps the user-namespace helpers [`PendingUserNamespace::map`] released. A session calls it
/// once init has its setup message (while init builds the root, the host only waits); each
/// helper has normally exited by then, so the wait is a formality.
pub(crate) fn reap_released() {
    let released = std::mem::take(
        &mut *RELEASED
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()),
    );
    // Dropping reaps each one (see `Drop for PendingUserNamespace`).
    drop(released);
}

/// The child of [`start_user_namespace`]: `ends` are the report pipe's write end, the release
/// pipe's read end, and (closed with everything else) the release pipe's write end.
extern "C" fn make_user_namespace(ends: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `ends` points to the child's two pipe descriptors, alive until the parent has
    // reaped us; every call acts on this child's own descriptor table (a clone without
    // CLONE_FILES copies it), credentials and stack; exit_group never returns. The child never drops
    // anything it shares with the parent, so closing the parent's descriptors in its own table
    // (`close_all_except`) cannot disturb an owner.
    unsafe {
        let [made, release, _ours] = *ends.cast::<[RawFd; 3]>();
        // Every call below is a raw system call (`spawn/raw.rs`): this child runs on the parent
        // thread's thread-local storage, so a libc wrapper failing here would overwrite that
        // thread's `errno`.
        //
        // First thing: close every descriptor but the two pipe ends. The table is a copy of the
        // host's at the moment of the clone — lock files and sockets of other threads included —
        // and this child lives until the host has written the maps. Our copy of the release
        // pipe's write end goes too, so the release (a byte, or end of file) does not depend on
        // us. A failure is reported like a failed `unshare`.
        let closed = raw::close_all_except(made, release);
        let status: u8 = if closed < 0 {
            raw::status(closed)
        } else {
            raw::status(raw::syscall3(
                libc::SYS_unshare,
                libc::CLONE_NEWUSER as usize,
                0,
                0,
            ))
        };
        raw::syscall3(
            libc::SYS_write,
            made as usize,
            (&status as *const u8) as usize,
            1,
        );
        let mut byte = 0u8;
        raw::syscall3(
            libc::SYS_read,
            release as usize,
            (&mut byte as *mut u8) as usize,
            1,
        );
        raw::syscall3(libc::SYS_exit_group, 0, 0, 0);
        // exit_group does not return.
        0
    }
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

mod raw;
#[cfg(test)]
mod tests;
