//! A host program cordon runs outside any sandbox (`git push` for the `deliver` action): given
//! one extra descriptor, how a credential reaches it without an argument or an environment
//! variable another process could read; and bounded, in a process group of its own with
//! resource limits every helper it starts inherits, so a hostile server cannot grow it without
//! end and a timeout stops all of it.

use std::os::fd::{AsRawFd as _, OwnedFd};
use std::os::unix::process::CommandExt as _;
use std::process::Command;

/// Makes `fd` descriptor `target` (3 or above) of the program `command` starts, and nothing
/// else: `fd` itself stays close-on-exec, so only that one number is inherited.
pub fn pass_fd(command: &mut Command, fd: OwnedFd, target: i32) {
    assert!(
        target > 2,
        "descriptors 0-2 are the program's standard streams"
    );
    // SAFETY: the closure runs in the forked child before `exec`, where only async-signal-safe
    // calls are allowed: `dup2` and `fcntl` are, and the closure allocates nothing. `fd` is
    // owned by the closure, so the descriptor number is valid until the command is dropped.
    unsafe {
        command.pre_exec(move || {
            let raw = fd.as_raw_fd();
            if raw == target {
                // `dup2` onto itself keeps close-on-exec set: clear it instead.
                if libc::fcntl(raw, libc::F_SETFD, 0) == -1 {
                    return Err(std::io::Error::last_os_error());
                }
            } else if libc::dup2(raw, target) == -1 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// Starts the program `command` runs in a process group of its own (its id is the program's
/// pid: [`kill_group`] stops it and every helper it started) with at most `memory` bytes of
/// data memory (`RLIMIT_DATA`: heap and private writable mappings, not the files it maps) and
/// of any file it writes (`RLIMIT_FSIZE`), and no core dump (it may hold a credential) — each
/// lowered, never raised past a hard limit cordon already runs under, and inherited across
/// `fork` and `exec`.
pub fn confine(command: &mut Command, memory: u64) {
    use super::process::lower_resource;
    // SAFETY: runs in the forked child before `exec`: `setpgid`, `prctl`, `getrlimit` and
    // `setrlimit` are async-signal-safe and the closure allocates nothing (the limits are plain values).
    unsafe {
        command.pre_exec(move || {
            if libc::setpgid(0, 0) == -1 {
                return Err(std::io::Error::last_os_error());
            }
            // Killed with the thread that started it, should cordon die before [`guard`]
            // stands watch (its helpers are the guard's: they are not this process's children).
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) == -1 {
                return Err(std::io::Error::last_os_error());
            }
            lower_resource(libc::RLIMIT_DATA as _, memory)?;
            lower_resource(libc::RLIMIT_FSIZE as _, memory)?;
            lower_resource(libc::RLIMIT_CORE as _, 0)
        });
    }
}

/// Has the program `command` starts get `signal` when the thread that started it ends (this
/// process, should it be killed outright): a batch's worker is told to stop, as an interrupt
/// would, instead of being left running with no one waiting for it.
pub fn die_with_parent(command: &mut Command, signal: i32) {
    // SAFETY: runs in the forked child before `exec`: `prctl` is async-signal-safe and the
    // closure allocates nothing.
    unsafe {
        command.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, signal as libc::c_ulong) == -1 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// The signal a [`confine`]d program gets when it writes past its file-size limit.
pub const FILE_SIZE_SIGNAL: i32 = libc::SIGXFSZ;

/// Whether the child `pid` has exited, without reaping it: while it is a zombie its pid (the
/// id of its process group) cannot be reused, so [`kill_group`] still names only its group.
pub fn exited(pid: u32) -> std::io::Result<bool> {
    // SAFETY: `info` is a valid, zeroed `siginfo_t` the kernel fills; `WNOWAIT` leaves the
    // child to be reaped by its `std::process::Child`.
    unsafe {
        let mut info: libc::siginfo_t = std::mem::zeroed();
        if libc::waitid(
            libc::P_PID,
            pid,
            &mut info,
            libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
        ) == -1
        {
            return Err(std::io::Error::last_os_error());
        }
        Ok(info.si_pid() != 0)
    }
}

/// Sends `SIGKILL` to every process of the group `pgid` ([`confine`]d programs: their pid).
/// A group that is already empty is no error.
pub fn kill_group(pgid: u32) {
    let Ok(pgid) = libc::pid_t::try_from(pgid) else {
        return;
    };
    if pgid <= 1 {
        return;
    }
    // SAFETY: `kill` takes plain integers; a negative pid names the process group only.
    unsafe {
        libc::kill(-pgid, libc::SIGKILL);
    }
}

/// Sends `signal` to the child `pid` of this process (a batch's worker, forwarded an interrupt).
/// A child that has already ended is no error; `pid` must be a child not yet reaped, so the id
/// still names it.
pub fn signal_child(pid: u32, signal: i32) {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return;
    };
    if pid <= 1 {
        return;
    }
    // SAFETY: `kill` takes plain integers; a positive pid names that one process.
    unsafe {
        libc::kill(pid, signal);
    }
}

/// A process standing watch over the group `pgid` for as long as it is held: should cordon end
/// in any way — `SIGINT`, `SIGTERM`, `kill -9`, a crash — before it drops the guard, the guard
/// kills the group, so no helper git started outlives cordon holding the token. Dropping it
/// stops and reaps it (drop it before the group's leader is reaped: until then the id names
/// only that group).
pub struct Guard {
    pid: libc::pid_t,
}

/// Starts a [`Guard`] over `pgid`.
///
/// The guard is a `fork` of cordon that runs no Rust code after the fork — a multithreaded
/// process's child may only make async-signal-safe calls — only `prctl`, `getppid`,
/// `sigtimedwait`, `kill` and `_exit`: it asks for a signal when the thread that made it ends
/// (`PR_SET_PDEATHSIG`), and on that signal, or every 100 ms in any case, looks whether its
/// parent is still cordon.
pub fn guard(pgid: u32) -> std::io::Result<Guard> {
    let pgid = libc::pid_t::try_from(pgid)
        .ok()
        .filter(|pgid| *pgid > 1)
        .ok_or_else(|| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
    // SAFETY: `getpid` takes nothing.
    let parent = unsafe { libc::getpid() };
    // SAFETY: `all` and `before` are valid `sigset_t`s the calls fill. Every signal is blocked
    // on this thread across the `fork` (and restored right after in the parent), so the child
    // starts with none that could run one of cordon's handlers, and waits for them itself.
    let (all, before) = unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        let mut before: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut before);
        (all, before)
    };
    // SAFETY: the child runs only the async-signal-safe calls below and leaves by `_exit`;
    // `all` is a plain value copied into it.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        // SAFETY: in the forked child: plain integers and valid pointers to stack values.
        unsafe {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGUSR1 as libc::c_ulong);
            let tick = libc::timespec {
                tv_sec: 0,
                tv_nsec: 100_000_000,
            };
            loop {
                if libc::getppid() != parent {
                    libc::kill(-pgid, libc::SIGKILL);
                    libc::_exit(0);
                }
                libc::sigtimedwait(&all, std::ptr::null_mut(), &tick);
            }
        }
    }
    let forked = std::io::Error::last_os_error();
    // SAFETY: restores the mask saved above.
    unsafe {
        libc::pthread_sigmask(libc::SIG_SETMASK, &before, std::ptr::null_mut());
    }
    if pid < 0 {
        return Err(forked);
    }
    Ok(Guard { pid })
}

impl Drop for Guard {
    fn drop(&mut self) {
        // SAFETY: integers and a valid out-pointer; the guard is this process's unreaped child,
        // so its pid names it alone.
        unsafe {
            libc::kill(self.pid, libc::SIGKILL);
            let mut status = 0;
            while libc::waitpid(self.pid, &mut status, 0) == -1
                && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted
            {
            }
        }
    }
}
