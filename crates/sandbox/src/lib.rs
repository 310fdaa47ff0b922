//! The sandbox: sessions built from Linux namespaces, Landlock and seccomp. The only crate with `unsafe`,
//! and all of it lives in [`sys`].
//!
//! Entry points: [`Session::open`] with a [`SessionConfig`], then [`Session::exec`] with an
//! [`ExecRequest`]; [`init::main`] is what the init program runs inside every session.

pub mod cache;
pub mod cgroup;
mod config;
pub mod environment;
mod error;
mod exec;
mod facts;
pub mod git;
pub mod identity;
pub mod init;
pub mod landlock;
pub mod limits;
pub mod mounts;
pub mod probe;
pub mod seccomp;
mod session;
mod sys;
pub mod toolchain;
mod wire;

/// The user's terminal for `cordon exec -t` ([`Stdin::Terminal`]).
pub mod terminal {
    pub use crate::sys::pty::{
        SETTLE_WAIT, Signals, TerminalGuard, WindowSize, is_foreground, set_window_size,
        window_size,
    };
}

/// Programs cordon runs on the host, outside any sandbox (DESIGN §10: resolved from fixed
/// directories, a scrubbed environment).
pub mod host {
    pub use crate::sys::host::{
        FILE_SIZE_SIGNAL, Guard, confine, die_with_parent, exited, guard, kill_group, pass_fd,
        signal_child,
    };
}

pub use config::{
    DEFAULT_TMP_SIZE, ImageRoot, InitProgram, InitStart, Network, PrivateGitDir, SessionConfig,
    Workspace,
};
pub use error::SandboxError;
pub use exec::{Capture, ExecOutcome, ExecRequest, ExitStatus, Stdin, Stream};
pub use facts::{HOSTNAME, host_user};
pub use mounts::GitMutations;
pub use session::{Background, ESCAPE_STOPPED, MemoryUsage, Session, Starting, Tick, Watch};
pub use sys::process::WorkloadStage;
