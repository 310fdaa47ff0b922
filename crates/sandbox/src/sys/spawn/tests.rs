//! The helpers cordon clones keep none of the host's descriptors while they live: checked on a
//! live helper, at a point where it would still hold them if it did not close them first thing.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};

use super::*;
use crate::sys::fd::{Poll, pipe, poll};

/// A file opened *without* close-on-exec, as a careless library (or a lock file) would, placed
/// at a descriptor number above `floor`; and its path.
fn inheritable_file(floor: RawFd) -> (OwnedFd, PathBuf) {
    let dir = std::env::temp_dir();
    let path = dir.join(format!("cordon-leak-{}-{floor}", std::process::id()));
    std::fs::write(&path, "lock").unwrap();
    let file = std::fs::File::open(&path).unwrap();
    // SAFETY: F_DUPFD on a descriptor we own returns a fresh one (no close-on-exec) that only
    // this function owns.
    let fd = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_DUPFD, floor) };
    assert!(fd >= floor, "F_DUPFD");
    // SAFETY: see above.
    (unsafe { OwnedFd::from_raw_fd(fd) }, path)
}

/// The files `pid` has open, as their paths.
fn open_files(pid: i32) -> Vec<PathBuf> {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .expect("the helper's descriptor table is readable")
        .flatten()
        .filter_map(|entry| std::fs::read_link(entry.path()).ok())
        .collect()
}

/// Waits (bounded) until `fd` is readable or hung up; false on timeout.
fn ready(fd: RawFd) -> bool {
    let mut polls = [Poll {
        fd,
        readable: false,
    }];
    poll(&mut polls, 20_000).is_ok_and(|n| n == 1)
}

fn check_holds_nothing(pid: i32, leaked: &Path, what: &str) {
    // The control: our own table shows the file, so the probe can see it where it is open.
    assert!(
        open_files(std::process::id() as i32)
            .iter()
            .any(|p| p == leaked)
    );
    let files = open_files(pid);
    assert!(
        !files.iter().any(|p| p == leaked),
        "{what} still holds {leaked:?}: {files:?}"
    );
}

#[test]
fn the_idmap_helper_holds_no_inherited_descriptor_while_it_waits() {
    let (_file, path) = inheritable_file(500);
    let pending = start_user_namespace().expect("the helper starts");
    // It reports on `made` only after it has closed what it does not need and made its
    // namespace; it then waits for the release, alive, with its table as it will stay.
    assert!(ready(pending.made.as_raw_fd()), "the helper never reported");
    check_holds_nothing(pending.pid, &path, "the idmap helper");
    drop(pending);
    let _ = std::fs::remove_file(path);
}

#[test]
fn the_init_child_holds_no_inherited_descriptor_while_it_waits_for_its_maps() {
    let (_file, path) = inheritable_file(600);
    // A witness: a pipe whose write end the child inherits at a number above the leaked file's.
    // Descriptors are closed in ascending order, so end of file on the read end (once our own
    // copy is gone) means the child has closed the leaked file too — without the early close it
    // would hold both until its maps were written, which this test never does.
    let (witness_read, witness_write) = pipe().unwrap();
    // SAFETY: F_DUPFD on a descriptor we own returns a fresh one only this test owns.
    let high = unsafe { libc::fcntl(witness_write.as_raw_fd(), libc::F_DUPFD, 900) };
    assert!(high >= 900, "F_DUPFD");
    // SAFETY: see above.
    let witness_write_high = unsafe { OwnedFd::from_raw_fd(high) };
    drop(witness_write);
    let null = std::fs::File::open("/dev/null").unwrap();
    let (sync_read, _sync_write) = pipe().unwrap();
    let (_report_read, report_write) = pipe().unwrap();
    let fds = ImageFds {
        exe: null.as_fd(),
        control: null.as_fd(),
        sync: sync_read.as_fd(),
        report: report_write.as_fd(),
        null: null.as_fd(),
    };
    let image = InitImage::new(&fds, "cordon-init", 0, 0, Groups::Keep);
    // No namespaces: the child only has to reach its wait for the maps.
    let spawned = clone_init(&image, 0).expect("the child starts");
    drop(witness_write_high);
    let closed = ready(witness_read.as_raw_fd());
    let files = open_files(spawned.pid);
    crate::sys::process::kill(spawned.pid, libc::SIGKILL);
    let _ = crate::sys::process::wait_pid(spawned.pid);
    assert!(
        closed,
        "the child kept the host's descriptors while waiting: {files:?}"
    );
    assert!(!files.iter().any(|p| p == &path), "{files:?}");
    let _ = std::fs::remove_file(path);
}

#[test]
fn raw_system_calls_report_errors_without_touching_errno() {
    const SENTINEL: i32 = 4242;
    // SAFETY: writing this thread's own errno; close(-1) closes nothing.
    unsafe {
        *libc::__errno_location() = SENTINEL;
        let ret = raw::syscall3(libc::SYS_close, -1isize as usize, 0, 0);
        assert_eq!(ret, -(libc::EBADF as isize));
        assert_eq!(raw::status(ret), libc::EBADF as u8);
        assert_eq!(*libc::__errno_location(), SENTINEL, "errno is left alone");
        // The control: libc's wrapper for the same failing call does set it.
        libc::syscall(libc::SYS_close, -1);
        assert_eq!(*libc::__errno_location(), libc::EBADF);
    }
}
