//! Processes: a fresh /proc with only the session's processes, host processes out of reach, init's
//! executable out of reach, no capabilities, no inherited descriptors.

use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};

use crate::support::*;

#[test]
fn proc_shows_only_sandbox_processes_and_host_processes_cannot_be_killed() {
    let ws = workspace();
    let mut victim = Command::new("/bin/sleep")
        .arg("600")
        .stdin(Stdio::null())
        .spawn()
        .expect("start a host process");
    let pid = victim.id();
    let mut session = open(ws.path());
    let out = sh(
        &mut session,
        &format!(
            "for p in /proc/[0-9]*; do cat $p/comm; done; kill -9 {pid} 2>/dev/null && echo killed"
        ),
    );
    let text = stdout(&out);
    assert!(
        !text.lines().any(|l| l == "sleep"),
        "a host process is visible:\n{text}"
    );
    assert!(!text.contains("killed"), "{text}");
    assert!(
        text.lines().count() <= 4,
        "more than the session's own processes:\n{text}"
    );
    assert!(
        matches!(victim.try_wait(), Ok(None)),
        "the host process died"
    );
    // Control: the host sees its own process, and can kill it.
    assert!(std::path::Path::new(&format!("/proc/{pid}")).exists());
    victim.kill().expect("the host can kill it");
    let _ = victim.wait();
}

#[test]
fn init_and_its_executable_are_out_of_reach() {
    let ws = workspace();
    let mut session = open(ws.path());
    let out = stdout(&sh(
        &mut session,
        "readlink /proc/1/exe && echo exe-link; cat /proc/1/exe >/dev/null 2>&1 && echo exe-read; ls /proc/1/fd >/dev/null 2>&1 && echo fds; readlink /proc/self/exe >/dev/null && echo control",
    ));
    assert_eq!(
        out, "control\n",
        "init is reachable from the workload: {out}"
    );
}

#[test]
fn workloads_have_no_capabilities() {
    let ws = workspace();
    let mut session = open(ws.path());
    let status = stdout(&sh(&mut session, "grep ^Cap /proc/self/status"));
    let lines: Vec<&str> = status.lines().collect();
    assert_eq!(lines.len(), 5, "{status}");
    for line in lines {
        assert!(
            line.ends_with("0000000000000000"),
            "a capability set is not empty: {line}"
        );
    }
    // Control: the probe reads a non-empty set where one exists (the host's bounding set).
    let host = std::fs::read_to_string("/proc/self/status").expect("read status");
    assert!(
        host.lines()
            .any(|l| l.starts_with("CapBnd:") && !l.ends_with("0000000000000000")),
        "{host}"
    );
}

#[test]
fn workloads_inherit_only_stdin_stdout_and_stderr() {
    let ws = workspace();
    let mut session = open(ws.path());
    // `ls` itself holds one descriptor (3) on the directory it lists.
    let fds = stdout(&sh(&mut session, "ls /proc/self/fd"));
    assert_eq!(fds, "0\n1\n2\n3\n");
    // Control: the host process has more open (at least the session's control socket).
    assert!(std::fs::read_dir("/proc/self/fd").expect("list").count() > 4);
}

#[test]
fn a_one_shot_init_without_exec_keeps_the_host_memory_out_of_reach() {
    let ws = workspace();
    let secret = format!("cordon-secret-{}", std::process::id());
    let script = "wc -c </proc/1/cmdline; \
        cat /proc/1/environ >/dev/null 2>&1 && echo environ; \
        head -c 16 /proc/1/mem >/dev/null 2>&1 && echo mem; \
        readlink /proc/1/exe >/dev/null 2>&1 && echo exe-link; \
        cat /proc/1/exe >/dev/null 2>&1 && echo exe-read; \
        ls /proc/1/fd >/dev/null 2>&1 && echo fds; \
        grep -q HOME= /proc/self/environ && echo control";
    let output = Command::new(init_path())
        .arg0("cordon-sandbox-one-shot")
        .arg(ws.path())
        .args(["/bin/sh", "-c", script])
        .env("CORDON_TEST_SECRET", &secret)
        .stdin(Stdio::null())
        .output()
        .expect("run the one-shot runner");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    let mut lines = stdout.lines();
    // Init is the runner itself, forked without exec: its command line area is the runner's
    // argv's, zero-filled behind `cordon-init` (an exec'd init's is exactly `cordon-init\0`), so
    // this test exercises the in-process path.
    let cmdline_len: usize = lines.next().unwrap_or_default().trim().parse().unwrap_or(0);
    assert!(
        cmdline_len > "cordon-init\0".len(),
        "init was not started in-process: {cmdline_len}"
    );
    // Nothing of init's memory, environment, executable or descriptors is reachable; the
    // workload's own environment is (the control).
    assert_eq!(lines.collect::<Vec<_>>(), ["control"], "{stdout}\n{stderr}");
    assert!(!stdout.contains(&secret) && !stderr.contains(&secret));
}
