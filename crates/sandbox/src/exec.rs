//! One command run in a session: [`ExecRequest`] in, [`ExecOutcome`] out, output streamed to a
//! callback as it arrives and kept in a bounded capture (the tail).

use std::path::PathBuf;
use std::time::Duration;

/// What to run.
#[derive(Clone, Debug)]
pub struct ExecRequest {
    pub argv: Vec<String>,
    /// The working directory inside the sandbox; the workspace when `None`.
    pub cwd: Option<PathBuf>,
    /// Variables added to (or replacing) the session's scrubbed environment.
    pub env: Vec<(String, String)>,
    pub stdin: Stdin,
    /// Wall-clock limit; at the deadline the command and every process below it are killed.
    pub timeout: Option<Duration>,
    /// How many bytes of each stream the outcome keeps (the last ones).
    pub capture_limit: usize,
}

impl ExecRequest {
    /// `argv` with no stdin, no timeout, a 64 KiB capture, in the workspace.
    pub fn new(argv: Vec<String>) -> ExecRequest {
        ExecRequest {
            argv,
            cwd: None,
            env: Vec::new(),
            stdin: Stdin::Null,
            timeout: None,
            capture_limit: 64 << 10,
        }
    }
}

/// Where the command's standard input comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Stdin {
    /// `/dev/null`.
    Null,
    /// This process's own standard input, passed through.
    Inherit,
    /// These bytes, then end of file.
    Bytes(Vec<u8>),
    /// A new pseudo-terminal inside the sandbox (its own devpts), the command's stdin, stdout,
    /// stderr and controlling terminal: this process's stdin is copied to it, its size follows
    /// this process's stdin terminal (checked every 100 ms), and everything the command writes
    /// arrives as [`Stream::Stdout`]. The caller puts its own terminal in raw mode
    /// ([`crate::terminal::TerminalGuard::raw`]).
    Terminal,
}

/// Which output stream a chunk came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stream {
    Stdout,
    Stderr,
}

/// How the command ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExitStatus {
    Code(i32),
    Signal(i32),
    /// No such program (on `PATH`); nothing ran.
    NotFound,
    /// The program exists but cannot be executed; nothing ran.
    NotExecutable,
}

/// The tail of one output stream.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Capture {
    pub bytes: Vec<u8>,
    /// How many earlier bytes were dropped to stay within the limit.
    pub dropped: u64,
}

impl Capture {
    pub(crate) fn push(&mut self, chunk: &[u8], limit: usize) {
        self.bytes.extend_from_slice(chunk);
        if self.bytes.len() > limit {
            let excess = self.bytes.len() - limit;
            self.bytes.drain(..excess);
            self.dropped += excess as u64;
        }
    }
}

/// What happened.
#[derive(Clone, Debug)]
pub struct ExecOutcome {
    pub status: ExitStatus,
    /// The timeout fired and the command's tree was killed.
    pub timed_out: bool,
    pub stdout: Capture,
    pub stderr: Capture,
    pub duration: Duration,
    /// When the command died of SIGKILL while the session's memory cap OOM-killed a process:
    /// what to tell the user (`killed: out of memory (memory cap 32 MiB)`).
    pub oom: Option<String>,
    /// The watch of [`crate::Session::exec_watched`] stopped the command (its tree was killed):
    /// why. Distinct from `timed_out`.
    pub stopped: Option<String>,
}

impl ExecOutcome {
    /// The exit code a shell would report, with Appendix A's conventions: 124 timeout, 126 not
    /// executable, 127 not found, 128+N killed by signal N.
    pub fn exit_code(&self) -> i32 {
        if self.timed_out {
            return 124;
        }
        match self.status {
            ExitStatus::Code(code) => code,
            ExitStatus::Signal(signal) => 128 + signal,
            ExitStatus::NotFound => 127,
            ExitStatus::NotExecutable => 126,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(status: ExitStatus, timed_out: bool, expected: i32) {
        let outcome = ExecOutcome {
            status,
            timed_out,
            stdout: Capture::default(),
            stderr: Capture::default(),
            duration: Duration::ZERO,
            oom: None,
            stopped: None,
        };
        assert_eq!(
            outcome.exit_code(),
            expected,
            "{status:?} timed_out={timed_out}"
        );
    }

    #[test]
    fn exit_codes_follow_the_contract() {
        for (status, timed_out, expected) in [
            (ExitStatus::Code(0), false, 0),
            (ExitStatus::Code(3), false, 3),
            (ExitStatus::Signal(9), false, 137),
            (ExitStatus::Signal(9), true, 124),
            (ExitStatus::NotFound, false, 127),
            (ExitStatus::NotExecutable, false, 126),
        ] {
            check(status, timed_out, expected);
        }
    }

    #[test]
    fn capture_keeps_the_tail() {
        let mut capture = Capture::default();
        capture.push(b"hello ", 8);
        capture.push(b"world", 8);
        assert_eq!(
            (capture.bytes.as_slice(), capture.dropped),
            (&b"lo world"[..], 3)
        );
    }
}
