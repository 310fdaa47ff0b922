//! Resource caps: both drivers against fake cgroupfs directories (files written with the right
//! values, the v2 leaf move, stale-group cleanup), and real enforcement on this host's cgroups (v1
//! here) — a memory cap OOM-kills, a pids cap refuses forks, a CPU quota is written. As an
//! unprivileged user (`.ci/unprivileged`) the real tests assert the refusal and its remedy
//! instead, so they never pass without checking something.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use cordon_sandbox::cgroup::{
    Caps, Cgroup, CgroupDriver, CgroupError, GroupName, V1, V2, create_for_session, host_driver,
};

// ---- v2, against a fake cgroupfs ----------------------------------------------------------------

/// A fake delegated v2 directory: the control files the kernel would show, `procs` in
/// `cgroup.procs` (cordon itself, normally).
fn fake_v2(controllers: &str, procs: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("a temporary directory");
    for (file, content) in [
        ("cgroup.controllers", controllers),
        ("cgroup.procs", procs),
        ("cgroup.subtree_control", ""),
    ] {
        std::fs::write(dir.path().join(file), content).expect("write a fake control file");
    }
    dir
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

fn only_dir(group: &Cgroup) -> PathBuf {
    let dirs: Vec<&Path> = group.dirs().collect();
    assert_eq!(dirs.len(), 1, "{dirs:?}");
    dirs[0].to_path_buf()
}

#[test]
fn v2_driver_moves_cordon_into_a_leaf_and_writes_every_limit_into_the_session_group() {
    let me = std::process::id();
    let base = fake_v2("cpuset cpu io memory pids", &format!("{me}\n"));
    let driver = V2::new(base.path().to_path_buf());
    let caps = Caps {
        memory: Some(64 << 20),
        pids: Some(32),
        cpus: Some(1.5),
    };
    let group = driver.create("s1", &caps).expect("the group is created");

    let dir = only_dir(&group);
    let name = dir
        .file_name()
        .and_then(|n| n.to_str())
        .expect("a utf-8 name");
    assert!(
        name.starts_with(&format!("cordon-{me}-")) && name.ends_with("-s1"),
        "{name}"
    );
    assert_eq!(read(&dir.join("memory.max")), "67108864");
    assert_eq!(
        read(&dir.join("memory.swap.max")),
        "0",
        "swap counts against the memory cap"
    );
    assert_eq!(read(&dir.join("pids.max")), "32");
    assert_eq!(read(&dir.join("cpu.max")), "150000 100000");
    assert_eq!(
        read(&base.path().join("cgroup.subtree_control")),
        "+memory +pids +cpu"
    );
    // No internal processes: cordon itself now sits in its own leaf beside the session group.
    let leaf = base.path().join(GroupName::host_leaf().to_string());
    assert_eq!(read(&leaf.join("cgroup.procs")), me.to_string());
    assert_eq!(group.procs_files(), [dir.join("cgroup.procs")]);
}

#[test]
fn v2_driver_enables_only_the_controllers_requested() {
    let base = fake_v2("cpu memory pids", "");
    let driver = V2::new(base.path().to_path_buf());
    let group = driver
        .create(
            "s2",
            &Caps {
                pids: Some(8),
                ..Caps::default()
            },
        )
        .expect("created");
    let dir = only_dir(&group);
    assert_eq!(read(&base.path().join("cgroup.subtree_control")), "+pids");
    assert_eq!(read(&dir.join("pids.max")), "8");
    assert!(!dir.join("memory.max").exists());
    // An empty base needs no leaf.
    assert!(
        !base
            .path()
            .join(GroupName::host_leaf().to_string())
            .exists()
    );
}

#[test]
fn v2_driver_reads_oom_kills_from_memory_events() {
    let base = fake_v2("memory", "");
    let driver = V2::new(base.path().to_path_buf());
    let caps = Caps {
        memory: Some(16 << 20),
        ..Caps::default()
    };
    let group = driver.create("s3", &caps).expect("created");
    let events = only_dir(&group).join("memory.events");
    std::fs::write(&events, "low 0\nhigh 0\nmax 12\noom 1\noom_kill 0\n").expect("write events");
    assert_eq!(group.oom_kills().expect("events read"), 0);
    std::fs::write(&events, "low 0\nhigh 0\nmax 12\noom 2\noom_kill 1\n").expect("write events");
    assert_eq!(group.oom_kills().expect("events read"), 1);
    std::fs::write(only_dir(&group).join("memory.current"), "1048576\n").expect("write usage");
    assert_eq!(group.memory_usage().expect("usage read"), Some(1 << 20));
    assert_eq!(
        group.oom_message(),
        "killed: out of memory (memory cap 16 MiB)"
    );
}

#[test]
fn v2_driver_refuses_a_cap_whose_controller_is_not_delegated() {
    let base = fake_v2("cpu pids", "");
    let driver = V2::new(base.path().to_path_buf());
    let err = driver
        .create(
            "s4",
            &Caps {
                memory: Some(1 << 30),
                ..Caps::default()
            },
        )
        .unwrap_err();
    let message = err.to_string();
    assert!(
        message.starts_with(
            "the memory cap cannot be enforced: the memory controller is not available in `"
        ),
        "{message}"
    );
    assert!(
        message.ends_with("systemd-run --user --scope -p Delegate=yes cordon …`"),
        "{message}"
    );
    // Control: the delegated controllers themselves are fine.
    assert!(
        driver
            .check(&Caps {
                pids: Some(1),
                cpus: Some(1.0),
                ..Caps::default()
            })
            .is_ok()
    );
}

#[test]
fn v2_driver_refuses_a_subtree_that_is_not_delegated() {
    let driver = V2::new(PathBuf::from("/nonexistent/cordon-test-cgroup"));
    let err = driver
        .check(&Caps {
            cpus: Some(2.0),
            ..Caps::default()
        })
        .unwrap_err();
    assert!(matches!(err, CgroupError::NotEnforceable { .. }), "{err:?}");
    let message = err.to_string();
    assert!(message.contains("is not delegated to uid"), "{message}");
    assert!(
        message.contains("systemd-run --user --scope -p Delegate=yes"),
        "{message}"
    );
    assert!(
        driver.check(&Caps::default()).is_ok(),
        "no cap requested, nothing to enforce"
    );
}

#[test]
fn drivers_refuse_bad_requests_before_touching_the_tree() {
    let base = fake_v2("cpu memory pids", "");
    let driver = V2::new(base.path().to_path_buf());
    let cases: [(&str, Caps, &str); 3] = [
        ("s5", Caps::default(), "no cap was requested"),
        (
            "../escape",
            Caps {
                pids: Some(1),
                ..Caps::default()
            },
            "invalid cgroup label `../escape`",
        ),
        (
            "s5",
            Caps {
                cpus: Some(0.0),
                ..Caps::default()
            },
            "invalid cpus cap",
        ),
    ];
    for (label, caps, expected) in cases {
        let message = driver.create(label, &caps).unwrap_err().to_string();
        assert!(message.starts_with(expected), "{message}");
    }
    let entries = std::fs::read_dir(base.path()).expect("list").count();
    assert_eq!(entries, 3, "only the three fake control files remain");
}

#[test]
fn v1_driver_writes_each_limit_into_its_own_hierarchy() {
    // A fake v1 root: one directory per controller, as /sys/fs/cgroup has.
    let root = tempfile::tempdir().expect("a temporary directory");
    for controller in ["memory", "pids", "cpu"] {
        std::fs::create_dir(root.path().join(controller)).expect("mkdir a hierarchy");
    }
    let driver = V1::under(root.path());
    let caps = Caps {
        memory: Some(256 << 20),
        pids: Some(100),
        cpus: Some(0.25),
    };
    let group = driver.create("s6", &caps).expect("the group is created");
    let dirs: Vec<PathBuf> = group.dirs().map(Path::to_path_buf).collect();
    assert_eq!(dirs.len(), 3, "{dirs:?}");
    let name = dirs[0].file_name().expect("a name").to_owned();
    let file = |controller: &str, control: &str| {
        read(&root.path().join(controller).join(&name).join(control))
    };
    assert_eq!(file("memory", "memory.limit_in_bytes"), "268435456");
    assert_eq!(file("pids", "pids.max"), "100");
    assert_eq!(file("cpu", "cpu.cfs_period_us"), "100000");
    assert_eq!(file("cpu", "cpu.cfs_quota_us"), "25000");
    let procs: Vec<PathBuf> = ["memory", "pids", "cpu"]
        .iter()
        .map(|c| root.path().join(c).join(&name).join("cgroup.procs"))
        .collect();
    assert_eq!(group.procs_files(), procs);
}

#[test]
fn v1_driver_counts_oom_kills_and_falls_back_to_the_failure_counter() {
    let root = tempfile::tempdir().expect("a temporary directory");
    std::fs::create_dir(root.path().join("memory")).expect("mkdir memory");
    let driver = V1::under(root.path());
    let caps = Caps {
        memory: Some(8 << 20),
        ..Caps::default()
    };
    let group = driver.create("s7", &caps).expect("created");
    let dir = only_dir(&group);
    std::fs::write(
        dir.join("memory.oom_control"),
        "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n",
    )
    .expect("write oom_control");
    assert_eq!(group.oom_kills().expect("read"), 2);
    // Kernels before 4.13 have no oom_kill line: a hit limit counts as one.
    std::fs::write(
        dir.join("memory.oom_control"),
        "oom_kill_disable 0\nunder_oom 0\n",
    )
    .expect("write oom_control");
    std::fs::write(dir.join("memory.failcnt"), "3\n").expect("write failcnt");
    assert_eq!(group.oom_kills().expect("read"), 1);
    std::fs::write(dir.join("memory.failcnt"), "0\n").expect("write failcnt");
    assert_eq!(group.oom_kills().expect("read"), 0);
}

#[test]
fn v1_driver_refuses_a_cap_whose_hierarchy_is_not_mounted() {
    let root = tempfile::tempdir().expect("a temporary directory");
    let driver = V1::new(vec![]);
    let message = driver
        .check(&Caps {
            pids: Some(5),
            ..Caps::default()
        })
        .unwrap_err()
        .to_string();
    assert!(
        message.starts_with("the pids cap cannot be enforced: no cgroup v1 hierarchy has the pids controller; cgroup v1 caps need root"),
        "{message}"
    );
    assert!(
        message.ends_with("`systemd-run --user --scope -p Delegate=yes cordon …`"),
        "{message}"
    );
    // Control: with the hierarchy present, the same cap is enforceable.
    std::fs::create_dir(root.path().join("pids")).expect("mkdir pids");
    assert!(
        V1::under(root.path())
            .check(&Caps {
                pids: Some(5),
                ..Caps::default()
            })
            .is_ok()
    );
}

/// A pid that certainly belongs to no running process: a child that has been reaped.
fn dead_pid() -> u32 {
    let mut child = Command::new("/bin/true").spawn().expect("spawn /bin/true");
    let pid = child.id();
    child.wait().expect("reap /bin/true");
    pid
}

#[test]
fn stale_groups_of_dead_cordon_processes_are_removed_and_live_ones_kept() {
    let me = std::process::id();
    let base = fake_v2("cpu memory pids", "");
    let live = GroupName::for_this_process("live")
        .expect("a valid label")
        .to_string();
    let dead = format!("cordon-{}-7-old", dead_pid());
    // Our pid with another start time: a previous process that had our pid (pid reuse).
    let reused = format!("cordon-{me}-1-old");
    let unrelated = "user.slice".to_owned();
    for name in [&live, &dead, &reused, &unrelated] {
        std::fs::create_dir(base.path().join(name)).expect("mkdir");
    }
    let driver = V2::new(base.path().to_path_buf());
    let cleanup = driver.cleanup_stale().expect("cleanup runs");
    let mut removed: Vec<String> = cleanup
        .removed
        .iter()
        .filter_map(|p| p.file_name()?.to_str().map(str::to_owned))
        .collect();
    removed.sort();
    let mut expected = vec![dead.clone(), reused.clone()];
    expected.sort();
    assert_eq!(removed, expected);
    assert!(cleanup.left.is_empty(), "{:?}", cleanup.left);
    assert!(base.path().join(&live).exists() && base.path().join(&unrelated).exists());
    assert!(!base.path().join(&dead).exists() && !base.path().join(&reused).exists());
}

// ---- this host's cgroups (v1 here), for real ---------------------------------------------------

/// Held by the tests that plant or clean up stale groups in this host's cgroups, which run in
/// parallel threads of one process: one test's cleanup would otherwise remove another's planted
/// group mid-test.
static STALE_GROUPS: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn is_root() -> bool {
    // The owner of /proc/self is the effective uid.
    std::os::unix::fs::MetadataExt::uid(&std::fs::metadata("/proc/self").expect("stat /proc/self"))
        == 0
}

/// The host driver when it can enforce `caps`. Root on this machine must be able to; anyone else
/// must get the refusal naming the cap and the delegation remedy — checked here, so a test that
/// returns early still asserted something.
fn enforceable(caps: &Caps) -> Option<Box<dyn CgroupDriver>> {
    let driver = host_driver();
    match driver.check(caps) {
        Ok(()) => Some(driver),
        Err(err) => {
            assert!(!is_root(), "root must be able to enforce {caps:?}: {err}");
            let message = err.to_string();
            let cap = caps.requested()[0].to_string();
            assert!(
                message.starts_with(&format!("the {cap} cap cannot be enforced: ")),
                "{message}"
            );
            assert!(
                message.contains("systemd-run --user --scope -p Delegate=yes cordon …"),
                "{message}"
            );
            let refused = driver.create("refused", caps).unwrap_err();
            assert!(
                matches!(refused, CgroupError::NotEnforceable { .. }),
                "{refused:?}"
            );
            None
        }
    }
}

/// Starts `argv` blocked on a line from stdin, so it can be moved into a group before it does
/// anything; `go` releases it.
fn spawn_held(argv: &[&str]) -> Child {
    Command::new(argv[0])
        .args(&argv[1..])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {argv:?}: {e}"))
}

fn go(child: &mut Child) {
    let stdin = child.stdin.as_mut().expect("stdin is piped");
    stdin.write_all(b"go\n").expect("release the child");
    stdin.flush().expect("flush");
}

/// Touches every page of 256 MiB after reading one line.
const ALLOCATE: [&str; 3] = [
    "/usr/bin/python3",
    "-c",
    "import sys; sys.stdin.readline(); block = b'x' * (256 << 20); print(len(block))",
];

#[test]
fn memory_cap_gets_the_process_oom_killed_and_reported() {
    let caps = Caps {
        memory: Some(32 << 20),
        ..Caps::default()
    };
    // Control: without the cap the allocation succeeds.
    let mut free = spawn_held(&ALLOCATE);
    go(&mut free);
    let output = free
        .wait_with_output()
        .expect("the uncapped allocation finishes");
    assert!(output.status.success(), "{output:?}");

    let Some(driver) = enforceable(&caps) else {
        return;
    };
    let group = driver.create("oom", &caps).expect("the group is created");
    let mut child = spawn_held(&ALLOCATE);
    group
        .add_process(child.id())
        .expect("the process moves into the group");
    // v1 charges a moved process's later allocations only, so the value may still be 0 here.
    let usage = group.memory_usage().expect("usage is readable");
    assert!(usage.is_some(), "a memory-capped group reports its usage");
    go(&mut child);
    let output = child
        .wait_with_output()
        .expect("the capped allocation ends");
    let kills = group.oom_kills().expect("the OOM counter is readable");
    let message = group.oom_message();
    group.remove().expect("the group is removed");
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(output.status.signal(), Some(9), "{output:?}");
    assert!(kills >= 1, "the kernel counted no OOM kill");
    assert_eq!(message, "killed: out of memory (memory cap 32 MiB)");
}

/// Forks eight blocked `cat`s after the first line, reports `forked`, then waits for them.
const FORK_EIGHT: [&str; 3] = [
    "/bin/sh",
    "-c",
    "exec 3<&0; read _; for i in 1 2 3 4 5 6 7 8; do cat <&3 >/dev/null & done; echo forked; wait",
];

/// Runs [`FORK_EIGHT`] in `group`, returns its `pids.current` while the cats are blocked and the
/// shell's stderr.
fn fork_eight_in(group: &Cgroup) -> (u64, String) {
    let mut child = spawn_held(&FORK_EIGHT);
    group
        .add_process(child.id())
        .expect("the shell moves into the group");
    go(&mut child);
    let mut line = String::new();
    let stdout = child.stdout.take().expect("stdout is piped");
    BufReader::new(stdout)
        .read_line(&mut line)
        .expect("read the shell's report");
    let dir = group.dirs().next().expect("a pids directory").to_path_buf();
    let current = read(&dir.join("pids.current"))
        .trim()
        .parse()
        .expect("a number");
    drop(child.stdin.take()); // EOF: the cats exit, then the shell.
    let output = child.wait_with_output().expect("the shell ends");
    (
        current,
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn pids_cap_refuses_forks_beyond_the_limit() {
    let capped = Caps {
        pids: Some(4),
        ..Caps::default()
    };
    let Some(driver) = enforceable(&capped) else {
        return;
    };
    // Control: a generous cap lets all eight forks through.
    let roomy = driver
        .create(
            "pids-roomy",
            &Caps {
                pids: Some(64),
                ..Caps::default()
            },
        )
        .expect("created");
    let (current, stderr) = fork_eight_in(&roomy);
    roomy.remove().expect("removed");
    assert_eq!(current, 9, "the shell and eight cats: {stderr}");

    let group = driver.create("pids", &capped).expect("created");
    let dir = group.dirs().next().expect("a pids directory").to_path_buf();
    assert_eq!(read(&dir.join("pids.max")).trim(), "4");
    let (current, stderr) = fork_eight_in(&group);
    let events = read(&dir.join("pids.events"));
    group.remove().expect("removed");
    assert_eq!(current, 4, "the shell and three cats, no more: {stderr}");
    assert!(
        stderr.to_lowercase().contains("fork"),
        "the shell saw forks fail: {stderr}"
    );
    assert!(
        !events.contains("max 0"),
        "the kernel counted refused forks: {events}"
    );
}

#[test]
fn cpu_quota_is_written_and_read_back() {
    let caps = Caps {
        cpus: Some(0.5),
        ..Caps::default()
    };
    let Some(driver) = enforceable(&caps) else {
        return;
    };
    let group = driver.create("cpu", &caps).expect("created");
    let dir = group.dirs().next().expect("a cpu directory").to_path_buf();
    let (quota, period) = if dir.join("cpu.max").exists() {
        let max = read(&dir.join("cpu.max"));
        let mut parts = max.split_whitespace();
        (
            parts.next().unwrap_or("").to_owned(),
            parts.next().unwrap_or("").to_owned(),
        )
    } else {
        (
            read(&dir.join("cpu.cfs_quota_us")),
            read(&dir.join("cpu.cfs_period_us")),
        )
    };
    group.remove().expect("removed");
    assert_eq!((quota.trim(), period.trim()), ("50000", "100000"));
}

#[test]
fn leftover_groups_of_a_killed_run_are_removed_at_the_next_start() {
    let _guard = STALE_GROUPS.lock().unwrap_or_else(|e| e.into_inner());
    let caps = Caps {
        pids: Some(16),
        ..Caps::default()
    };
    let Some(driver) = enforceable(&caps) else {
        return;
    };
    let live = driver.create("live", &caps).expect("created");
    let live_dir = live.dirs().next().expect("a directory").to_path_buf();
    // A group as a killed cordon would have left it: named after a process that is gone.
    let parent = live_dir.parent().expect("a parent").to_path_buf();
    let stale = parent.join(format!("cordon-{}-7-killed", dead_pid()));
    std::fs::create_dir(&stale).expect("mkdir a stale group");
    // A process still inside it, as a session that outlived its cordon would be.
    let mut straggler = spawn_held(&["/bin/cat"]);
    std::fs::write(stale.join("cgroup.procs"), straggler.id().to_string()).expect("move it in");

    let cleanup = driver.cleanup_stale().expect("cleanup runs");
    let status = straggler.wait().expect("the straggler ends");
    let live_kept = live_dir.exists();
    live.remove().expect("removed");
    assert!(cleanup.removed.contains(&stale), "{cleanup:?}");
    assert!(!stale.exists());
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(status.signal(), Some(9), "the straggler was killed");
    assert!(live_kept, "a live cordon's group stays");
}

#[test]
fn a_session_without_caps_gets_no_group_and_one_with_caps_gets_its_group() {
    let _guard = STALE_GROUPS.lock().unwrap_or_else(|e| e.into_inner());
    assert!(
        create_for_session("none", &Caps::default())
            .expect("nothing to enforce")
            .is_none()
    );
    let caps = Caps {
        pids: Some(32),
        memory: Some(64 << 20),
        cpus: None,
    };
    if enforceable(&caps).is_none() {
        // Unprivileged: the refusal comes before anything is created (checked by `enforceable`).
        let err = create_for_session("capped", &caps).unwrap_err();
        assert!(matches!(err, CgroupError::NotEnforceable { .. }), "{err:?}");
        return;
    }
    let group = create_for_session("capped", &caps)
        .expect("created")
        .expect("a group");
    let dirs: Vec<PathBuf> = group.dirs().map(Path::to_path_buf).collect();
    assert_eq!(
        dirs.len(),
        2,
        "one directory per v1 controller or one v2 group: {dirs:?}"
    );
    assert!(dirs.iter().all(|d| d.is_dir()));
    group.remove().expect("removed");
    assert!(dirs.iter().all(|d| !d.exists()));
}
