//! [`Cgroup`]: one session's group, as made by a driver — moving processes in, reading OOM kills
//! after the fact, and removal.

use std::path::{Path, PathBuf};

use super::{Caps, CgroupError, Controller, Version, keyed_value, read_control, remove_group};

/// A created group. v2 has one directory; v1 one per controller a requested cap needs.
#[derive(Debug)]
pub struct Cgroup {
    version: Version,
    dirs: Vec<(Vec<Controller>, PathBuf)>,
    caps: Caps,
}

impl Cgroup {
    pub(crate) fn new(
        version: Version,
        dirs: Vec<(Vec<Controller>, PathBuf)>,
        caps: Caps,
    ) -> Cgroup {
        Cgroup {
            version,
            dirs,
            caps,
        }
    }

    pub fn version(&self) -> Version {
        self.version
    }

    pub fn caps(&self) -> &Caps {
        &self.caps
    }

    /// The group's directories.
    pub fn dirs(&self) -> impl Iterator<Item = &Path> {
        self.dirs.iter().map(|(_, dir)| dir.as_path())
    }

    pub(crate) fn entries(&self) -> &[(Vec<Controller>, PathBuf)] {
        &self.dirs
    }

    /// The `cgroup.procs` file of every directory. A session opens these before it forks and its
    /// child writes `0` (itself) to each before exec, so the workload never runs uncapped.
    pub fn procs_files(&self) -> Vec<PathBuf> {
        self.dirs
            .iter()
            .map(|(_, dir)| dir.join("cgroup.procs"))
            .collect()
    }

    /// Moves process `pid` (all its threads) into the group.
    pub fn add_process(&self, pid: u32) -> Result<(), CgroupError> {
        for path in self.procs_files() {
            super::write_control(&path, &pid.to_string())?;
        }
        Ok(())
    }

    /// How many processes the kernel OOM-killed in this group because of the memory cap (0
    /// without a memory cap). v2 reads `oom_kill` in `memory.events`; v1 reads `oom_kill` in
    /// `memory.oom_control` (Linux 4.13+), and on older kernels counts a hit limit
    /// (`memory.failcnt` > 0) as one, which the caller should pair with the process having died
    /// of SIGKILL.
    pub fn oom_kills(&self) -> Result<u64, CgroupError> {
        let Some(dir) = self.dir_of(Controller::Memory) else {
            return Ok(0);
        };
        match self.version {
            Version::V2 => {
                let events = read_control(&dir.join("memory.events"))?;
                Ok(keyed_value(&events, "oom_kill").unwrap_or(0))
            }
            Version::V1 => {
                let control = read_control(&dir.join("memory.oom_control"))?;
                if let Some(kills) = keyed_value(&control, "oom_kill") {
                    return Ok(kills);
                }
                let failcnt = read_control(&dir.join("memory.failcnt"))?;
                Ok(u64::from(failcnt.trim().parse::<u64>().unwrap_or(0) > 0))
            }
        }
    }

    /// The memory the group uses now, in bytes (`memory.current` on v2, `memory.usage_in_bytes`
    /// on v1), for `resources.sample` and the `mem_warn` limit; `None` without a memory cap.
    pub fn memory_usage(&self) -> Result<Option<u64>, CgroupError> {
        let Some(dir) = self.dir_of(Controller::Memory) else {
            return Ok(None);
        };
        let file = match self.version {
            Version::V2 => dir.join("memory.current"),
            Version::V1 => dir.join("memory.usage_in_bytes"),
        };
        let text = read_control(&file)?;
        Ok(text.trim().parse().ok())
    }

    /// `killed: out of memory (memory cap 512 MiB)`: what to tell the user about an OOM kill.
    pub fn oom_message(&self) -> String {
        match self.caps.describe_memory() {
            Some(cap) => format!("killed: out of memory ({cap})"),
            None => "killed: out of memory".to_owned(),
        }
    }

    fn dir_of(&self, controller: Controller) -> Option<&Path> {
        self.dirs
            .iter()
            .find(|(controllers, _)| controllers.contains(&controller))
            .map(|(_, dir)| dir.as_path())
    }

    /// Kills whatever is still in the group and removes it.
    pub fn remove(self) -> Result<(), CgroupError> {
        let mut first_error = None;
        for (_, dir) in &self.dirs {
            if let Err(err) = remove_group(dir) {
                first_error.get_or_insert(err);
            }
        }
        first_error.map_or(Ok(()), Err)
    }
}
