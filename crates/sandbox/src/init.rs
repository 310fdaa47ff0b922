//! The session's PID 1. Started by the host in all of the session's namespaces (see
//! `session/spawner.rs`), it builds the root from the plan it is sent, gives the session's user
//! namespace its own per-user kernel limits (`limits.rs`), seals itself with Landlock and seccomp,
//! then serves exec requests: it starts each workload (a vfork-style clone, see
//! `sys::process::spawn_workload`), reaps every process that ends up parented to
//! it, and kills a workload's whole tree on request. It exits when the host closes the control
//! socket (also what happens when the host dies), and the kernel then kills every process left in
//! the PID namespace.
//!
//! Init never runs untrusted code itself. It is non-dumpable from its first instruction, so a
//! workload (same uid) can neither ptrace it nor open `/proc/1/exe`, `/proc/1/mem` or
//! `/proc/1/fd/*`: the executable behind init — the `cordon` binary — is out of reach
//! (CVE-2019-5736), and init holds no descriptor to it (it was exec'd through a close-on-exec fd,
//! or, started in-process by a single-threaded host, closed it before running this code).

use std::ffi::CString;
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use crate::landlock;
use crate::limits;
use crate::seccomp;
use crate::sys;
use crate::sys::fd::Poll;
use crate::sys::process::{Exit, Stdio, Workload};
use crate::wire::{self, ExecSpec, FromInit, Setup, ToInit};

/// `argv[0]` under which a binary runs as a session's init.
pub const ARGV0: &str = "cordon-init";

/// The search path when a workload's environment has no `PATH` (the environment module's).
const DEFAULT_PATH: &str = crate::environment::DEFAULT_PATH;

/// Entry point of init. A binary calls this first thing in `main` when `argv[0]` is [`ARGV0`].
pub fn main() -> ! {
    let code = match run() {
        Ok(()) => 0,
        Err(err) => {
            eprintln!("cordon-init: {err}");
            1
        }
    };
    std::process::exit(code)
}

/// Entry point of an init cloned without `execve` (`sys::spawn::Start::InProcess`): the same
/// code as [`main`], run in the forked child of a single-threaded host — after replacing the
/// host's command line, which this process inherited as a copy and a workload could otherwise
/// read in `/proc/1/cmdline` (an exec'd init's is just [`ARGV0`]). A failure ends init before
/// the session exists: fail closed rather than show the host's argv.
pub(crate) fn main_in_process() -> ! {
    let name = CString::new(ARGV0).unwrap_or_default();
    if let Err(err) = sys::cmdline::replace(&name) {
        eprintln!("cordon-init: cannot replace the host's command line: {err}");
        std::process::exit(1)
    }
    main()
}

fn run() -> io::Result<()> {
    sys::process::set_non_dumpable()?;
    // The host moved this process into the session's cgroup (when caps were requested) before it
    // let it exec; a cgroup namespace made now is rooted there, so the sandbox sees its own group
    // as `/` and nothing of the host's hierarchy.
    sys::process::unshare_cgroup_namespace()?;
    // SIGCHLD is blocked before any child exists, so no exit is missed.
    let children = sys::process::child_signal_fd()?;
    let control = sys::spawn::control_socket();
    let Some((ToInit::Setup(setup), fds)) = wire::receive::<ToInit>(&control)? else {
        return Ok(());
    };
    match build(&setup, &fds) {
        Ok(()) => wire::send(control.as_fd(), &FromInit::Ready, &[])?,
        Err(message) => {
            return wire::send(control.as_fd(), &FromInit::SetupFailed { message }, &[]);
        }
    }
    drop(fds);
    serve(&control, &children)
}

/// Network, host name, root, per-user limits, Landlock, seccomp: everything before the first
/// workload.
fn build(setup: &Setup, fds: &[OwnedFd]) -> Result<(), String> {
    sys::net::loopback_up().map_err(|e| format!("cannot bring up the loopback interface: {e}"))?;
    sys::net::set_hostname(&setup.hostname)
        .map_err(|e| format!("cannot set the host name: {e}"))?;
    crate::mounts::apply(&setup.plan, fds).map_err(|e| error_chain(&e))?;
    // The session's own per-user kernel limits (see `limits.rs`), so no workload can use up the
    // invoking user's host-wide inotify instances or watches, fanotify groups or marks, pending
    // signals or message-queue bytes, nor make a user namespace. Written through the session's
    // own procfs (the plan has just mounted it) with the capabilities init holds in the session's
    // user namespace, and before Landlock, which would refuse writes to /proc/sys. A limit that
    // cannot be set fails the setup: nothing has run.
    limits::apply(&setup.limits).map_err(|e| error_chain(&e))?;
    // Landlock is applied to init itself once the mounts are final, so every workload inherits
    // the domain (and the per-exec cost is nothing). Init needs nothing it forbids.
    let rules = landlock::Rules {
        read_exec: setup.read_exec.clone(),
        read_write: setup.read_write.clone(),
        devices: setup.devices.clone(),
    };
    landlock::restrict(&rules).map_err(|e| error_chain(&e))?;
    // The seccomp filter, likewise, is loaded into init once: every workload inherits it (with
    // `no_new_privs`) through its clone and keeps it across `execve`. Loading a filter costs
    // ~75 µs (the kernel compiles it and runs it once per call number), which each exec paid
    // while the workload's child loaded it. Init needs nothing the filter refuses from here on:
    // it only polls, passes messages and descriptors, starts workloads with a plain `clone`,
    // reaps and kills them. Init itself is then filtered too — one more layer around the process
    // that holds the pipe to the host.
    seccomp::program()
        .install()
        .map_err(|e| format!("cannot load the seccomp filter: {e}"))?;
    Ok(())
}

fn error_chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

fn serve(control: &OwnedFd, children: &OwnedFd) -> io::Result<()> {
    let mut running: Option<i32> = None;
    loop {
        let mut polls = [
            Poll {
                fd: control.as_raw_fd(),
                readable: false,
            },
            Poll {
                fd: children.as_raw_fd(),
                readable: false,
            },
        ];
        sys::fd::poll(&mut polls, -1)?;
        if polls[1].readable {
            drain_signals(children);
            while let Some((pid, exit)) = sys::process::reap_any() {
                if running == Some(pid) {
                    running = None;
                    let (code, signal) = match exit {
                        Exit::Code(code) => (Some(code), None),
                        Exit::Signal(signal) => (None, Some(signal)),
                    };
                    wire::send(control.as_fd(), &FromInit::Exited { code, signal }, &[])?;
                }
            }
        }
        if polls[0].readable {
            match wire::receive::<ToInit>(control)? {
                // The host closed the socket or died: end the session.
                None => return Ok(()),
                Some((ToInit::Exec(spec), fds)) => {
                    // Each command compiles its own bytecode (its `PYTHONPYCACHEPREFIX` is fresh):
                    // the earlier commands' is removed so it does not fill the session's `/tmp`.
                    // `remove_dir_all` removes a link planted there, never what it points to.
                    let _ = std::fs::remove_dir_all(crate::environment::PYCACHE_DIR);
                    let reply = match spec.terminal {
                        Some(size) => start_on_terminal(&spec, size, control)?,
                        None => start(&spec, &fds, false)?,
                    };
                    match reply {
                        Ok(pid) => running = Some(pid),
                        Err(failed) => wire::send(control.as_fd(), &failed, &[])?,
                    }
                }
                Some((ToInit::KillTree, _)) => {
                    if let Some(pid) = running {
                        kill_tree(pid);
                    }
                }
                Some((ToInit::Setup(_), _)) => return Err(io::Error::other("setup sent twice")),
            }
        }
    }
}

fn drain_signals(fd: &OwnedFd) {
    let mut buf = [0u8; 128 * 8];
    while matches!(sys::fd::read(fd.as_fd(), &mut buf), Ok(n) if n > 0) {}
}

/// Starts one workload on a new pseudo-terminal of the session's own devpts (`exec -t`), and
/// sends the host its master once the command runs. Init keeps no end: the command holds the
/// slave, the host the master, so the host reads end of file (`EIO`) when the last holder of the
/// slave is gone.
fn start_on_terminal(
    spec: &ExecSpec,
    size: sys::pty::WindowSize,
    control: &OwnedFd,
) -> io::Result<Result<i32, FromInit>> {
    let (master, slave) = match sys::pty::open_pair(Some(size)) {
        Ok(pair) => pair,
        Err(err) => {
            return Ok(Err(FromInit::SpawnFailed {
                stage: sys::process::WorkloadStage::Terminal,
                errno: err.raw_os_error().unwrap_or(libc::EIO),
            }));
        }
    };
    let stdio = [slave.try_clone()?, slave.try_clone()?, slave];
    let started = start(spec, &stdio, true)?;
    drop(stdio);
    if started.is_ok() {
        wire::send(control.as_fd(), &FromInit::Terminal, &[master.as_fd()])?;
    }
    Ok(started)
}

/// Starts one workload; `Ok(Err(..))` is a refusal to report, not a failure of init.
fn start(spec: &ExecSpec, fds: &[OwnedFd], terminal: bool) -> io::Result<Result<i32, FromInit>> {
    let [stdin, stdout, stderr] = fds else {
        return Err(io::Error::other("exec needs exactly three descriptors"));
    };
    let invalid = |_| io::Error::from_raw_os_error(libc::EINVAL);
    let argv: Vec<CString> = spec
        .argv
        .iter()
        .map(|a| CString::new(a.as_str()))
        .collect::<Result<_, _>>()
        .map_err(invalid)?;
    let envp: Vec<CString> = spec
        .env
        .iter()
        .map(|(k, v)| CString::new(format!("{k}={v}")))
        .collect::<Result<_, _>>()
        .map_err(invalid)?;
    let path = spec
        .env
        .iter()
        .find(|(k, _)| k == "PATH")
        .map_or(DEFAULT_PATH, |(_, v)| v.as_str());
    let Some(program) = spec.argv.first() else {
        return Err(io::Error::other("empty argv"));
    };
    let candidates = candidates(program, path)
        .into_iter()
        .filter_map(|p| CString::new(p.as_os_str().as_bytes()).ok())
        .collect();
    let cwd = CString::new(spec.cwd.as_os_str().as_bytes()).map_err(invalid)?;
    let work = Workload::new(candidates, argv, envp, cwd).on_terminal(terminal);
    let stdio = Stdio {
        stdin: stdin.as_fd(),
        stdout: stdout.as_fd(),
        stderr: stderr.as_fd(),
    };
    Ok(sys::process::spawn_workload(&work, &stdio)?
        .map_err(|(stage, errno)| FromInit::SpawnFailed { stage, errno }))
}

/// The paths `execvp` would try for `program`.
fn candidates(program: &str, path: &str) -> Vec<PathBuf> {
    if program.contains('/') {
        return vec![PathBuf::from(program)];
    }
    path.split(':')
        .map(|dir| Path::new(if dir.is_empty() { "." } else { dir }).join(program))
        .collect()
}

/// Kills `root` and every process below it, however deep. Each is stopped first, so none can fork
/// a child the walk would miss, until a walk finds nothing new; then all are killed, and init waits (bounded)
/// until each has ended, so the caller sees a dead tree. Daemonised descendants are found too: the
/// workload is a child subreaper, so they stay below it while it lives.
fn kill_tree(root: i32) {
    let mut stopped = vec![root];
    sys::process::kill(root, libc::SIGSTOP);
    // No cap on the number of walks: each one stops what it finds, so the tree can only grow by
    // children forked before their parent was stopped, and the walk ends once a pass finds
    // nothing new (at worst after as many passes as the PID namespace holds processes).
    loop {
        let parents = sys::process::process_parents();
        let fresh: Vec<i32> = parents
            .iter()
            .filter(|(pid, parent)| stopped.contains(parent) && !stopped.contains(pid))
            .map(|(pid, _)| *pid)
            .collect();
        if fresh.is_empty() {
            break;
        }
        for pid in fresh {
            sys::process::kill(pid, libc::SIGSTOP);
            stopped.push(pid);
        }
    }
    // Stopped processes cannot exit or be replaced, so these pidfds name exactly the tree.
    let pidfds: Vec<OwnedFd> = stopped
        .iter()
        .filter_map(|pid| sys::process::pidfd_open(*pid).ok())
        .collect();
    for pid in &stopped {
        sys::process::kill(*pid, libc::SIGKILL);
    }
    let deadline = std::time::Instant::now() + KILL_WAIT;
    for fd in &pidfds {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let mut poll = [Poll {
            fd: fd.as_raw_fd(),
            readable: false,
        }];
        let _ = sys::fd::poll(&mut poll, left.as_millis() as i32);
    }
}

/// How long [`kill_tree`] waits for the killed processes to be gone.
const KILL_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn program_search_follows_execvp() {
        let rows: [(&str, &str, &[&str]); 4] = [
            ("true", "/usr/bin:/bin", &["/usr/bin/true", "/bin/true"]),
            ("./run.sh", "/usr/bin", &["./run.sh"]),
            ("/bin/sh", "/usr/bin", &["/bin/sh"]),
            ("x", ":/opt", &["./x", "/opt/x"]),
        ];
        for (program, path, expected) in rows {
            let expected: Vec<PathBuf> = expected.iter().map(PathBuf::from).collect();
            assert_eq!(candidates(program, path), expected, "{program} in {path}");
        }
    }
}
