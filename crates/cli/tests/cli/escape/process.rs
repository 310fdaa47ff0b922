//! Process escapes: the host's environment and open files, host processes (seeing, signalling,
//! tracing), children that outlive a timeout, and the identity tools see inside.

use std::ffi::OsStr;
use std::process::{Child, Command, Stdio};

use super::{
    Outcome, STARTED, on_host, outside, python, running_as_root, sandboxed, sh_quote, unique,
    workspace,
};
use crate::support::cordon_bin;

#[test]
fn host_environment_does_not_leak_into_the_sandbox() {
    let ws = workspace();
    let secret = unique("env-secret");
    let mut command = crate::support::cordon();
    command
        .args(["exec", "-w"])
        .arg(ws.path())
        .args(["-e", "DECLARED=visible", "--", "/bin/sh", "-c"])
        .arg(format!("echo {STARTED}; env"))
        .env("AWS_SECRET_ACCESS_KEY", &secret)
        .env("CORDON_ESCAPE_SECRET", &secret)
        .env("SSH_AUTH_SOCK", "/run/user/0/ssh-agent")
        .env("LD_PRELOAD", "/nonexistent/evil.so")
        .stdin(Stdio::null());
    let output = command.output().expect("run cordon exec");
    let run = Outcome::from_output(output);
    run.assert_line(STARTED);
    run.assert_line("DECLARED=visible");
    assert!(
        !run.mentions(&secret),
        "a host secret leaked into the sandbox:\n{run}"
    );
    for name in ["SSH_AUTH_SOCK=", "LD_PRELOAD=", "CORDON_ESCAPE_SECRET="] {
        assert!(
            !run.stdout.lines().any(|line| line.starts_with(name)),
            "{name} leaked:\n{run}"
        );
    }
    // Control: a plain child inherits all of it.
    let control = Command::new("/usr/bin/env")
        .env("CORDON_ESCAPE_SECRET", &secret)
        .output()
        .expect("env");
    assert!(
        String::from_utf8_lossy(&control.stdout).contains(&secret),
        "control: env shows the secret"
    );
}

#[test]
fn inherited_file_descriptors_do_not_reach_the_sandbox() {
    let ws = workspace();
    let host = outside();
    let secret_text = unique("fd-secret");
    let secret = host.path().join("secret");
    std::fs::write(&secret, &secret_text).expect("write the secret");
    // The shell opens fd 7 on the secret without close-on-exec, then becomes the next command.
    let probe = format!("echo {STARTED}; cat <&7; ls /proc/self/fd");
    let launch = |inner: String| {
        let script = format!(
            "exec 7< {}; exec {inner}",
            sh_quote(&secret.display().to_string())
        );
        let output = Command::new("/bin/sh")
            .args(["-c", &script])
            .stdin(Stdio::null())
            .output()
            .expect("sh");
        Outcome::from_output(output)
    };
    let run = launch(format!(
        "{} exec -w {} -- /bin/sh -c {}",
        sh_quote(&cordon_bin().display().to_string()),
        sh_quote(&ws.path().display().to_string()),
        sh_quote(&probe)
    ));
    run.assert_line(STARTED);
    assert!(
        !run.mentions(&secret_text),
        "an inherited fd was readable in the sandbox:\n{run}"
    );
    assert!(
        !run.stdout.lines().any(|line| line == "7"),
        "fd 7 is open in the sandbox:\n{run}"
    );

    let control = launch(format!("/bin/sh -c {}", sh_quote(&probe)));
    assert!(
        control.mentions(&secret_text),
        "control: a plain child reads fd 7:\n{control}"
    );
}

/// A host process the sandbox will try to find, signal and trace; killed when dropped.
struct Victim {
    child: Child,
    marker: String,
}

impl Victim {
    fn start() -> Victim {
        let marker = unique("cordon-escape-victim");
        // The marker rides in the arguments of a sleeping python process.
        let child = Command::new("/usr/bin/python3")
            .args(["-c", "import sys, time; time.sleep(600)", &marker])
            .stdin(Stdio::null())
            .spawn()
            .expect("start the victim");
        Victim { child, marker }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    fn tracer(&self) -> Option<String> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).ok()?;
        status
            .lines()
            .find_map(|line| line.strip_prefix("TracerPid:"))
            .map(|pid| pid.trim().to_owned())
    }
}

impl Drop for Victim {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Looks for the victim by its marker in every visible /proc/*/cmdline, signals it by pid, and
/// tries to attach to it with ptrace.
fn hunt_script(victim: &Victim) -> String {
    let pid = victim.pid();
    let hunt = format!(
        r#"
import ctypes, errno, glob
marker = b"{reversed}"[::-1]  # reversed, so this probe's own command line does not match
for path in glob.glob("/proc/[0-9]*/cmdline"):
    try:
        if marker in open(path, "rb").read():
            print("seen", path, flush=True)
    except OSError:
        pass
libc = ctypes.CDLL(None, use_errno=True)
result = libc.ptrace(16, {pid}, 0, 0)  # PTRACE_ATTACH
print("ptrace:", "ok" if result == 0 else errno.errorcode.get(ctypes.get_errno()), flush=True)
"#,
        reversed = victim.marker.chars().rev().collect::<String>()
    );
    format!("{}; kill -9 {pid} && echo killed", python(&hunt))
}

#[test]
fn sandbox_cannot_see_signal_or_trace_host_processes() {
    let ws = workspace();
    let mut victim = Victim::start();
    let run = sandboxed(ws.path(), &[], &hunt_script(&victim));
    assert!(
        run.mentions("ptrace:"),
        "the probe did not get to ptrace:\n{run}"
    );
    assert!(
        !run.mentions("seen"),
        "the sandbox saw a host process:\n{run}"
    );
    assert!(victim.alive(), "the sandbox killed a host process:\n{run}");
    assert_eq!(
        victim.tracer().as_deref(),
        Some("0"),
        "the host process is being traced:\n{run}"
    );

    // Control: a host child of the same user sees it, traces it and kills it.
    let mut target = Victim::start();
    let control = on_host(ws.path(), &hunt_script(&target));
    assert!(
        control.mentions("seen"),
        "control: the probe finds host processes:\n{control}"
    );
    if running_as_root() {
        // Yama or a hardened ptrace scope may stop an unprivileged sibling; root always attaches.
        control.assert_line("ptrace: ok");
    }
    control.assert_line("killed");
    let _ = target.child.wait();
    assert!(!target.alive());
}

#[test]
fn ptrace_is_refused_even_on_the_sandboxs_own_children() {
    let ws = workspace();
    // The traced child is our own: only the seccomp filter stands in the way.
    let script = python(
        r#"
import ctypes, errno, os, time
libc = ctypes.CDLL(None, use_errno=True)
child = os.fork()
if child == 0:
    time.sleep(30)
    os._exit(0)
result = libc.ptrace(16, child, 0, 0)
print("ptrace-own-child:", "ok" if result == 0 else errno.errorcode.get(ctypes.get_errno()), flush=True)
os.kill(child, 9)
"#,
    );
    let run = sandboxed(ws.path(), &[], &script);
    run.assert_line("ptrace-own-child: EPERM");
    let control = on_host(ws.path(), &script);
    control.assert_line("ptrace-own-child: ok");
}

/// Host processes whose working directory is inside `dir` or whose environment holds `marker`.
fn processes_of(dir: &std::path::Path, marker: &str) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter(|entry| {
            entry
                .file_name()
                .to_string_lossy()
                .bytes()
                .all(|byte| byte.is_ascii_digit())
        })
        .filter(|entry| {
            let in_dir =
                std::fs::read_link(entry.path().join("cwd")).is_ok_and(|cwd| cwd.starts_with(dir));
            let environ = std::fs::read(entry.path().join("environ")).unwrap_or_default();
            in_dir
                || environ
                    .windows(marker.len())
                    .any(|window| window == marker.as_bytes())
        })
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .collect()
}

#[test]
fn timeout_kills_daemonised_children_too() {
    let marker = format!("CORDON_DAEMON_MARK={}", unique("daemon"));
    // A setsid daemon that leaves the process group (its output detached, as daemons do), then a
    // foreground sleep that the timeout ends. The marker in the daemon's environment identifies it from the host.
    let script = format!(
        "{marker} setsid sh -c 'cd daemon && echo started > ../daemon-started && exec sleep 600' \
         </dev/null >/dev/null 2>&1 & \
         while [ ! -e daemon-started ]; do :; done; echo daemon-up; exec sleep 600"
    );
    let ws = workspace();
    std::fs::create_dir(ws.path().join("daemon")).expect("mkdir");
    let mut command = crate::support::cordon();
    command
        .args(["exec", "--timeout", "2", "-w"])
        .arg(ws.path())
        .args(["--", "/bin/sh", "-c", &script])
        .stdin(Stdio::null());
    let output = command.output().expect("run cordon exec");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.contains("daemon-up"),
        "the daemon never started: {output:?}"
    );
    assert_eq!(
        output.status.code(),
        Some(124),
        "a timeout exits 124: {output:?}"
    );
    let left = processes_of(&ws.path().join("daemon"), &marker);
    assert!(
        left.is_empty(),
        "daemonised children outlived the session: pids {left:?}"
    );

    // Control: coreutils `timeout` alone leaves the daemon running.
    let control_ws = workspace();
    std::fs::create_dir(control_ws.path().join("daemon")).expect("mkdir");
    let control = Command::new("timeout")
        .args(["2", "/bin/sh", "-c", &script])
        .current_dir(control_ws.path())
        .stdin(Stdio::null())
        .output()
        .expect("run timeout");
    let survivors = processes_of(&control_ws.path().join("daemon"), &marker);
    for pid in processes_of(control_ws.path(), &marker) {
        let _ = Command::new("kill").args(["-9", &pid]).status();
    }
    assert!(
        !survivors.is_empty(),
        "control: the daemon survives a plain timeout: {control:?}"
    );
}

#[test]
fn python_and_node_find_the_invoking_user() {
    let ws = workspace();
    let user = Command::new("id").arg("-un").output().expect("id -un");
    let user = String::from_utf8_lossy(&user.stdout).trim().to_owned();
    let script = format!(
        "{}; /usr/bin/node -e 'const os = require(\"os\"); console.log(\"node\", os.userInfo().username, os.homedir() === process.env.HOME)'; \
         id -un",
        python(
            "import os, pwd, getpass; entry = pwd.getpwuid(os.getuid()); \
             print('python', entry.pw_name, getpass.getuser(), os.path.expanduser('~') == os.environ['HOME'])"
        )
    );
    let run = sandboxed(
        ws.path(),
        &[OsStr::new("-e"), OsStr::new("CORDON_PROBE=1")],
        &script,
    );
    run.assert_line(&format!("python {user} {user} True"));
    run.assert_line(&format!("node {user} true"));
    run.assert_line(&user);
}
