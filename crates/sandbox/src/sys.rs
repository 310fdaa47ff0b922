//! Raw system calls behind narrow safe functions. The only module allowed `unsafe`; every block says
//! why it is sound.
#![allow(unsafe_code)]

pub(crate) mod cmdline;
pub(crate) mod fd;
pub(crate) mod filter;
pub(crate) mod host;
pub(crate) mod mount;
pub(crate) mod net;
pub(crate) mod netns;
pub(crate) mod probe;
pub(crate) mod process;
pub(crate) mod pty;
pub(crate) mod spawn;

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// A path as the C string the kernel takes; a path with an interior NUL cannot name a file.
pub(crate) fn cstring(path: &Path) -> io::Result<CString> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

/// Turns a `-1`-on-error return value into an `io::Result`.
fn check(rc: libc::c_int) -> io::Result<libc::c_int> {
    if rc == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

/// Same as [`check`] for the `long` that `syscall(2)` returns.
fn check_long(rc: libc::c_long) -> io::Result<libc::c_long> {
    if rc == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}
