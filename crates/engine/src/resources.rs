//! Resource guardrails (DESIGN §5 `[limits]`): the disk usage of the workspace filesystem,
//! sampled when a sandboxed step starts and when it ends. Each sample is a `resources.sample`
//! event; crossing `disk_warn` adds one `resources.warning` per step attempt; a step that ends
//! with the disk past `disk_abort` fails with `disk exhausted: X% used (limit Y%)`. Samples are
//! always taken fresh for the step being judged, so a stale sample never fails a later step.

use std::path::Path;

/// The operator's disk thresholds, in percent; 0 disables a threshold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DiskLimits {
    pub warn: u8,
    pub abort: u8,
}

/// Where a sample stands against the thresholds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Level {
    Normal,
    Warn,
    Abort,
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

    /// The warning's text for a sample at `percent`.
    pub fn warning(&self, percent: u8) -> String {
        format!(
            "the workspace filesystem is {percent}% full (warning at {}%, the step fails at {}%); \
             free space or raise `[limits]` in the operator policy",
            self.warn, self.abort
        )
    }
}

/// Takes a disk sample (percent used) of the filesystem holding a path.
pub type DiskSampler = Box<dyn Fn(&Path) -> std::io::Result<u8>>;

/// The disk guard of a run: its thresholds and how it samples.
pub struct DiskGuard {
    pub limits: DiskLimits,
    pub sample: DiskSampler,
}

impl DiskGuard {
    /// A guard that samples the real filesystem with `statvfs`.
    pub fn new(limits: DiskLimits) -> DiskGuard {
        DiskGuard {
            limits,
            sample: Box::new(used_percent),
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
}
