//! Names of the groups cordon creates: `cordon-<pid>-<start time>[-<label>]`, which identify the
//! cordon process that owns the group so leftovers of a dead process can be recognised.

use std::sync::OnceLock;

use super::CgroupError;

/// A group name bound to its owning cordon process. The start time (field 22 of
/// `/proc/<pid>/stat`) guards against pid reuse: a group is stale when no process with that pid
/// and that start time exists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupName {
    pid: u32,
    start_time: u64,
    label: Option<String>,
}

const PREFIX: &str = "cordon-";

impl GroupName {
    /// The name of a session group owned by this process.
    pub fn for_this_process(label: &str) -> Result<GroupName, CgroupError> {
        let valid = (1..=64).contains(&label.len())
            && label
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-');
        if !valid {
            return Err(CgroupError::InvalidLabel {
                label: label.to_owned(),
            });
        }
        Ok(GroupName {
            label: Some(label.to_owned()),
            ..GroupName::this_process()
        })
    }

    /// The leaf that holds this cordon process itself (cgroup v2's no-internal-processes rule).
    pub fn host_leaf() -> GroupName {
        GroupName::this_process()
    }

    fn this_process() -> GroupName {
        static START: OnceLock<u64> = OnceLock::new();
        let pid = std::process::id();
        let start_time = *START.get_or_init(|| start_time(pid).unwrap_or(0));
        GroupName {
            pid,
            start_time,
            label: None,
        }
    }

    /// Parses a directory name made by cordon; `None` for anything else.
    pub fn parse(name: &str) -> Option<GroupName> {
        let rest = name.strip_prefix(PREFIX)?;
        let mut parts = rest.splitn(3, '-');
        let pid = parts.next()?.parse().ok()?;
        let start_time = parts.next()?.parse().ok()?;
        let label = parts.next().map(str::to_owned);
        if label.as_deref() == Some("") {
            return None;
        }
        Some(GroupName {
            pid,
            start_time,
            label,
        })
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Whether the owning cordon process is still running.
    pub fn owner_is_alive(&self) -> bool {
        start_time(self.pid) == Some(self.start_time)
    }
}

impl std::fmt::Display for GroupName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{PREFIX}{}-{}", self.pid, self.start_time)?;
        if let Some(label) = &self.label {
            write!(f, "-{label}")?;
        }
        Ok(())
    }
}

/// The start time of process `pid` in clock ticks since boot, or `None` when it does not exist.
fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may contain spaces and `)`.
    let after_name = &stat[stat.rfind(')')? + 1..];
    // Field 22 is the 20th after the name: state is field 3.
    after_name.split_whitespace().nth(19)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn group_names_round_trip_and_reject_foreign_names() {
        let name = GroupName::for_this_process("run-01j_step").unwrap();
        assert_eq!(GroupName::parse(&name.to_string()), Some(name.clone()));
        let leaf = GroupName::host_leaf();
        assert_eq!(GroupName::parse(&leaf.to_string()), Some(leaf));
        for foreign in [
            "cordon",
            "cordon-",
            "cordon-x-1",
            "cordon-1",
            "cordon-1-2-",
            "user.slice",
        ] {
            assert_eq!(GroupName::parse(foreign), None, "{foreign}");
        }
        assert_eq!(
            GroupName::parse("cordon-12-34-a-b"),
            Some(GroupName {
                pid: 12,
                start_time: 34,
                label: Some("a-b".to_owned())
            })
        );
    }

    #[test]
    fn this_process_is_alive_and_a_changed_start_time_is_not() {
        let name = GroupName::for_this_process("x").unwrap();
        assert!(name.owner_is_alive());
        let reused = GroupName {
            start_time: name.start_time + 1,
            ..name
        };
        assert!(!reused.owner_is_alive());
    }

    #[test]
    fn labels_must_be_safe_directory_names() {
        for bad in ["", "../x", "A", "a/b", "a b", &"x".repeat(65)] {
            let err = GroupName::for_this_process(bad).unwrap_err().to_string();
            assert!(err.starts_with("invalid cgroup label"), "{err}");
        }
    }
}
