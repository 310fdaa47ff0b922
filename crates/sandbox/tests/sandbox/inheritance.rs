//! What the processes cordon clones inherit from the host process: none of its open descriptors,
//! and (for an init started in-process by one-shot `cordon exec`) not its command line. Run
//! through the one-shot runner, the test binary's stand-in for `cordon exec`.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use crate::support::*;

/// The one-shot runner (`cordon-sandbox-one-shot WORKSPACE CMD...`), like `cordon exec`.
fn one_shot() -> Command {
    let mut command = Command::new(init_path());
    command.arg0("cordon-sandbox-one-shot");
    command
}

#[test]
fn an_in_process_init_shows_no_host_argument_in_its_command_line() {
    let ws = workspace();
    let marker = format!("cordon-host-arg-{}", unique());
    let script = "tr '\\0' ' ' </proc/1/cmdline; echo; cat /proc/1/comm; \
        wc -c </proc/1/cmdline; tr '\\0' ' ' </proc/self/cmdline; echo";
    let output = one_shot()
        .arg(ws.path())
        .args(["/bin/sh", "-c", script, &marker])
        .stdin(Stdio::null())
        .output()
        .expect("run the one-shot runner");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    let lines: Vec<&str> = stdout.lines().collect();
    let [init_cmdline, init_comm, init_len, own_cmdline] = lines[..] else {
        panic!("unexpected output: {stdout}\n{stderr}");
    };
    assert_eq!(init_cmdline.trim_end(), "cordon-init");
    assert_eq!(init_comm, "cordon-init");
    // The area is still the runner's argv's size, zero-filled: init really was the in-process
    // fork (an exec'd init's command line is exactly `cordon-init\0`).
    let len: usize = init_len.trim().parse().expect("a byte count");
    assert!(len > "cordon-init\0".len() + marker.len(), "{len}");
    // The control: the marker is in the host argv, so the workload's own command line shows it.
    assert!(own_cmdline.contains(&marker), "{own_cmdline}");
    assert!(!init_cmdline.contains(&marker));
}

/// The paths of the files `pid` has open; `None` when its table cannot be read (another uid's
/// non-dumpable process, unprivileged).
fn open_files(pid: u32) -> Option<Vec<PathBuf>> {
    let entries = std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?;
    Some(
        entries
            .flatten()
            .filter_map(|e| std::fs::read_link(e.path()).ok())
            .collect(),
    )
}

fn parent_of(pid: u32) -> u32 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("stat");
    let after = &stat[stat.rfind(')').expect("a stat line") + 1..];
    after
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .expect("a parent pid")
}

#[test]
fn a_descriptor_the_host_leaks_reaches_neither_init_nor_the_workload() {
    let ws = workspace();
    let lock = ws.path().join("run.lock");
    std::fs::write(&lock, "").expect("lock file");
    let fifo = ws.path().join("release");
    let made = Command::new("mkfifo").arg(&fifo).status().expect("mkfifo");
    assert!(made.success());
    let marker = format!("cordon-leak-{}", unique());
    // bash opens the lock file at descriptor 7 without close-on-exec (as a careless library or
    // a lock held across exec would) and execs the runner, which then holds it as its own.
    let runner = init_path();
    let mut child = Command::new("bash")
        .args([
            "-c",
            "exec 7<\"$0\"; exec -a cordon-sandbox-one-shot \"$@\"",
            lock.to_str().expect("utf-8"),
            runner.to_str().expect("utf-8"),
            ws.path().to_str().expect("utf-8"),
            "/bin/sh",
            "-c",
            "echo ready; read x < release",
            &marker,
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .expect("run the one-shot runner");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout"));
    let mut line = String::new();
    lines.read_line(&mut line).expect("read");
    // The workload is waiting on the FIFO, so the session is up: init and the workload live.
    let runner_pid = child.id();
    // The workload is the shell; the runner's argv holds the marker too.
    let workloads: Vec<u32> = host_processes_with(&marker)
        .into_iter()
        .filter(|pid| {
            *pid != runner_pid
                && std::fs::read(format!("/proc/{pid}/cmdline"))
                    .is_ok_and(|c| c.starts_with(b"/bin/sh\0"))
        })
        .collect();
    let holders = |pid: u32| open_files(pid).map(|files| files.iter().any(|f| f == &lock));
    let findings = workloads
        .iter()
        .map(|pid| (*pid, holders(*pid), parent_of(*pid)))
        .collect::<Vec<_>>();
    let init = findings.first().map(|(_, _, parent)| *parent);
    let init_holds = init.map(holders);
    let runner_holds = holders(runner_pid);
    // Release the workload (opening the FIFO's write end completes its read), and finish.
    std::fs::OpenOptions::new()
        .write(true)
        .open(&fifo)
        .and_then(|mut f| f.write_all(b"\n"))
        .expect("release the workload");
    let status = child.wait().expect("wait");
    assert_eq!(line, "ready\n");
    assert!(status.success(), "{status:?}");
    // The control: the runner holds the descriptor, so the probe sees it where it is open.
    assert_eq!(
        runner_holds,
        Some(true),
        "the runner must hold the lock file"
    );
    assert_eq!(workloads.len(), 1, "one workload: {findings:?}");
    assert_eq!(
        findings[0].1,
        Some(false),
        "the workload holds it: {findings:?}"
    );
    // Init is non-dumpable; only root can read its table. Unprivileged, the workload's table is
    // what shows that nothing came through init.
    match init_holds {
        Some(Some(held)) => assert!(!held, "init holds the lock file"),
        Some(None) => assert!(!running_as_root(), "root must be able to read init's table"),
        None => panic!("no init found: {findings:?}"),
    }
}
