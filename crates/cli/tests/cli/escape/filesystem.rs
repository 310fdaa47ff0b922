//! Filesystem escapes: writing outside the workspace (directly, through symlinks, hard links and
//! device nodes), reading what the host keeps from the sandbox, ownership of what the sandbox
//! writes, masked `.env` files and the cordon binary itself.

use std::ffi::OsStr;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::PathBuf;

use crate::support::cordon_bin;

use super::{on_host, outside, running_as_root, sandboxed, sh_quote, unique, workspace};

/// Writes `pwned` to each path with `>` (so a success creates it) and reports which writes worked.
fn write_each(targets: &[PathBuf]) -> String {
    targets
        .iter()
        .map(|target| {
            let quoted = sh_quote(&target.display().to_string());
            format!("(echo pwned > {quoted}) 2>/dev/null && echo wrote {quoted}")
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// Removes whichever `targets` exist and returns them, so a failing test does not leave them.
fn take_existing(targets: &[PathBuf]) -> Vec<PathBuf> {
    targets
        .iter()
        .filter(|target| std::fs::symlink_metadata(target).is_ok())
        .inspect(|target| {
            let _ = std::fs::remove_file(target);
        })
        .cloned()
        .collect()
}

#[test]
fn sandbox_cannot_write_outside_the_workspace() {
    let ws = workspace();
    let host = outside();
    let mut targets = vec![host.path().join("planted")];
    if running_as_root() {
        // Root's control can write these, so they prove the sandbox, not file permissions, stops it.
        let name = unique("cordon-escape-planted");
        for dir in ["/etc", "/usr/local", "/root", "/var/tmp", "/opt"] {
            targets.push(PathBuf::from(dir).join(&name));
        }
    }
    let script = format!("{}; echo inside > inside", write_each(&targets));
    let run = sandboxed(ws.path(), &[], &script);
    let escaped = take_existing(&targets);
    assert!(
        ws.path().join("inside").exists(),
        "the workspace must stay writable:\n{run}"
    );
    assert!(
        escaped.is_empty(),
        "the sandbox wrote {escaped:?} on the host:\n{run}"
    );

    let control = on_host(ws.path(), &script);
    let written = take_existing(&targets);
    assert_eq!(
        written, targets,
        "control: the probe must write every target without the sandbox:\n{control}"
    );
}

#[test]
fn sandbox_cannot_write_outside_through_symlinks() {
    let ws = workspace();
    let host = outside();
    // A link planted before the run, and one the probe makes itself.
    std::os::unix::fs::symlink(host.path(), ws.path().join("link-to-host"))
        .expect("plant a symlink");
    let through_new = host.path().join("through-new-link");
    let script = format!(
        "echo pwned > link-to-host/through-planted-link; ln -s {} new-link; echo pwned > new-link",
        sh_quote(&through_new.display().to_string())
    );
    let targets = [host.path().join("through-planted-link"), through_new];
    let run = sandboxed(ws.path(), &[], &script);
    let escaped = take_existing(&targets);
    assert!(
        escaped.is_empty(),
        "a write through a symlink reached {escaped:?}:\n{run}"
    );

    let _ = std::fs::remove_file(ws.path().join("new-link"));
    let control = on_host(ws.path(), &script);
    assert_eq!(
        take_existing(&targets),
        targets,
        "control: the symlink writes work on the host:\n{control}"
    );
}

#[test]
fn sandbox_cannot_modify_a_read_only_file_through_a_hard_link() {
    let ws = workspace();
    let host = outside();
    let victim = host.path().join("victim");
    std::fs::write(&victim, "original\n").expect("write the victim");
    let quoted = sh_quote(&victim.display().to_string());
    let script = format!(
        "cat {quoted}; ln {quoted} hard-link && echo pwned >> hard-link; echo pwned >> {quoted}; \
         chmod 666 {quoted}; rm -f {quoted}"
    );
    let ro = [OsStr::new("--ro"), host.path().as_os_str()];
    let run = sandboxed(ws.path(), &ro, &script);
    run.assert_line("original");
    assert_eq!(
        std::fs::read_to_string(&victim).ok().as_deref(),
        Some("original\n"),
        "victim changed:\n{run}"
    );

    let _ = std::fs::remove_file(ws.path().join("hard-link"));
    let control = on_host(ws.path(), &script);
    assert!(
        !victim.exists(),
        "control: the probe modifies and removes the file on the host:\n{control}"
    );
}

#[test]
fn sandbox_cannot_create_device_nodes() {
    let ws = workspace();
    let script = "mknod null-device c 1 3; mknod disk-device b 8 0; mkfifo fifo && echo fifo-made";
    let run = sandboxed(ws.path(), &[], script);
    run.assert_line("fifo-made");
    for name in ["null-device", "disk-device"] {
        let kind = std::fs::symlink_metadata(ws.path().join(name)).map(|meta| meta.file_type());
        assert!(
            !kind.is_ok_and(|kind| kind.is_char_device() || kind.is_block_device()),
            "the sandbox created the device node {name}:\n{run}"
        );
    }
    if running_as_root() {
        // Only root's control can make device nodes; unprivileged, the kernel refuses on its own.
        let ws = workspace();
        let control = on_host(ws.path(), script);
        let kind =
            std::fs::symlink_metadata(ws.path().join("disk-device")).map(|meta| meta.file_type());
        assert!(
            kind.is_ok_and(|kind| kind.is_block_device()),
            "control: mknod works as root:\n{control}"
        );
    }
}

#[test]
fn sandbox_cannot_read_etc_shadow() {
    let ws = workspace();
    let script = "cat /etc/shadow > /dev/null && echo read-shadow";
    let run = sandboxed(ws.path(), &[], script);
    assert!(
        !run.mentions("read-shadow"),
        "the sandbox read /etc/shadow:\n{run}"
    );
    if running_as_root() {
        let control = on_host(ws.path(), script);
        control.assert_line("read-shadow");
    }
}

#[test]
fn sandbox_cannot_read_root_owned_files_on_a_read_only_path() {
    let ws = workspace();
    let host = outside();
    let secret_text = unique("root-only-secret");
    let secret = host.path().join("secret");
    std::fs::write(&secret, &secret_text).expect("write the secret");
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).expect("chmod 600");
    std::fs::write(host.path().join("public"), "public-content\n").expect("write the public file");
    let dir = sh_quote(&host.path().display().to_string());
    let script = format!("cat {dir}/public; cat {dir}/secret");
    let ro = [OsStr::new("--ro"), host.path().as_os_str()];
    let run = sandboxed(ws.path(), &ro, &script);
    run.assert_line("public-content");
    if running_as_root() {
        // As root the sandbox runs as a uid that owns nothing, so a root-owned 0600 file stays
        // closed. Unprivileged, the file is the user's own and readable by design.
        assert!(
            !run.mentions(&secret_text),
            "the sandbox read a root-only file:\n{run}"
        );
        let control = on_host(ws.path(), &script);
        assert!(
            control.mentions(&secret_text),
            "control: root reads the file:\n{control}"
        );
    }
}

#[test]
fn sandbox_cannot_see_the_host_tmp_or_roots_home() {
    let ws = workspace();
    let host = outside();
    let secret_text = unique("host-tmp-secret");
    let in_tmp = host.path().join("secret");
    std::fs::write(&in_tmp, &secret_text).expect("write the secret");
    let mut files = vec![in_tmp];
    let in_root_home = PathBuf::from("/root").join(unique(".cordon-escape-secret"));
    if running_as_root() && std::fs::write(&in_root_home, &secret_text).is_ok() {
        files.push(in_root_home.clone());
    }
    let script = files
        .iter()
        .map(|file| format!("cat {}", sh_quote(&file.display().to_string())))
        .collect::<Vec<_>>()
        .join("; ");
    let run = sandboxed(ws.path(), &[], &format!("{script}; ls -a /tmp /root 2>&1"));
    let control = on_host(ws.path(), &script);
    let _ = std::fs::remove_file(&in_root_home);
    assert!(
        !run.mentions(&secret_text),
        "the sandbox read a host secret:\n{run}"
    );
    assert_eq!(
        control.stdout.matches(&secret_text).count(),
        files.len(),
        "control: the host reads every secret:\n{control}"
    );
}

#[test]
fn files_written_in_the_workspace_keep_the_workspace_owner() {
    let ws = workspace();
    let run = sandboxed(
        ws.path(),
        &[],
        "echo x > new-file && mkdir new-dir && echo made",
    );
    run.assert_line("made");
    let owner = std::fs::metadata(ws.path()).expect("workspace metadata");
    for name in ["new-file", "new-dir"] {
        let meta = std::fs::metadata(ws.path().join(name)).expect("created by the sandbox");
        assert_eq!(
            (meta.uid(), meta.gid()),
            (owner.uid(), owner.gid()),
            "{name} has a foreign owner"
        );
    }
}

#[test]
fn root_env_files_are_masked_and_cannot_be_rewritten() {
    let ws = workspace();
    let secret_text = unique("dotenv-secret");
    for name in [".env", ".env.local"] {
        std::fs::write(ws.path().join(name), format!("TOKEN={secret_text}\n")).expect("write .env");
    }
    std::fs::write(ws.path().join(".env.example"), "EXAMPLE=visible\n")
        .expect("write .env.example");
    let script = "cat .env .env.local .env.example; echo TOKEN=replaced > .env";
    let run = sandboxed(ws.path(), &[], script);
    run.assert_line("EXAMPLE=visible");
    assert!(
        !run.mentions(&secret_text),
        "a masked .env file was readable:\n{run}"
    );
    let on_disk = std::fs::read_to_string(ws.path().join(".env")).expect("read .env");
    assert_eq!(
        on_disk,
        format!("TOKEN={secret_text}\n"),
        "the sandbox rewrote .env:\n{run}"
    );

    let control = on_host(ws.path(), "cat .env.local");
    assert!(
        control.mentions(&secret_text),
        "control: the file is readable on the host:\n{control}"
    );
}

#[test]
fn sandbox_cannot_modify_the_cordon_binary_through_proc_exe() {
    let ws = workspace();
    let before = std::fs::read(cordon_bin()).expect("read the cordon binary");
    // Open every visible /proc/*/exe for appending, directly and through an O_PATH reopen.
    let writer = r#"
import glob, os, sys
for link in sys.argv[1:] or glob.glob("/proc/[0-9]*/exe"):
    for how in ("direct", "reopen"):
        try:
            if how == "direct":
                fd = os.open(link, os.O_WRONLY | os.O_APPEND)
            else:
                path_fd = os.open(link, os.O_PATH)
                fd = os.open(f"/proc/self/fd/{path_fd}", os.O_WRONLY | os.O_APPEND)
            os.write(fd, b"pwned")
            print("appended", link, how, flush=True)
        except OSError as error:
            print("refused", link, how, error.strerror, flush=True)
"#;
    let run = sandboxed(ws.path(), &[], &super::python(writer));
    assert!(
        run.mentions("refused"),
        "the probe found no /proc/*/exe to attack:\n{run}"
    );
    let after = std::fs::read(cordon_bin()).expect("read the cordon binary");
    assert!(before == after, "the cordon binary changed:\n{run}");

    // Control: the same writer modifies a file it may write when no sandbox is in the way.
    let host = outside();
    let scratch = host.path().join("scratch");
    std::fs::write(&scratch, "binary").expect("write scratch");
    let control = on_host(
        ws.path(),
        &format!(
            "{} {}",
            super::python(writer),
            sh_quote(&scratch.display().to_string())
        ),
    );
    let changed = std::fs::read_to_string(&scratch).unwrap_or_default();
    assert!(
        changed.starts_with("binarypwned"),
        "control: the writer appends on the host:\n{control}"
    );
}
