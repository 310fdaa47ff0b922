//! A host program cordon runs outside any sandbox (`git push` for the `deliver` action) given
//! one extra descriptor: how a credential reaches it without an argument or an environment
//! variable another process could read.

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
