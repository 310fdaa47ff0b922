//! Statuses of the four namespace layers: from quick facts (namespace files, sysctls, AppArmor)
//! and, when those cannot decide or a thorough probe is asked for, from a real attempt to create
//! them in a forked child (see `sys::probe::try_namespaces`).

use std::path::Path;

use super::{Layer, LayerStatus};
use crate::sys::probe::NamespaceAttempt;

/// The four namespace layers, in report order.
const LAYERS: [Layer; 4] = [
    Layer::UserNamespaces,
    Layer::MountNamespaces,
    Layer::PidNamespaces,
    Layer::NetworkNamespaces,
];

/// What the namespace probe found out.
#[derive(Debug, Clone)]
pub(crate) struct NamespaceFacts {
    /// The real attempt; `None` when the quick facts decided. `Err` when the probe itself could
    /// not run (fork failed).
    pub attempt: Option<Result<NamespaceAttempt, String>>,
    /// Whether `/proc/self/ns/{user,mnt,pid,net}` exist (the kernel was built with them).
    pub kernel_has: [bool; 4],
    /// `/proc/sys/user/max_{user,mnt,pid,net}_namespaces`.
    pub limits: [Option<u64>; 4],
    /// `/proc/sys/kernel/apparmor_restrict_unprivileged_userns` (Ubuntu 23.10 and later).
    pub apparmor_restricts: Option<bool>,
    /// Whether this process is unconfined by AppArmor (then the restriction above applies to it
    /// for sure; under a profile, only an attempt tells).
    pub apparmor_unconfined: Option<bool>,
    /// `/proc/sys/kernel/unprivileged_userns_clone` (Debian's older kernels).
    pub unprivileged_clone: Option<bool>,
    pub root: bool,
}

impl NamespaceFacts {
    /// Reads the quick facts: a few small `/proc` files, no process created. This runs before
    /// every session, so facts that cannot matter for this process are not read: Debian's switch
    /// and the AppArmor label only ever restrict unprivileged processes, and the label only
    /// matters when AppArmor restricts user namespaces at all.
    pub(crate) fn quick(root: bool) -> NamespaceFacts {
        let files = ["user", "mnt", "pid", "net"];
        let apparmor_restricts =
            read_number("/proc/sys/kernel/apparmor_restrict_unprivileged_userns").map(|v| v != 0);
        let apparmor_unconfined = (!root && apparmor_restricts == Some(true))
            .then(|| {
                std::fs::read_to_string("/proc/self/attr/apparmor/current")
                    .or_else(|_| std::fs::read_to_string("/proc/self/attr/current"))
                    .ok()
                    .map(|label| label.trim() == "unconfined")
            })
            .flatten();
        let unprivileged_clone = (!root)
            .then(|| read_number("/proc/sys/kernel/unprivileged_userns_clone").map(|v| v != 0))
            .flatten();
        NamespaceFacts {
            attempt: None,
            kernel_has: files.map(|ns| Path::new("/proc/self/ns").join(ns).exists()),
            limits: files.map(|ns| read_number(&format!("/proc/sys/user/max_{ns}_namespaces"))),
            apparmor_restricts,
            apparmor_unconfined,
            unprivileged_clone,
            root,
        }
    }

    /// Whether the quick facts leave the answer open: AppArmor restricts unprivileged user
    /// namespaces but this process runs under a profile, which may allow them.
    pub(crate) fn undecided(&self) -> bool {
        !self.root
            && self.apparmor_restricts == Some(true)
            && self.apparmor_unconfined != Some(true)
    }

    /// Adds the real attempt.
    pub(crate) fn attempt(mut self) -> NamespaceFacts {
        self.attempt = Some(crate::sys::probe::try_namespaces().map_err(|e| e.to_string()));
        self
    }
}

/// A number in a small `/proc` file, read with one `read` (a sysctl returns all of its text at
/// once) instead of `read_to_string`'s `statx` and second `read`.
fn read_number(path: &str) -> Option<u64> {
    read_small(path)?.trim().parse().ok()
}

/// The text of a `/proc` file of at most 127 bytes, or `None` when it is missing or longer.
pub(super) fn read_small(path: &str) -> Option<String> {
    use std::io::Read;
    let mut buf = [0u8; 128];
    let len = std::fs::File::open(path).ok()?.read(&mut buf).ok()?;
    if len == buf.len() {
        return None;
    }
    String::from_utf8(buf[..len].to_vec()).ok()
}

const APPARMOR_REMEDY: &str = "Ubuntu's AppArmor restricts unprivileged user namespaces: run \
    `sudo sysctl -w kernel.apparmor_restrict_unprivileged_userns=0` (persist it in \
    /etc/sysctl.d/), or load an AppArmor profile for the cordon binary that allows `userns,`";

const QUICK: &str = "(quick check; `cordon doctor` creates one)";

/// The statuses of user, mount, PID and network namespaces, in that order.
pub(crate) fn statuses(facts: &NamespaceFacts) -> [LayerStatus; 4] {
    // Facts that rule a layer out whatever an attempt would say.
    let user = user_blocker(facts);
    let mut out = [0, 1, 2, 3].map(|i| match (i, &user) {
        (0, Some(status)) => status.clone(),
        (_, Some(_)) => not_tried(LAYERS[i]),
        (_, None) => inner_blocker(facts, i).unwrap_or_else(|| {
            let detail = match (i, facts.limits[i]) {
                (0, Some(max)) => format!("allowed (max_user_namespaces={max}) {QUICK}"),
                _ => format!("the kernel has them and no limit forbids them {QUICK}"),
            };
            LayerStatus::available(LAYERS[i], detail)
        }),
    });
    match &facts.attempt {
        None => {}
        Some(Err(reason)) => {
            for status in &mut out {
                *status = LayerStatus::missing(
                    status.layer,
                    format!("could not run the namespace probe: {reason}"),
                    "check that cordon may fork (process limits) and retry".to_owned(),
                );
            }
        }
        Some(Ok(attempt)) => {
            out[0] = match attempt.user {
                Ok(()) => LayerStatus::available(
                    Layer::UserNamespaces,
                    if facts.root {
                        "created one as root".to_owned()
                    } else {
                        "created one unprivileged".to_owned()
                    },
                ),
                Err(errno) => LayerStatus::missing(
                    Layer::UserNamespaces,
                    format!("unshare(CLONE_NEWUSER) failed: {}", describe(errno)),
                    user.and_then(|s| s.remedy)
                        .unwrap_or_else(|| user_remedy(facts, errno)),
                ),
            };
            for (i, result) in [(1, attempt.mount), (2, attempt.pid), (3, attempt.network)] {
                out[i] = attempted(facts, i, result);
            }
        }
    }
    out
}

/// A fact that makes user namespaces unusable for this process, as the missing status.
fn user_blocker(facts: &NamespaceFacts) -> Option<LayerStatus> {
    let missing = |detail: &str, remedy: &str| {
        Some(LayerStatus::missing(
            Layer::UserNamespaces,
            detail.to_owned(),
            remedy.to_owned(),
        ))
    };
    if !facts.kernel_has[0] {
        return missing(
            "the kernel has no user namespaces (no /proc/self/ns/user)",
            "use a kernel built with CONFIG_USER_NS=y",
        );
    }
    if facts.limits[0] == Some(0) {
        return missing(
            "user.max_user_namespaces is 0",
            "user namespaces are disabled: run `sudo sysctl -w user.max_user_namespaces=15000`",
        );
    }
    if !facts.root && facts.unprivileged_clone == Some(false) {
        return missing(
            "kernel.unprivileged_userns_clone is 0",
            "unprivileged user namespaces are disabled: run \
             `sudo sysctl -w kernel.unprivileged_userns_clone=1`",
        );
    }
    if !facts.root
        && facts.apparmor_restricts == Some(true)
        && facts.apparmor_unconfined == Some(true)
    {
        return missing(
            "kernel.apparmor_restrict_unprivileged_userns is 1 and cordon has no AppArmor profile \
             allowing user namespaces",
            APPARMOR_REMEDY,
        );
    }
    None
}

/// A fact that rules out the inner namespace `LAYERS[i]`.
fn inner_blocker(facts: &NamespaceFacts, i: usize) -> Option<LayerStatus> {
    let (file, sysctl, config) = inner_names(i);
    if !facts.kernel_has[i] {
        return Some(LayerStatus::missing(
            LAYERS[i],
            format!("the kernel has no such namespace (no /proc/self/ns/{file})"),
            format!("use a kernel built with {config}=y"),
        ));
    }
    if facts.limits[i] == Some(0) {
        return Some(LayerStatus::missing(
            LAYERS[i],
            format!("{sysctl} is 0"),
            format!("run `sudo sysctl -w {sysctl}=15000`"),
        ));
    }
    None
}

fn inner_names(i: usize) -> (&'static str, &'static str, &'static str) {
    match i {
        1 => ("mnt", "user.max_mnt_namespaces", "CONFIG_NAMESPACES"),
        2 => ("pid", "user.max_pid_namespaces", "CONFIG_PID_NS"),
        _ => ("net", "user.max_net_namespaces", "CONFIG_NET_NS"),
    }
}

fn not_tried(layer: Layer) -> LayerStatus {
    LayerStatus::missing(
        layer,
        "not tried: there is no user namespace to create it in".to_owned(),
        "fix user_namespaces first".to_owned(),
    )
}

fn user_remedy(facts: &NamespaceFacts, errno: i32) -> String {
    match errno {
        libc::ENOSPC | libc::EUSERS => "the user namespace limit is reached: raise \
            `user.max_user_namespaces` with sysctl, or end processes holding namespaces"
            .to_owned(),
        libc::EPERM | libc::EACCES if !facts.root && facts.apparmor_restricts == Some(true) => {
            APPARMOR_REMEDY.to_owned()
        }
        libc::EINVAL | libc::ENOSYS => {
            "the kernel was built without user namespaces: use one with CONFIG_USER_NS=y".to_owned()
        }
        _ => "user namespaces are refused: inside a container, run with a seccomp profile that \
              allows unshare and clone with CLONE_NEWUSER, or run cordon on the host"
            .to_owned(),
    }
}

/// The status of inner namespace `LAYERS[i]` from the real attempt.
fn attempted(facts: &NamespaceFacts, i: usize, result: Option<Result<(), i32>>) -> LayerStatus {
    let layer = LAYERS[i];
    let (file, sysctl, config) = inner_names(i);
    let flag = match file {
        "mnt" => "CLONE_NEWNS",
        "pid" => "CLONE_NEWPID",
        _ => "CLONE_NEWNET",
    };
    match result {
        None => not_tried(layer),
        Some(Ok(())) => {
            LayerStatus::available(layer, "created one inside a new user namespace".to_owned())
        }
        Some(Err(errno)) => {
            let remedy = match errno {
                libc::EPERM | libc::EACCES if facts.apparmor_restricts == Some(true) => {
                    format!(
                        "AppArmor lets the user namespace be created but denies it \
                         capabilities. {APPARMOR_REMEDY}"
                    )
                }
                libc::ENOSPC | libc::EUSERS => {
                    format!("the namespace limit is reached or 0: raise `{sysctl}` with sysctl")
                }
                libc::EINVAL => format!("the kernel was built without it: use one with {config}=y"),
                _ => "the namespace is refused inside a user namespace: inside a container, run \
                      with a seccomp profile that allows unshare, or run cordon on the host"
                    .to_owned(),
            };
            LayerStatus::missing(
                layer,
                format!(
                    "unshare({flag}) inside a new user namespace failed: {}",
                    describe(errno)
                ),
                remedy,
            )
        }
    }
}

/// An errno as the C library describes it, e.g. `Operation not permitted (os error 1)`.
pub(crate) fn describe(errno: i32) -> String {
    std::io::Error::from_raw_os_error(errno).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(attempt: Option<NamespaceAttempt>) -> NamespaceFacts {
        NamespaceFacts {
            attempt: attempt.map(Ok),
            kernel_has: [true; 4],
            limits: [Some(1000); 4],
            apparmor_restricts: None,
            apparmor_unconfined: None,
            unprivileged_clone: None,
            root: false,
        }
    }

    const ALL_OK: NamespaceAttempt = NamespaceAttempt {
        user: Ok(()),
        mount: Some(Ok(())),
        pid: Some(Ok(())),
        network: Some(Ok(())),
    };
    const USER_REFUSED: NamespaceAttempt = NamespaceAttempt {
        user: Err(libc::EPERM),
        mount: None,
        pid: None,
        network: None,
    };
    const FIRST: &str = "fix user_namespaces first";

    /// Checks (available, remedy contains) for each of the four layers.
    fn check(facts: &NamespaceFacts, expected: [(bool, &str); 4]) {
        let statuses = statuses(facts);
        for (status, (available, remedy)) in statuses.iter().zip(expected) {
            assert_eq!(status.available, available, "{status:?}");
            let actual = status.remedy.as_deref().unwrap_or("");
            assert!(
                actual.contains(remedy),
                "{status:?} should mention {remedy:?}"
            );
            assert_eq!(status.remedy.is_none(), available, "{status:?}");
        }
    }

    #[test]
    fn working_namespaces_are_available_quickly_and_when_tried() {
        check(&facts(None), [(true, ""); 4]);
        check(&facts(Some(ALL_OK)), [(true, ""); 4]);
        assert_eq!(
            statuses(&facts(Some(ALL_OK)))[0].detail,
            "created one unprivileged"
        );
    }

    #[test]
    fn zero_max_user_namespaces_names_the_sysctl_without_an_attempt() {
        for attempt in [
            None,
            Some(NamespaceAttempt {
                user: Err(libc::ENOSPC),
                ..USER_REFUSED
            }),
        ] {
            let mut f = facts(attempt);
            f.limits[0] = Some(0);
            check(
                &f,
                [
                    (false, "sysctl -w user.max_user_namespaces="),
                    (false, FIRST),
                    (false, FIRST),
                    (false, FIRST),
                ],
            );
        }
    }

    #[test]
    fn apparmor_restriction_of_an_unconfined_process_names_the_ubuntu_sysctl() {
        let mut f = facts(None);
        f.apparmor_restricts = Some(true);
        f.apparmor_unconfined = Some(true);
        assert!(!f.undecided());
        let sysctl = "kernel.apparmor_restrict_unprivileged_userns=0";
        check(
            &f,
            [
                (false, sysctl),
                (false, FIRST),
                (false, FIRST),
                (false, FIRST),
            ],
        );
        f.root = true;
        check(&f, [(true, ""); 4]);
    }

    #[test]
    fn apparmor_restriction_under_a_profile_needs_an_attempt() {
        let mut f = facts(None);
        f.apparmor_restricts = Some(true);
        f.apparmor_unconfined = Some(false);
        assert!(f.undecided());
        f.attempt = Some(Ok(NamespaceAttempt {
            user: Ok(()),
            mount: Some(Err(libc::EPERM)),
            pid: Some(Err(libc::EPERM)),
            network: Some(Err(libc::EPERM)),
        }));
        let remedy = "AppArmor lets the user namespace be created but denies it capabilities";
        check(
            &f,
            [
                (true, ""),
                (false, remedy),
                (false, remedy),
                (false, remedy),
            ],
        );
        f.attempt = Some(Ok(ALL_OK));
        check(&f, [(true, ""); 4]);
    }

    #[test]
    fn debian_unprivileged_clone_sysctl_is_named() {
        let mut f = facts(None);
        f.unprivileged_clone = Some(false);
        let sysctl = "kernel.unprivileged_userns_clone=1";
        check(
            &f,
            [
                (false, sysctl),
                (false, FIRST),
                (false, FIRST),
                (false, FIRST),
            ],
        );
    }

    #[test]
    fn a_kernel_without_one_namespace_names_its_config_option() {
        let mut f = facts(None);
        f.kernel_has[3] = false;
        check(
            &f,
            [
                (true, ""),
                (true, ""),
                (true, ""),
                (false, "CONFIG_NET_NS=y"),
            ],
        );
        let f = facts(Some(NamespaceAttempt {
            network: Some(Err(libc::EINVAL)),
            ..ALL_OK
        }));
        check(
            &f,
            [
                (true, ""),
                (true, ""),
                (true, ""),
                (false, "CONFIG_NET_NS=y"),
            ],
        );
        let mut f = facts(None);
        f.kernel_has[0] = false;
        check(
            &f,
            [
                (false, "CONFIG_USER_NS=y"),
                (false, FIRST),
                (false, FIRST),
                (false, FIRST),
            ],
        );
    }

    #[test]
    fn a_zero_inner_namespace_limit_names_its_sysctl() {
        let mut f = facts(None);
        f.limits[2] = Some(0);
        let sysctl = "sysctl -w user.max_pid_namespaces=";
        check(&f, [(true, ""), (true, ""), (false, sysctl), (true, "")]);
    }

    #[test]
    fn a_refusal_without_known_cause_points_at_container_profiles() {
        check(
            &facts(Some(USER_REFUSED)),
            [
                (false, "seccomp profile"),
                (false, FIRST),
                (false, FIRST),
                (false, FIRST),
            ],
        );
    }

    #[test]
    fn a_probe_that_cannot_fork_reports_every_namespace_missing() {
        let mut f = facts(None);
        f.attempt = Some(Err("Resource temporarily unavailable".to_owned()));
        check(&f, [(false, "may fork"); 4]);
    }
}
