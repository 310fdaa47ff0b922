//! Per-user kernel limits through `cordon exec` (whose init runs in-process): a probe taking
//! inotify instances or fanotify groups until the kernel refuses stops at the session's own limit,
//! below the invoking user's, and the session may have no user namespace. The control, the same
//! probe as a plain host child, takes more: up to the user's host-wide limit. (The sandbox suite's
//! `limits` tests also check, while a session holds all it can, that the host user still gets one.)

use super::{on_host, python, sandboxed, workspace};

/// One `KIND HELD REASON LIMIT` line per kind (REASON: the errno's name; LIMIT: the limit this
/// process sees), then `user_namespaces N`. What it takes is held until it exits.
const PROBE: &str = r#"
import ctypes, errno, os, resource
libc = ctypes.CDLL(None, use_errno=True)
# The loops must end at the kernel's per-user count, never at the descriptor table.
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
takes = [
    ("inotify", "max_inotify_instances", lambda: libc.inotify_init1(0) >= 0),
    # FAN_CLASS_NOTIF | FAN_REPORT_FID: what an unprivileged process may create.
    ("fanotify", "max_fanotify_groups", lambda: libc.fanotify_init(0x200, os.O_RDONLY) >= 0),
]
for kind, limit, take in takes:
    held = 0
    while held < 1000000 and take():
        held += 1
    reason = errno.errorcode.get(ctypes.get_errno(), "?")
    print(kind, held, reason, open("/proc/sys/user/" + limit).read().strip(), flush=True)
print("user_namespaces", open("/proc/sys/user/max_user_namespaces").read().strip(), flush=True)
"#;

/// `(held, reason, limit)` of the probe's line for `kind`.
fn line(stdout: &str, kind: &str) -> (u64, String, u64) {
    let fields: Vec<&str> = stdout
        .lines()
        .find_map(|l| l.strip_prefix(kind)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("no {kind} line in\n{stdout}"))
        .split_whitespace()
        .collect();
    match fields[..] {
        [held, reason, limit] => (
            held.parse().expect("a count"),
            reason.to_owned(),
            limit.parse().expect("a limit"),
        ),
        _ => panic!("a malformed {kind} line in\n{stdout}"),
    }
}

#[test]
fn cordon_exec_keeps_a_session_below_the_users_inotify_and_fanotify_limits() {
    let ws = workspace();
    let script = python(PROBE);
    let inside = sandboxed(ws.path(), &[], &script);
    inside.assert_line("user_namespaces 0");
    // Control: the same probe on the host, as the same user.
    let host = on_host(ws.path(), &script);
    for kind in ["inotify", "fanotify"] {
        let (held, reason, limit) = line(&inside.stdout, kind);
        let (host_held, host_reason, host_limit) = line(&host.stdout, kind);
        assert_eq!(
            (held, reason.as_str()),
            (limit, "EMFILE"),
            "{kind}: the session did not stop at its own limit:\n{inside}"
        );
        assert!(held > 0, "{kind}: the session could take none:\n{inside}");
        assert!(
            limit < host_limit,
            "{kind}: the session's limit {limit} is not below the user's {host_limit}"
        );
        assert_eq!(host_reason, "EMFILE", "{kind}: the control:\n{host}");
        assert!(
            host_held > held && host_held <= host_limit,
            "{kind}: the control took {host_held} (session {held}, user's limit {host_limit}):\n{host}"
        );
    }
    assert!(
        !host.stdout.contains("user_namespaces 0\n"),
        "the host's user namespace limit reads 0 too:\n{host}"
    );
}
