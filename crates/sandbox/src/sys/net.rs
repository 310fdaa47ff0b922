//! The network namespace's only interface: bringing `lo` up. Also the UTS host name.

use std::io;
use std::os::fd::{FromRawFd, OwnedFd};

use super::check;

/// Sets `IFF_UP` on `lo` in the calling process's network namespace.
pub(crate) fn loopback_up() -> io::Result<()> {
    // SAFETY: socket() takes integers and returns a fresh descriptor or -1.
    let fd =
        check(unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) })?;
    // SAFETY: the descriptor is fresh and ours; OwnedFd closes it on every path.
    let socket = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: an all-zero ifreq is valid; the name fits in IFNAMSIZ with its NUL.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, src) in req.ifr_name.iter_mut().zip(b"lo\0") {
        *dst = *src as libc::c_char;
    }
    use std::os::fd::AsRawFd;
    // SAFETY: SIOCGIFFLAGS/SIOCSIFFLAGS read and write `req`, a valid ifreq, for the call only.
    unsafe {
        check(libc::ioctl(
            socket.as_raw_fd(),
            libc::SIOCGIFFLAGS,
            &mut req,
        ))?;
        req.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short;
        check(libc::ioctl(socket.as_raw_fd(), libc::SIOCSIFFLAGS, &req))?;
    }
    Ok(())
}

/// Sets the UTS namespace's host name.
pub(crate) fn set_hostname(name: &str) -> io::Result<()> {
    // SAFETY: `name` is valid for `name.len()` bytes; the kernel copies it.
    check(unsafe { libc::sethostname(name.as_ptr().cast(), name.len()) })?;
    Ok(())
}
