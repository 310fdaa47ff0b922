//! Resource caps (memory, pids, CPU) through cgroups: one [`CgroupDriver`] trait with a v2 driver
//! (a delegated subtree) and a v1 driver (one hierarchy per controller, as root), both rooted at a
//! directory the caller chooses so tests can point them at a fake cgroupfs.
//!
//! Caps apply only when requested. A requested cap that cannot be enforced is an error naming the
//! cap and the remedy — never a silent run without it. Groups are named after the cordon process
//! that made them (pid and start time), so the leftovers of a killed run are found and removed by
//! [`CgroupDriver::cleanup_stale`] at the next start.

mod caps;
mod group;
mod host;
mod name;
mod v1;
mod v2;

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

pub use caps::{Cap, Caps, SizeError, format_size, parse_size};
pub use group::Cgroup;
pub use host::{HostCgroups, Placement};
pub use name::GroupName;
pub use v1::V1;
pub use v2::V2;

/// The remedy for a host whose cgroups cordon may not write.
pub const DELEGATE_REMEDY: &str =
    "run cordon in a delegated cgroup: `systemd-run --user --scope -p Delegate=yes cordon …`";

/// The remedy for an unprivileged user on a cgroup v1 host, where nothing can be delegated.
pub const V1_REMEDY: &str = "cgroup v1 caps need root: run cordon as root, or boot with cgroup v2 \
    (`systemd.unified_cgroup_hierarchy=1`) and run cordon in a delegated cgroup: \
    `systemd-run --user --scope -p Delegate=yes cordon …`";

/// A cgroup controller cordon uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Controller {
    Memory,
    Pids,
    Cpu,
}

impl Controller {
    pub const ALL: [Controller; 3] = [Controller::Memory, Controller::Pids, Controller::Cpu];

    /// The kernel's name for the controller.
    pub fn as_str(self) -> &'static str {
        match self {
            Controller::Memory => "memory",
            Controller::Pids => "pids",
            Controller::Cpu => "cpu",
        }
    }
}

/// Which cgroup interface a driver speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    V1,
    V2,
}

/// Errors of the cgroup drivers.
#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    /// A requested cap this host will not let cordon enforce.
    #[error("the {cap} cap cannot be enforced: {reason}; {remedy}")]
    NotEnforceable {
        cap: Cap,
        reason: String,
        remedy: String,
    },
    /// A cap value out of range.
    #[error("invalid {cap} cap: {reason}")]
    InvalidCap { cap: Cap, reason: String },
    /// `create` without any cap: caps apply only when requested, so there is nothing to enforce.
    #[error("no cap was requested; create a cgroup only for a memory, pids or cpus cap")]
    NoCaps,
    /// A group label that is not a safe directory name.
    #[error(
        "invalid cgroup label `{label}`: use 1 to 64 characters from `a-z`, `0-9`, `_` and `-`"
    )]
    InvalidLabel { label: String },
    /// A cgroupfs operation that failed.
    #[error("cannot {action} `{}`: {source}", path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

impl CgroupError {
    pub(crate) fn io(action: &'static str, path: &Path) -> impl FnOnce(io::Error) -> CgroupError {
        let path = path.to_path_buf();
        move |source| CgroupError::Io {
            action,
            path,
            source,
        }
    }
}

/// What [`CgroupDriver::cleanup_stale`] did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Cleanup {
    /// Groups of dead cordon processes that were removed.
    pub removed: Vec<PathBuf>,
    /// Groups of dead cordon processes that could not be removed yet (still busy), left for the
    /// next start.
    pub left: Vec<(PathBuf, String)>,
}

/// One way of enforcing [`Caps`]: creates per-session groups, checks enforceability and removes
/// leftovers. Object safe, so the host's driver is chosen at run time ([`host_driver`]).
pub trait CgroupDriver: fmt::Debug + Send + Sync {
    fn version(&self) -> Option<Version>;

    /// Where the driver works, for `cordon doctor`.
    fn describe(&self) -> String;

    /// Whether every cap `caps` requests can be enforced here; the error names the first cap that
    /// cannot and the remedy. Empty caps always pass.
    fn check(&self, caps: &Caps) -> Result<(), CgroupError>;

    /// Creates the group for one session, named after this process and `label` (e.g. the session
    /// id), with the limits of `caps` written. Checks and validates first.
    fn create(&self, label: &str, caps: &Caps) -> Result<Cgroup, CgroupError>;

    /// Removes the groups of cordon processes that are no longer alive (killing what is left in
    /// them first). Call once at start, before creating groups.
    fn cleanup_stale(&self) -> Result<Cleanup, CgroupError>;
}

/// The driver for this host: v1 when the memory, pids or cpu controller is bound to a v1
/// hierarchy (a hybrid host's unified mount then has no controllers), v2 when only the unified
/// hierarchy exists, and a driver that refuses every cap when there are no cgroups.
pub fn host_driver() -> Box<dyn CgroupDriver> {
    let host = HostCgroups::detect();
    if !host.v1.is_empty() {
        let parents = host.v1.iter().map(|(c, p)| (*c, p.own.clone())).collect();
        return Box::new(V1::new(parents));
    }
    match host.v2 {
        Some(placement) => Box::new(V2::new(v2_base(placement.own))),
        None => Box::new(NoCgroups),
    }
}

/// What a session calls before its init runs anything (init waits for the sync byte): `None`
/// when no cap is requested (caps apply only when requested); otherwise the host's driver checks
/// every cap (the error names the cap and the remedy, and nothing has run yet), removes the
/// leftovers of dead cordon processes, and creates the session's group named after `label`. The
/// caller moves the session's init into the group before the init creates its cgroup namespace
/// and starts the workload.
pub fn create_for_session(label: &str, caps: &Caps) -> Result<Option<Cgroup>, CgroupError> {
    if caps.is_empty() {
        return Ok(None);
    }
    caps.validate()?;
    let driver = host_driver();
    driver.check(caps)?;
    // Leftovers that cannot be removed yet (still busy) are retried at the next start; they do not
    // stop this session.
    let _ = driver.cleanup_stale()?;
    driver.create(label, caps).map(Some)
}

/// The delegated directory for a process in `own`: `own` itself, unless this process already moved
/// itself into its leaf there (see [`V2`]), in which case it is the leaf's parent — so asking
/// again after the first session never nests deeper.
fn v2_base(own: PathBuf) -> PathBuf {
    let in_own_leaf =
        own.file_name().and_then(|n| n.to_str()) == Some(&GroupName::host_leaf().to_string());
    match own.parent() {
        Some(parent) if in_own_leaf => parent.to_path_buf(),
        _ => own,
    }
}

/// A host without a cgroup filesystem: every cap is refused.
#[derive(Debug, Clone, Copy)]
pub struct NoCgroups;

impl CgroupDriver for NoCgroups {
    fn version(&self) -> Option<Version> {
        None
    }

    fn describe(&self) -> String {
        "no cgroup filesystem is mounted".to_owned()
    }

    fn check(&self, caps: &Caps) -> Result<(), CgroupError> {
        match caps.requested().first() {
            None => Ok(()),
            Some(&cap) => Err(CgroupError::NotEnforceable {
                cap,
                reason: "no cgroup filesystem is mounted".to_owned(),
                remedy: DELEGATE_REMEDY.to_owned(),
            }),
        }
    }

    fn create(&self, label: &str, caps: &Caps) -> Result<Cgroup, CgroupError> {
        GroupName::for_this_process(label)?;
        if caps.is_empty() {
            return Err(CgroupError::NoCaps);
        }
        self.check(caps)?;
        Err(CgroupError::NoCaps)
    }

    fn cleanup_stale(&self) -> Result<Cleanup, CgroupError> {
        Ok(Cleanup::default())
    }
}

/// Writes `value` to a cgroup control file.
pub(crate) fn write_control(path: &Path, value: &str) -> Result<(), CgroupError> {
    std::fs::write(path, value).map_err(CgroupError::io("write", path))
}

/// Reads a cgroup control file.
pub(crate) fn read_control(path: &Path) -> Result<String, CgroupError> {
    std::fs::read_to_string(path).map_err(CgroupError::io("read", path))
}

/// The value of `key` in a flat-keyed control file (`memory.events`, `memory.oom_control`).
pub(crate) fn keyed_value(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let (k, v) = line.split_once(' ')?;
        (k == key).then(|| v.trim().parse().ok()).flatten()
    })
}

/// Removes a group directory, first killing what is still in it. A cgroup disappears only after
/// its last process has exited, which happens shortly after SIGKILL, so removal is retried for a
/// bounded time (at most about 200 ms) before it reports the group busy.
pub(crate) fn remove_group(dir: &Path) -> Result<(), CgroupError> {
    let kill_file = dir.join("cgroup.kill");
    if kill_file.exists() {
        let _ = std::fs::write(&kill_file, "1");
    } else if let Ok(procs) = std::fs::read_to_string(dir.join("cgroup.procs")) {
        for pid in procs.lines().filter_map(|l| l.trim().parse::<i32>().ok()) {
            crate::sys::probe::kill_process(pid);
        }
    }
    let mut attempts = 0;
    loop {
        match std::fs::remove_dir(dir) {
            Ok(()) => return Ok(()),
            Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(err) if err.raw_os_error() == Some(libc::EBUSY) && attempts < 100 => {
                attempts += 1;
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
            Err(err) => return Err(CgroupError::io("remove cgroup", dir)(err)),
        }
    }
}

/// Removes the stale groups (named `cordon-…` after a dead process) directly under `parent`.
pub(crate) fn cleanup_under(parent: &Path, cleanup: &mut Cleanup) -> Result<(), CgroupError> {
    let entries = match std::fs::read_dir(parent) {
        Ok(entries) => entries,
        Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(err) => return Err(CgroupError::io("list", parent)(err)),
    };
    for entry in entries.flatten() {
        let Some(name) = entry.file_name().to_str().and_then(GroupName::parse) else {
            continue;
        };
        if name.owner_is_alive() || !entry.path().is_dir() {
            continue;
        }
        match remove_group(&entry.path()) {
            Ok(()) => cleanup.removed.push(entry.path()),
            Err(err) => cleanup.left.push((entry.path(), err.to_string())),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keyed_values_are_read_from_flat_files() {
        let events = "low 0\nhigh 0\nmax 4\noom 1\noom_kill 1\noom_group_kill 0\n";
        assert_eq!(keyed_value(events, "oom_kill"), Some(1));
        assert_eq!(keyed_value(events, "max"), Some(4));
        assert_eq!(keyed_value(events, "oom_kil"), None);
        assert_eq!(keyed_value("oom_kill x\n", "oom_kill"), None);
    }

    #[test]
    fn the_v2_base_is_found_again_after_cordon_moved_into_its_leaf() {
        let base = PathBuf::from("/sys/fs/cgroup/user.slice/run-u1.scope");
        assert_eq!(v2_base(base.clone()), base);
        let leaf = base.join(GroupName::host_leaf().to_string());
        assert_eq!(v2_base(leaf), base);
        let other = base.join("cordon-1-2");
        assert_eq!(v2_base(other.clone()), other);
    }

    #[test]
    fn no_cgroups_refuses_a_requested_cap_with_the_delegation_remedy() {
        let caps = Caps {
            pids: Some(10),
            ..Caps::default()
        };
        let err = NoCgroups.check(&caps).unwrap_err().to_string();
        assert_eq!(
            err,
            "the pids cap cannot be enforced: no cgroup filesystem is mounted; run cordon in a \
             delegated cgroup: `systemd-run --user --scope -p Delegate=yes cordon …`"
        );
        assert!(NoCgroups.check(&Caps::default()).is_ok());
    }
}
