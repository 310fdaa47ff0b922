//! The session's own per-user kernel limits (DESIGN §10): a session cannot use up what the
//! invoking user holds host-wide.
//!
//! The kernel counts some objects per user, and counts those of a process in a child user
//! namespace at every level up to the initial namespace, where the whole session is charged to
//! the namespace's owner: the invoking user — root, when cordon runs as root. A new user
//! namespace's own limits are unlimited, so a session with none of its own could take, say, all
//! of the user's 128 inotify instances (`/proc/sys/user/max_inotify_instances`), and until it
//! ended no other process of that user (root's system daemons, an editor) could watch a file.
//! Measured on Linux 6.18 before this module existed: a session took all 128 inotify instances,
//! all 128 fanotify groups and all 96363 pending signals of root. So init gives the session's
//! user namespace limits of its own, lower than the host's, before the first workload starts
//! ([`plan`] decides them from [`HostLimits`], [`apply`] sets them):
//!
//! * `/proc/sys/user/max_{inotify_instances,inotify_watches,fanotify_groups,fanotify_marks}`:
//!   a [`share`] of the host's value (read on the host: in the session the file shows the
//!   session's own, unlimited, value). Fanotify needs no privilege since Linux 5.13, so its
//!   groups are as exposed as inotify instances.
//! * `max_user_namespaces`: 0. The seccomp filter already refuses every call that makes a
//!   namespace; this is a second, independent layer. The other `max_*_namespaces` are left alone
//!   on purpose: each would add a cold write to `/proc/sys` (~9–15 µs measured, see [`apply`]) to
//!   every start, and
//!   protect nothing more — making any other namespace takes CAP_SYS_ADMIN over the user
//!   namespace that would own it, no workload holds a capability in the session's namespace and
//!   none can have a namespace of its own, and init, the only process holding them, makes its
//!   last namespace (the cgroup one) before it reads the setup.
//! * `RLIMIT_MSGQUEUE` and `RLIMIT_SIGPENDING`: a [`share`] of the host process's soft limit,
//!   made the soft and the hard limit of init, so every workload inherits them and none can raise
//!   them (that takes CAP_SYS_RESOURCE in the initial user namespace). Both are checked against
//!   the session's own count, which the kernel also charges to the invoking user. The session's
//!   IPC namespace has a queue count of its own (`/proc/sys/fs/mqueue/queues_max`, default 256,
//!   never the host's), which init could not lower anyway: the kernel lets only the uid that is
//!   0 in the owning user namespace write it (or global root when that uid is unmapped), and a
//!   session maps neither. POSIX queues are out of a workload's reach today in any case:
//!   Landlock refuses `mq_open` (a queue lives on the IPC namespace's internal mqueue mount,
//!   beneath no rule), so this limit, like `max_user_namespaces`, is the second layer.
//!
//! How the kernel decides (checked by experiment as root and as an unprivileged user): a file in
//! `/proc/sys/user` is the one of the user namespace of the process that opens it, whatever procfs
//! mount it is opened through, and is writable by a process with CAP_SYS_RESOURCE in that
//! namespace. Init holds every capability of the session's namespace (and none above it) until
//! its workloads drop them; it writes through the session's own procfs, after the mount plan and
//! before Landlock, which would refuse the writes.
//!
//! Not limited here: `RLIMIT_NPROC` and `RLIMIT_MEMLOCK`. Their per-user counts are charged up
//! the same way, but they do not bind root on the host (CAP_SYS_RESOURCE, CAP_IPC_LOCK), and a
//! lower `RLIMIT_NPROC` would also count a build's threads; for an unprivileged invoker a session
//! can still take that user's processes (the `pids` cap bounds it) or locked shared memory.
//!
//! Fail closed: these limits are a required protection. A host value that exists but cannot be
//! read refuses the session on the host ([`HostLimits::read`]), and a limit init cannot set fails
//! the setup with a message naming the remedy ([`LimitError`]); nothing has run then. A counter
//! the kernel does not have (built without inotify or fanotify: no file on the host) has nothing
//! to use up and is skipped.

use std::ffi::CString;
use std::fmt;
use std::io;
use std::os::fd::AsFd;
use std::os::unix::fs::OpenOptionsExt;

use serde::{Deserialize, Serialize};

use crate::error::SandboxError;
pub use crate::sys::process::Rlimit;

/// Where the per-user count limits of the calling process's user namespace are.
const USER_SYSCTLS: &str = "/proc/sys/user";

/// A per-user count the kernel limits through a file in `/proc/sys/user`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Count {
    InotifyInstances,
    InotifyWatches,
    FanotifyGroups,
    FanotifyMarks,
    UserNamespaces,
}

/// How a session's limit is chosen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rule {
    /// A [`share`] of the host's value, at least `floor` (when the host allows twice that).
    Share { floor: u64 },
    /// None at all.
    Zero,
}

impl Count {
    /// Every count a session limits, in the order init writes them.
    pub const ALL: [Count; 5] = [
        Count::InotifyInstances,
        Count::InotifyWatches,
        Count::FanotifyGroups,
        Count::FanotifyMarks,
        Count::UserNamespaces,
    ];

    /// The file in `/proc/sys/user`.
    pub fn file(self) -> &'static str {
        match self {
            Count::InotifyInstances => "max_inotify_instances",
            Count::InotifyWatches => "max_inotify_watches",
            Count::FanotifyGroups => "max_fanotify_groups",
            Count::FanotifyMarks => "max_fanotify_marks",
            Count::UserNamespaces => "max_user_namespaces",
        }
    }

    /// The floors leave a workload some room on a host configured low: an instance or group per
    /// watching tool, and a few directory trees' worth of watches or marks.
    pub fn rule(self) -> Rule {
        match self {
            Count::InotifyInstances | Count::FanotifyGroups => Rule::Share { floor: 16 },
            Count::InotifyWatches | Count::FanotifyMarks => Rule::Share { floor: 1024 },
            Count::UserNamespaces => Rule::Zero,
        }
    }
}

/// The kernel's default `RLIMIT_MSGQUEUE` (`MQ_BYTES_MAX`): the base of the share when the host
/// process has no limit (a session still gets a bounded one).
const MSGQUEUE_WITHOUT_LIMIT: u64 = 819_200;
/// The base of the `RLIMIT_SIGPENDING` share when the host process has no limit: the kernel's
/// default on a machine with 16 GiB (half its maximum number of threads).
const SIGPENDING_WITHOUT_LIMIT: u64 = 65_536;

/// The resource limits a session lowers, in the order init sets them.
pub const RLIMITS: [Rlimit; 2] = [Rlimit::MessageQueueBytes, Rlimit::PendingSignals];

/// How a session's resource limit is chosen: a [`share`] of the host process's soft limit, at
/// least `floor`; of `without_limit` when the host process has none (a session still gets a
/// bounded one).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RlimitRule {
    pub floor: u64,
    pub without_limit: u64,
}

impl RlimitRule {
    /// The message-queue floor is one queue of the default size (10 messages of 8 KiB and their
    /// bookkeeping); the pending-signal floor a few dozen queued signals.
    pub fn of(resource: Rlimit) -> RlimitRule {
        match resource {
            Rlimit::MessageQueueBytes => RlimitRule {
                floor: 96 << 10,
                without_limit: MSGQUEUE_WITHOUT_LIMIT,
            },
            Rlimit::PendingSignals => RlimitRule {
                floor: 64,
                without_limit: SIGPENDING_WITHOUT_LIMIT,
            },
        }
    }
}

/// A session's share of a per-user limit whose host value is `host`: a quarter, so that three
/// sessions open at once and the user's own processes (which already hold some) still leave
/// the user a quarter — half would let two sessions take everything; at least `floor`, so a
/// host configured low still leaves a workload room, but never more than half of `host`.
pub fn share(host: u64, floor: u64) -> u64 {
    (host / 4).max(floor.min(host / 2))
}

/// The host's values a session's limits are derived from.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HostLimits {
    /// The host's value of each shared [`Count`] this kernel has.
    pub counts: Vec<(Count, u64)>,
    /// The host process's soft limit of each of [`RLIMITS`]; `None` when unlimited.
    pub rlimits: Vec<(Rlimit, Option<u64>)>,
}

impl HostLimits {
    /// Reads them on the host (in the host's user namespace). A count whose file does not exist
    /// is one this kernel does not keep and is left out; any other failure refuses: cordon does
    /// not start a session it cannot give its limits.
    pub fn read() -> Result<HostLimits, SandboxError> {
        let refuse = |what: String, err: io::Error| SandboxError::Refused {
            layer: "per-user limits",
            detail: format!("cannot read {what}: {err}"),
            remedy: "each session's kernel limits are a share of the host's; run cordon where \
                     procfs is mounted at /proc and /proc/sys/user is readable"
                .to_owned(),
        };
        let mut counts = Vec::new();
        for count in Count::ALL {
            if count.rule() == Rule::Zero {
                continue;
            }
            let path = format!("{USER_SYSCTLS}/{}", count.file());
            let text = match std::fs::read_to_string(&path) {
                Ok(text) => text,
                Err(err) if err.kind() == io::ErrorKind::NotFound => continue,
                Err(err) => return Err(refuse(format!("`{path}`"), err)),
            };
            let value = text.trim().parse::<u64>().map_err(|_| {
                refuse(
                    format!("`{path}`"),
                    io::Error::new(io::ErrorKind::InvalidData, format!("`{}`", text.trim())),
                )
            })?;
            counts.push((count, value));
        }
        let mut rlimits = Vec::new();
        for resource in RLIMITS {
            let soft = crate::sys::process::soft_limit(resource)
                .map_err(|err| refuse(format!("the host's {}", Named(resource)), err))?;
            rlimits.push((resource, soft));
        }
        Ok(HostLimits { counts, rlimits })
    }
}

/// What init sets in the session's user namespace and on itself.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limits {
    /// Written to `/proc/sys/user/<file>`, in this order.
    pub counts: Vec<(Count, u64)>,
    /// Made init's soft and hard limit, in this order.
    pub rlimits: Vec<(Rlimit, u64)>,
}

/// A session's limits for a host with `host`'s values (pure).
pub fn plan(host: &HostLimits) -> Limits {
    let counts = Count::ALL
        .into_iter()
        .filter_map(|count| match count.rule() {
            Rule::Zero => Some((count, 0)),
            Rule::Share { floor } => host
                .counts
                .iter()
                .find(|(c, _)| *c == count)
                .map(|(_, value)| (count, share(*value, floor))),
        })
        .collect();
    let rlimits = RLIMITS
        .into_iter()
        .map(|resource| {
            let rule = RlimitRule::of(resource);
            let base = host
                .rlimits
                .iter()
                .find(|(r, _)| *r == resource)
                .and_then(|(_, soft)| *soft)
                .unwrap_or(rule.without_limit);
            (resource, share(base, rule.floor))
        })
        .collect();
    Limits { counts, rlimits }
}

/// A limit init could not set; the session does not start.
#[derive(Debug, thiserror::Error)]
#[error(
    "cannot set the session's {what}, which keeps it from using up the invoking user's \
     host-wide share: init needs CAP_SYS_RESOURCE in the session's user namespace and a \
     writable /proc/sys, which a security module (AppArmor's unprivileged_userns profile, an \
     SELinux policy) may withhold; allow cordon's user namespaces their capabilities"
)]
pub struct LimitError {
    /// The limit and its value, e.g. "`/proc/sys/user/max_inotify_instances` (32)".
    pub what: String,
    #[source]
    pub source: io::Error,
}

/// Sets `limits` in init, which holds every capability of the session's user namespace: the
/// counts through `/proc/sys/user` of the session's own procfs (one directory lookup, then each
/// file relative to it: every lookup in a fresh procfs is a cold one), then the resource limits,
/// which belong to the whole process (every workload inherits them). Run after the mount plan,
/// before Landlock and before any workload; the first failure is the error.
///
/// Cost, on the critical path of every start: every lookup in a fresh procfs is a cold one —
/// measured on the 2-CPU test VM under load, ~28 µs for `/proc/sys/user` and ~9 µs per file,
/// opened relative to it (full paths were ~30% dearer; the host's procfs, whose dentry hash
/// holds the same names of every earlier session's namespace, dearer still). Writing on a thread
/// of init while the mount plan's final detach sleeps through its RCU grace period was tried and
/// measured slower: the thread's start and wake-up cost more than the writes.
pub(crate) fn apply(limits: &Limits) -> Result<(), LimitError> {
    let count_error = |count: Count, value: u64| {
        move |source| LimitError {
            what: format!("`{USER_SYSCTLS}/{}` ({value})", count.file()),
            source,
        }
    };
    if let Some(&(first, value)) = limits.counts.first() {
        let dir = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC)
            .open(USER_SYSCTLS)
            .map_err(count_error(first, value))?;
        for &(count, value) in &limits.counts {
            let name = CString::new(count.file())
                .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
                .map_err(count_error(count, value))?;
            crate::sys::fd::write_at(dir.as_fd(), &name, value.to_string().as_bytes())
                .map_err(count_error(count, value))?;
        }
    }
    for &(resource, value) in &limits.rlimits {
        crate::sys::process::lower_limit(resource, value).map_err(|source| LimitError {
            what: format!("{} ({value})", Named(resource)),
            source,
        })?;
    }
    Ok(())
}

/// A resource limit as `/proc/PID/limits` and messages name it.
struct Named(Rlimit);

impl fmt::Display for Named {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self.0 {
            Rlimit::MessageQueueBytes => "RLIMIT_MSGQUEUE (message queue bytes)",
            Rlimit::PendingSignals => "RLIMIT_SIGPENDING (pending signals)",
        })
    }
}

#[cfg(test)]
mod tests;
