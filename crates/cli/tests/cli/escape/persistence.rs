//! Attacks that plant something for later: a file one session writes in the workspace that would
//! make the next session (or the host's git, or a user on the host) do the attacker's bidding.
//! Each reproduces a finding of the first security review and is judged on the host.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Stdio};

use super::{Outcome, STARTED, on_host, outside, python, sandboxed, workspace};
use crate::support::cordon_bin;

/// How long a session may take before the host counts as hung.
const HANG_LIMIT_SECS: &str = "60";

/// `cordon exec -w WS -- sh -c SCRIPT` under coreutils `timeout -s KILL`: a host cordon that hangs
/// ends with 137 instead of hanging the test.
fn bounded(workspace: &Path, script: &str) -> Outcome {
    let output = Command::new("timeout")
        .args(["-s", "KILL", HANG_LIMIT_SECS])
        .arg(cordon_bin())
        .arg("exec")
        .arg("-w")
        .arg(workspace)
        .args(["--", "/bin/sh", "-c", &format!("echo {STARTED}; {script}")])
        .stdin(Stdio::null())
        .output()
        .expect("run cordon exec under timeout");
    Outcome::from_output(output)
}

#[test]
fn commondir_planted_by_one_session_mounts_nothing_into_the_next() {
    let host = outside();
    let key = host.path().join("id_rsa");
    std::fs::write(&key, "PRIVATE-KEY-MATERIAL\n").expect("write the key");
    let ws = workspace();
    let plant = format!(
        "mkdir -p .git && echo {} > .git/commondir && echo planted",
        host.path().display()
    );
    sandboxed(ws.path(), &[], &plant).assert_line("planted");
    let read = format!("cat {}; echo probe-done", key.display());
    let run = sandboxed(ws.path(), &[], &read);
    run.assert_line("probe-done");
    assert!(
        !run.mentions("PRIVATE-KEY-MATERIAL"),
        "the key leaked:\n{run}"
    );
    // Control: the same read on the host prints the key.
    assert!(on_host(ws.path(), &read).mentions("PRIVATE-KEY-MATERIAL"));
}

#[test]
fn a_fifo_or_endless_git_pointer_does_not_hang_the_host() {
    for plant in [
        "mkdir -p .git && mkfifo .git/commondir && echo planted",
        "mkdir -p .git && ln -s /dev/zero .git/commondir && echo planted",
        "mkfifo .git && echo planted",
    ] {
        let ws = workspace();
        let first = bounded(ws.path(), plant);
        first.assert_line("planted");
        let next = bounded(ws.path(), "echo next-session");
        assert_eq!(
            next.code,
            Some(0),
            "after `{plant}` the next session:\n{next}"
        );
        next.assert_line("next-session");
    }
}

#[test]
fn a_symlinked_dot_git_is_refused_with_the_fix() {
    let ws = workspace();
    std::fs::create_dir(ws.path().join("real-git")).expect("mkdir");
    std::os::unix::fs::symlink("real-git", ws.path().join(".git")).expect("symlink");
    let run = bounded(ws.path(), "echo ran");
    assert_eq!(run.code, Some(125), "{run}");
    assert!(!run.mentions("ran"), "{run}");
    assert!(
        run.stderr.contains("symbolic link") && run.stderr.contains("gitdir:"),
        "{run}"
    );
    // Control: the same workspace with a real directory starts.
    std::fs::remove_file(ws.path().join(".git")).expect("rm");
    std::fs::rename(ws.path().join("real-git"), ws.path().join(".git")).expect("mv");
    bounded(ws.path(), "echo ran").assert_line("ran");
}

/// Every way to leave a set-user-ID or set-group-ID file or directory in the workspace.
const SETID_SCRIPT: &str = "cp /bin/sh suid-chmod; chmod 4755 suid-chmod; \
    cp /bin/sh sgid-chmod; chmod g+s sgid-chmod; \
    mkdir sgid-dir; chmod 2775 sgid-dir; \
    cp /bin/sh suid-install; chmod 755 suid-install; chmod u+s suid-install; echo copied";

#[test]
fn sandbox_cannot_leave_setuid_or_setgid_files_in_the_workspace() {
    let ws = workspace();
    let create = python(
        "import os\n\
         for name, mode in [('suid-open', 0o4755), ('sgid-open', 0o2755)]:\n\
         \x20   try:\n\
         \x20       os.close(os.open(name, os.O_CREAT | os.O_WRONLY, mode))\n\
         \x20   except OSError as e:\n\
         \x20       print(name, e.strerror)\n\
         try:\n\
         \x20   os.mkdir('sgid-mkdir', 0o2755)\n\
         except OSError as e:\n\
         \x20   print('mkdir', e.strerror)\n",
    );
    let run = sandboxed(ws.path(), &[], &format!("{SETID_SCRIPT}; {create}"));
    run.assert_line("copied");
    let setid = |dir: &Path| -> Vec<String> {
        std::fs::read_dir(dir)
            .expect("list")
            .flatten()
            .filter(|e| {
                e.metadata()
                    .is_ok_and(|m| m.permissions().mode() & 0o6000 != 0)
            })
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect()
    };
    assert_eq!(
        setid(ws.path()),
        Vec::<String>::new(),
        "set-id bits reached the host:\n{run}"
    );
    // Control: on the host the same script sets the bits.
    let control_ws = workspace();
    on_host(control_ws.path(), SETID_SCRIPT).assert_line("copied");
    let mut control = setid(control_ws.path());
    control.sort();
    assert_eq!(
        control,
        ["sgid-chmod", "sgid-dir", "suid-chmod", "suid-install"],
        "control"
    );
}

#[test]
fn a_nested_git_directory_cannot_be_moved_to_plant_config() {
    let ws = workspace();
    let git = |args: &[&str]| {
        let status = Command::new("git")
            .args(args)
            .current_dir(ws.path())
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .stdout(Stdio::null())
            .status()
            .expect("run git");
        assert!(status.success(), "git {args:?}");
    };
    std::fs::create_dir(ws.path().join("meta")).expect("mkdir meta");
    git(&["init", "-q", "--separate-git-dir", "meta/gd", "."]);
    let config_before = std::fs::read(ws.path().join("meta/gd/config")).expect("config");
    let script = "mv meta meta2 && echo moved-meta; mv meta/gd meta/gd2 && echo moved-gd; \
                  echo '[core]' >> meta/gd/config && echo wrote-config; touch meta/control && echo control";
    let run = sandboxed(ws.path(), &[], script);
    run.assert_line("control");
    for what in ["moved-meta", "moved-gd", "wrote-config"] {
        assert!(!run.stdout.lines().any(|l| l == what), "{what}:\n{run}");
    }
    assert_eq!(
        std::fs::read(ws.path().join("meta/gd/config")).expect("config"),
        config_before
    );
    // Control: on the host the directory can be moved.
    on_host(ws.path(), "mv meta meta2 && echo moved-meta").assert_line("moved-meta");
}

#[test]
fn a_cordon_binary_inside_the_workspace_cannot_be_replaced_by_moving_its_directory() {
    let ws = workspace();
    let bin = ws.path().join("tools/bin");
    std::fs::create_dir_all(&bin).expect("mkdir");
    let copy = bin.join("cordon");
    std::fs::copy(cordon_bin(), &copy).expect("copy the binary");
    let before = std::fs::read(&copy).expect("read the binary");
    let script = "mv tools tools2 && echo moved-tools; mv tools/bin tools/bin2 && echo moved-bin; \
                  echo evil > tools/bin/cordon && echo replaced; rm -f tools/bin/cordon && echo removed; \
                  touch tools/control && echo control";
    let output = Command::new(&copy)
        .args(["exec", "-w"])
        .arg(ws.path())
        .args(["--", "/bin/sh", "-c", &format!("echo {STARTED}; {script}")])
        .stdin(Stdio::null())
        .output()
        .expect("run the copied cordon");
    let run = Outcome::from_output(output);
    run.assert_line(STARTED);
    run.assert_line("control");
    for what in ["moved-tools", "moved-bin", "replaced", "removed"] {
        assert!(!run.stdout.lines().any(|l| l == what), "{what}:\n{run}");
    }
    assert_eq!(
        std::fs::read(&copy).expect("read"),
        before,
        "the binary changed"
    );
    // Control: on the host the directory can be moved.
    on_host(ws.path(), "mv tools tools2 && echo moved-tools").assert_line("moved-tools");
}
