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
    // SAFETY: runs in the forked child before `exec`: `setpgid`, `getrlimit` and `setrlimit`
    // are async-signal-safe and the closure allocates nothing (the limits are plain values).
    unsafe {
        command.pre_exec(move || {
            if libc::setpgid(0, 0) == -1 {
                return Err(std::io::Error::last_os_error());
            }
            lower_resource(libc::RLIMIT_DATA as _, memory)?;
            lower_resource(libc::RLIMIT_FSIZE as _, memory)?;
            lower_resource(libc::RLIMIT_CORE as _, 0)
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
