//! [`Monitor`]: the guardrail's state for one step attempt — which samples were logged, which
//! thresholds were crossed, whether the disk is exhausted — as a pure function from readings to
//! events, so its rules are tested as data.

use std::time::{Duration, Instant};

use cordon_protocol::Event;

use super::{Filesystem, Level, Limits};

/// A logged sample is repeated at least this often while nothing changes, so a reader sees the
/// guard is alive.
const HEARTBEAT: Duration = Duration::from_secs(30);

/// Memory changes smaller than this (or than 1% of the cap, if larger) do not log a new sample.
const MEMORY_GRAIN: u64 = 1 << 20;

pub use crate::executor::Memory;

/// One sample: each part `None` when it could not be taken (or does not exist: no memory cap,
/// no session yet).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Reading {
    /// Percent used of the workspace filesystem.
    pub workspace: Option<u8>,
    /// Percent used of the session's tmpfs.
    pub tmp: Option<u8>,
    pub memory: Option<Memory>,
}

impl Reading {
    /// The fuller of the two filesystems (the workspace on a tie).
    pub fn disk(&self) -> Option<(u8, Filesystem)> {
        match (self.workspace, self.tmp) {
            (Some(w), Some(t)) if t > w => Some((t, Filesystem::Tmp)),
            (Some(w), _) => Some((w, Filesystem::Workspace)),
            (None, Some(t)) => Some((t, Filesystem::Tmp)),
            (None, None) => None,
        }
    }
}

/// What a logged sample is compared by: memory in grains, disk in percent.
type Logged = (Option<u64>, Option<u8>);

/// The guardrail of one step attempt.
#[derive(Clone, Debug)]
pub struct Monitor {
    limits: Limits,
    /// The last sample logged, and when.
    logged: Option<(Logged, Instant)>,
    /// The workspace filesystem's first sample of the attempt: what it inherited.
    baseline: Option<u8>,
    disk_warned: bool,
    memory_warned: bool,
    exhausted: Option<String>,
}

impl Monitor {
    pub fn new(limits: Limits) -> Monitor {
        Monitor {
            limits,
            logged: None,
            baseline: None,
            disk_warned: false,
            memory_warned: false,
            exhausted: None,
        }
    }

    /// The step's failure reason once a sample of this attempt was past `disk_abort`.
    pub fn exhausted(&self) -> Option<&str> {
        self.exhausted.as_deref()
    }

    /// The events `reading` (taken at `now`) adds: a `resources.sample` when a value changed
    /// since the last one logged (or [`HEARTBEAT`] passed), and one `resources.warning` the
    /// first time this attempt crosses `disk_warn`, `disk_abort` and `mem_warn` each.
    ///
    /// A workspace filesystem already past `disk_abort` when the attempt started is what an
    /// earlier step left: the attempt fails only if it fills it further (it may be the step
    /// that frees space), and is warned meanwhile.
    pub fn observe(&mut self, reading: &Reading, now: Instant) -> Vec<Event> {
        let mut events = Vec::new();
        let disk = reading.disk();
        if disk.is_none() && reading.memory.is_none() {
            return events;
        }
        let key = (
            reading
                .memory
                .map(|m| m.used / MEMORY_GRAIN.max(m.cap / 100)),
            disk.map(|(percent, _)| percent),
        );
        let due = match self.logged {
            None => true,
            Some((last, at)) => last != key || now.saturating_duration_since(at) >= HEARTBEAT,
        };
        if due {
            self.logged = Some((key, now));
            events.push(Event::ResourcesSample {
                memory_bytes: reading.memory.map(|m| m.used),
                disk_percent: disk.map(|(percent, _)| percent),
            });
        }
        let disk_limits = self.limits.disk;
        if let Some(workspace) = reading.workspace {
            self.baseline.get_or_insert(workspace);
        }
        if let Some((percent, fs)) = disk {
            let inherited = fs == Filesystem::Workspace
                && self
                    .baseline
                    .is_some_and(|b| disk_limits.level(b) == Level::Abort && percent <= b);
            let level = match disk_limits.level(percent) {
                Level::Abort if inherited => Level::Warn,
                level => level,
            };
            match level {
                Level::Abort if self.exhausted.is_none() => {
                    self.exhausted = Some(disk_limits.exhausted(percent));
                    self.disk_warned = true;
                    events.push(Event::ResourcesWarning {
                        message: disk_limits.stopping(percent, fs),
                    });
                }
                Level::Warn if !self.disk_warned => {
                    self.disk_warned = true;
                    events.push(Event::ResourcesWarning {
                        message: disk_limits.warning(percent, fs),
                    });
                }
                Level::Abort | Level::Warn | Level::Normal => {}
            }
        }
        let mem_warn = self.limits.mem_warn;
        if let Some(memory) = reading.memory
            && mem_warn != 0
            && memory.percent() >= u64::from(mem_warn)
            && !self.memory_warned
        {
            self.memory_warned = true;
            events.push(Event::ResourcesWarning {
                message: memory_warning(memory, mem_warn),
            });
        }
        events
    }
}

/// The `mem_warn` warning: usage, cap, threshold and the remedy.
fn memory_warning(memory: Memory, mem_warn: u8) -> String {
    format!(
        "the sandbox uses {} of its {} memory cap ({}%, warning at {mem_warn}%); at the cap the \
         kernel kills processes (out of memory): raise `isolation.memory` (`--memory` for \
         `cordon exec`) or `[limits] mem_warn` in the operator policy",
        mib(memory.used),
        mib(memory.cap),
        memory.percent(),
    )
}

/// Bytes in MiB, one decimal below 10 MiB.
pub fn mib(bytes: u64) -> String {
    let mib = bytes as f64 / f64::from(1 << 20);
    if mib < 10.0 {
        format!("{mib:.1} MiB")
    } else {
        format!("{mib:.0} MiB")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::DiskLimits;

    const LIMITS: Limits = Limits {
        disk: DiskLimits {
            warn: 85,
            abort: 95,
        },
        mem_warn: 90,
    };

    fn disk(workspace: Option<u8>, tmp: Option<u8>) -> Reading {
        Reading {
            workspace,
            tmp,
            memory: None,
        }
    }

    fn memory(used_mib: u64, cap_mib: u64) -> Reading {
        Reading {
            workspace: Some(10),
            tmp: None,
            memory: Some(Memory {
                used: used_mib << 20,
                cap: cap_mib << 20,
            }),
        }
    }

    /// Feeds `readings` (with the seconds since the first) to a fresh monitor; returns each
    /// event in short form (`sample m=MiB d=%`, `warn …`) and the exhausted reason.
    fn check(readings: &[(u64, Reading)], expected: &[&str], exhausted: Option<&str>) {
        let start = Instant::now();
        let mut monitor = Monitor::new(LIMITS);
        let mut seen = Vec::new();
        for (secs, reading) in readings {
            for event in monitor.observe(reading, start + Duration::from_secs(*secs)) {
                seen.push(match event {
                    Event::ResourcesSample {
                        memory_bytes,
                        disk_percent,
                    } => format!(
                        "sample m={} d={}",
                        memory_bytes.map_or("-".to_owned(), |b| (b >> 20).to_string()),
                        disk_percent.map_or("-".to_owned(), |p| p.to_string())
                    ),
                    Event::ResourcesWarning { message } => {
                        format!("warn {}", message.split(" is ").next().unwrap_or(""))
                    }
                    other => panic!("unexpected {other:?}"),
                });
            }
        }
        assert_eq!(seen, expected, "{readings:?}");
        assert_eq!(monitor.exhausted(), exhausted, "{readings:?}");
    }

    #[test]
    fn samples_are_logged_when_a_value_changes_or_a_heartbeat_passed() {
        check(
            &[
                (0, disk(Some(40), None)),
                (1, disk(Some(40), None)),
                (2, disk(Some(41), None)),
                (20, disk(Some(41), None)),
                (32, disk(Some(41), None)),
            ],
            &["sample m=- d=40", "sample m=- d=41", "sample m=- d=41"],
            None,
        );
        check(&[(0, Reading::default())], &[], None);
    }

    #[test]
    fn the_fuller_filesystem_is_judged_and_named() {
        check(
            &[(0, disk(Some(40), Some(86))), (1, disk(Some(40), Some(97)))],
            &[
                "sample m=- d=86",
                "warn the sandbox's /tmp (`isolation.tmp_size`)",
                "sample m=- d=97",
                "warn the sandbox's /tmp (`isolation.tmp_size`)",
            ],
            Some("disk exhausted: 97% used (limit 95%)"),
        );
        check(
            &[(0, disk(Some(50), None)), (1, disk(Some(96), Some(50)))],
            &[
                "sample m=- d=50",
                "sample m=- d=96",
                "warn the workspace filesystem",
            ],
            Some("disk exhausted: 96% used (limit 95%)"),
        );
        check(
            &[(0, disk(None, Some(95)))],
            &[
                "sample m=- d=95",
                "warn the sandbox's /tmp (`isolation.tmp_size`)",
            ],
            Some("disk exhausted: 95% used (limit 95%)"),
        );
    }

    #[test]
    fn each_threshold_warns_once_per_attempt_and_the_first_exhaustion_is_kept() {
        check(
            &[
                (0, disk(Some(86), None)),
                (1, disk(Some(50), None)),
                (2, disk(Some(87), None)),
                (3, disk(Some(99), None)),
                (4, disk(Some(96), None)),
            ],
            &[
                "sample m=- d=86",
                "warn the workspace filesystem",
                "sample m=- d=50",
                "sample m=- d=87",
                "sample m=- d=99",
                "warn the workspace filesystem",
                "sample m=- d=96",
            ],
            Some("disk exhausted: 99% used (limit 95%)"),
        );
    }

    #[test]
    fn a_workspace_already_past_disk_abort_fails_the_attempt_only_if_it_fills_further() {
        check(
            &[
                (0, disk(Some(97), None)),
                (1, disk(Some(96), None)),
                (2, disk(Some(97), None)),
            ],
            &[
                "sample m=- d=97",
                "warn the workspace filesystem",
                "sample m=- d=96",
                "sample m=- d=97",
            ],
            None,
        );
        check(
            &[(0, disk(Some(97), None)), (1, disk(Some(98), None))],
            &[
                "sample m=- d=97",
                "warn the workspace filesystem",
                "sample m=- d=98",
                "warn the workspace filesystem",
            ],
            Some("disk exhausted: 98% used (limit 95%)"),
        );
    }

    #[test]
    fn memory_warns_past_mem_warn_of_the_cap_and_never_exhausts() {
        check(
            &[
                (0, memory(100, 512)),
                (1, memory(100, 512)),
                (2, memory(470, 512)),
                (3, memory(512, 512)),
            ],
            &[
                "sample m=100 d=10",
                "sample m=470 d=10",
                "warn the sandbox uses 470 MiB of its 512 MiB memory cap (91%, warning at 90%); \
                 at the cap the kernel kills processes (out of memory): raise `isolation.memory` \
                 (`--memory` for `cordon exec`) or `[limits] mem_warn` in the operator policy",
                "sample m=512 d=10",
            ],
            None,
        );
    }

    #[test]
    fn small_memory_changes_do_not_log_samples() {
        let reading = |used: u64| Reading {
            memory: Some(Memory { used, cap: 1 << 30 }),
            ..Reading::default()
        };
        // 1% of 1 GiB is about 10 MiB.
        check(
            &[
                (0, reading(100 << 20)),
                (1, reading((100 << 20) + 4096)),
                (2, reading(130 << 20)),
            ],
            &["sample m=100 d=-", "sample m=130 d=-"],
            None,
        );
    }
}
