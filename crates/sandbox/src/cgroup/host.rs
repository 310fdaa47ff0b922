//! Where this host mounts its cgroup hierarchies and which cgroup cordon is in, from
//! `/proc/self/mountinfo` and `/proc/self/cgroup`.

use std::path::{Path, PathBuf};

use super::Controller;

/// The cgroup directories of the calling process, per hierarchy.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostCgroups {
    /// The unified (v2) hierarchy: its mount point and this process's cgroup directory in it.
    pub v2: Option<Placement>,
    /// The v1 hierarchies carrying a controller cordon uses (memory, pids, cpu).
    pub v1: Vec<(Controller, Placement)>,
}

/// A hierarchy's mount point and this process's own cgroup directory inside it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    pub mount: PathBuf,
    pub own: PathBuf,
}

impl HostCgroups {
    /// Reads the running process's view. Unreadable files mean no cgroups.
    pub fn detect() -> HostCgroups {
        let mountinfo = read_proc("/proc/self/mountinfo");
        let membership = read_proc("/proc/self/cgroup");
        HostCgroups::parse(&mountinfo, &membership)
    }

    /// Combines mount points (`mountinfo`) with membership (`/proc/self/cgroup` lines
    /// `ID:CONTROLLERS:PATH`). A mount whose root is not a prefix of our path (another cgroup
    /// namespace's view) is skipped.
    pub fn parse(mountinfo: &str, membership: &str) -> HostCgroups {
        let mut host = HostCgroups::default();
        for line in mountinfo.lines() {
            let Some(mount) = MountLine::parse(line) else {
                continue;
            };
            match mount.fstype {
                "cgroup2" => {
                    if host.v2.is_some() {
                        continue;
                    }
                    let path = membership
                        .lines()
                        .find_map(|l| l.strip_prefix("0::"))
                        .unwrap_or("/");
                    host.v2 = mount.placement(path);
                }
                "cgroup" => {
                    for controller in Controller::ALL {
                        let named = mount
                            .super_options
                            .split(',')
                            .any(|o| o == controller.as_str());
                        if !named || host.v1.iter().any(|(c, _)| *c == controller) {
                            continue;
                        }
                        let path = membership.lines().find_map(|l| {
                            let mut fields = l.splitn(3, ':');
                            let (_, controllers, path) =
                                (fields.next()?, fields.next()?, fields.next()?);
                            controllers
                                .split(',')
                                .any(|c| c == controller.as_str())
                                .then_some(path)
                        });
                        if let Some(placement) = path.and_then(|p| mount.placement(p)) {
                            host.v1.push((controller, placement));
                        }
                    }
                }
                _ => {}
            }
        }
        host
    }

    /// The v1 placement of `controller`, if that hierarchy is mounted.
    pub fn v1_placement(&self, controller: Controller) -> Option<&Placement> {
        self.v1
            .iter()
            .find(|(c, _)| *c == controller)
            .map(|(_, p)| p)
    }
}

/// Reads a `/proc` file in few system calls: such files report size 0, so `read_to_string` would
/// start with a tiny buffer and read it in many small pieces. Unreadable means empty.
fn read_proc(path: &str) -> String {
    use std::io::Read;
    let mut text = String::with_capacity(16 * 1024);
    match std::fs::File::open(path).and_then(|mut file| file.read_to_string(&mut text)) {
        Ok(_) => text,
        Err(_) => String::new(),
    }
}

/// The fields of one `/proc/self/mountinfo` line that matter here.
struct MountLine<'a> {
    root: String,
    mount_point: PathBuf,
    fstype: &'a str,
    super_options: &'a str,
}

impl<'a> MountLine<'a> {
    fn parse(line: &'a str) -> Option<MountLine<'a>> {
        let (left, right) = line.split_once(" - ")?;
        let mut left = left.split(' ');
        let root = unescape(left.nth(3)?);
        let mount_point = PathBuf::from(unescape(left.next()?));
        let mut right = right.split(' ');
        let fstype = right.next()?;
        let _source = right.next()?;
        let super_options = right.next().unwrap_or("");
        Some(MountLine {
            root,
            mount_point,
            fstype,
            super_options,
        })
    }

    /// Our cgroup directory under this mount, when the mount shows the part of the tree we are in.
    fn placement(&self, cgroup_path: &str) -> Option<Placement> {
        let relative = Path::new(cgroup_path.trim())
            .strip_prefix(&self.root)
            .ok()?;
        Some(Placement {
            mount: self.mount_point.clone(),
            own: self.mount_point.join(relative),
        })
    }
}

/// Undoes mountinfo's octal escapes (`\040` for a space).
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes
            .get(i + 1..i + 4)
            .filter(|d| d.iter().all(|b| (b'0'..=b'7').contains(b)));
        match (bytes[i], octal) {
            (b'\\', Some(digits)) => {
                let value = digits
                    .iter()
                    .fold(0u32, |acc, d| acc * 8 + u32::from(d - b'0'));
                out.push(u8::try_from(value).unwrap_or(b'?'));
                i += 4;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    const HYBRID_MOUNTS: &str = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
38 31 0:35 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
40 31 0:37 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw";
    const HYBRID_MEMBERSHIP: &str = "\
8:pids:/
4:memory:/process_api/a7cd
1:cpu:/
0::/";

    fn placement(mount: &str, own: &str) -> Placement {
        Placement {
            mount: mount.into(),
            own: own.into(),
        }
    }

    fn check(mountinfo: &str, membership: &str, expected: HostCgroups) {
        assert_eq!(HostCgroups::parse(mountinfo, membership), expected);
    }

    #[test]
    fn hybrid_hosts_list_v1_controllers_and_the_unified_mount() {
        check(
            HYBRID_MOUNTS,
            HYBRID_MEMBERSHIP,
            HostCgroups {
                v2: Some(placement(
                    "/sys/fs/cgroup/unified",
                    "/sys/fs/cgroup/unified/",
                )),
                v1: vec![
                    (
                        Controller::Cpu,
                        placement("/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpu/"),
                    ),
                    (
                        Controller::Memory,
                        placement(
                            "/sys/fs/cgroup/memory",
                            "/sys/fs/cgroup/memory/process_api/a7cd",
                        ),
                    ),
                    (
                        Controller::Pids,
                        placement("/sys/fs/cgroup/pids", "/sys/fs/cgroup/pids/"),
                    ),
                ],
            },
        );
    }

    #[test]
    fn unified_hosts_find_their_own_cgroup() {
        check(
            "29 23 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate",
            "0::/user.slice/user-1000.slice/user@1000.service/app.slice/run-u1.scope\n",
            HostCgroups {
                v2: Some(placement(
                    "/sys/fs/cgroup",
                    "/sys/fs/cgroup/user.slice/user-1000.slice/user@1000.service/app.slice/run-u1.scope",
                )),
                v1: vec![],
            },
        );
    }

    #[test]
    fn comounted_cpu_and_escaped_mount_points_are_understood() {
        check(
            "32 31 0:29 / /sys/fs/cgroup/cpu\\054cpuacct rw - cgroup cgroup rw,cpu,cpuacct",
            "3:cpu,cpuacct:/a b\n",
            HostCgroups {
                v2: None,
                v1: vec![(
                    Controller::Cpu,
                    placement(
                        "/sys/fs/cgroup/cpu,cpuacct",
                        "/sys/fs/cgroup/cpu,cpuacct/a b",
                    ),
                )],
            },
        );
    }

    #[test]
    fn a_mount_rooted_elsewhere_in_the_tree_is_skipped() {
        check(
            "29 23 0:26 /other /sys/fs/cgroup rw - cgroup2 cgroup2 rw",
            "0::/mine\n",
            HostCgroups::default(),
        );
        check(
            "29 23 0:26 /mine /sys/fs/cgroup rw - cgroup2 cgroup2 rw",
            "0::/mine/sub\n",
            HostCgroups {
                v2: Some(placement("/sys/fs/cgroup", "/sys/fs/cgroup/sub")),
                v1: vec![],
            },
        );
    }

    #[test]
    fn no_cgroup_mounts_mean_no_cgroups() {
        check("", "", HostCgroups::default());
        check("garbage line\n", "0::/\n", HostCgroups::default());
    }
}
