//! Environment images as the session's root (DESIGN §14): a root filesystem built from the
//! distribution's static busybox, judged by what the sandbox sees and what lands on the host.

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use cordon_sandbox::{ImageRoot, Session};

use crate::support::*;

/// The applets the tests call, each a link to `/bin/busybox`.
const APPLETS: [&str; 17] = [
    "sh", "ls", "cat", "echo", "touch", "id", "test", "mkdir", "rm", "stat", "env", "mknod",
    "mount", "unshare", "readlink", "head", "true",
];

/// A root filesystem holding only busybox (from the host's `busybox-static`), its applets and an
/// `/etc/os-release` naming it; no `/usr`, no `/etc/passwd`.
pub fn busybox_rootfs(dir: &Path) {
    fs::create_dir_all(dir.join("bin")).unwrap();
    fs::create_dir_all(dir.join("etc")).unwrap();
    fs::copy("/bin/busybox", dir.join("bin/busybox"))
        .expect("busybox-static is installed (.ci/run installs it)");
    fs::set_permissions(dir.join("bin/busybox"), fs::Permissions::from_mode(0o755)).unwrap();
    for applet in APPLETS {
        std::os::unix::fs::symlink("busybox", dir.join("bin").join(applet)).unwrap();
    }
    fs::write(dir.join("etc/os-release"), "ID=cordon-test-image\n").unwrap();
}

struct Image {
    _temp: tempfile::TempDir,
    root: std::path::PathBuf,
}

fn image() -> Image {
    let temp = tempfile::Builder::new()
        .prefix("cordon-image-")
        .tempdir()
        .unwrap();
    let root = temp.path().join("rootfs");
    busybox_rootfs(&root);
    Image { _temp: temp, root }
}

fn open_on(workspace: &Path, image: &Path, writable: bool) -> Session {
    let mut config = config(workspace);
    config.image = Some(ImageRoot::open(image, writable, Some("/bin".into())).unwrap());
    Session::open(config).expect("a session on the image opens")
}

#[test]
fn an_image_is_the_root_and_the_hosts_system_directories_are_invisible() {
    let ws = workspace();
    let image = image();
    let mut session = open_on(ws.path(), &image.root, false);
    let out = sh(
        &mut session,
        "cat /etc/os-release; echo PATH=$PATH; test -e /usr && echo has-usr; \
         test -e /usr/bin/python3 && echo has-python; ls /proc/self >/dev/null && echo proc; \
         test -c /dev/null && echo dev; touch /tmp/t && echo tmp; id -un",
    );
    let text = stdout(&out);
    assert!(
        text.contains("ID=cordon-test-image"),
        "{text}{}",
        stderr(&out)
    );
    assert!(text.contains("PATH=/bin\n"), "the image's PATH: {text}");
    assert!(
        !text.contains("has-usr") && !text.contains("has-python"),
        "{text}"
    );
    for line in ["proc", "dev", "tmp"] {
        assert!(text.lines().any(|l| l == line), "{line} missing: {text}");
    }
    // The generated passwd names the sandbox user although the image has no /etc/passwd.
    assert!(
        text.ends_with(&format!("{}\n", session.identity().name)),
        "{text}"
    );
    // Control: the host has the /usr the sandbox does not see.
    assert!(Path::new("/usr/bin").is_dir());
}

#[test]
fn a_read_only_image_refuses_writes_and_the_workspace_keeps_its_owner() {
    let ws = workspace();
    let image = image();
    let before = fs::read_dir(&image.root).unwrap().count();
    let mut session = open_on(ws.path(), &image.root, false);
    let ws_path = session.workspace().to_path_buf();
    let out = sh(
        &mut session,
        &format!(
            "touch /bin/planted 2>&1; touch /etc/planted 2>&1; mkdir /new 2>&1; \
             rm /bin/cat 2>&1; echo data > {}/made && echo workspace-ok",
            ws_path.display()
        ),
    );
    let text = stdout(&out);
    assert!(text.contains("workspace-ok"), "{text}{}", stderr(&out));
    assert!(text.contains("Read-only file system"), "{text}");
    assert!(!image.root.join("bin/planted").exists());
    assert!(fs::symlink_metadata(image.root.join("bin/cat")).is_ok());
    assert_eq!(
        fs::read_dir(&image.root).unwrap().count(),
        before,
        "nothing added on the host"
    );
    let made = fs::metadata(ws.path().join("made")).unwrap();
    let owner = fs::metadata(ws.path()).unwrap().uid();
    assert_eq!(
        made.uid(),
        owner,
        "files made in the workspace keep the workspace owner"
    );
}

#[test]
fn a_writable_image_layer_takes_writes_and_is_discarded_when_the_session_ends() {
    let ws = workspace();
    let image = image();
    let mut session = open_on(ws.path(), &image.root, true);
    let out = sh(
        &mut session,
        "echo changed > /etc/os-release && touch /bin/planted && rm /bin/head && \
         cat /etc/os-release && test ! -e /bin/head && echo writable; \
         touch /proc/sys/kernel/hostname 2>/dev/null || echo proc-refused",
    );
    let text = stdout(&out);
    assert!(
        text.contains("changed\nwritable\n"),
        "{text}{}",
        stderr(&out)
    );
    assert!(text.contains("proc-refused"), "{text}");
    drop(session);
    // The host's image is untouched, and the next session sees it as imported.
    assert_eq!(
        fs::read_to_string(image.root.join("etc/os-release")).unwrap(),
        "ID=cordon-test-image\n"
    );
    assert!(!image.root.join("bin/planted").exists());
    let mut next = open_on(ws.path(), &image.root, true);
    let out = sh(
        &mut next,
        "cat /etc/os-release; test -e /bin/planted && echo leaked; test -e /bin/head && echo head",
    );
    assert_eq!(
        stdout(&out),
        "ID=cordon-test-image\nhead\n",
        "{}",
        stderr(&out)
    );
}

#[test]
fn the_sandbox_layers_still_apply_on_an_image() {
    let ws = workspace();
    let image = image();
    let marker = format!("cordon-image-host-{}", unique());
    let host_file = std::env::temp_dir().join(&marker);
    fs::write(&host_file, "secret").unwrap();
    let mut session = open_on(ws.path(), &image.root, true);
    let out = sh(
        &mut session,
        &format!(
            "mknod /tmp/dev c 1 3 2>/dev/null && echo mknod-ok; \
             mount -t tmpfs none /tmp 2>/dev/null && echo mount-ok; \
             unshare -U true 2>/dev/null && echo userns-ok; \
             cat /proc/1/root/tmp/{marker} 2>/dev/null && echo host-tmp-seen; \
             ls /.cordon 2>/dev/null && echo scratch-seen; \
             cat /tmp/{marker} 2>/dev/null && echo host-tmp-seen; echo done"
        ),
    );
    let text = stdout(&out);
    assert_eq!(text, "done\n", "{text}{}", stderr(&out));
    // Controls: the applets work where no sandbox is in the way (a user namespace for anyone;
    // a device node and a mount as root), and the marker is there to be read.
    let host = |script: &str| {
        std::process::Command::new("/bin/busybox")
            .args(["sh", "-c", script])
            .status()
            .unwrap()
            .success()
    };
    assert!(host("unshare -U true"), "busybox unshare works on the host");
    assert!(host(&format!("cat /tmp/{marker} >/dev/null")));
    if running_as_root() {
        let dir = tempfile::tempdir().unwrap();
        let node = dir.path().join("dev");
        assert!(host(&format!("mknod {} c 1 3", node.display())));
        assert!(host(&format!(
            "unshare -m sh -c 'mount -t tmpfs none {}'",
            dir.path().display()
        )));
    }
    fs::remove_file(&host_file).unwrap();
}

#[test]
fn a_mount_point_through_a_link_of_the_image_is_refused() {
    let ws = workspace();
    let image = image();
    // The workspace's top directory is a link in the image: mounting there would follow it.
    let top = ws
        .path()
        .canonicalize()
        .unwrap()
        .components()
        .nth(1)
        .map(|c| c.as_os_str().to_owned())
        .unwrap();
    std::os::unix::fs::symlink("/.cordon/oldroot", image.root.join(&top)).unwrap();
    let mut config = config(ws.path());
    config.image = Some(ImageRoot::open(&image.root, false, None).unwrap());
    let err = Session::open(config).err().expect("the session is refused");
    assert!(
        err.to_string().contains("symbolic link") || format!("{err:?}").contains("symbolic link"),
        "{err}"
    );
    // Control: without the link the same workspace mounts.
    fs::remove_file(image.root.join(&top)).unwrap();
    let mut session = open_on(ws.path(), &image.root, false);
    assert_eq!(stdout(&sh(&mut session, "echo up")), "up\n");
}

#[test]
fn an_image_directory_that_is_a_system_directory_or_holds_hidden_paths_is_refused() {
    let ws = workspace();
    for root in ["/", "/etc", "/usr", "/tmp"] {
        let mut hidden = config(ws.path());
        hidden.mask = vec![std::env::temp_dir().join("cordon-state-for-test")];
        hidden.image = Some(ImageRoot::open(Path::new(root), false, None).unwrap());
        let err = Session::open(hidden).err().expect("refused");
        assert!(
            err.to_string().contains("the image directory"),
            "{root}: {err}"
        );
    }
    // Control: a directory holding only a root filesystem opens.
    let image = image();
    let mut session = open_on(ws.path(), &image.root, false);
    assert_eq!(stdout(&sh(&mut session, "echo up")), "up\n");
}

#[test]
fn an_images_own_scratch_name_is_covered_when_a_directory_and_refused_when_a_link() {
    let ws = workspace();
    let image = image();
    fs::create_dir(image.root.join(".cordon")).unwrap();
    fs::write(image.root.join(".cordon/left"), "x").unwrap();
    let mut session = open_on(ws.path(), &image.root, false);
    assert_eq!(stdout(&sh(&mut session, "ls -A /.cordon")), "left\n");
    drop(session);
    let target = tempfile::tempdir().unwrap();
    fs::remove_dir_all(image.root.join(".cordon")).unwrap();
    std::os::unix::fs::symlink(target.path(), image.root.join(".cordon")).unwrap();
    let mut config = config(ws.path());
    config.image = Some(ImageRoot::open(&image.root, false, None).unwrap());
    let err = Session::open(config).err().expect("refused");
    assert!(format!("{err}").contains("symbolic link"), "{err}");
    assert_eq!(fs::read_dir(target.path()).unwrap().count(), 0);
}
