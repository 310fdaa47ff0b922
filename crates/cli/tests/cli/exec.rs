//! `cordon exec`: the command's stdin, stdout, stderr and status pass through; cordon's own
//! messages are on stderr as `cordon: ...`; the exit codes of DESIGN Appendix A; a missing layer
//! refuses with 125 and names the remedy. The sandbox's layers themselves are tested in the
//! sandbox crate and, as attacks, in `escape`.

use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use crate::support::{cordon, cordon_bin};

fn workspace() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("cordon-exec-")
        .tempdir()
        .expect("a temporary workspace")
}

/// `cordon exec -w ws OPTIONS -- COMMAND`, stdin closed.
pub fn exec(ws: &Path, options: &[&str], command: &[&str]) -> Output {
    cordon()
        .arg("exec")
        .arg("-w")
        .arg(ws)
        .args(options)
        .arg("--")
        .args(command)
        .env_remove("CORDON_PROBE_REMOVE")
        .stdin(Stdio::null())
        .output()
        .expect("run cordon exec")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn exec_passes_output_and_exit_status_through() {
    let ws = workspace();
    let out = exec(
        ws.path(),
        &[],
        &["/bin/sh", "-c", "echo out; echo err >&2; exit 42"],
    );
    assert_eq!(
        (out.status.code(), text(&out.stdout), text(&out.stderr)),
        (Some(42), "out\n".into(), "err\n".into())
    );
}

#[test]
fn exec_reports_signals_missing_and_unexecutable_programs_with_the_contract_codes() {
    let ws = workspace();
    std::fs::write(ws.path().join("script"), "#!/bin/sh\n").expect("write");
    let rows: [(&[&str], i32, &str); 4] = [
        (&["/bin/sh", "-c", "kill -KILL $$"], 137, ""),
        (
            &["no-such-program-anywhere"],
            127,
            "cordon: `no-such-program-anywhere` not found in the sandbox (check PATH and the mounted paths)\n",
        ),
        (
            &["./script"],
            126,
            "cordon: `./script` is not executable in the sandbox\n",
        ),
        (&["true"], 0, ""),
    ];
    for (command, code, stderr) in rows {
        let out = exec(ws.path(), &[], command);
        assert_eq!(
            (out.status.code(), text(&out.stderr).as_str()),
            (Some(code), stderr),
            "{command:?}"
        );
        assert!(out.stdout.is_empty(), "cordon wrote to stdout: {out:?}");
    }
}

#[test]
fn usage_errors_exit_125_and_name_the_fix() {
    let ws = workspace();
    let missing = ws.path().join("missing");
    let rows: [(&Path, &[&str], &str); 5] = [
        (
            ws.path(),
            &["--net", "wide"],
            "cordon: `--net wide` is not a network mode; use `--net none` or `--net open`\n",
        ),
        (
            ws.path(),
            &["--net", "open", "--allow", "example.com"],
            "cordon: `--net open` already allows every name and port; drop `--allow`",
        ),
        (
            ws.path(),
            &["-e", "NOVALUE"],
            "cordon: `-e NOVALUE` is not KEY=VALUE; write it as `-e NAME=value`\n",
        ),
        (
            ws.path(),
            &["--timeout", "0"],
            "cordon: `--timeout 0` would kill the command at once; give at least 1 second\n",
        ),
        (&missing, &[], "cordon: cannot open the workspace"),
    ];
    for (workspace, options, message) in rows {
        let out = exec(workspace, options, &["true"]);
        assert_eq!(out.status.code(), Some(125), "{options:?}: {out:?}");
        assert!(
            text(&out.stderr).starts_with(message),
            "{options:?}: {}",
            text(&out.stderr)
        );
        assert!(out.stdout.is_empty());
    }
    // A timeout that is not whole seconds is a clap usage error, with the fix.
    for value in ["1.5", "soon"] {
        let out = exec(ws.path(), &["--timeout", value], &["true"]);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(125), "{value}: {stderr}");
        assert!(
            stderr.contains(&format!(
                "`--timeout {value}` is not a whole number of seconds; write it like `--timeout 60`"
            )),
            "{value}: {stderr}"
        );
    }
    // No command at all is a clap usage error, also 125.
    let out = cordon()
        .args(["exec", "-w"])
        .arg(ws.path())
        .output()
        .expect("run cordon exec");
    assert_eq!(out.status.code(), Some(125));
}

#[test]
fn the_sandboxs_pid_1_shows_none_of_the_hosts_arguments() {
    let ws = workspace();
    let marker = "HOST-ARGUMENT-MARKER";
    let out = exec(
        ws.path(),
        &["--env", &format!("UNUSED={marker}")],
        &[
            "/bin/sh",
            "-c",
            "tr '\\0' ' ' </proc/1/cmdline; echo; tr '\\0' ' ' </proc/self/cmdline",
            marker,
        ],
    );
    let stdout = text(&out.stdout);
    let (init, own) = stdout.split_once('\n').expect("two lines");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(!init.contains(marker) && !init.contains("exec"), "{init:?}");
    assert!(init.starts_with("cordon-init"), "{init:?}");
    // Control: the marker is on the command line, where the workload itself sees it.
    assert!(own.contains(marker), "{own:?}");
}

#[test]
fn timeout_exits_124_and_says_so() {
    let ws = workspace();
    let out = exec(
        ws.path(),
        &["--timeout", "1"],
        &["/bin/sh", "-c", "sleep 600 & sleep 600"],
    );
    assert_eq!(out.status.code(), Some(124), "{out:?}");
    assert_eq!(
        text(&out.stderr),
        "cordon: `/bin/sh` timed out after 1 s; it and every process it started were killed\n"
    );
}

#[test]
fn stdin_passes_through() {
    let ws = workspace();
    let mut child = cordon()
        .arg("exec")
        .arg("-w")
        .arg(ws.path())
        .args(["--", "tr", "a-z", "A-Z"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("run cordon exec");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(b"piped\n")
        .expect("write");
    let out = child.wait_with_output().expect("wait");
    assert_eq!(
        (out.status.code(), text(&out.stdout)),
        (Some(0), "PIPED\n".into())
    );
}

#[test]
fn environment_is_scrubbed_to_the_declared_variables() {
    let ws = workspace();
    let mut command = cordon();
    command
        .arg("exec")
        .arg("-w")
        .arg(ws.path())
        .args(["-e", "DECLARED=yes", "--", "env"])
        .env("AWS_SECRET_ACCESS_KEY", "host-secret")
        .env("LD_PRELOAD", "/host/lib.so")
        .env("XDG_RUNTIME_DIR", "/run/user/0")
        .env("LANG", "C.UTF-8")
        .env("TZ", "Europe/Berlin")
        .env_remove("TERM");
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("LC_") {
            command.env_remove(name);
        }
    }
    let out = command.output().expect("run cordon exec");
    let env = text(&out.stdout);
    let mut names: Vec<&str> = env
        .lines()
        .filter_map(|l| l.split_once('=').map(|(k, _)| k))
        .collect();
    names.sort_unstable();
    assert_eq!(
        names,
        [
            "DECLARED",
            "HOME",
            "LANG",
            "LOGNAME",
            "PATH",
            "PYTHONPYCACHEPREFIX",
            "TZ",
            "USER",
            "XDG_RUNTIME_DIR"
        ],
        "{env}"
    );
    assert!(
        !env.contains("host-secret")
            && !env.contains("/run/user/0")
            && env.contains("DECLARED=yes\n")
            && env.contains("LANG=C.UTF-8\n")
            && env.contains("TZ=Europe/Berlin\n")
    );
}

#[test]
fn descriptors_of_the_caller_do_not_leak_in() {
    let ws = workspace();
    // The caller holds descriptor 7 open across exec; the sandboxed `ls` must see only 0-2 and
    // its own directory handle.
    let script = format!(
        "exec 7</etc/hostname; exec {} exec -w {} -- ls /proc/self/fd",
        cordon_bin().display(),
        ws.path().display()
    );
    let out = Command::new("/bin/bash")
        .arg("-c")
        .arg(&script)
        .env_remove("CORDON_PROBE_REMOVE")
        .output()
        .expect("run bash");
    assert_eq!(text(&out.stdout), "0\n1\n2\n3\n", "{out:?}");
    // Control: without the sandbox, the same `ls` sees descriptor 7.
    let control = Command::new("/bin/bash")
        .arg("-c")
        .arg("exec 7</etc/hostname; exec ls /proc/self/fd")
        .output()
        .expect("run bash");
    assert!(
        text(&control.stdout).lines().any(|l| l == "7"),
        "{control:?}"
    );
}

#[test]
fn a_missing_required_layer_refuses_with_125_and_the_remedy() {
    let ws = workspace();
    for layer in ["landlock", "seccomp", "user_namespaces"] {
        let out = cordon()
            .arg("exec")
            .arg("-w")
            .arg(ws.path())
            .args(["--", "/bin/sh", "-c", "echo ran > ran"])
            .env("CORDON_PROBE_REMOVE", layer)
            .output()
            .expect("run cordon exec");
        assert_eq!(out.status.code(), Some(125), "{layer}: {out:?}");
        let stderr = text(&out.stderr);
        assert!(
            stderr.starts_with(&format!(
                "cordon: refusing to run: the sandbox layer `{layer}` is not available"
            )),
            "{stderr}"
        );
        assert!(
            stderr.contains("unset CORDON_PROBE_REMOVE"),
            "no remedy: {stderr}"
        );
        assert!(
            !ws.path().join("ran").exists(),
            "the command ran although {layer} is missing"
        );
    }
    // Control: with every layer the same command runs.
    let out = exec(ws.path(), &[], &["/bin/sh", "-c", "echo ran > ran"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(ws.path().join("ran").exists());
}

#[test]
fn a_host_without_user_namespaces_gets_125_with_the_remedy() {
    let ws = workspace();
    // A user namespace in which no further user namespace may be created: what a host with
    // `user.max_user_namespaces = 0` looks like to cordon.
    let script = format!(
        "echo 0 > /proc/sys/user/max_user_namespaces && exec {} exec -w {} -- /bin/sh -c 'echo ran > ran'",
        cordon_bin().display(),
        ws.path().display()
    );
    let out = Command::new("unshare")
        .args(["-U", "-r", "/bin/sh", "-c", &script])
        .env_remove("CORDON_PROBE_REMOVE")
        .output()
        .expect("run unshare");
    assert_eq!(out.status.code(), Some(125), "{out:?}");
    let stderr = text(&out.stderr);
    assert!(
        stderr.starts_with(
            "cordon: refusing to run: the sandbox layer `user_namespaces` is not available"
        ),
        "{stderr}"
    );
    assert!(!ws.path().join("ran").exists());
}

/// Whether this host lets cordon enforce `caps` (as root on cgroup v1, or in a delegated v2
/// subtree); each cap test then checks enforcement, or the refusal with the remedy.
fn enforceable(caps: &cordon_sandbox::cgroup::Caps) -> bool {
    cordon_sandbox::cgroup::host_driver().check(caps).is_ok()
}

#[test]
fn a_memory_cap_kills_an_oversized_allocation_with_137_and_says_why() {
    let ws = workspace();
    let allocate = [
        "/usr/bin/python3",
        "-c",
        "b = bytearray(200 << 20); print(len(b))",
    ];
    let caps = cordon_sandbox::cgroup::Caps {
        memory: Some(32 << 20),
        ..Default::default()
    };
    let out = exec(ws.path(), &["--memory", "32M"], &allocate);
    if enforceable(&caps) {
        assert_eq!(out.status.code(), Some(137), "{}", text(&out.stderr));
        assert_eq!(text(&out.stdout), "");
        assert!(
            text(&out.stderr).contains("cordon: killed: out of memory (memory cap 32 MiB)"),
            "{}",
            text(&out.stderr)
        );
    } else {
        assert_refused_with_the_remedy(&out, "memory");
    }
    // Control: without the cap the allocation succeeds.
    let out = exec(ws.path(), &[], &allocate);
    assert_eq!(
        (out.status.code(), text(&out.stdout)),
        (Some(0), "209715200\n".into())
    );
}

/// Forks up to 20 children that wait on a pipe, and prints how many forks succeeded.
const FORK_COUNT: &str = r#"import os
r, w = os.pipe()
n = 0
for _ in range(20):
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        os.close(w); os.read(r, 1); os._exit(0)
    n += 1
print(n, flush=True)
os.close(w)
"#;

#[test]
fn a_pids_cap_stops_a_fork_bomb() {
    let ws = workspace();
    let caps = cordon_sandbox::cgroup::Caps {
        pids: Some(8),
        ..Default::default()
    };
    let fork = ["/usr/bin/python3", "-c", FORK_COUNT];
    let out = exec(ws.path(), &["--pids", "8"], &fork);
    if enforceable(&caps) {
        let forked: u32 = text(&out.stdout).trim().parse().expect("a count");
        assert!(forked < 8, "{forked} forks under a cap of 8");
    } else {
        assert_refused_with_the_remedy(&out, "pids");
    }
    // Control: without the cap all 20 forks succeed.
    let out = exec(ws.path(), &[], &fork);
    assert_eq!(text(&out.stdout), "20\n", "{}", text(&out.stderr));
}

#[track_caller]
fn assert_refused_with_the_remedy(out: &Output, cap: &str) {
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{stderr}");
    assert_eq!(text(&out.stdout), "", "nothing ran");
    assert!(
        stderr.starts_with(&format!(
            "cordon: refusing to run: the {cap} cap cannot be enforced"
        )) && stderr.contains("systemd-run --user --scope -p Delegate=yes"),
        "{stderr}"
    );
}

#[test]
fn an_invalid_cap_exits_125_and_names_the_accepted_forms() {
    let ws = workspace();
    let out = exec(ws.path(), &["--memory", "lots"], &["/bin/true"]);
    assert_eq!(out.status.code(), Some(125));
    assert!(
        text(&out.stderr).contains("`--memory lots`: invalid size `lots`")
            && text(&out.stderr).contains("`512M`"),
        "{}",
        text(&out.stderr)
    );
}

/// Runs `argv` under a seccomp filter that refuses only `sched_setaffinity` (EPERM), as a systemd
/// `SystemCallFilter=~@resources` unit or an SELinux domain without `setsched` would. Python's
/// ctypes loads the filter: no compiler and no `unsafe` in the tests.
fn without_sched_setaffinity(argv: &[&str]) -> Output {
    const WRAPPER: &str = r#"
import ctypes, os, struct, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.prctl.argtypes = [ctypes.c_int] + [ctypes.c_ulong] * 4
NR_SCHED_SETAFFINITY = 203  # x86_64
insns = [
    (0x20, 0, 0, 0),                     # load the call number
    (0x15, 0, 1, NR_SCHED_SETAFFINITY),  # sched_setaffinity?
    (0x06, 0, 0, 0x00050000 | 1),        # -> EPERM
    (0x06, 0, 0, 0x7fff0000),            # everything else allowed
]
code = b"".join(struct.pack("HBBI", *i) for i in insns)
buf = ctypes.create_string_buffer(code)
prog = struct.pack("HxxxxxxQ", len(insns), ctypes.addressof(buf))
prog_buf = ctypes.create_string_buffer(prog)
if libc.prctl(38, 1, 0, 0, 0) != 0 or libc.prctl(22, 2, ctypes.addressof(prog_buf), 0, 0) != 0:
    sys.exit("cannot load the filter: errno %d" % ctypes.get_errno())
os.execv(sys.argv[1], sys.argv[1:])
"#;
    Command::new("python3")
        .args(["-c", WRAPPER])
        .args(argv)
        .env_remove("CORDON_PROBE_REMOVE")
        .stdin(Stdio::null())
        .output()
        .expect("run python3")
}

/// This process's `Cpus_allowed_list` line of `/proc/self/status`, with its newline.
fn host_cpus() -> String {
    let status = std::fs::read_to_string("/proc/self/status").expect("read our own status");
    let line = status
        .lines()
        .find(|line| line.starts_with("Cpus_allowed_list"))
        .expect("a Cpus_allowed_list line");
    format!("{line}\n")
}

#[cfg(target_arch = "x86_64")]
#[test]
fn exec_works_on_a_host_that_refuses_to_move_processes_between_cpus() {
    // The control: under the wrapper, moving a process between CPUs is refused.
    let refused = without_sched_setaffinity(&[
        "/usr/bin/python3",
        "-c",
        "import os\ntry:\n os.sched_setaffinity(0, os.sched_getaffinity(0))\nexcept PermissionError:\n print('refused')",
    ]);
    assert_eq!(
        text(&refused.stdout),
        "refused\n",
        "{}",
        text(&refused.stderr)
    );
    // cordon moves a freshly cloned init off its CPU only as a hint: refused, it still starts,
    // and the command sees every CPU the host has.
    let ws = workspace();
    let cordon = cordon_bin();
    let out = without_sched_setaffinity(&[
        cordon.to_str().expect("a UTF-8 path"),
        "exec",
        "-w",
        ws.path().to_str().expect("a UTF-8 path"),
        "--",
        "/bin/sh",
        "-c",
        "grep Cpus_allowed_list /proc/self/status",
    ]);
    assert_eq!(
        (out.status.code(), text(&out.stdout)),
        (Some(0), host_cpus()),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn a_command_sees_every_cpu_the_host_may_use() {
    // The cloned init is moved off the host's CPU while it starts and must take every CPU back
    // before anything runs in the sandbox.
    let ws = workspace();
    let out = exec(
        ws.path(),
        &[],
        &["/bin/sh", "-c", "grep Cpus_allowed_list /proc/self/status"],
    );
    assert_eq!(
        (out.status.code(), text(&out.stdout)),
        (Some(0), host_cpus()),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn a_workspace_the_user_cannot_read_is_refused_with_the_fix() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::Builder::new()
        .prefix("cordon-exec-unreadable-")
        .tempdir()
        .expect("a temporary directory");
    let locked = dir.path().join("locked");
    std::fs::create_dir(&locked).expect("mkdir");
    std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o000)).expect("chmod");
    // Root reads anything: as root the command runs as uid 65534, to whom the directory (root's,
    // mode 000) is closed; unprivileged, the mode closes it to its own owner.
    let root = std::fs::metadata(dir.path()).expect("stat").uid() == 0;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let mut command = if root {
        let mut c = Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(cordon_bin())
            .env("HOME", "/");
        c
    } else {
        Command::new(cordon_bin())
    };
    let out = command
        .arg("exec")
        .arg("-w")
        .arg(&locked)
        .args(["--", "true"])
        .stdin(Stdio::null())
        .output()
        .expect("run cordon exec");
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{stderr}");
    assert!(
        stderr.contains("cannot be read by this user")
            && stderr.contains("pass a directory you can read and write with -w"),
        "{stderr}"
    );
    // The control: readable again, the same command runs.
    std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o777)).expect("chmod");
    let out = command.output().expect("run cordon exec");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
}

#[test]
fn the_operators_env_pass_reaches_the_sandbox_with_the_files_it_names_read_only() {
    let ws = workspace();
    let dir = tempfile::tempdir().expect("tempdir");
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, "corporate root\n").expect("write");
    let policy = dir.path().join("policy.toml");
    std::fs::write(
        &policy,
        "[env]\npass = [\"CORDON_PASS_TEST\", \"CORDON_CA\", \"CORDON_UNSET_HERE\"]\n",
    )
    .expect("write");
    let script = "echo \"pass=$CORDON_PASS_TEST\"; cat \"$CORDON_CA\"; \
                  (echo x >> \"$CORDON_CA\") 2>/dev/null && echo wrote || echo read-only; \
                  echo \"unset=${CORDON_UNSET_HERE-none}\"; echo \"other=${CORDON_OTHER-none}\"";
    let run = |with_policy: bool| {
        let mut command = cordon();
        command.arg("exec").arg("-w").arg(ws.path());
        if with_policy {
            command.arg(format!("--policy={}", policy.display()));
        }
        command
            .args(["--", "sh", "-c", script])
            .env("CORDON_PASS_TEST", "hello")
            .env("CORDON_CA", &ca)
            .env("CORDON_OTHER", "not passed")
            .env_remove("CORDON_UNSET_HERE")
            .output()
            .expect("cordon exec")
    };
    let out = run(true);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        "pass=hello\ncorporate root\nread-only\nunset=none\nother=none\n"
    );
    assert_eq!(
        std::fs::read_to_string(&ca).expect("read"),
        "corporate root\n"
    );
    // Control: without the policy neither the variable nor the file reaches the sandbox.
    let out = run(false);
    assert!(
        text(&out.stdout).starts_with("pass=\n"),
        "{}",
        text(&out.stdout)
    );
    assert!(!text(&out.stdout).contains("corporate root"));
}
