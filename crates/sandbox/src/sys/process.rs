//! Processes: starting a workload inside init (fork, drop every capability, execve), reaping,
//! signalling, pidfds, and the prctl flags init sets on itself.

use std::ffi::{CString, c_char};
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::sync::Mutex;

use super::{check, check_long};

/// How a process ended, as `waitpid` reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Exit {
    Code(i32),
    Signal(i32),
}

fn decode(status: libc::c_int) -> Exit {
    if libc::WIFSIGNALED(status) {
        Exit::Signal(libc::WTERMSIG(status))
    } else {
        Exit::Code(libc::WEXITSTATUS(status))
    }
}

/// Waits for the child `pid` to end.
pub(crate) fn wait_pid(pid: i32) -> io::Result<Exit> {
    let mut status = 0;
    loop {
        // SAFETY: `status` is a valid out-pointer for the call.
        let rc = unsafe { libc::waitpid(pid, &mut status, 0) };
        if rc >= 0 {
            return Ok(decode(status));
        }
        let err = io::Error::last_os_error();
        if err.kind() != io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
}

/// Reaps one ended child without waiting; `None` when no child has ended (or none is left).
pub(crate) fn reap_any() -> Option<(i32, Exit)> {
    let mut status = 0;
    // SAFETY: `status` is a valid out-pointer for the call.
    let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
    (pid > 0).then(|| (pid, decode(status)))
}

/// Sends `signal` to `pid` (in the caller's PID namespace); a process that is already gone is fine.
pub(crate) fn kill(pid: i32, signal: i32) {
    // SAFETY: kill takes integers only.
    unsafe { libc::kill(pid, signal) };
}

/// SIGKILL through a pidfd, so a recycled pid can never be hit.
pub(crate) fn pidfd_kill(pidfd: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: integers and a null siginfo pointer, which the call allows.
    check_long(unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            pidfd.as_raw_fd(),
            libc::SIGKILL,
            std::ptr::null::<libc::siginfo_t>(),
            0,
        )
    })?;
    Ok(())
}

/// Waits until the process behind `pidfd` has ended and reaps it.
pub(crate) fn pidfd_wait(pidfd: BorrowedFd<'_>) -> io::Result<()> {
    loop {
        // SAFETY: an all-zero siginfo_t is a valid out-buffer.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: `info` is a valid out-pointer; P_PIDFD takes the descriptor as the id.
        let rc = unsafe {
            libc::waitid(
                libc::P_PIDFD,
                pidfd.as_raw_fd() as libc::id_t,
                &mut info,
                libc::WEXITED,
            )
        };
        if rc == 0 {
            return Ok(());
        }
        let err = io::Error::last_os_error();
        if err.kind() != io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
}

/// Marks the calling process non-dumpable: no core dumps, and `/proc/PID/{exe,mem,fd,...}` and
/// ptrace are closed to every process without CAP_SYS_PTRACE over it, even one with the same uid.
pub(crate) fn set_non_dumpable() -> io::Result<()> {
    // SAFETY: integer arguments only.
    check(unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) })?;
    Ok(())
}

/// Gives the calling process a new cgroup namespace rooted at its current cgroup (init does this
/// after the host moved it into the session's group, so the sandbox sees that group as `/`).
pub(crate) fn unshare_cgroup_namespace() -> io::Result<()> {
    // SAFETY: integer argument only.
    check(unsafe { libc::unshare(libc::CLONE_NEWCGROUP) })?;
    Ok(())
}

/// Blocks SIGCHLD and returns a signalfd that becomes readable when a child ends.
pub(crate) fn child_signal_fd() -> io::Result<OwnedFd> {
    blocked_signal_fd(&[libc::SIGCHLD])
}

/// Blocks `signals` for the calling thread (and the threads it starts later) and returns a
/// non-blocking signalfd that receives them instead.
pub(crate) fn blocked_signal_fd(signals: &[libc::c_int]) -> io::Result<OwnedFd> {
    // SAFETY: `set` is initialised by sigemptyset before use; all pointers are to stack values.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for signal in signals {
            libc::sigaddset(&mut set, *signal);
        }
        check(libc::sigprocmask(
            libc::SIG_BLOCK,
            &set,
            std::ptr::null_mut(),
        ))?;
        let fd = check(libc::signalfd(
            -1,
            &set,
            libc::SFD_CLOEXEC | libc::SFD_NONBLOCK,
        ))?;
        Ok(OwnedFd::from_raw_fd(fd))
    }
}

/// A workload's program, arguments, environment and descriptors, prepared before the fork.
pub(crate) struct Workload {
    /// Paths to try in order (the `PATH` search is done by trying, as the workload's own
    /// credentials decide what is executable).
    candidates: Vec<CString>,
    _argv: Vec<CString>,
    argv_ptrs: Vec<*const c_char>,
    _envp: Vec<CString>,
    envp_ptrs: Vec<*const c_char>,
    cwd: CString,
    /// Take stdin as the controlling terminal after `setsid`.
    terminal: bool,
}

impl Workload {
    pub(crate) fn new(
        candidates: Vec<CString>,
        argv: Vec<CString>,
        envp: Vec<CString>,
        cwd: CString,
    ) -> Workload {
        let ptrs = |v: &[CString]| {
            v.iter()
                .map(|s| s.as_ptr())
                .chain([std::ptr::null()])
                .collect()
        };
        Workload {
            candidates,
            argv_ptrs: ptrs(&argv),
            _argv: argv,
            envp_ptrs: ptrs(&envp),
            _envp: envp,
            cwd,
            terminal: false,
        }
    }

    /// The workload's stdin is a pseudo-terminal slave that becomes its controlling terminal.
    pub(crate) fn on_terminal(mut self, terminal: bool) -> Workload {
        self.terminal = terminal;
        self
    }
}

/// The descriptors a workload starts with.
pub(crate) struct Stdio<'a> {
    pub stdin: BorrowedFd<'a>,
    pub stdout: BorrowedFd<'a>,
    pub stderr: BorrowedFd<'a>,
}

/// Why a workload failed before its `execve`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum WorkloadStage {
    Descriptors,
    /// Making the pseudo-terminal, or making it the controlling terminal (`exec -t`).
    Terminal,
    Session,
    Directory,
    Capabilities,
    Exec,
}

const SECURE_BITS_LOCKED: libc::c_ulong = 0xEF;

/// The child's stack: it shares init's memory until `execve`, but not init's stack.
const CHILD_STACK: usize = 256 << 10;

/// What the child reads (prepared by the parent) and writes (its failure, if any). Shared
/// memory: the child runs with CLONE_VM while the parent is suspended (CLONE_VFORK).
struct Launch<'a> {
    work: &'a Workload,
    stdio: [RawFd; 3],
    failure: Option<(WorkloadStage, i32)>,
}

/// Starts a workload the way `posix_spawn` does: a child sharing init's memory (no page-table
/// copy) while init waits until it has exec'd or failed, which it reports in shared memory
/// instead of through a pipe. In the child: its stdio and nothing else, a new session (no
/// controlling terminal), death with init, child-subreaper (so daemonised descendants stay below
/// the workload while it runs and a timeout can find them), default signal mask, the working
/// directory, every capability set emptied (bounding and ambient included) with the securebits
/// locked, then `execve`. The seccomp filter and `no_new_privs` are init's own (loaded once when
/// the root was built), inherited by the clone. `Ok(Err(..))`: the child failed at that stage
/// with that errno and has been reaped.
pub(crate) fn spawn_workload(
    work: &Workload,
    stdio: &Stdio<'_>,
) -> io::Result<Result<i32, (WorkloadStage, i32)>> {
    let mut launch = Launch {
        work,
        stdio: [
            stdio.stdin.as_raw_fd(),
            stdio.stdout.as_raw_fd(),
            stdio.stderr.as_raw_fd(),
        ],
        failure: None,
    };
    // One stack for every workload's child, kept for the life of init: allocating and freeing
    // 256 KiB per exec cost an mmap, page faults on the pages the child touches, and an munmap
    // (whose TLB flush reaches the CPU the child ran on) every time. The lock is held until the
    // child has exec'd or exited, so no two children ever share it (init is single-threaded
    // anyway).
    static STACK: Mutex<Vec<u8>> = Mutex::new(Vec::new());
    let mut stack = STACK
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if stack.len() < CHILD_STACK {
        *stack = vec![0u8; CHILD_STACK];
    }
    // The stack grows down on every architecture Linux runs this on; keep 16-byte alignment.
    let top = (stack.as_mut_ptr() as usize + CHILD_STACK) & !15;
    // SAFETY: `launch` and `stack` outlive the child's use of them: with CLONE_VFORK this thread
    // is suspended until the child has exec'd or exited, and the stack stays locked until then. The child only makes system calls on
    // the prepared data, writes `launch.failure`, and never returns into our frames.
    let pid = check(unsafe {
        libc::clone(
            workload_main,
            top as *mut libc::c_void,
            libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
            (&mut launch as *mut Launch<'_>).cast(),
        )
    })?;
    drop(stack);
    match launch.failure {
        None => Ok(Ok(pid)),
        Some(failure) => {
            wait_pid(pid)?;
            Ok(Err(failure))
        }
    }
}

extern "C" fn workload_main(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the `Launch` of `spawn_workload`, alive and not touched by the suspended
    // parent until this child has exec'd or exited.
    let launch = unsafe { &mut *arg.cast::<Launch<'_>>() };
    let stage = prepare_and_exec(launch);
    // SAFETY: reads this thread's errno.
    let errno = unsafe { *libc::__errno_location() };
    // A volatile write: the parent reads it after we are gone, which the compiler cannot see.
    // SAFETY: `launch.failure` is valid for writes (see above).
    unsafe { std::ptr::write_volatile(&mut launch.failure, Some((stage, errno))) };
    // SAFETY: _exit ends the child without running anything of the parent's.
    unsafe { libc::_exit(127) }
}

/// Everything between clone and execve; returns the stage that failed (errno is left set).
fn prepare_and_exec(launch: &Launch<'_>) -> WorkloadStage {
    let work = launch.work;
    // SAFETY: raw system calls on integers, stack values and the prepared arrays of `work`.
    unsafe {
        // Move stdio above 2 first, so no dup2 clobbers a source, then into place; everything
        // else (init's control socket, received descriptors) is closed.
        let high = launch.stdio.iter().copied().max().unwrap_or(0).max(2) + 1;
        let mut moved = [0 as RawFd; 3];
        for (slot, fd) in moved.iter_mut().zip(launch.stdio) {
            *slot = libc::fcntl(fd, libc::F_DUPFD, high);
            if *slot < 0 {
                return WorkloadStage::Descriptors;
            }
        }
        for (from, to) in moved.iter().zip(0..3) {
            if libc::dup2(*from, to) < 0 {
                return WorkloadStage::Descriptors;
            }
        }
        if libc::syscall(
            libc::SYS_close_range,
            3 as libc::c_uint,
            libc::c_uint::MAX,
            0,
        ) != 0
        {
            return WorkloadStage::Descriptors;
        }
        if libc::setsid() < 0 {
            return WorkloadStage::Session;
        }
        // The new session's controlling terminal: the pseudo-terminal on stdin (`exec -t`), so
        // job control, `^C` and `SIGWINCH` reach the command's foreground group.
        if work.terminal && !super::pty::take_controlling_terminal() {
            return WorkloadStage::Terminal;
        }
        if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) != 0
            || libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0
        {
            return WorkloadStage::Session;
        }
        let mut empty: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut empty);
        if libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut()) != 0 {
            return WorkloadStage::Session;
        }
        if libc::chdir(work.cwd.as_ptr()) != 0 {
            return WorkloadStage::Directory;
        }
        // Capabilities: the bounding set first (needs CAP_SETPCAP, which we still hold), lock
        // the securebits so no later execve can regain anything (not even as uid 0 of a nested
        // namespace), then clear ambient and the three process sets.
        for cap in 0..64 {
            if libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) != 0
                && *libc::__errno_location() != libc::EINVAL
            {
                return WorkloadStage::Capabilities;
            }
        }
        if libc::prctl(libc::PR_SET_SECUREBITS, SECURE_BITS_LOCKED, 0, 0, 0) != 0
            || libc::prctl(
                libc::PR_CAP_AMBIENT,
                libc::PR_CAP_AMBIENT_CLEAR_ALL,
                0,
                0,
                0,
            ) != 0
        {
            return WorkloadStage::Capabilities;
        }
        let header = [0x2008_0522u32, 0];
        let data = [0u32; 6];
        if libc::syscall(libc::SYS_capset, header.as_ptr(), data.as_ptr()) != 0 {
            return WorkloadStage::Capabilities;
        }
        // Try each candidate; remember EACCES (found but not executable) over ENOENT.
        let mut errno = libc::ENOENT;
        for path in &work.candidates {
            libc::execve(
                path.as_ptr(),
                work.argv_ptrs.as_ptr(),
                work.envp_ptrs.as_ptr(),
            );
            let e = *libc::__errno_location();
            if e != libc::ENOENT && e != libc::ENOTDIR {
                errno = e;
                if e != libc::EACCES {
                    break;
                }
            }
        }
        *libc::__errno_location() = errno;
        WorkloadStage::Exec
    }
}

/// Direct children of every process, from `/proc/*/stat`, as `(pid, parent)` pairs.
pub(crate) fn process_parents() -> Vec<(i32, i32)> {
    let mut pairs = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return pairs;
    };
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<i32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // The command name is in parentheses and may contain anything; fields follow the last ')'.
        let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
            continue;
        };
        let ppid = rest
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse::<i32>().ok());
        if let Some(ppid) = ppid {
            pairs.push((pid, ppid));
        }
    }
    pairs
}

/// Re-reads this process's own executable as an fd: the init program for sessions started by the
/// `cordon` binary itself.
pub(crate) fn open_own_executable() -> io::Result<OwnedFd> {
    Ok(OwnedFd::from(std::fs::File::open("/proc/self/exe")?))
}

/// Whether the calling thread is its process's only thread (`/proc/self/task` lists one); false
/// when that cannot be read, so the caller takes the path that is safe with threads.
pub(crate) fn single_threaded() -> bool {
    std::fs::read_dir("/proc/self/task").is_ok_and(|tasks| tasks.take(2).count() == 1)
}

/// The calling process's real uid and gid.
pub(crate) fn ids() -> (u32, u32) {
    // SAFETY: getuid and getgid cannot fail and touch no memory.
    unsafe { (libc::getuid(), libc::getgid()) }
}

/// A pidfd for `pid` (in the caller's PID namespace); it becomes readable when the process ends.
pub(crate) fn pidfd_open(pid: i32) -> io::Result<OwnedFd> {
    // SAFETY: integer arguments only; the result is a fresh descriptor or -1.
    let fd = check_long(unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) })?;
    // SAFETY: the descriptor is fresh and ours.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as libc::c_int) })
}

/// A per-process resource limit that init lowers for its session (see `limits.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Rlimit {
    /// `RLIMIT_MSGQUEUE`: bytes of POSIX message queues a user may hold.
    MessageQueueBytes,
    /// `RLIMIT_SIGPENDING`: signals a user's processes may have queued.
    PendingSignals,
}

/// The calling process's soft limit of `resource`; `None` when it is unlimited.
pub(crate) fn soft_limit(resource: Rlimit) -> io::Result<Option<u64>> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `limit` is a valid out-pointer for the call.
    check(unsafe { libc::getrlimit(rlimit_id(resource) as _, &mut limit) })?;
    Ok((limit.rlim_cur != libc::RLIM_INFINITY).then_some(limit.rlim_cur))
}

/// Sets the soft and the hard limit of `resource` to `value`, or both to the current hard limit
/// when that is lower (a hard limit can only be raised with CAP_SYS_RESOURCE in the initial user
/// namespace, so the lowered one holds for this process and every process it starts).
pub(crate) fn lower_limit(resource: Rlimit, value: u64) -> io::Result<()> {
    lower_resource(rlimit_id(resource), value)
}

/// [`lower_limit`] of the `RLIMIT_*` number `id`. Async-signal-safe (two system calls, nothing
/// allocated), so a `pre_exec` closure may call it.
pub(crate) fn lower_resource(id: libc::c_int, value: u64) -> io::Result<()> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `limit` is a valid out-pointer for the call.
    check(unsafe { libc::getrlimit(id as _, &mut limit) })?;
    let value = value.min(limit.rlim_max);
    let lowered = libc::rlimit {
        rlim_cur: value,
        rlim_max: value,
    };
    // SAFETY: `lowered` is a valid, initialised rlimit that the call only reads.
    check(unsafe { libc::setrlimit(id as _, &lowered) })?;
    Ok(())
}

/// The `RLIMIT_*` number of `resource` (cast back at each call: glibc and musl type it
/// differently).
fn rlimit_id(resource: Rlimit) -> libc::c_int {
    let id = match resource {
        Rlimit::MessageQueueBytes => libc::RLIMIT_MSGQUEUE,
        Rlimit::PendingSignals => libc::RLIMIT_SIGPENDING,
    };
    id as libc::c_int
}
