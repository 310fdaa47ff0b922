//! The cgroup v2 driver: a delegated subtree (a directory cordon may write, such as a systemd
//! scope started with `Delegate=yes`). v2 forbids processes in a group that distributes
//! controllers to children ("no internal processes"), so cordon first moves itself into a leaf of
//! its own, then enables the controllers and creates one child per session beside that leaf.

use std::path::PathBuf;

use super::caps::CPU_PERIOD_US;
use super::{
    Cap, Caps, Cgroup, CgroupDriver, CgroupError, Cleanup, Controller, DELEGATE_REMEDY, GroupName,
    Version, cleanup_under, read_control, write_control,
};

/// Session groups are created as children of `base`, the delegated cgroup cordon runs in.
#[derive(Debug, Clone)]
pub struct V2 {
    base: PathBuf,
}

impl V2 {
    /// A driver for the delegated directory `base` (on a host, cordon's own cgroup, e.g.
    /// `/sys/fs/cgroup/user.slice/…/run-u12.scope`).
    pub fn new(base: PathBuf) -> V2 {
        V2 { base }
    }

    /// Moves this process into its own leaf under `base` when `base` has processes (it always
    /// does while cordon runs in it), so that `base` may hand controllers to its children.
    fn move_into_leaf(&self) -> Result<(), CgroupError> {
        let procs = read_control(&self.base.join("cgroup.procs"))?;
        if procs.trim().is_empty() {
            return Ok(());
        }
        let leaf = self.base.join(GroupName::host_leaf().to_string());
        match std::fs::create_dir(&leaf) {
            Ok(()) => {}
            Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(err) => return Err(CgroupError::io("create cgroup", &leaf)(err)),
        }
        write_control(&leaf.join("cgroup.procs"), &std::process::id().to_string())
    }

    /// Enables the controllers the caps need for the children of `base`. `EBUSY` here means
    /// processes other than cordon live in `base` itself.
    fn enable_controllers(&self, caps: &Caps) -> Result<(), CgroupError> {
        let wanted: Vec<String> = caps
            .controllers()
            .iter()
            .map(|c| format!("+{}", c.as_str()))
            .collect();
        let path = self.base.join("cgroup.subtree_control");
        std::fs::write(&path, wanted.join(" ")).map_err(|source| {
            if source.raw_os_error() == Some(libc::EBUSY) {
                CgroupError::NotEnforceable {
                    cap: caps.requested().first().copied().unwrap_or(Cap::Memory),
                    reason: format!(
                        "other processes share cordon's cgroup `{}`",
                        self.base.display()
                    ),
                    remedy: DELEGATE_REMEDY.to_owned(),
                }
            } else {
                CgroupError::io("write", &path)(source)
            }
        })
    }
}

impl CgroupDriver for V2 {
    fn version(&self) -> Option<Version> {
        Some(Version::V2)
    }

    fn describe(&self) -> String {
        format!("cgroup v2: delegated subtree {}", self.base.display())
    }

    fn check(&self, caps: &Caps) -> Result<(), CgroupError> {
        let Some(first) = caps.requested().first().copied() else {
            return Ok(());
        };
        let writable = ["", "cgroup.procs", "cgroup.subtree_control"]
            .iter()
            .all(|file| crate::sys::probe::writable(&self.base.join(file)));
        if !writable {
            return Err(CgroupError::NotEnforceable {
                cap: first,
                reason: format!(
                    "cordon's cgroup `{}` is not delegated to uid {} (not writable)",
                    self.base.display(),
                    crate::sys::probe::effective_uid()
                ),
                remedy: DELEGATE_REMEDY.to_owned(),
            });
        }
        let available = read_control(&self.base.join("cgroup.controllers")).unwrap_or_default();
        for cap in caps.requested() {
            let controller = cap.controller().as_str();
            if !available.split_whitespace().any(|c| c == controller) {
                return Err(CgroupError::NotEnforceable {
                    cap,
                    reason: format!(
                        "the {controller} controller is not available in `{}`",
                        self.base.display()
                    ),
                    remedy: DELEGATE_REMEDY.to_owned(),
                });
            }
        }
        Ok(())
    }

    fn create(&self, label: &str, caps: &Caps) -> Result<Cgroup, CgroupError> {
        let name = GroupName::for_this_process(label)?;
        if caps.is_empty() {
            return Err(CgroupError::NoCaps);
        }
        caps.validate()?;
        self.check(caps)?;
        self.move_into_leaf()?;
        self.enable_controllers(caps)?;
        let dir = self.base.join(name.to_string());
        std::fs::create_dir(&dir).map_err(CgroupError::io("create cgroup", &dir))?;
        let group = Cgroup::new(Version::V2, vec![(caps.controllers(), dir.clone())], *caps);
        if let Err(err) = write_limits(&dir, caps) {
            let _ = group.remove();
            return Err(err);
        }
        Ok(group)
    }

    fn cleanup_stale(&self) -> Result<Cleanup, CgroupError> {
        let mut cleanup = Cleanup::default();
        cleanup_under(&self.base, &mut cleanup)?;
        Ok(cleanup)
    }
}

/// Writes the requested limits. `memory.swap.max` = 0 makes the memory cap include swap; the file
/// is absent without swap accounting, and then the failed write is ignored (there is no swap to
/// limit through this group).
fn write_limits(dir: &std::path::Path, caps: &Caps) -> Result<(), CgroupError> {
    for controller in caps.controllers() {
        match controller {
            Controller::Memory => {
                let Some(memory) = caps.memory else { continue };
                write_control(&dir.join("memory.max"), &memory.to_string())?;
                let swap = dir.join("memory.swap.max");
                if let Err(err) = write_control(&swap, "0")
                    && swap.exists()
                {
                    return Err(err);
                }
            }
            Controller::Pids => {
                let Some(pids) = caps.pids else { continue };
                write_control(&dir.join("pids.max"), &pids.to_string())?;
            }
            Controller::Cpu => {
                let Some(quota) = caps.cpu_quota_us() else {
                    continue;
                };
                write_control(&dir.join("cpu.max"), &format!("{quota} {CPU_PERIOD_US}"))?;
            }
        }
    }
    Ok(())
}
