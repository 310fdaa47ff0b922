//! Pseudo-terminals for `cordon exec -t`: the pair is made by init in the session's own devpts
//! instance (so the command's `tty` names a terminal that exists in its root), the host gets the
//! master; the user's terminal is put in raw mode while the command runs and restored after.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use super::check;

/// A terminal's size in character cells.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct WindowSize {
    pub rows: u16,
    pub cols: u16,
}

/// A new pseudo-terminal pair `(master, slave)` from `/dev/ptmx` (init's: the session's own
/// devpts), both close-on-exec, neither a controlling terminal of this process. The slave is
/// opened from the master (`TIOCGPTPEER`), never by a path lookup under `/dev/pts`.
pub(crate) fn open_pair(size: Option<WindowSize>) -> io::Result<(OwnedFd, OwnedFd)> {
    // SAFETY: a NUL-terminated literal path; the result is checked.
    let master = check(unsafe {
        libc::open(
            c"/dev/ptmx".as_ptr(),
            libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC,
        )
    })?;
    // SAFETY: a fresh descriptor owned by nobody else.
    let master = unsafe { OwnedFd::from_raw_fd(master) };
    let unlock: libc::c_int = 0;
    // SAFETY: TIOCSPTLCK reads one int from the pointer, which is valid.
    check(unsafe { libc::ioctl(master.as_raw_fd(), libc::TIOCSPTLCK, &unlock) })?;
    if let Some(size) = size {
        set_window_size(master.as_fd(), size)?;
    }
    // SAFETY: TIOCGPTPEER takes the open flags as its integer argument and returns a new
    // descriptor.
    let slave = check(unsafe {
        libc::ioctl(
            master.as_raw_fd(),
            libc::TIOCGPTPEER,
            libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC,
        )
    })?;
    // SAFETY: a fresh descriptor owned by nobody else.
    Ok((master, unsafe { OwnedFd::from_raw_fd(slave) }))
}

/// The size of the terminal `fd`, or `None` when it is not a terminal (or reports 0×0).
pub fn window_size(fd: BorrowedFd<'_>) -> Option<WindowSize> {
    // SAFETY: `winsize` is plain data; TIOCGWINSZ writes one into the valid pointer.
    let mut size: libc::winsize = unsafe { std::mem::zeroed() };
    // SAFETY: see above.
    if unsafe { libc::ioctl(fd.as_raw_fd(), libc::TIOCGWINSZ, &mut size) } != 0 {
        return None;
    }
    (size.ws_row > 0 && size.ws_col > 0).then_some(WindowSize {
        rows: size.ws_row,
        cols: size.ws_col,
    })
}

/// Sets the size of the terminal (or pty master) `fd`; its foreground process group gets
/// `SIGWINCH` when it changes.
pub fn set_window_size(fd: BorrowedFd<'_>, size: WindowSize) -> io::Result<()> {
    let size = libc::winsize {
        ws_row: size.rows,
        ws_col: size.cols,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCSWINSZ reads one `winsize` from the valid pointer.
    check(unsafe { libc::ioctl(fd.as_raw_fd(), libc::TIOCSWINSZ, &size) }).map(drop)
}

/// Makes the calling process's standard input its controlling terminal (the workload's child,
/// after `setsid`). Async-signal-safe: one system call.
pub(crate) fn take_controlling_terminal() -> bool {
    // SAFETY: TIOCSCTTY takes an integer (0: do not steal from another session).
    unsafe { libc::ioctl(0, libc::TIOCSCTTY, 0) == 0 }
}

/// The user's terminal while a command's output is written to it: its settings saved (and, for a
/// pty command, raw mode: no echo, no line editing, no signals from keys, no output processing —
/// the pty inside does all of that). Dropped when the command has ended: `farewell` (mode resets
/// and a status question) is written to the output terminal, input is read and discarded until
/// `answer` arrives (at most [`SETTLE_WAIT`]: terminals answer in order, so every earlier answer
/// has arrived by then), what is still queued is discarded, and the settings are restored.
pub struct TerminalGuard {
    input: OwnedFd,
    output: OwnedFd,
    saved: libc::termios,
    farewell: Vec<u8>,
    answer: Vec<u8>,
}

/// The longest the guard waits for the terminal's answer to its farewell question. Best effort:
/// the filter keeps questions from reaching the terminal at all; this catches what the terminal
/// sends on its own (mouse and focus reports the command turned on).
pub const SETTLE_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// Whether this process is in the foreground of the terminal `fd` (a background job must not
/// read it or change its settings: the kernel would stop it with `SIGTTIN` / `SIGTTOU`).
pub fn is_foreground(fd: BorrowedFd<'_>) -> bool {
    // SAFETY: integer arguments only.
    unsafe { libc::tcgetpgrp(fd.as_raw_fd()) == libc::getpgrp() }
}

/// The signals that would end `cordon exec` (`SIGINT`, `SIGTERM`, `SIGHUP`, `SIGQUIT`), blocked
/// and received through a signalfd instead, so the command is stopped and the terminal restored
/// before exiting with 128 + the signal. Threads started after [`Signals::block`] inherit the
/// mask; make it first.
pub struct Signals {
    fd: OwnedFd,
}

impl Signals {
    pub fn block() -> io::Result<Signals> {
        let fd = super::process::blocked_signal_fd(&[
            libc::SIGINT,
            libc::SIGTERM,
            libc::SIGHUP,
            libc::SIGQUIT,
        ])?;
        Ok(Signals { fd })
    }

    /// A signal received since the last call, if any (without waiting).
    pub fn pending(&self) -> Option<i32> {
        // SAFETY: `signalfd_siginfo` is plain data the kernel fills through the valid pointer.
        let mut info: libc::signalfd_siginfo = unsafe { std::mem::zeroed() };
        let size = std::mem::size_of::<libc::signalfd_siginfo>();
        // SAFETY: `info` is valid for writes of `size` bytes.
        let n = unsafe {
            libc::read(
                self.fd.as_raw_fd(),
                (&mut info as *mut libc::signalfd_siginfo).cast(),
                size,
            )
        };
        (n == size as isize).then_some(info.ssi_signo as i32)
    }
}

impl TerminalGuard {
    /// Saves the settings of the terminal `input` (this process's stdin); `output` is the
    /// terminal the command's output is written to.
    pub fn save(
        input: BorrowedFd<'_>,
        output: BorrowedFd<'_>,
        farewell: &[u8],
        answer: &[u8],
    ) -> io::Result<TerminalGuard> {
        let input = input.try_clone_to_owned()?;
        let output = output.try_clone_to_owned()?;
        // SAFETY: `termios` is plain data; tcgetattr fills it through the valid pointer.
        let mut saved: libc::termios = unsafe { std::mem::zeroed() };
        // SAFETY: see above.
        check(unsafe { libc::tcgetattr(input.as_raw_fd(), &mut saved) })?;
        Ok(TerminalGuard {
            input,
            output,
            saved,
            farewell: farewell.to_vec(),
            answer: answer.to_vec(),
        })
    }

    /// Replaces what is written when the guard is dropped (known only once the command ended).
    pub fn set_farewell(&mut self, farewell: &[u8]) {
        self.farewell = farewell.to_vec();
    }

    /// Puts the input terminal in raw mode (until the guard is dropped).
    pub fn raw(&self) -> io::Result<()> {
        let mut raw = self.saved;
        // SAFETY: cfmakeraw only edits the struct it is given.
        unsafe { libc::cfmakeraw(&mut raw) };
        // SAFETY: tcsetattr reads the valid struct.
        check(unsafe { libc::tcsetattr(self.input.as_raw_fd(), libc::TCSANOW, &raw) }).map(drop)
    }

    /// Writes the farewell and reads input until its answer or the deadline.
    fn settle(&self) -> io::Result<()> {
        self.raw()?;
        // SAFETY: an integer descriptor we own.
        unsafe { libc::tcdrain(self.output.as_raw_fd()) };
        super::fd::write_all(self.output.as_fd(), &self.farewell)?;
        let deadline = std::time::Instant::now() + SETTLE_WAIT;
        let mut tail: Vec<u8> = Vec::new();
        let mut buf = [0u8; 512];
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return Ok(());
            }
            let mut ready = [super::fd::Poll {
                fd: self.input.as_raw_fd(),
                readable: false,
            }];
            if super::fd::poll(&mut ready, left.as_millis() as i32 + 1)? == 0 {
                return Ok(());
            }
            let n = super::fd::read(self.input.as_fd(), &mut buf)?;
            if n == 0 {
                return Ok(());
            }
            tail.extend_from_slice(&buf[..n]);
            if tail
                .windows(self.answer.len())
                .any(|w| w == self.answer.as_slice())
            {
                return Ok(());
            }
            let keep = tail.len().saturating_sub(self.answer.len());
            tail.drain(..keep);
        }
    }
}

impl Drop for TerminalGuard {
    fn drop(&mut self) {
        let _ = self.settle();
        // SAFETY: integer and valid-pointer arguments on a descriptor we own.
        unsafe {
            libc::tcflush(self.input.as_raw_fd(), libc::TCIFLUSH);
            libc::tcsetattr(self.input.as_raw_fd(), libc::TCSANOW, &self.saved);
        }
    }
}
