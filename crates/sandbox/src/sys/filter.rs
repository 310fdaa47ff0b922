//! The two system calls that seal a process: `prctl(PR_SET_NO_NEW_PRIVS)` and
//! `seccomp(SECCOMP_SET_MODE_FILTER)`. Neither allocates: they run in a freshly forked child.

use std::io;

use crate::seccomp::SockFilter;

/// Makes `execve` unable to grant privileges (setuid bits, file capabilities) to this process and
/// its descendants. Required before an unprivileged process may load a seccomp filter.
pub(crate) fn set_no_new_privs() -> io::Result<()> {
    // SAFETY: PR_SET_NO_NEW_PRIVS takes integer arguments only (1, then three zeros that the
    // kernel requires to be zero) and touches no memory of ours.
    let rc = unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Loads `program` as a seccomp filter for every thread of the process (`TSYNC`), so no thread
/// stays unfiltered even if the caller is not single-threaded after all.
pub(crate) fn load(program: &[SockFilter]) -> io::Result<()> {
    // The kernel takes at most BPF_MAXINSNS (4096) instructions; a longer program is a bug.
    let len =
        u16::try_from(program.len()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    let fprog = libc::sock_fprog {
        len,
        // The kernel only reads through this pointer; `SockFilter` is `#[repr(C)]` with the exact
        // layout of `struct sock_filter` (asserted at compile time in `seccomp::bpf`).
        filter: program.as_ptr().cast_mut().cast::<libc::sock_filter>(),
    };
    // SAFETY: `fprog` points at `len` initialised `sock_filter`s that outlive the call (the kernel
    // copies the program before returning), and `&fprog` is a valid `sock_fprog` for its duration.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER,
            libc::SECCOMP_FILTER_FLAG_TSYNC,
            &fprog as *const libc::sock_fprog,
        )
    };
    match rc {
        0 => Ok(()),
        // With TSYNC a positive result is the id of a thread that could not be synchronised.
        tid if tid > 0 => Err(io::Error::from_raw_os_error(libc::EAGAIN)),
        _ => Err(io::Error::last_os_error()),
    }
}
