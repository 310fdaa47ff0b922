//! `ToolHost`: the one way the built-in tools act — a `/bin/bash -c` process inside the step's
//! sandbox session. The engine implements it with the real session; tests use a fake.

use std::time::Duration;

/// The bash every tool process runs under, inside the sandbox.
pub const BASH: &str = "/bin/bash";

/// One `/bin/bash -c SCRIPT NAME ARGS...` to run inside the step's sandbox, in the workspace
/// directory, with the session's scrubbed environment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BashRun {
    pub script: String,
    /// `$0` for the script (shows up in bash's own error messages).
    pub name: String,
    /// `$1`, `$2`, … — data is passed as arguments, never spliced into the script.
    pub args: Vec<String>,
    /// Standard input; empty means `/dev/null`-like end of file at once.
    pub stdin: Vec<u8>,
    /// At this wall-clock limit the process tree is killed.
    pub timeout: Duration,
}

impl BashRun {
    /// The argv the host executes.
    pub fn argv(&self) -> Vec<String> {
        let mut argv = vec![
            BASH.to_owned(),
            "-c".to_owned(),
            self.script.clone(),
            self.name.clone(),
        ];
        argv.extend(self.args.iter().cloned());
        argv
    }
}

/// Which stream a chunk of output came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stream {
    Stdout,
    Stderr,
}

/// How the process ended and what it wrote (each view bounded; see
/// [`OutputBuffer`](crate::OutputBuffer)).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BashOutput {
    /// The shell's exit code (128+N for signal N; 124 when timed out).
    pub exit_code: i32,
    pub timed_out: bool,
    /// Stdout and stderr interleaved in arrival order.
    pub combined: Vec<u8>,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
}

/// The host could not run the process at all. This stops the step; a command that merely fails
/// is a [`BashOutput`] with its exit code.
#[derive(Debug, thiserror::Error)]
pub enum ToolHostError {
    /// A required sandbox layer (or a requested cap) cannot be enforced: exit 3.
    #[error("{0}")]
    Refused(cordon_protocol::Refusal),
    /// The session is gone or the sandbox failed.
    #[error("the sandbox could not run an agent tool: {message}")]
    Failed {
        message: String,
        #[source]
        source: Option<Box<dyn std::error::Error + Send + Sync>>,
    },
}

impl ToolHostError {
    /// A failure described by `message`.
    pub fn failed(message: impl Into<String>) -> ToolHostError {
        ToolHostError::Failed {
            message: message.into(),
            source: None,
        }
    }
}

/// Runs tool processes inside the step's sandbox session.
pub trait ToolHost {
    fn bash(&mut self, run: &BashRun) -> Result<BashOutput, ToolHostError>;
}
