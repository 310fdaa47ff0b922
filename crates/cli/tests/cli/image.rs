//! Environment images end to end (DESIGN §14): archives built here from the distribution's static
//! busybox, imported with `cordon image import`, and run on by `cordon exec --image` and by
//! pipelines — judged by what the sandbox sees and what the host keeps.

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::run::{Fixture, stderr};
use crate::support::cordon;

/// The applets the tests call, each a link to `/bin/busybox`.
const APPLETS: [&str; 22] = [
    "sh", "ls", "cat", "echo", "touch", "id", "test", "mkdir", "rm", "stat", "env", "mknod",
    "mount", "unshare", "readlink", "head", "true", "nc", "sleep", "wc", "grep", "[",
];

/// A root filesystem of busybox alone (from the host's `busybox-static`), its applets and an
/// `/etc/os-release` saying `ID=<id>`; no `/usr`, no `/etc/passwd`.
pub fn rootfs(dir: &Path, id: &str) {
    fs::create_dir_all(dir.join("bin")).unwrap();
    fs::create_dir_all(dir.join("etc")).unwrap();
    fs::copy("/bin/busybox", dir.join("bin/busybox"))
        .expect("busybox-static is installed (.ci/run installs it)");
    fs::set_permissions(dir.join("bin/busybox"), fs::Permissions::from_mode(0o755)).unwrap();
    for applet in APPLETS {
        std::os::unix::fs::symlink("busybox", dir.join("bin").join(applet)).unwrap();
    }
    fs::write(dir.join("etc/os-release"), format!("ID={id}\n")).unwrap();
}

fn sh(dir: &Path, script: &str) -> String {
    let out = Command::new("/bin/sh")
        .args(["-c", script])
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{script}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn sha256(path: &Path) -> String {
    let out = sh(Path::new("/"), &format!("sha256sum '{}'", path.display()));
    out.split_whitespace().next().unwrap().to_owned()
}

/// The image configuration for one layer whose unpacked tar has digest `diff_id`.
fn config(diff_id: &str) -> String {
    format!(
        r#"{{"architecture":"amd64","os":"linux","config":{{"Env":["PATH=/bin:/opt/tools"]}},"rootfs":{{"type":"layers","diff_ids":["sha256:{diff_id}"]}}}}"#
    )
}

/// `docker save`'s format of the root filesystem at `root`, one uncompressed layer, as `out`.
pub fn docker_archive(root: &Path, out: &Path, tag: &str) {
    let staging = out.with_extension("staging");
    fs::create_dir_all(staging.join("layer")).unwrap();
    let layer = staging.join("layer/layer.tar");
    sh(root, &format!("tar -cf '{}' .", layer.display()));
    let config = config(&sha256(&layer));
    let config_name = {
        let path = staging.join("config.tmp");
        fs::write(&path, &config).unwrap();
        let hex = sha256(&path);
        fs::rename(&path, staging.join(format!("{hex}.json"))).unwrap();
        format!("{hex}.json")
    };
    fs::write(
        staging.join("manifest.json"),
        format!(
            r#"[{{"Config":"{config_name}","RepoTags":["{tag}"],"Layers":["layer/layer.tar"]}}]"#
        ),
    )
    .unwrap();
    sh(
        &staging,
        &format!(
            "tar -cf '{}' manifest.json {config_name} layer",
            out.display()
        ),
    );
}

/// An OCI image layout of the root filesystem at `root` in the directory `out`, one gzip layer.
pub fn oci_layout(root: &Path, out: &Path, tag: &str) {
    let blobs = out.join("blobs/sha256");
    fs::create_dir_all(&blobs).unwrap();
    let tar = out.join("layer.tar");
    sh(root, &format!("tar -cf '{}' .", tar.display()));
    let diff_id = sha256(&tar);
    sh(out, "gzip -n layer.tar");
    let gz = out.join("layer.tar.gz");
    let (layer, layer_size) = (sha256(&gz), fs::metadata(&gz).unwrap().len());
    fs::rename(&gz, blobs.join(&layer)).unwrap();
    let put = |bytes: &str| {
        let path = out.join("blob.tmp");
        fs::write(&path, bytes).unwrap();
        let hex = sha256(&path);
        fs::rename(&path, blobs.join(&hex)).unwrap();
        (hex, bytes.len())
    };
    let (config, config_size) = put(&config(&diff_id));
    let (manifest, manifest_size) = put(&format!(
        r#"{{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:{config}","size":{config_size}}},"layers":[{{"mediaType":"application/vnd.oci.image.layer.v1.tar+gzip","digest":"sha256:{layer}","size":{layer_size}}}]}}"#
    ));
    fs::write(
        out.join("index.json"),
        format!(
            r#"{{"schemaVersion":2,"manifests":[{{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:{manifest}","size":{manifest_size},"annotations":{{"org.opencontainers.image.ref.name":"{tag}"}}}}]}}"#
        ),
    )
    .unwrap();
    fs::write(out.join("oci-layout"), r#"{"imageLayoutVersion":"1.0.0"}"#).unwrap();
}

/// A temporary directory with a state directory and a busybox image imported as `name`.
pub struct Imported {
    /// Holds the state directory.
    pub _dir: tempfile::TempDir,
    pub state: PathBuf,
    pub digest: String,
}

impl Imported {
    pub fn new(name: &str, id: &str) -> Imported {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("state");
        let root = dir.path().join("rootfs");
        rootfs(&root, id);
        let archive = dir.path().join("image.tar");
        docker_archive(&root, &archive, name);
        let out = import(&state, &archive, &[]);
        assert!(out.status.success(), "{}", stderr(&out));
        let line = String::from_utf8_lossy(&out.stdout).into_owned();
        let digest = line.trim().rsplit(' ').next().unwrap().to_owned();
        Imported {
            _dir: dir,
            state,
            digest,
        }
    }

    /// `cordon exec` with this state directory, on `image`, in `workspace`.
    pub fn exec(&self, workspace: &Path, image: &str, extra: &[&str], script: &str) -> Output {
        cordon()
            .env("CORDON_STATE_DIR", &self.state)
            .args(["exec", "-w"])
            .arg(workspace)
            .args(["--image", image])
            .args(extra)
            .args(["--", "/bin/sh", "-c", script])
            .output()
            .unwrap()
    }
}

fn import(state: &Path, archive: &Path, extra: &[&str]) -> Output {
    cordon()
        .args(["image", "import"])
        .arg(archive)
        .args(extra)
        .arg("--state-dir")
        .arg(state)
        .output()
        .unwrap()
}

fn image_cmd(state: &Path, args: &[&str]) -> Output {
    cordon()
        .arg("image")
        .args(args)
        .arg("--state-dir")
        .arg(state)
        .output()
        .unwrap()
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn docker_archives_and_oci_layouts_import_list_and_remove() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let root = dir.path().join("rootfs");
    rootfs(&root, "one");
    let archive = dir.path().join("one.tar");
    docker_archive(&root, &archive, "busybox:one");
    let out = import(&state, &archive, &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let line = stdout(&out);
    let digest = line
        .trim()
        .strip_prefix("imported busybox:one sha256:")
        .unwrap_or_else(|| panic!("`imported <name> sha256:<hex>`: {line:?}"));
    assert_eq!(digest.len(), 64, "{line}");

    let other = dir.path().join("other");
    rootfs(&other, "two");
    let layout = dir.path().join("layout");
    oci_layout(&other, &layout, "busybox:oci");
    let out = import(&state, &layout, &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).starts_with("imported busybox:oci sha256:"),
        "{}",
        stdout(&out)
    );
    // The same layout as a tar, under another name: the same image.
    let layout_tar = dir.path().join("layout.tar");
    sh(
        &layout,
        &format!(
            "tar -cf '{}' oci-layout index.json blobs",
            layout_tar.display()
        ),
    );
    let out = import(&state, &layout_tar, &["--name", "again"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let oci_digest = stdout(&out).trim().rsplit(' ').next().unwrap().to_owned();

    let listed = stdout(&image_cmd(&state, &["ls"]));
    assert!(
        listed.contains("busybox:one") && listed.contains("again, busybox:oci"),
        "{listed}"
    );
    let json = stdout(&image_cmd(&state, &["ls", "--json"]));
    let entries: Vec<serde_json::Value> = json
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(entries.len(), 2, "{json}");
    assert!(
        entries
            .iter()
            .any(|e| e["digest"] == oci_digest && e["path"] == "/bin:/opt/tools")
    );

    let out = image_cmd(&state, &["rm", "busybox:oci"]);
    assert!(
        stdout(&out).contains("keeps its other names"),
        "{}",
        stdout(&out)
    );
    let out = image_cmd(&state, &["rm", &oci_digest]);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = image_cmd(&state, &["rm", "busybox:oci"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("no image `busybox:oci` in the image store"),
        "{}",
        stderr(&out)
    );
    // The store is the user's alone.
    let mode = fs::metadata(state.join("images"))
        .unwrap()
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o700);
}

#[test]
fn a_tampered_layer_or_a_file_that_is_no_archive_is_refused_and_nothing_is_stored() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let root = dir.path().join("rootfs");
    rootfs(&root, "x");
    let archive = dir.path().join("x.tar");
    docker_archive(&root, &archive, "x:1");
    // The layer rewritten with one more file: its digest no longer matches the configuration.
    let staging = archive.with_extension("staging");
    fs::write(root.join("etc/extra"), "planted").unwrap();
    sh(
        &root,
        &format!("tar -cf '{}' .", staging.join("layer/layer.tar").display()),
    );
    let names = sh(&staging, "ls *.json | tr '\\n' ' '");
    sh(
        &staging,
        &format!("tar -cf '{}' {names} layer", archive.display()),
    );
    let out = import(&state, &archive, &[]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("does not match its digest"),
        "{}",
        stderr(&out)
    );
    assert!(stdout(&image_cmd(&state, &["ls", "--json"])).is_empty());
    let out = import(&state, Path::new("/etc/hostname"), &["--name", "n"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
}

#[test]
fn exec_on_an_image_sees_the_image_its_path_and_not_the_hosts_system_directories() {
    let image = Imported::new("busybox:exec", "exec-image");
    let ws = tempfile::tempdir().unwrap();
    let out = image.exec(
        ws.path(),
        "busybox:exec",
        &[],
        "cat /etc/os-release; echo PATH=$PATH; test -e /usr/bin || echo no-usr; echo made > made",
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        stdout(&out),
        "ID=exec-image\nPATH=/bin:/opt/tools\nno-usr\n"
    );
    let made = fs::metadata(ws.path().join("made")).unwrap();
    assert_eq!(
        made.uid(),
        fs::metadata(ws.path()).unwrap().uid(),
        "the workspace owner keeps it"
    );
    // By digest too; an unknown name names the fix.
    let out = image.exec(ws.path(), &image.digest, &[], "cat /etc/os-release");
    assert_eq!(stdout(&out), "ID=exec-image\n");
    let out = image.exec(ws.path(), "nope", &[], "true");
    assert_eq!(out.status.code(), Some(125));
    assert!(
        stderr(&out).contains("cordon image import FILE --name nope"),
        "{}",
        stderr(&out)
    );
    // Control: the host has a /usr the sandbox did not show.
    assert!(Path::new("/usr/bin").is_dir());
}

#[test]
fn a_writable_image_layer_is_thrown_away_when_the_session_ends() {
    let image = Imported::new("busybox:w", "w");
    let ws = tempfile::tempdir().unwrap();
    let write = "echo changed > /etc/os-release && touch /bin/new && cat /etc/os-release";
    let out = image.exec(ws.path(), "busybox:w", &["--image-writable"], write);
    assert_eq!(stdout(&out), "changed\n", "{}", stderr(&out));
    let out = image.exec(
        ws.path(),
        "busybox:w",
        &["--image-writable"],
        "cat /etc/os-release; test -e /bin/new && echo kept",
    );
    assert_eq!(stdout(&out), "ID=w\n", "{}", stderr(&out));
    // Without the layer the image is read-only.
    let out = image.exec(ws.path(), "busybox:w", &[], "touch /bin/new 2>&1; echo $?");
    assert!(
        stdout(&out).contains("Read-only file system"),
        "{}",
        stdout(&out)
    );
}

#[test]
fn an_image_session_is_refused_when_overlayfs_is_missing() {
    let image = Imported::new("busybox:r", "r");
    let ws = tempfile::tempdir().unwrap();
    let out = cordon()
        .env("CORDON_STATE_DIR", &image.state)
        .env("CORDON_PROBE_REMOVE", "overlayfs")
        .args(["exec", "-w"])
        .arg(ws.path())
        .args(["--image", "busybox:r", "--", "/bin/sh", "-c", "echo ran"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(125), "{}", stderr(&out));
    assert!(stderr(&out).contains("`overlayfs`"), "{}", stderr(&out));
    assert!(stdout(&out).is_empty());
    // Control: without an image the same override changes nothing.
    let out = cordon()
        .env("CORDON_PROBE_REMOVE", "overlayfs")
        .args(["exec", "-w"])
        .arg(ws.path())
        .args(["--", "/bin/sh", "-c", "echo ran"])
        .output()
        .unwrap();
    assert_eq!(stdout(&out), "ran\n", "{}", stderr(&out));
}

#[test]
fn a_read_only_host_path_is_mounted_onto_an_image_in_its_own_mount_point() {
    let image = Imported::new("busybox:ro", "ro");
    let ws = tempfile::tempdir().unwrap();
    let host = tempfile::tempdir().unwrap();
    fs::write(host.path().join("tool"), "tool").unwrap();
    let path = host.path().canonicalize().unwrap();
    let out = image.exec(
        ws.path(),
        "busybox:ro",
        &["--ro", path.to_str().unwrap()],
        &format!(
            "cat {}/tool; touch {}/x 2>/dev/null || echo read-only",
            path.display(),
            path.display()
        ),
    );
    assert_eq!(stdout(&out), "toolread-only\n", "{}", stderr(&out));
    // The mount point was made in the session's own layer, never in the stored image.
    let stored = image
        .state
        .join("images")
        .join(image.digest.trim_start_matches("sha256:"));
    let top = path.components().nth(1).unwrap();
    assert!(!stored.join("rootfs").join(top).exists());
}

const ON_IMAGE: &str = "name: on-image
isolation:
  image: busybox:run
steps:
  - name: first
    command: cat /etc/os-release > first.txt
  - name: second
    command: cat gate && cat /etc/os-release > second.txt
";

fn logs(f: &Fixture, id: &str, kind: &str) -> Vec<serde_json::Value> {
    let out = f
        .cordon(&["logs", id, "--json", "--type", kind])
        .output()
        .unwrap();
    stdout(&out)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn import_into(state: &Path, name: &str, id: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("rootfs");
    rootfs(&root, id);
    let archive = dir.path().join("image.tar");
    docker_archive(&root, &archive, name);
    let out = import(state, &archive, &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    stdout(&out).trim().rsplit(' ').next().unwrap().to_owned()
}

#[test]
fn a_pipeline_runs_its_steps_on_its_image_and_a_resumed_run_keeps_the_recorded_digest() {
    let f = Fixture::gated(ON_IMAGE);
    // Not imported yet: refused before anything runs, naming the fix.
    let out = f.run(&["--no-ui"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("cordon image import FILE --name busybox:run"),
        "{}",
        stderr(&out)
    );
    let first = import_into(&f.state, "busybox:run", "first-image");
    // The plan and the policy name the image.
    let dry = f
        .cordon(&["run", "pipeline.yaml", "--dry-run"])
        .output()
        .unwrap();
    assert!(
        stdout(&dry).contains("image          busybox:run as the read-only /"),
        "{}",
        stdout(&dry)
    );
    let policy = f.cordon(&["policy", "pipeline.yaml"]).output().unwrap();
    assert!(
        stdout(&policy).contains("image: busybox:run as the read-only /"),
        "{}",
        stdout(&policy)
    );

    let (mut child, id, _stderr) = f.spawn(&["run", "pipeline.yaml", "--no-ui"]);
    // Wait (bounded) for the second step's session, then interrupt the run there.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while logs(&f, &id, "sandbox.session").len() < 2 {
        assert!(
            std::time::Instant::now() < deadline,
            "the second step never started"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let status = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    assert_eq!(child.wait().unwrap().code(), Some(130));
    assert_eq!(
        fs::read_to_string(f.ws.join("first.txt")).unwrap(),
        "ID=first-image\n"
    );

    // The name now points to another image; the resumed run keeps the one it recorded.
    let second = import_into(&f.state, "busybox:run", "second-image");
    assert_ne!(first, second);
    let (mut resumed, _, _stderr) = f.spawn(&["run", "--resume", &id, "--no-ui"]);
    fs::write(f.ws.join("gate"), "open\n").unwrap();
    assert_eq!(resumed.wait().unwrap().code(), Some(0));
    assert_eq!(
        fs::read_to_string(f.ws.join("second.txt")).unwrap(),
        "ID=first-image\n"
    );
    for event in logs(&f, &id, "sandbox.session") {
        assert_eq!(event["data"]["image"], first.as_str(), "{event}");
    }
}

#[test]
fn a_pipeline_naming_a_directory_needs_the_operator_policy_to_list_it() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("rootfs");
    rootfs(&root, "dir-image");
    let root = root.canonicalize().unwrap();
    let f = Fixture::new(&format!(
        "name: p\nsteps:\n  - name: s\n    image: {}\n    command: cat /etc/os-release > seen.txt\n",
        root.display()
    ));
    let validate = cordon()
        .args(["validate", "pipeline.yaml"])
        .current_dir(&f.ws)
        .output()
        .unwrap();
    assert!(
        stderr(&validate).contains("is a directory, not a store image"),
        "{}",
        stderr(&validate)
    );
    let out = f.run(&[
        "--no-ui",
        "--policy",
        dir.path().join("none.toml").to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let policy = dir.path().join("policy.toml");
    fs::write(&policy, "deny = []\n").unwrap();
    let out = f.run(&["--no-ui", "--policy", policy.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("`[images] paths`"),
        "{}",
        stderr(&out)
    );
    fs::write(
        &policy,
        format!("[images]\npaths = [\"{}\"]\n", root.display()),
    )
    .unwrap();
    let out = f.run(&["--no-ui", "--policy", policy.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        fs::read_to_string(f.ws.join("seen.txt")).unwrap(),
        "ID=dir-image\n"
    );
}

#[test]
fn the_escape_probes_are_refused_on_an_image_each_with_its_control() {
    use crate::escape::{on_host, outside, running_as_root, sandboxed, workspace};
    let image = Imported::new("busybox:escape", "escape");
    let ws = workspace();
    let host = outside();
    let marker = host.path().join("marker");
    fs::write(&marker, "host secret").unwrap();
    let image_dir = image
        .state
        .join("images")
        .join(image.digest.trim_start_matches("sha256:"))
        .join("rootfs");
    let args: Vec<std::ffi::OsString> = vec!["--image".into(), image_dir.clone().into()];
    let args: Vec<&std::ffi::OsStr> = args.iter().map(|a| a.as_os_str()).collect();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let probes = [
        (
            "write",
            format!(
                "touch {0}/planted 2>/dev/null; test -e {0}/planted && echo ESCAPED",
                host.path().display()
            ),
        ),
        (
            "read",
            format!("cat {} 2>/dev/null && echo ESCAPED", marker.display()),
        ),
        (
            "image",
            "touch /bin/planted 2>/dev/null && echo ESCAPED".to_owned(),
        ),
        (
            "userns",
            "unshare -U true 2>/dev/null && echo ESCAPED".to_owned(),
        ),
        (
            "net",
            format!("echo x | nc -w 2 127.0.0.1 {port} 2>/dev/null && echo ESCAPED"),
        ),
        (
            "proc-root",
            format!(
                "cat /proc/1/root{} 2>/dev/null && echo ESCAPED",
                marker.display()
            ),
        ),
    ];
    for (name, script) in &probes {
        let sandboxed = sandboxed(ws.path(), &args, script);
        assert!(
            !sandboxed.mentions("ESCAPED"),
            "{name} escaped on the image:\n{sandboxed}"
        );
    }
    assert!(!image_dir.join("bin/planted").exists());
    assert!(!host.path().join("planted").exists());
    // Controls on the host (busybox's applets do what the probes claim where nothing stops
    // them); a root control also mknods and mounts.
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            drop(stream);
        }
    });
    let busybox = |script: &str| format!("/bin/busybox sh -c '{script}'");
    for (name, script) in &probes[..2] {
        assert!(
            on_host(ws.path(), script).mentions("ESCAPED"),
            "{name} control"
        );
    }
    assert!(on_host(ws.path(), &busybox("unshare -U true && echo ESCAPED")).mentions("ESCAPED"));
    let net = on_host(
        ws.path(),
        &busybox(&format!(
            "echo x | nc -w 2 127.0.0.1 {port} && echo ESCAPED"
        )),
    );
    assert!(net.mentions("ESCAPED"), "net control:\n{net}");
    let devices = sandboxed(
        ws.path(),
        &args,
        "mknod /tmp/null c 1 3 2>/dev/null && echo ESCAPED; mount -t tmpfs none /tmp 2>/dev/null && echo ESCAPED",
    );
    assert!(!devices.mentions("ESCAPED"), "{devices}");
    if running_as_root() {
        let control = on_host(ws.path(), &busybox("mknod ./null c 1 3 && echo ESCAPED"));
        assert!(control.mentions("ESCAPED"), "{control}");
    }
}

#[test]
fn the_image_tests_example_runs_a_projects_tests_on_an_imported_image() {
    let tmp = tempfile::tempdir().unwrap();
    let out = crate::support::run_example("image-tests", tmp.path());
    let (text, err) = (stdout(&out), stderr(&out));
    assert!(out.status.success(), "{text}\n{err}");
    assert!(text.starts_with("imported busybox-tests sha256:"), "{text}");
    assert!(
        text.contains("ok: '  spaced   out  ' has 2 words\nrunning on: ID=busybox-tests\n"),
        "{text}"
    );
    assert!(err.contains("success: `test` routed to success"), "{err}");
}

#[test]
fn a_setup_hook_runs_on_its_steps_image_and_is_cached_per_image() {
    let f = Fixture::new(
        "name: p\nsteps:\n  - name: s\n    image: busybox:setup\n    setup: cat /etc/os-release >> setup.txt\n    command: cat setup.txt\n",
    );
    import_into(&f.state, "busybox:setup", "setup-one");
    let out = f.run(&["--no-ui"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let out = f.run(&["--no-ui"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    // The second run found the hook's stamp: it ran once.
    assert_eq!(
        fs::read_to_string(f.ws.join("setup.txt")).unwrap(),
        "ID=setup-one\n"
    );
    // Another image under the name: the stamp is the image's, so the hook runs again, on it.
    import_into(&f.state, "busybox:setup", "setup-two");
    let out = f.run(&["--no-ui"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        fs::read_to_string(f.ws.join("setup.txt")).unwrap(),
        "ID=setup-one\nID=setup-two\n"
    );
}
