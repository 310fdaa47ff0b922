//! Landlock applied for real, in a child process (it cannot be undone), judged by what happened to
//! files on the host.

use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::Command;

use super::{LandlockError, Rules, restrict};

/// The environment variable that turns the re-executed test binary into the child below.
const CHILD: &str = "CORDON_LANDLOCK_TEST_CHILD";
const TEST_NAME: &str = "landlock::tests::restricted_process_writes_only_where_the_rules_allow";

fn system_dirs() -> Vec<PathBuf> {
    ["/usr", "/bin", "/sbin", "/lib", "/lib64", "/etc", "/proc"]
        .iter()
        .map(PathBuf::from)
        .collect()
}

/// `CORDON_TEST_MISSING` lists the layers CI declares absent (STYLE rule 12).
fn declared_missing(layer: &str) -> bool {
    std::env::var("CORDON_TEST_MISSING")
        .is_ok_and(|list| list.split(',').any(|item| item.trim() == layer))
}

#[test]
fn restricted_process_writes_only_where_the_rules_allow() {
    if let Some(mode) = std::env::var_os(CHILD) {
        // Child: the directories come from the parent; report each attempt on stdout.
        let inside = PathBuf::from(std::env::var_os("INSIDE").expect("INSIDE"));
        let outside = PathBuf::from(std::env::var_os("OUTSIDE").expect("OUTSIDE"));
        if mode == "restricted" {
            let status = restrict(&Rules {
                read_exec: system_dirs(),
                read_write: vec![inside.clone()],
                devices: vec![PathBuf::from("/dev/null")],
            })
            .expect("restrict");
            println!("status {status:?}");
        }
        for dir in [&inside, &outside] {
            let result = std::fs::write(dir.join("probe"), "x");
            println!(
                "write {} {}",
                dir.display(),
                if result.is_ok() { "ok" } else { "refused" }
            );
        }
        let null = std::fs::OpenOptions::new()
            .write(true)
            .truncate(true)
            .open("/dev/null");
        println!("devnull {}", if null.is_ok() { "ok" } else { "refused" });
        let listed = std::fs::read_dir(outside.parent().unwrap_or(Path::new("/")));
        println!(
            "list-outside-parent {}",
            if listed.is_ok() { "ok" } else { "refused" }
        );
        // Scopes: an abstract socket and a process (the parent test) created outside the domain.
        let name = std::env::var("ABSTRACT").expect("ABSTRACT");
        let address = SocketAddr::from_abstract_name(name.as_bytes()).expect("abstract address");
        let connected = UnixStream::connect_addr(&address);
        println!(
            "abstract {}",
            if connected.is_ok() { "ok" } else { "refused" }
        );
        let parent = std::env::var("PARENT").expect("PARENT");
        let signalled = Command::new("/bin/sh")
            .args(["-c", &format!("kill -0 {parent} 2>/dev/null")])
            .status()
            .is_ok_and(|status| status.success());
        println!("signal {}", if signalled { "ok" } else { "refused" });
        return;
    }
    let name = format!("cordon-landlock-test-{}", std::process::id());
    let address = SocketAddr::from_abstract_name(name.as_bytes()).expect("abstract address");
    let _listener = UnixListener::bind_addr(&address).expect("bind an abstract socket");
    let run = |mode: &str| {
        let inside = tempfile::tempdir().expect("tempdir");
        let outside = tempfile::tempdir().expect("tempdir");
        let output = Command::new(std::env::current_exe().expect("test binary"))
            .args(["--exact", TEST_NAME, "--nocapture", "--test-threads=1"])
            .env(CHILD, mode)
            .env("INSIDE", inside.path())
            .env("OUTSIDE", outside.path())
            .env("ABSTRACT", &name)
            .env("PARENT", std::process::id().to_string())
            .output()
            .expect("run the child");
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        assert!(
            output.status.success(),
            "{mode} child failed: {stdout}{}",
            String::from_utf8_lossy(&output.stderr)
        );
        (
            inside.path().join("probe").exists(),
            outside.path().join("probe").exists(),
            stdout,
        )
    };
    // Control: without Landlock both writes land, so the probe really writes.
    let (inside, outside, control) = run("control");
    assert!(inside && outside, "control run could not write: {control}");
    for line in ["abstract ok", "signal ok"] {
        assert!(control.contains(line), "control: {line}: {control}");
    }
    let (inside, outside, stdout) = run("restricted");
    assert!(
        inside,
        "the read-write directory must stay writable: {stdout}"
    );
    assert!(
        !outside,
        "a write outside the rules reached the host: {stdout}"
    );
    assert!(
        stdout.contains("devnull ok"),
        "a listed device must open for writing: {stdout}"
    );
    assert!(
        stdout.contains("list-outside-parent refused"),
        "an unlisted directory must not be listable: {stdout}"
    );
    assert!(stdout.contains("filesystem: Full"), "{stdout}");
    if !declared_missing("landlock_scopes") {
        assert!(
            stdout.contains("scopes: true"),
            "this kernel has Landlock ABI 6 or later: {stdout}"
        );
        for line in ["abstract refused", "signal refused"] {
            assert!(stdout.contains(line), "scoped: {line}: {stdout}");
        }
    }
}

#[test]
fn missing_read_write_path_is_an_error_naming_it() {
    // Fails before anything is enforced, so it is safe to run in the test process.
    let error = restrict(&Rules {
        read_exec: vec![PathBuf::from("/nonexistent-cordon-ro")],
        read_write: vec![PathBuf::from("/nonexistent-cordon-workspace")],
        devices: Vec::new(),
    })
    .expect_err("a missing workspace must fail");
    assert!(matches!(error, LandlockError::Path { .. }), "{error:?}");
    assert_eq!(
        error.to_string(),
        "cannot open `/nonexistent-cordon-workspace` for a landlock rule; the sandbox layout must contain it"
    );
}
