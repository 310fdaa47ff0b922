//! A TCP listener created inside a session's network namespace and handed to the host (DESIGN
//! §5: the proxy listens on `127.0.0.1:3128` *inside* the session, served by the host process).
//!
//! The host cannot simply `setns` a thread into the session's network namespace: joining a
//! network namespace needs `CAP_SYS_ADMIN` in the caller's *own* user namespace too, which an
//! unprivileged host lacks, and a multi-threaded process cannot join a user namespace. So a
//! short-lived child is forked (single-threaded by construction); it joins the session's user
//! and network namespaces through init's pidfd in one `setns` — the host's uid owns the
//! session's user namespace, so the child has every capability there — binds and listens, and
//! sends the socket back over a socket pair with `SCM_RIGHTS`. The socket keeps its namespace:
//! clients inside the session reach it on their loopback, and the host accepts from it.

use std::io;
use std::net::SocketAddrV4;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};

use super::{check_long, fd, process};

/// The listen backlog of a handed-over listener.
const BACKLOG: libc::c_int = 128;

/// A listening TCP socket bound to `addr` in the network namespace of the process `pidfd`
/// refers to (a session's init), created there by a forked child.
pub(crate) fn listen_in(pidfd: BorrowedFd<'_>, addr: SocketAddrV4) -> io::Result<OwnedFd> {
    let (parent_end, child_end) = fd::socket_pair()?;
    let sockaddr = libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: addr.port().to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from(*addr.ip()).to_be(),
        },
        sin_zero: [0; 8],
    };
    // Everything the child touches is built before the fork: it allocates nothing.
    let mut job = Job {
        pidfd: pidfd.as_raw_fd(),
        socket: child_end.as_raw_fd(),
        sockaddr,
        errno: 0,
        payload: 0,
        control: [0; 4],
        iov: libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        },
    };
    // SAFETY: a raw clone without CLONE_VM and without a new stack behaves like fork: the child
    // gets a copy of our memory and returns here on a copy of this stack. It then runs only
    // `child()`, which never returns and makes only raw system calls on `job` (its own copy).
    let pid = check_long(unsafe {
        libc::syscall(
            libc::SYS_clone,
            libc::SIGCHLD as libc::c_ulong,
            0usize,
            0usize,
            0usize,
            0usize,
        )
    })?;
    if pid == 0 {
        child(&mut job);
    }
    drop(child_end);
    let mut payload = [0u8; 4];
    let mut fds = Vec::new();
    let received = fd::recv_with_fds(parent_end.as_fd(), &mut payload, &mut fds);
    // The child is reaped whatever it sent; it exits right after sending.
    let exit = process::wait_pid(pid as i32);
    match received {
        Ok(true) => {}
        Ok(false) => {
            return Err(io::Error::other(format!(
                "the helper that opens the session's listener ended without an answer ({exit:?})"
            )));
        }
        Err(err) => return Err(err),
    }
    let errno = i32::from_ne_bytes(payload);
    if errno != 0 {
        return Err(io::Error::from_raw_os_error(errno));
    }
    match (fds.pop(), fds.is_empty()) {
        (Some(listener), true) => Ok(listener),
        _ => Err(io::Error::other(
            "the helper that opens the session's listener sent no socket, or more than one",
        )),
    }
}

/// The forked child's whole state, prepared by the parent.
#[repr(C)]
struct Job {
    pidfd: libc::c_int,
    socket: libc::c_int,
    sockaddr: libc::sockaddr_in,
    /// The errno to report (0: success, the listener is attached).
    errno: i32,
    payload: i32,
    /// Room for one `SCM_RIGHTS` header with one descriptor (CMSG_SPACE(4) ≤ 32 bytes), aligned
    /// like `cmsghdr`.
    control: [u64; 4],
    iov: libc::iovec,
}

fn child(job: &mut Job) -> ! {
    // SAFETY: raw system calls only, on integers and on memory inside `job` (the child's own
    // copy of the parent's stack frame); nothing allocates or takes a lock. Every path ends in
    // `_exit`, so nothing inherited is ever dropped after `close_all_except`.
    unsafe {
        let mut listener: libc::c_int = -1;
        // First thing: keep only init's pidfd and our socket. The fork copied the host's whole
        // descriptor table (lock files, other sessions' sockets), and none of it may live on in
        // this helper, however briefly, or reach the session's network namespace.
        let mut keep = [job.pidfd, job.socket];
        if !super::fd::close_all_except(&mut keep) {
            job.errno = *libc::__errno_location();
        }
        if job.errno == 0 && libc::setns(job.pidfd, libc::CLONE_NEWUSER | libc::CLONE_NEWNET) != 0 {
            job.errno = *libc::__errno_location();
        }
        if job.errno == 0 {
            listener = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
            if listener < 0 {
                job.errno = *libc::__errno_location();
            }
        }
        if job.errno == 0
            && libc::bind(
                listener,
                (&job.sockaddr as *const libc::sockaddr_in).cast(),
                size_of::<libc::sockaddr_in>() as libc::socklen_t,
            ) != 0
        {
            job.errno = *libc::__errno_location();
        }
        if job.errno == 0 && libc::listen(listener, BACKLOG) != 0 {
            job.errno = *libc::__errno_location();
        }
        job.payload = job.errno;
        job.iov = libc::iovec {
            iov_base: (&mut job.payload as *mut i32).cast(),
            iov_len: size_of::<i32>(),
        };
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut job.iov;
        msg.msg_iovlen = 1;
        if job.errno == 0 {
            msg.msg_control = job.control.as_mut_ptr().cast();
            msg.msg_controllen = libc::CMSG_SPACE(size_of::<libc::c_int>() as u32) as _;
            let cmsg = libc::CMSG_FIRSTHDR(&msg);
            (*cmsg).cmsg_level = libc::SOL_SOCKET;
            (*cmsg).cmsg_type = libc::SCM_RIGHTS;
            (*cmsg).cmsg_len = libc::CMSG_LEN(size_of::<libc::c_int>() as u32) as _;
            libc::CMSG_DATA(cmsg)
                .cast::<libc::c_int>()
                .write_unaligned(listener);
        }
        let sent = libc::sendmsg(job.socket, &msg, libc::MSG_NOSIGNAL);
        libc::_exit(if sent == size_of::<i32>() as isize {
            0
        } else {
            1
        });
    }
}
