//! Resource guardrails (DESIGN §5 `[limits]`): while a sandboxed step (or its setup hook) runs,
//! the engine samples the disk usage of the workspace filesystem and of the session's tmpfs
//! (`/tmp`), and the session's memory against its cap — when the step starts, every
//! [`ResourceGuard::every`] while a command or tool call runs, and when its last command has
//! ended. [`Monitor`] turns the
//! samples of one step attempt into `resources.sample` / `resources.warning` events and decides
//! when the disk is exhausted: the engine then stops the running command and fails the step with
//! `disk exhausted: X% used (limit Y%)`. Each attempt gets a fresh monitor, so a stale sample
//! never fails a later step. Memory only warns: the cap itself OOM-kills.

mod guarded;
mod monitor;

use std::path::Path;
use std::rc::Rc;
use std::time::Duration;

pub use guarded::GuardedSession;
pub use monitor::{Memory, Monitor, Reading};

/// How often a running command is sampled unless the guard says otherwise.
pub const SAMPLE_EVERY: Duration = Duration::from_secs(1);

/// The operator's disk thresholds, in percent; 0 disables a threshold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DiskLimits {
    pub warn: u8,
    pub abort: u8,
}

/// Every `[limits]` threshold, in percent; 0 disables one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    pub disk: DiskLimits,
    /// Percent of the session's memory cap (never sampled without a cap).
    pub mem_warn: u8,
}

/// Where a sample stands against the thresholds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Level {
    Normal,
    Warn,
    Abort,
}

/// Which filesystem a disk sample is of.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Filesystem {
    /// The filesystem holding the workspace (shared with the host).
    Workspace,
    /// The session's private tmpfs: `/tmp`, `/dev/shm` and `HOME`, capped by
    /// `isolation.tmp_size`.
    Tmp,
}

impl Filesystem {
    fn describe(self) -> &'static str {
        match self {
            Filesystem::Workspace => "the workspace filesystem",
            Filesystem::Tmp => "the sandbox's /tmp (`isolation.tmp_size`)",
        }
    }

    fn remedy(self) -> &'static str {
        match self {
            Filesystem::Workspace => "free space",
            Filesystem::Tmp => "raise `isolation.tmp_size`, delete files in /tmp",
        }
    }
}

impl DiskLimits {
    pub fn level(&self, percent: u8) -> Level {
        if self.abort != 0 && percent >= self.abort {
            Level::Abort
        } else if self.warn != 0 && percent >= self.warn {
            Level::Warn
        } else {
            Level::Normal
        }
    }

    /// The step's failure reason for a sample at `percent` (past `abort`).
    pub fn exhausted(&self, percent: u8) -> String {
        format!("disk exhausted: {percent}% used (limit {}%)", self.abort)
    }

    /// The warning's text for a sample of `fs` at `percent`, past `warn`.
    pub fn warning(&self, percent: u8, fs: Filesystem) -> String {
        let abort = match self.abort {
            0 => String::new(),
            abort => format!(", the step fails at {abort}%"),
        };
        format!(
            "{} is {percent}% full (warning at {}%{abort}); {} or raise `[limits]` in the \
             operator policy",
            fs.describe(),
            self.warn,
            fs.remedy(),
        )
    }

    /// The warning's text for a sample of `fs` at `percent`, past `abort`: the step is stopped.
    pub fn stopping(&self, percent: u8, fs: Filesystem) -> String {
        format!(
            "{} is {percent}% full, past the {}% limit: the step is stopped and fails; {} or \
             raise `[limits] disk_abort` in the operator policy",
            fs.describe(),
            self.abort,
            fs.remedy(),
        )
    }
}

/// Takes a disk sample (percent used) of the filesystem holding a path.
pub type DiskSampler = Rc<dyn Fn(&Path) -> std::io::Result<u8>>;

/// The guard of a run: its thresholds, how often a running command is sampled, and how the
/// disk is sampled.
#[derive(Clone)]
pub struct ResourceGuard {
    pub limits: Limits,
    pub every: Duration,
    pub sample: DiskSampler,
}

impl ResourceGuard {
    /// A guard that samples the real filesystems with `statvfs` every [`SAMPLE_EVERY`].
    pub fn new(limits: Limits) -> ResourceGuard {
        ResourceGuard {
            limits,
            every: SAMPLE_EVERY,
            sample: Rc::new(used_percent),
        }
    }
}

/// Percent of the filesystem holding `path` in use, as `df` counts it: used blocks over the
/// blocks an unprivileged user could use (the root reserve left out), rounded up.
pub fn used_percent(path: &Path) -> std::io::Result<u8> {
    let stats = rustix::fs::statvfs(path).map_err(std::io::Error::from)?;
    Ok(percent(stats.f_blocks, stats.f_bfree, stats.f_bavail))
}

/// `df`'s formula on block counts: `used / (used + available)`, rounded up, at most 100.
fn percent(blocks: u64, free: u64, available: u64) -> u8 {
    let used = blocks.saturating_sub(free);
    let total = used.saturating_add(available);
    if total == 0 {
        return 0;
    }
    let pct = (u128::from(used) * 100).div_ceil(u128::from(total));
    u8::try_from(pct.min(100)).unwrap_or(100)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(limits: (u8, u8), percent: u8, expected: Level) {
        let limits = DiskLimits {
            warn: limits.0,
            abort: limits.1,
        };
        assert_eq!(limits.level(percent), expected, "{limits:?} at {percent}%");
    }

    #[test]
    fn samples_are_judged_against_warn_and_abort_and_zero_disables() {
        for (limits, pct, expected) in [
            ((85, 95), 10, Level::Normal),
            ((85, 95), 84, Level::Normal),
            ((85, 95), 85, Level::Warn),
            ((85, 95), 94, Level::Warn),
            ((85, 95), 95, Level::Abort),
            ((85, 95), 100, Level::Abort),
            ((0, 95), 90, Level::Normal),
            ((0, 95), 96, Level::Abort),
            ((85, 0), 100, Level::Warn),
            ((0, 0), 100, Level::Normal),
        ] {
            check(limits, pct, expected);
        }
    }

    #[test]
    fn usage_is_counted_like_df_without_the_root_reserve() {
        for (blocks, free, available, expected) in [
            (100, 100, 100, 0),
            (100, 50, 50, 50),
            (100, 10, 5, 95),
            (100, 10, 0, 100),
            (1000, 1, 0, 100),
            (3, 2, 2, 34),
            (0, 0, 0, 0),
        ] {
            assert_eq!(
                percent(blocks, free, available),
                expected,
                "{blocks} {free} {available}"
            );
        }
    }

    #[test]
    fn the_failure_reason_names_the_usage_and_the_limit() {
        let limits = DiskLimits {
            warn: 85,
            abort: 95,
        };
        assert_eq!(limits.exhausted(97), "disk exhausted: 97% used (limit 95%)");
    }

    #[test]
    fn warnings_name_the_filesystem_and_the_remedy() {
        let limits = DiskLimits {
            warn: 85,
            abort: 95,
        };
        for (text, expected) in [
            (
                limits.warning(90, Filesystem::Workspace),
                "the workspace filesystem is 90% full (warning at 85%, the step fails at 95%); \
                 free space or raise `[limits]` in the operator policy",
            ),
            (
                limits.warning(86, Filesystem::Tmp),
                "the sandbox's /tmp (`isolation.tmp_size`) is 86% full (warning at 85%, the \
                 step fails at 95%); raise `isolation.tmp_size`, delete files in /tmp or raise \
                 `[limits]` in the operator policy",
            ),
            (
                limits.stopping(100, Filesystem::Tmp),
                "the sandbox's /tmp (`isolation.tmp_size`) is 100% full, past the 95% limit: \
                 the step is stopped and fails; raise `isolation.tmp_size`, delete files in \
                 /tmp or raise `[limits] disk_abort` in the operator policy",
            ),
        ] {
            assert_eq!(text, expected);
        }
    }
}
