//! Watching a running command: [`Watch`] is a callback a session calls at a fixed interval while a
//! command runs (the engine samples memory and disk usage with it), and which may ask to stop the
//! command ([`Tick::Stop`]); [`MemoryUsage`] and [`Session::tmp_path`] are what it samples.

use std::path::PathBuf;
use std::time::Duration;

use super::Session;

/// A periodic callback for [`Session::exec_watched`]. It is first called one interval after the
/// command started, then every interval until the command ends, from the thread running the
/// command (so it should be quick: it delays reading the command's output).
pub struct Watch<'w> {
    pub every: Duration,
    pub tick: &'w mut dyn FnMut(&Session) -> Tick,
}

/// What a watch answers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Tick {
    Continue,
    /// Kill the command and every process below it, as a timeout does; the outcome's `stopped`
    /// carries `reason`.
    Stop {
        reason: String,
    },
}

/// A session's memory use against its cap.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemoryUsage {
    pub used: u64,
    pub cap: u64,
}

impl Session {
    /// The memory the session's processes use now, with its cap; `None` without a memory cap
    /// (nothing to measure against: a session is only put in a cgroup when a cap is requested)
    /// or when the group cannot be read.
    pub fn memory_usage(&self) -> Option<MemoryUsage> {
        let group = self.cgroup.as_ref()?;
        let cap = group.caps().memory?;
        let used = group.memory_usage().ok()??;
        Some(MemoryUsage { used, cap })
    }

    /// The host path of the session's private tmpfs (`/tmp`, which also holds `/dev/shm` and
    /// `HOME`), for sampling its usage with `statvfs`: init's root seen through `/proc`. Looking
    /// through it needs ptrace-read access to init, which the host process has whether it runs
    /// as root (capabilities over every user namespace it made) or unprivileged (it owns the
    /// session's user namespace). The host only reads filesystem statistics through it, never
    /// file contents; and the sandbox cannot redirect it, since its `/tmp` is a mount point it
    /// can neither unmount nor rename (the mount family is refused by seccomp).
    pub fn tmp_path(&self) -> PathBuf {
        PathBuf::from(format!("/proc/{}/root/tmp", self.init.pid))
    }
}
