//! The cgroup v1 driver: one hierarchy per controller (`memory`, `pids`, `cpu`), each session group
//! created under the directory cordon itself is in, so the limits of whoever started cordon still
//! apply on top. v1 has no safe delegation, so this works as root only.

use std::path::{Path, PathBuf};

use super::caps::CPU_PERIOD_US;
use super::{
    Cap, Caps, Cgroup, CgroupDriver, CgroupError, Cleanup, Controller, GroupName, V1_REMEDY,
    Version, cleanup_under, write_control,
};

/// Session groups are created directly under the parent directory of each controller.
#[derive(Debug, Clone)]
pub struct V1 {
    parents: Vec<(Controller, PathBuf)>,
}

impl V1 {
    /// A driver creating groups under the given per-controller directories (on a host: the
    /// directories cordon is in, e.g. `/sys/fs/cgroup/memory/user.slice`).
    pub fn new(parents: Vec<(Controller, PathBuf)>) -> V1 {
        V1 { parents }
    }

    /// A driver rooted at `root` holding one directory per controller (`root/memory`,
    /// `root/pids`, `root/cpu`), as `/sys/fs/cgroup` does on a v1 host.
    pub fn under(root: &Path) -> V1 {
        V1::new(
            Controller::ALL
                .into_iter()
                .map(|c| (c, root.join(c.as_str())))
                .collect(),
        )
    }

    fn parent(&self, controller: Controller) -> Option<&Path> {
        self.parents
            .iter()
            .find(|(c, _)| *c == controller)
            .map(|(_, p)| p.as_path())
    }
}

impl CgroupDriver for V1 {
    fn version(&self) -> Option<Version> {
        Some(Version::V1)
    }

    fn describe(&self) -> String {
        let parts: Vec<String> = self
            .parents
            .iter()
            .map(|(c, p)| format!("{} at {}", c.as_str(), p.display()))
            .collect();
        format!("cgroup v1: {}", parts.join(", "))
    }

    fn check(&self, caps: &Caps) -> Result<(), CgroupError> {
        for cap in caps.requested() {
            let controller = cap.controller();
            let Some(parent) = self.parent(controller) else {
                return Err(not_enforceable(
                    cap,
                    format!(
                        "no cgroup v1 hierarchy has the {} controller",
                        controller.as_str()
                    ),
                ));
            };
            if !crate::sys::probe::writable(parent) {
                return Err(not_enforceable(
                    cap,
                    format!(
                        "`{}` is not writable by uid {}",
                        parent.display(),
                        crate::sys::probe::effective_uid()
                    ),
                ));
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
        let mut dirs = Vec::new();
        let mut controllers = caps.controllers();
        controllers.dedup();
        for controller in controllers {
            let Some(parent) = self.parent(controller) else {
                continue;
            };
            let dir = parent.join(name.to_string());
            std::fs::create_dir(&dir).map_err(CgroupError::io("create cgroup", &dir))?;
            dirs.push((vec![controller], dir));
        }
        // The handle exists before limits are written so a failed write removes the groups.
        let group = Cgroup::new(Version::V1, dirs, *caps);
        if let Err(err) = write_limits(&group, caps) {
            let _ = group.remove();
            return Err(err);
        }
        Ok(group)
    }

    fn cleanup_stale(&self) -> Result<Cleanup, CgroupError> {
        let mut cleanup = Cleanup::default();
        for (_, parent) in &self.parents {
            cleanup_under(parent, &mut cleanup)?;
        }
        Ok(cleanup)
    }
}

/// Writes each requested limit into the directory of its controller. A missing control file is an
/// error (the cap would not hold), except `memory.memsw.limit_in_bytes`, which exists only with
/// swap accounting; without it the kernel cannot limit swap, and the memory cap limits RAM.
fn write_limits(group: &Cgroup, caps: &Caps) -> Result<(), CgroupError> {
    for (controllers, dir) in group.entries() {
        for controller in controllers {
            match controller {
                Controller::Memory => {
                    let Some(memory) = caps.memory else { continue };
                    // memory+swap may never be below memory, so memory goes first; both equal
                    // means the cap includes swap.
                    write_control(&dir.join("memory.limit_in_bytes"), &memory.to_string())?;
                    let memsw = dir.join("memory.memsw.limit_in_bytes");
                    if memsw.exists() {
                        write_control(&memsw, &memory.to_string())?;
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
                    write_control(&dir.join("cpu.cfs_period_us"), &CPU_PERIOD_US.to_string())?;
                    write_control(&dir.join("cpu.cfs_quota_us"), &quota.to_string())?;
                }
            }
        }
    }
    Ok(())
}

fn not_enforceable(cap: Cap, reason: String) -> CgroupError {
    CgroupError::NotEnforceable {
        cap,
        reason,
        remedy: V1_REMEDY.to_owned(),
    }
}
