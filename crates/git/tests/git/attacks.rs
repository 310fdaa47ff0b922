//! What a step can leave in the work tree (or, with `allow_git_mutations`, in the git directory)
//! to make the host's git act for it — each judged on the host, each with a control that shows the
//! attack works against a naive host.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::mpsc;
use std::time::Duration;

use cordon_git::{GitError, StatCache};
use cordon_workspace::WsPath;

use crate::support::{Fixture, git, git_bytes, git_out, system_git};

pub(crate) const CANARY: &str = "canary-5b1e: a private key of the host user";

/// Every object in the repository, concatenated (`cat-file --batch-all-objects`).
fn all_objects(dir: &Path) -> String {
    String::from_utf8_lossy(&git_bytes(
        dir,
        &["cat-file", "--batch-all-objects", "--batch", "--unordered"],
    ))
    .into_owned()
}

pub(crate) fn bounded<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    let (send, receive) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = send.send(f());
    });
    receive
        .recv_timeout(Duration::from_secs(60))
        .expect("the host's git blocked on the work tree")
}

#[test]
fn a_symlinked_parent_of_a_tracked_file_commits_no_host_file() {
    let fx = Fixture::new();
    fx.write("config/settings.toml", "debug = false\n");
    fx.commit_all("base");
    let outside = fx.outside();
    std::fs::write(outside.join("settings.toml"), CANARY).unwrap();
    std::fs::remove_dir_all(fx.path().join("config")).unwrap();
    fx.symlink(&outside, "config");
    // Control: a host that joins the tracked path and reads it reads the canary.
    assert_eq!(
        std::fs::read_to_string(fx.path().join("config/settings.toml")).unwrap(),
        CANARY
    );
    let committed = fx.commit_with(&fx.repo()).unwrap().unwrap();
    assert_eq!(committed.files, ["config", "config/settings.toml"]);
    let tree = git_out(fx.path(), &["ls-tree", "-r", "HEAD"]);
    assert!(
        tree.starts_with("120000 blob"),
        "the directory became a link: {tree}"
    );
    assert!(!all_objects(fx.path()).contains(CANARY));
    let diff = fx.diff_with(&fx.repo()).unwrap();
    assert!(!String::from_utf8_lossy(&diff.patch).contains(CANARY));
}

#[test]
fn a_file_name_with_a_newline_is_one_name_and_injects_no_entry() {
    let fx = Fixture::new();
    fx.write("pipeline.yaml", "name: safe\n");
    fx.commit_all("base");
    let planted = git_out(fx.path(), &["hash-object", "-w", "--stdin"]);
    let _ = planted;
    let injected_blob = {
        let outside = fx.outside();
        std::fs::write(outside.join("p.yaml"), "name: evil\nnetwork: open\n").unwrap();
        git_out(
            fx.path(),
            &[
                "hash-object",
                "-w",
                outside.join("p.yaml").to_str().unwrap(),
            ],
        )
    };
    // What `update-index --index-info` would have read as a second line.
    let name = format!("x\n100644 {injected_blob}\tpipeline.yaml");
    fx.write(&name, "harmless\n");
    fx.write("tab\there", "t\n");
    fx.write("esc\x1b]0;title\x07", "e\n");
    let committed = fx.commit_with(&fx.repo()).unwrap().unwrap();
    assert_eq!(committed.files.len(), 3);
    assert_eq!(
        git_out(fx.path(), &["show", "HEAD:pipeline.yaml"]),
        "name: safe"
    );
    let names: Vec<Vec<u8>> = git_bytes(fx.path(), &["ls-tree", "-r", "-z", "--name-only", "HEAD"])
        .split(|&b| b == 0)
        .filter(|n| !n.is_empty())
        .map(<[u8]>::to_vec)
        .collect();
    assert!(names.contains(&name.clone().into_bytes()));
    assert_eq!(names.len(), 4);
    let patch = fx.diff_with(&fx.repo()).unwrap();
    assert!(patch.patch.is_empty(), "committed: nothing left to diff");
}

#[test]
fn fifos_sockets_and_links_to_devices_never_block_or_leak() {
    let fx = Fixture::new();
    fx.write("a.txt", "a\n");
    fx.commit_all("base");
    rustix::fs::mknodat(
        rustix::fs::CWD,
        fx.path().join("pipe").as_path(),
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o600),
        0,
    )
    .unwrap();
    let _socket = std::os::unix::net::UnixListener::bind(fx.path().join("sock")).unwrap();
    fx.symlink("/dev/zero", "zero");
    let repo_dir = fx.path().to_path_buf();
    let (diff, committed) = bounded(move || {
        let fx = Fixture::at(repo_dir);
        let diff = fx.diff_with(&fx.repo()).unwrap();
        let committed = fx.commit_with(&fx.repo()).unwrap().unwrap();
        (diff, committed)
    });
    let skipped: Vec<String> = diff.skipped.iter().map(ToString::to_string).collect();
    assert_eq!(skipped, ["pipe (a FIFO)", "sock (a socket)"]);
    assert!(
        String::from_utf8_lossy(&diff.patch).contains("# cordon: not recorded: \"pipe (a FIFO)\"")
            || String::from_utf8_lossy(&diff.patch)
                .contains("# cordon: not recorded: pipe (a FIFO)")
    );
    assert_eq!(committed.files, ["zero"]);
    assert_eq!(
        git_out(fx.path(), &["cat-file", "-p", "HEAD:zero"]),
        "/dev/zero"
    );
}

#[test]
fn a_git_planted_on_path_never_runs() {
    let fx = Fixture::new();
    fx.write("a.txt", "a\n");
    fx.commit_all("base");
    let bin = fx.outside().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let marker = fx.outside().join("git-ran");
    std::fs::write(
        bin.join("git"),
        format!(
            "#!/bin/sh\ntouch {}\nexec {} \"$@\"\n",
            marker.display(),
            system_git()
        ),
    )
    .unwrap();
    std::fs::set_permissions(bin.join("git"), std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    // Control: a host that resolves `git` through this PATH runs the planted one.
    let ran = std::process::Command::new("git")
        .env("PATH", &path)
        .arg("--version")
        .output()
        .unwrap();
    assert!(ran.status.success() && marker.exists());
    std::fs::remove_file(&marker).unwrap();
    // The library runs no process, whatever PATH says (it is this process's environment).
    fx.write("a.txt", "b\n");
    let repo = fx.repo();
    fx.diff_with(&repo).unwrap();
    repo.dirty_paths(&fx.view(), &mut StatCache::default())
        .unwrap();
    fx.commit_with(&repo).unwrap();
    let _ = cordon_git::user_identity(&|name| (name == "PATH").then(|| path.clone().into()));
    assert!(!marker.exists());
}

#[test]
fn filters_hooks_and_fsmonitor_from_the_repository_never_run() {
    let fx = Fixture::new();
    fx.write("a.txt", "a\n");
    fx.commit_all("base");
    let marker = fx.outside().join("ran");
    let touch = format!("touch {}", marker.display());
    git(fx.path(), &["config", "filter.pwn.clean", &touch]);
    git(fx.path(), &["config", "core.fsmonitor", &touch]);
    let hook = fx.path().join(".git/hooks/post-commit");
    std::fs::write(&hook, format!("#!/bin/sh\n{touch}\n")).unwrap();
    std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).unwrap();
    fx.write(".gitattributes", "* filter=pwn diff=pwn\n");
    fx.write("a.txt", "changed\n");
    // Control: the system's git runs the planted filter on `add`.
    let peer = fx.copy();
    git(&peer, &["add", "-A"]);
    assert!(marker.exists(), "the control's filter ran");
    std::fs::remove_file(&marker).unwrap();
    let repo = fx.repo();
    fx.diff_with(&repo).unwrap();
    fx.commit_with(&repo).unwrap().unwrap();
    assert!(!marker.exists());
    assert_eq!(git_out(fx.path(), &["show", "HEAD:a.txt"]), "changed");
}

#[test]
fn links_planted_in_a_writable_git_directory_are_refused_before_any_write() {
    for planted in [
        "objects/ab",
        "logs/HEAD",
        "logs/refs/heads/main",
        "refs/heads",
        "index",
    ] {
        let fx = Fixture::new();
        fx.write("a.txt", "a\n");
        fx.commit_all("base");
        fx.write("a.txt", "changed\n");
        let outside = fx.outside();
        let target = outside.join("target");
        std::fs::create_dir_all(&target).unwrap();
        let victim = outside.join("victim");
        std::fs::write(&victim, CANARY).unwrap();
        // A fan-out directory that holds none of the repository's objects: replacing one that
        // does (the base commit's id is timestamp-dependent) would lose HEAD's commit.
        let planted = if planted == "objects/ab" {
            (0..=255u8)
                .map(|b| format!("objects/{b:02x}"))
                .find(|dir| !fx.path().join(".git").join(dir).exists())
                .expect("a free fan-out directory")
        } else {
            planted.to_owned()
        };
        let planted = planted.as_str();
        let at = fx.path().join(".git").join(planted);
        if at.is_dir() {
            std::fs::remove_dir_all(&at).unwrap();
        } else if at.exists() {
            std::fs::remove_file(&at).unwrap();
        }
        std::fs::create_dir_all(at.parent().unwrap()).unwrap();
        let link_to: &Path = if planted.starts_with("objects/") || planted == "refs/heads" {
            &target
        } else {
            &victim
        };
        std::os::unix::fs::symlink(link_to, &at).unwrap();
        let repo = fx.repo();
        let result = fx.commit_with(&repo);
        match result {
            // The link itself, or (a linked `refs/heads`) the ref read through it.
            Err(GitError::LinkedGitDir(path)) => {
                assert!(path.starts_with(&at), "{planted}: {path:?}")
            }
            other => panic!("{planted}: {other:?}"),
        }
        assert_eq!(std::fs::read_dir(&target).unwrap().count(), 0, "{planted}");
        assert_eq!(
            std::fs::read_to_string(&victim).unwrap(),
            CANARY,
            "{planted}"
        );
    }
}

#[test]
fn a_changed_config_or_a_planted_commondir_refuses_the_commit() {
    let fx = Fixture::new();
    fx.write("a.txt", "a\n");
    fx.commit_all("base");
    let repo = fx.repo();
    fx.write("a.txt", "b\n");
    git(fx.path(), &["config", "core.hooksPath", "/tmp/planted"]);
    let err = fx.commit_with(&repo).unwrap_err();
    assert!(
        matches!(err, GitError::Tampered(ref p) if p.ends_with("config")),
        "{err}"
    );
    git(fx.path(), &["config", "--unset", "core.hooksPath"]);
    std::fs::write(fx.path().join(".git/commondir"), "/tmp/elsewhere\n").unwrap();
    let err = fx.commit_with(&repo).unwrap_err();
    assert!(
        matches!(err, GitError::Tampered(ref p) if p.ends_with("commondir")),
        "{err}"
    );
}

#[test]
fn excluded_paths_hold_even_through_a_link() {
    let fx = Fixture::new();
    fx.write("agents/dev.agent.md", "original\n");
    fx.commit_all("base");
    let outside = fx.outside();
    std::fs::write(outside.join("dev.agent.md"), CANARY).unwrap();
    std::fs::remove_dir_all(fx.path().join("agents")).unwrap();
    fx.symlink(&outside, "agents");
    let exclude = [WsPath::new("agents").unwrap()];
    let result = fx
        .repo()
        .commit(
            &fx.view(),
            "c",
            "Cordon-Run: t",
            &exclude,
            &mut StatCache::default(),
        )
        .unwrap();
    assert_eq!(
        result, None,
        "the excluded tooling keeps HEAD's entries: nothing to commit"
    );
    assert!(!all_objects(fx.path()).contains(CANARY));
}
