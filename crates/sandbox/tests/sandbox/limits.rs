//! Per-user kernel limits: the kernel charges what a session holds to the invoking user
//! host-wide, so each session gets lower limits of its own. Judged on the host: while a session
//! holds all it can get of inotify instances, fanotify groups, pending signals or message-queue
//! bytes, a host process of the same user can still take one more; the control runs the same
//! loop on the host, where it does leave the user nothing (and then lets go at once).

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};

use cordon_sandbox::limits::{self, Count, HostLimits, Rlimit};

use crate::support::*;

/// The interpreter, inside the session and on the host (a `PATH` lookup on the host could find
/// a shim the unprivileged user cannot run).
const PYTHON: &str = "/usr/bin/python3";

/// `holder.py KIND BOUND`: takes one KIND after the other until the kernel refuses (or BOUND are
/// held), prints `HELD REASON LIMIT` (REASON: the errno's name, or `bound`; LIMIT: the limit as
/// this process sees it), then holds everything until its standard input ends.
const HOLDER: &str = r#"
import ctypes, errno, os, resource, signal, sys
libc = ctypes.CDLL(None, use_errno=True)
kind, bound = sys.argv[1], int(sys.argv[2])
# The loop must end at the kernel's per-user count, never at the descriptor table.
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGRTMIN])
def take(i):
    if kind == "inotify":
        return libc.inotify_init1(0) >= 0
    if kind == "fanotify":
        # FAN_CLASS_NOTIF | FAN_REPORT_FID: what an unprivileged process may create.
        return libc.fanotify_init(0x200, os.O_RDONLY) >= 0
    if kind == "signals":
        return libc.sigqueue(os.getpid(), signal.SIGRTMIN, ctypes.c_void_p(0)) == 0
    if kind == "mqueue":
        name = b"/cordon-limits-%d-%d" % (os.getpid(), i)
        if libc.mq_open(name, os.O_CREAT | os.O_EXCL | os.O_RDONLY, 0o600, None) < 0:
            return False
        # Unlinked at once: the queue goes with its descriptor, however this process ends.
        libc.mq_unlink(name)
        return True
    raise SystemExit("unknown kind " + kind)
def limit():
    if kind in ("inotify", "fanotify"):
        name = "max_inotify_instances" if kind == "inotify" else "max_fanotify_groups"
        return int(open("/proc/sys/user/" + name).read())
    which = resource.RLIMIT_SIGPENDING if kind == "signals" else resource.RLIMIT_MSGQUEUE
    return resource.getrlimit(which)[0]
held = 0
while held < bound and take(held):
    held += 1
reason = "bound" if held == bound else errno.errorcode.get(ctypes.get_errno(), "?")
print(held, reason, limit(), flush=True)
sys.stdin.buffer.read()
"#;

/// More than any host here allows of any kind (root's pending signals: ~96 000), so the loops
/// end at the kernel's refusal; still a bound.
const BOUND: u32 = 1_000_000;

/// What a holder printed.
#[derive(Debug)]
struct Held {
    held: u64,
    reason: String,
    limit: u64,
}

fn parse(line: &str) -> Held {
    let fields: Vec<&str> = line.split_whitespace().collect();
    match fields[..] {
        [held, reason, limit] => Held {
            held: held.parse().expect("a count"),
            reason: reason.to_owned(),
            limit: limit.parse().expect("a limit"),
        },
        _ => panic!("the holder said: {line:?}"),
    }
}

/// Starts the holder inside `session` in the background, where it keeps what it took after the
/// command has ended (until the session closes), and returns what it printed.
fn hold_in_session(session: &mut cordon_sandbox::Session, holder: &Path, kind: &str) -> Held {
    // Its standard input is a FIFO opened read-write, which never ends; its report comes through
    // another FIFO, read by the command, which ends with that line.
    let script = format!(
        "mkfifo /tmp/hold /tmp/held || exit 1; \
         {PYTHON} {holder} {kind} {BOUND} 0<>/tmp/hold >/tmp/held 2>&1 & \
         read line </tmp/held; echo \"$line\"",
        holder = holder.display(),
    );
    let out = sh(session, &script);
    parse(stdout(&out).trim())
}

/// Runs `during` while a holder on the host (as this user, outside any sandbox) holds all it can
/// get, then releases it; returns what it printed and what `during` returned.
fn hold_on_host<T>(holder: &Path, kind: &str, during: impl FnOnce() -> T) -> (Held, T) {
    let mut child = Command::new(PYTHON)
        .arg(holder)
        .args([kind, &BOUND.to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("start the holder on the host");
    let mut line = String::new();
    let read = BufReader::new(child.stdout.take().expect("its stdout")).read_line(&mut line);
    let result = during();
    // Closing its standard input lets it go; waiting for it frees what it held.
    drop(child.stdin.take());
    let status = child.wait().expect("the holder ends");
    read.expect("read the holder's report");
    assert!(status.success(), "the host holder failed: {line:?}");
    (parse(line.trim()), result)
}

/// Whether a host process of this user (a fresh one, outside any sandbox) can take one more.
fn host_takes_one(holder: &Path, kind: &str) -> Held {
    let out = Command::new(PYTHON)
        .arg(holder)
        .args([kind, "1"])
        .stdin(Stdio::null())
        .output()
        .expect("run the probe on the host");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    parse(String::from_utf8_lossy(&out.stdout).trim())
}

/// How far a session's loop gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Inside {
    /// Exactly to the session's own limit, where the kernel refuses as on the host.
    ToItsLimit,
    /// Nowhere: a layer refuses the first one (`mq_open` is refused by Landlock: a queue lives on
    /// the IPC namespace's internal mount, beneath no rule), and the session's own limit is the
    /// second layer behind it.
    NoneAtAll { refused: &'static str },
}

/// The check every resource shares: the session gets no further than its own limit (below the
/// host's), and while it holds all it could get the host user can still take one more; the same
/// loop on the host, the control, takes more than the session did and leaves the user none,
/// the kernel refusing with `refused`.
fn session_leaves_the_user_a_share(kind: &str, refused: &'static str, inside_gets: Inside) {
    let ws = workspace();
    let holder = ws.path().join("holder.py");
    std::fs::write(&holder, HOLDER).expect("write the holder");
    let mut session = open(ws.path());
    let inside = hold_in_session(&mut session, &holder, kind);
    let host_meanwhile = host_takes_one(&holder, kind);
    session.close();
    // The control runs beside other tests of this user that may hold or free one for a moment
    // (a session's IPC namespace is torn down after `close` returns): up to three tries until
    // the host's loop leaves the user none.
    let (mut control, mut control_meanwhile) =
        hold_on_host(&holder, kind, || host_takes_one(&holder, kind));
    for _ in 0..2 {
        if control_meanwhile.held == 0 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
        (control, control_meanwhile) =
            hold_on_host(&holder, kind, || host_takes_one(&holder, kind));
    }

    assert_eq!(
        host_meanwhile.held, 1,
        "the host user could not take one while the session held {}: {host_meanwhile:?}",
        inside.held
    );
    match inside_gets {
        Inside::ToItsLimit => {
            assert_eq!(inside.reason, refused, "the session's loop: {inside:?}");
            assert!(inside.held > 0, "the session could take none: {inside:?}");
            assert_eq!(inside.held, inside.limit, "the session's loop: {inside:?}");
        }
        Inside::NoneAtAll { refused } => {
            assert_eq!(
                (inside.held, inside.reason.as_str()),
                (0, refused),
                "the session's loop: {inside:?}"
            );
        }
    }
    assert!(
        inside.limit < control.limit,
        "the session's limit is not below the host's: {inside:?} {control:?}"
    );
    // Control: on the host the loop takes more than the session could, until the user has none.
    assert_eq!(control.reason, refused, "the host's loop: {control:?}");
    assert!(
        control.held > inside.held,
        "the host's loop took no more than the session's: {control:?} {inside:?}"
    );
    assert_eq!(
        (control_meanwhile.held, control_meanwhile.reason.as_str()),
        (0, refused),
        "the host's loop left the user some: {control:?} {control_meanwhile:?}"
    );
}

#[test]
fn a_session_cannot_use_up_the_users_inotify_instances() {
    session_leaves_the_user_a_share("inotify", "EMFILE", Inside::ToItsLimit);
}

#[test]
fn a_session_cannot_use_up_the_users_fanotify_groups() {
    session_leaves_the_user_a_share("fanotify", "EMFILE", Inside::ToItsLimit);
}

#[test]
fn a_session_cannot_use_up_the_users_pending_signals() {
    session_leaves_the_user_a_share("signals", "EAGAIN", Inside::ToItsLimit);
}

#[test]
fn a_session_cannot_use_up_the_users_message_queue_bytes() {
    let inside = Inside::NoneAtAll { refused: "EACCES" };
    session_leaves_the_user_a_share("mqueue", "EMFILE", inside);
}

#[test]
fn a_session_cannot_make_a_user_namespace_and_may_have_none() {
    let ws = workspace();
    let mut session = open(ws.path());
    let out = sh(
        &mut session,
        "cat /proc/sys/user/max_user_namespaces; unshare --user true 2>/dev/null && echo made; \
         echo 1 >/proc/sys/user/max_user_namespaces 2>/dev/null && echo raised; \
         cat /proc/sys/user/max_user_namespaces",
    );
    assert_eq!(stdout(&out), "0\n0\n", "{}", stderr(&out));
    // Control: on the host the user may have user namespaces, and makes one with the same command.
    let host: u64 = std::fs::read_to_string("/proc/sys/user/max_user_namespaces")
        .expect("read the host's limit")
        .trim()
        .parse()
        .expect("a number");
    assert!(host > 0);
    let made = Command::new("unshare")
        .args(["--user", "true"])
        .status()
        .expect("run unshare on the host");
    assert!(made.success(), "the host cannot make a user namespace");
}

/// `(soft, hard)` of the `/proc/PID/limits` line starting with `name`.
fn limits_line(text: &str, name: &str) -> (String, String) {
    let line = text
        .lines()
        .find(|l| l.starts_with(name))
        .unwrap_or_else(|| panic!("no `{name}` in:\n{text}"));
    let fields: Vec<&str> = line[name.len()..].split_whitespace().collect();
    (fields[0].to_owned(), fields[1].to_owned())
}

#[test]
fn a_session_has_bounded_message_queue_and_pending_signal_limits_it_cannot_raise() {
    let planned = limits::plan(&HostLimits::read().expect("the host's limits"));
    let ws = workspace();
    let mut session = open(ws.path());
    let out = sh(&mut session, "cat /proc/self/limits");
    let inside = stdout(&out);
    let host = std::fs::read_to_string("/proc/self/limits").expect("the host's limits");
    for (resource, name) in [
        (Rlimit::MessageQueueBytes, "Max msgqueue size"),
        (Rlimit::PendingSignals, "Max pending signals"),
    ] {
        let value = planned
            .rlimits
            .iter()
            .find(|(r, _)| *r == resource)
            .map(|(_, v)| v.to_string())
            .expect("planned");
        assert_eq!(
            limits_line(&inside, name),
            (value.clone(), value.clone()),
            "{name} inside:\n{inside}"
        );
        // Control: the host process's own limit is higher (or unlimited).
        let (host_soft, _) = limits_line(&host, name);
        assert!(
            host_soft == "unlimited"
                || host_soft.parse::<u64>().expect("a number") > value.parse().expect("a number"),
            "{name}: host {host_soft}, session {value}"
        );
    }
    // A workload may lower its limits but not raise them (that takes CAP_SYS_RESOURCE in the
    // host's user namespace).
    let script = "import resource\n\
                  for which in (resource.RLIMIT_MSGQUEUE, resource.RLIMIT_SIGPENDING):\n    \
                  soft, hard = resource.getrlimit(which)\n    \
                  try:\n        resource.setrlimit(which, (hard + 1, hard + 1)); print('raised')\n    \
                  except (ValueError, OSError):\n        print('refused')\n    \
                  resource.setrlimit(which, (soft - 1, hard)); print('lowered')\n";
    let out = sh(&mut session, &format!("{PYTHON} -c \"{script}\""));
    assert_eq!(
        stdout(&out),
        "refused\nlowered\nrefused\nlowered\n",
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_session_has_lower_inotify_and_fanotify_limits_it_cannot_change() {
    let planned = limits::plan(&HostLimits::read().expect("the host's limits"));
    let ws = workspace();
    let mut session = open(ws.path());
    let files = [
        Count::InotifyInstances,
        Count::InotifyWatches,
        Count::FanotifyGroups,
        Count::FanotifyMarks,
    ];
    let mut script = String::new();
    for count in files {
        let path = format!("/proc/sys/user/{}", count.file());
        script.push_str(&format!(
            "cat {path}; echo 2147483647 >{path} 2>/dev/null && echo changed; "
        ));
    }
    let out = sh(&mut session, &script);
    assert!(!stdout(&out).contains("changed"), "{}", stdout(&out));
    let inside: Vec<u64> = stdout(&out)
        .lines()
        .map(|l| {
            l.parse()
                .unwrap_or_else(|_| panic!("{l:?} in {}", stdout(&out)))
        })
        .collect();
    assert_eq!(inside.len(), files.len(), "{}", stdout(&out));
    for (count, value) in files.into_iter().zip(inside) {
        let path = format!("/proc/sys/user/{}", count.file());
        let host: u64 = std::fs::read_to_string(&path)
            .expect("the host's value")
            .trim()
            .parse()
            .expect("a number");
        let expected = planned
            .counts
            .iter()
            .find(|(c, _)| *c == count)
            .map(|(_, v)| *v);
        assert_eq!(Some(value), expected, "{path}");
        // Control: the host's value, read the same way, is higher.
        assert!(value < host, "{path}: session {value}, host {host}");
    }
}
