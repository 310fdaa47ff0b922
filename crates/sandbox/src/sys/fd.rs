//! File descriptors: socket pairs that carry descriptors (`SCM_RIGHTS`), pipes, `poll`, and the
//! flags that keep descriptors from leaking into the sandbox.

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

use super::check;

/// Most descriptors one message may carry (stdin, stdout, stderr, and the mounts of a session).
pub(crate) const MAX_FDS: usize = 64;

/// A connected pair of stream sockets, both close-on-exec.
pub(crate) fn socket_pair() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: `fds` has room for the two descriptors the kernel writes.
    check(unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_STREAM | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    })?;
    // SAFETY: on success both descriptors are fresh and owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// A pipe `(read, write)`, both close-on-exec.
pub(crate) fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: `fds` has room for the two descriptors the kernel writes.
    check(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) })?;
    // SAFETY: on success both descriptors are fresh and owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Sends all of `bytes` on a stream socket, with `fds` attached to the first byte.
pub(crate) fn send_with_fds(
    socket: BorrowedFd<'_>,
    bytes: &[u8],
    fds: &[BorrowedFd<'_>],
) -> io::Result<()> {
    if fds.len() > MAX_FDS {
        return Err(io::Error::from_raw_os_error(libc::E2BIG));
    }
    let raw: Vec<RawFd> = fds.iter().map(AsRawFd::as_raw_fd).collect();
    let mut sent = 0;
    while sent < bytes.len() {
        let rest = &bytes[sent..];
        let mut iov = libc::iovec {
            iov_base: rest.as_ptr().cast_mut().cast(),
            iov_len: rest.len(),
        };
        let mut control = vec![0u8; cmsg_space(raw.len())];
        // SAFETY: an all-zero msghdr is a valid "no name, no control" header.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        if sent == 0 && !raw.is_empty() {
            msg.msg_control = control.as_mut_ptr().cast();
            msg.msg_controllen = control.len() as _;
            // SAFETY: `control` is sized by CMSG_SPACE for `raw.len()` descriptors, so the first
            // header and its data fit; CMSG_FIRSTHDR is non-null because msg_controllen > 0.
            unsafe {
                let cmsg = libc::CMSG_FIRSTHDR(&msg);
                (*cmsg).cmsg_level = libc::SOL_SOCKET;
                (*cmsg).cmsg_type = libc::SCM_RIGHTS;
                (*cmsg).cmsg_len = libc::CMSG_LEN((raw.len() * size_of::<RawFd>()) as u32) as _;
                std::ptr::copy_nonoverlapping(
                    raw.as_ptr(),
                    libc::CMSG_DATA(cmsg).cast::<RawFd>(),
                    raw.len(),
                );
            }
        }
        // SAFETY: `msg` points at `iov` and `control`, both alive for the call.
        let n = unsafe { libc::sendmsg(socket.as_raw_fd(), &msg, libc::MSG_NOSIGNAL) };
        if n < 0 {
            let err = io::Error::last_os_error();
            if err.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(err);
        }
        sent += n as usize;
    }
    Ok(())
}

/// Receives exactly `buf.len()` bytes from a stream socket, collecting any descriptors attached
/// to them. `Ok(false)` when the peer closed before the first byte.
pub(crate) fn recv_with_fds(
    socket: BorrowedFd<'_>,
    buf: &mut [u8],
    fds: &mut Vec<OwnedFd>,
) -> io::Result<bool> {
    let mut got = 0;
    while got < buf.len() {
        let rest = &mut buf[got..];
        let mut iov = libc::iovec {
            iov_base: rest.as_mut_ptr().cast(),
            iov_len: rest.len(),
        };
        let mut control = vec![0u8; cmsg_space(MAX_FDS)];
        // SAFETY: an all-zero msghdr is a valid "no name, no control" header.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = control.len() as _;
        // SAFETY: `msg` points at `iov` and `control`, both alive and writable for the call.
        // MSG_CMSG_CLOEXEC: received descriptors never leak into a later exec by accident.
        let n = unsafe { libc::recvmsg(socket.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
        if n < 0 {
            let err = io::Error::last_os_error();
            if err.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(err);
        }
        // SAFETY: the kernel filled `control` up to msg_controllen with well-formed headers;
        // CMSG_FIRSTHDR/CMSG_NXTHDR stay within it, and each SCM_RIGHTS payload holds
        // (cmsg_len - CMSG_LEN(0)) / 4 descriptors that are now ours.
        unsafe {
            let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
            while !cmsg.is_null() {
                if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                    let len = (*cmsg).cmsg_len as usize - libc::CMSG_LEN(0) as usize;
                    let data = libc::CMSG_DATA(cmsg).cast::<RawFd>();
                    for i in 0..len / size_of::<RawFd>() {
                        fds.push(OwnedFd::from_raw_fd(data.add(i).read_unaligned()));
                    }
                }
                cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
            }
        }
        if msg.msg_flags & libc::MSG_CTRUNC != 0 {
            return Err(io::Error::from_raw_os_error(libc::E2BIG));
        }
        if n == 0 {
            if got == 0 {
                return Ok(false);
            }
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        got += n as usize;
    }
    Ok(true)
}

fn cmsg_space(fds: usize) -> usize {
    // SAFETY: CMSG_SPACE is a pure size computation.
    unsafe { libc::CMSG_SPACE((fds.max(1) * size_of::<RawFd>()) as u32) as usize }
}

/// Readiness of one descriptor for [`poll`].
pub(crate) struct Poll {
    pub fd: RawFd,
    pub readable: bool,
}

/// Waits until one of `fds` is readable (or hung up) or `timeout_ms` passes (`-1`: forever).
/// Returns how many are ready; marks each in `readable`.
pub(crate) fn poll(fds: &mut [Poll], timeout_ms: i32) -> io::Result<usize> {
    let mut raw: Vec<libc::pollfd> = fds
        .iter()
        .map(|p| libc::pollfd {
            fd: p.fd,
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    loop {
        // SAFETY: `raw` is a valid array of `raw.len()` pollfds.
        let rc = unsafe { libc::poll(raw.as_mut_ptr(), raw.len() as libc::nfds_t, timeout_ms) };
        if rc < 0 {
            let err = io::Error::last_os_error();
            if err.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(err);
        }
        for (p, r) in fds.iter_mut().zip(&raw) {
            p.readable = r.revents != 0;
        }
        return Ok(rc as usize);
    }
}

/// Makes reads from `fd` return `WouldBlock` instead of waiting.
pub(crate) fn set_nonblocking(fd: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: F_GETFL/F_SETFL take and return integers only.
    unsafe {
        let flags = check(libc::fcntl(fd.as_raw_fd(), libc::F_GETFL))?;
        check(libc::fcntl(
            fd.as_raw_fd(),
            libc::F_SETFL,
            flags | libc::O_NONBLOCK,
        ))?;
    }
    Ok(())
}

/// Reads what `fd` has; `Ok(0)` at end of file.
pub(crate) fn read(fd: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<usize> {
    loop {
        // SAFETY: `buf` is valid for writes of `buf.len()` bytes.
        let n = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        if n >= 0 {
            return Ok(n as usize);
        }
        let err = io::Error::last_os_error();
        if err.kind() != io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
}

/// Writes all of `bytes` to `fd`.
/// One `write` of `bytes` (retried only when interrupted): how many were taken, or `WouldBlock`
/// on a full non-blocking descriptor.
pub(crate) fn write_some(fd: BorrowedFd<'_>, bytes: &[u8]) -> io::Result<usize> {
    loop {
        // SAFETY: `bytes` is valid for reads of `bytes.len()` bytes.
        let n = unsafe { libc::write(fd.as_raw_fd(), bytes.as_ptr().cast(), bytes.len()) };
        if n >= 0 {
            return Ok(n as usize);
        }
        let err = io::Error::last_os_error();
        if err.kind() != io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
}

pub(crate) fn write_all(fd: BorrowedFd<'_>, mut bytes: &[u8]) -> io::Result<()> {
    while !bytes.is_empty() {
        // SAFETY: `bytes` is valid for reads of `bytes.len()` bytes.
        let n = unsafe { libc::write(fd.as_raw_fd(), bytes.as_ptr().cast(), bytes.len()) };
        if n < 0 {
            let err = io::Error::last_os_error();
            if err.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(err);
        }
        bytes = &bytes[n as usize..];
    }
    Ok(())
}

/// Opens the existing file `name` in the directory `dir` for writing (no create, no truncate:
/// the file is a sysctl, set by one write) and writes `bytes` to it in one call.
pub(crate) fn write_at(dir: BorrowedFd<'_>, name: &CStr, bytes: &[u8]) -> io::Result<()> {
    // SAFETY: `name` is a NUL-terminated string alive for the call; `dir` is a valid descriptor.
    let fd = check(unsafe {
        libc::openat(
            dir.as_raw_fd(),
            name.as_ptr(),
            libc::O_WRONLY | libc::O_CLOEXEC | libc::O_NOFOLLOW,
        )
    })?;
    // SAFETY: the descriptor is fresh and ours; dropping it closes it.
    let file = unsafe { OwnedFd::from_raw_fd(fd) };
    write_all(file.as_fd(), bytes)
}

/// Duplicates the process's standard input (close-on-exec), to hand it to a sandboxed command;
/// `None` when this process has no standard input (descriptor 0 is closed).
pub(crate) fn dup_stdin() -> io::Result<Option<OwnedFd>> {
    // SAFETY: F_DUPFD_CLOEXEC returns a fresh descriptor (or -1) and touches no memory.
    let fd = unsafe { libc::fcntl(0, libc::F_DUPFD_CLOEXEC, 3) };
    if fd < 0 {
        let err = io::Error::last_os_error();
        return if err.raw_os_error() == Some(libc::EBADF) {
            Ok(None)
        } else {
            Err(err)
        };
    }
    // SAFETY: the descriptor is fresh and ours.
    Ok(Some(unsafe { OwnedFd::from_raw_fd(fd) }))
}

/// Closes every descriptor from 3 up except those in `keep` (sorted in place), with one
/// `close_range` per gap. Raw system calls on integers and stack memory only, no allocation and
/// no lock: callable in a child between `clone` and `execve`, or in a helper that never execs.
/// Returns `false` when a `close_range` failed (errno says why).
///
/// Why helpers need it: a clone copies the whole descriptor table, including descriptors the
/// host opened without close-on-exec (or that another thread opened a moment ago and has not yet
/// marked), and a helper that never execs would keep them open for its whole life — a run's lock
/// file held by an idmap helper kept the run looking alive after it ended. So every process
/// cordon clones that does not exec at once closes everything it does not need, first thing.
///
/// # Safety
///
/// Only in a child process whose descriptor table is its own (no `CLONE_FILES`) and that will
/// neither use nor drop any descriptor-owning object it inherited from its parent other than
/// those in `keep`: the descriptors they own are gone.
pub(crate) unsafe fn close_all_except(keep: &mut [RawFd]) -> bool {
    // Insertion sort: tiny input, no allocation.
    for i in 1..keep.len() {
        let mut j = i;
        while j > 0 && keep[j - 1] > keep[j] {
            keep.swap(j - 1, j);
            j -= 1;
        }
    }
    let mut from: libc::c_uint = 3;
    for &fd in keep.iter() {
        let Ok(fd) = libc::c_uint::try_from(fd) else {
            continue;
        };
        // Below 3 (stdio, untouched) or a duplicate in `keep`.
        if fd < from {
            continue;
        }
        // SAFETY: close_range on integers; the caller guarantees nothing else uses what closes.
        if fd > from && unsafe { libc::syscall(libc::SYS_close_range, from, fd - 1, 0) } != 0 {
            return false;
        }
        // A descriptor number is below `c_int::MAX`, so this cannot overflow.
        from = fd + 1;
    }
    // SAFETY: as above.
    unsafe { libc::syscall(libc::SYS_close_range, from, libc::c_uint::MAX, 0) == 0 }
}
