//! The seccomp filter, built as data: a BPF program compiled once from [`policy`], testable through
//! a small interpreter, and loaded by init into itself once the root is built, so that every
//! workload inherits it through its clone and keeps it across `execve`.
//!
//! The filter is applied last, after the mounts and Landlock, because it refuses calls (`mount`,
//! `unshare`, ...) that setting up the sandbox needs. What it refuses, and why, is listed in
//! [`policy`].

mod bpf;
pub mod policy;

use std::io;
use std::sync::OnceLock;

pub use bpf::{Action, SockFilter};

use crate::sys::filter;

/// A compiled seccomp program.
#[derive(Debug)]
pub struct Program {
    instructions: Vec<SockFilter>,
}

/// Why the filter could not be installed. Either way the workload must not start.
#[derive(Debug, thiserror::Error)]
pub enum SeccompError {
    #[error(
        "cannot set no_new_privs; the kernel must support prctl(PR_SET_NO_NEW_PRIVS) (Linux 3.5+)"
    )]
    NoNewPrivs(#[source] io::Error),
    #[error(
        "cannot load the seccomp filter; the kernel must be built with CONFIG_SECCOMP_FILTER \
         (run `cordon doctor`)"
    )]
    Load(#[source] io::Error),
}

/// The sandbox's filter, compiled on first use and shared afterwards ([`Program::install`] itself
/// does not allocate).
pub fn program() -> &'static Program {
    static PROGRAM: OnceLock<Program> = OnceLock::new();
    PROGRAM.get_or_init(|| Program {
        instructions: policy::compile(),
    })
}

impl Program {
    /// The BPF instructions, exactly as handed to the kernel.
    pub fn instructions(&self) -> &[SockFilter] {
        &self.instructions
    }

    /// What the filter decides for a call with this architecture (`AUDIT_ARCH_*`), number and
    /// arguments, computed by interpreting [`Program::instructions`].
    pub fn evaluate(&self, arch: u32, nr: u32, args: [u64; 6]) -> Action {
        bpf::evaluate(&self.instructions, arch, nr, args)
    }

    /// Sets `no_new_privs` and loads the filter into the calling process (all its threads). Does
    /// not allocate, so it is safe in a child forked from a multi-threaded parent; the filter stays
    /// for every process the caller executes.
    pub fn install(&self) -> Result<(), SeccompError> {
        filter::set_no_new_privs().map_err(SeccompError::NoNewPrivs)?;
        filter::load(&self.instructions).map_err(SeccompError::Load)
    }
}

#[cfg(test)]
mod tests;
