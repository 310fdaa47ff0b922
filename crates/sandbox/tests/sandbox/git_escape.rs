//! Git layouts where the workspace is not simply the top of a work tree with a `.git` directory:
//! a submodule's own work tree, a `--separate-git-dir` repository, a subdirectory of a work tree
//! with submodules under it, linked worktrees inside the workspace, and `.git` files naming a
//! missing directory. In each, a step tries to make the user's next `git status` on the host run
//! its program (a `core.fsmonitor` in a repository it made, with a `.git` file repointed at it);
//! judged by running `git status` on the host, with a pinned environment, and looking for the
//! marker. Each session also runs the same attack on a decoy — a `.git` file nothing protects —
//! whose marker must appear: the control that shows the attack works where nothing stops it.

use std::path::{Path, PathBuf};
use std::process::Command;

use cordon_sandbox::git::GitError;
use cordon_sandbox::{SandboxError, Session};

use crate::support::*;

/// Runs git on the host with a pinned environment: no system or global config (`HOME` an empty
/// directory), so only the repository's own config can name an fsmonitor.
fn host_git(dir: &Path, args: &[&str]) -> std::process::Output {
    let home = tempfile::tempdir().expect("a home");
    Command::new("git")
        .args(["-c", "user.name=t", "-c", "user.email=t@example.test"])
        .args([
            "-c",
            "protocol.file.allow=always",
            "-c",
            "init.defaultBranch=main",
        ])
        .args(args)
        .current_dir(dir)
        .env_remove("GIT_CONFIG_GLOBAL")
        .env_remove("GIT_DIR")
        .env_remove("GIT_WORK_TREE")
        .env("HOME", home.path())
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .output()
        .expect("git runs")
}

fn git(dir: &Path, args: &[&str]) {
    let out = host_git(dir, args);
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn committed_repo(dir: &Path) {
    std::fs::create_dir_all(dir).expect("mkdir");
    git(dir, &["init", "-q", "."]);
    std::fs::write(dir.join("file"), "x").expect("write");
    git(dir, &["add", "file"]);
    git(dir, &["commit", "-q", "-m", "one"]);
}

/// A shell snippet, run in the sandbox: makes a repository at `repo` (relative to the working
/// directory) whose `core.fsmonitor` touches `marker` (a host path), and writes `dot_git` to name
/// it as `named`. Prints `wrote <dot_git>` when the `.git` write succeeds.
fn attack(repo: &str, marker: &Path, dot_git: &str, named: &str) -> String {
    format!(
        "git init -q --bare {repo} && git -C {repo} config core.bare false && \
         git -C {repo} config core.fsmonitor 'touch {marker}; false'; \
         printf 'gitdir: {named}\\n' > {dot_git} 2>/dev/null && echo 'wrote {dot_git}'; ",
        marker = marker.display()
    )
}

/// The decoy: `decoy/.git` naming `../.decoy-git`, an ordinary workspace file no layer protects.
fn plant_decoy(ws: &Path) {
    std::fs::create_dir_all(ws.join("decoy")).expect("mkdir");
    std::fs::write(ws.join("decoy/.git"), "gitdir: ../.decoy-git\n").expect("write");
}

/// Markers in a directory outside the workspace: the attack's and the decoy's.
struct Markers {
    _dir: tempfile::TempDir,
    attack: PathBuf,
    decoy: PathBuf,
}

fn markers() -> Markers {
    let dir = tempfile::tempdir().expect("a marker directory");
    // The sandbox's fsmonitor runs as whoever runs git on the host; let anyone create markers.
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o777),
    )
    .expect("chmod");
    let attack = dir.path().join("attack");
    let decoy = dir.path().join("decoy");
    Markers {
        _dir: dir,
        attack,
        decoy,
    }
}

/// Runs `script` plus the decoy attack in a session on `ws`, then `git status` on the host in
/// `ws/decoy`, and asserts the control: the decoy's `.git` was rewritten and its marker made.
fn run_with_control(ws: &Path, markers: &Markers, script: &str) -> String {
    plant_decoy(ws);
    let decoy = attack(
        ".decoy-evil",
        &markers.decoy,
        "decoy/.git",
        "../.decoy-evil",
    );
    let mut session = open(ws);
    let outcome = sh(&mut session, &format!("{script}{decoy}"));
    drop(session);
    let out = stdout(&outcome);
    assert!(
        out.contains("wrote decoy/.git"),
        "the control write: {out}{}",
        stderr(&outcome)
    );
    host_git(&ws.join("decoy"), &["status"]);
    assert!(
        markers.decoy.exists(),
        "the control: host git status runs the decoy's fsmonitor"
    );
    out
}

/// Asserts the attack left no trace on the host: `file` still holds `before`, and `git status`
/// in each of `dirs` does not run the planted fsmonitor.
fn assert_host_unchanged(markers: &Markers, file: &Path, before: &[u8], dirs: &[&Path]) {
    assert_eq!(
        std::fs::read(file).expect("the .git file"),
        before,
        "{file:?} is unchanged"
    );
    for dir in dirs {
        host_git(dir, &["status"]);
        host_git(dir, &["status", "--ignore-submodules=none"]);
    }
    assert!(
        !markers.attack.exists(),
        "host git status must not run the sandbox's fsmonitor"
    );
}

#[test]
fn a_submodule_work_tree_as_workspace_keeps_its_git_file() {
    let root = workspace();
    let upstream = root.path().join("upstream");
    committed_repo(&upstream);
    let superproject = root.path().join("super");
    committed_repo(&superproject);
    let url = upstream.to_str().expect("utf-8");
    git(&superproject, &["submodule", "add", "-q", url, "sub"]);
    let ws = superproject.join("sub");
    let before = std::fs::read(ws.join(".git")).expect("read");
    let markers = markers();

    let out = run_with_control(
        &ws,
        &markers,
        &attack(".evil", &markers.attack, ".git", ".evil"),
    );

    assert_host_unchanged(&markers, &ws.join(".git"), &before, &[&ws, &superproject]);
    assert!(!out.contains("wrote .git\n"), "{out}");
}

#[test]
fn a_separate_git_dir_workspace_keeps_its_git_file() {
    let root = workspace();
    let ws = root.path().join("ws");
    let elsewhere = root.path().join("elsewhere");
    git(
        root.path(),
        &[
            "init",
            "-q",
            "--separate-git-dir",
            elsewhere.to_str().expect("utf-8"),
            "ws",
        ],
    );
    std::fs::write(ws.join("file"), "x").expect("write");
    git(&ws, &["add", "file"]);
    git(&ws, &["commit", "-q", "-m", "one"]);
    let before = std::fs::read(ws.join(".git")).expect("read");
    let markers = markers();

    let out = run_with_control(
        &ws,
        &markers,
        &attack(".evil", &markers.attack, ".git", ".evil"),
    );

    assert_host_unchanged(&markers, &ws.join(".git"), &before, &[&ws]);
    assert!(!out.contains("wrote .git\n"), "{out}");
}

#[test]
fn a_subdirectory_of_a_work_tree_keeps_the_submodules_under_it() {
    let root = workspace();
    let upstream = root.path().join("upstream");
    committed_repo(&upstream);
    let top = root.path().join("ws2");
    committed_repo(&top);
    let url = upstream.to_str().expect("utf-8");
    git(&top, &["submodule", "add", "-q", url, "libs/sub"]);
    let ws = top.join("libs");
    let before = std::fs::read(ws.join("sub/.git")).expect("read");
    let markers = markers();

    let out = run_with_control(
        &ws,
        &markers,
        &attack("evil", &markers.attack, "sub/.git", "../evil"),
    );

    assert_host_unchanged(&markers, &ws.join("sub/.git"), &before, &[&top]);
    assert!(!out.contains("wrote sub/.git"), "{out}");
}

#[test]
fn a_linked_worktree_inside_the_workspace_keeps_its_git_file() {
    let ws = workspace();
    committed_repo(ws.path());
    git(ws.path(), &["worktree", "add", "-q", ".worktrees/feat"]);
    let feat = ws.path().join(".worktrees/feat");
    let before = std::fs::read(feat.join(".git")).expect("read");
    let markers = markers();

    let out = run_with_control(
        ws.path(),
        &markers,
        &attack(".e", &markers.attack, ".worktrees/feat/.git", "../../.e"),
    );

    assert_host_unchanged(&markers, &feat.join(".git"), &before, &[&feat, ws.path()]);
    assert!(!out.contains("wrote .worktrees/feat/.git"), "{out}");
}

#[test]
fn a_git_file_naming_a_missing_directory_inside_the_workspace_refuses_the_session() {
    let root = workspace();
    let upstream = root.path().join("upstream");
    committed_repo(&upstream);
    let ws = root.path().join("ws");
    committed_repo(&ws);
    let url = upstream.to_str().expect("utf-8");
    git(&ws, &["submodule", "add", "-q", url, "sub"]);
    // What a hostile earlier session (or a careless hand) could leave: a `.git` file naming a
    // directory that does not exist yet, inside the workspace, where the sandbox could make it.
    std::fs::write(ws.join("sub/.git"), "gitdir: ../.gitsub\n").expect("write");
    match Session::open(config(&ws)) {
        Err(SandboxError::Git(GitError::UnsafeGitFile { path, .. })) => {
            assert!(path.ends_with("sub/.git"), "{path:?}");
        }
        Err(other) => panic!("wrong refusal: {other}"),
        Ok(_) => panic!("the session must be refused"),
    }
    // The control: with the directory there, the session opens and it is read-only.
    std::fs::rename(ws.join(".git/modules/sub"), ws.join(".gitsub")).expect("rename");
    let mut session = open(&ws);
    let out = stdout(&sh(
        &mut session,
        "echo '[core]' >> .gitsub/config 2>/dev/null && echo wrote-config; \
         touch control && echo wrote-workspace",
    ));
    assert_eq!(out, "wrote-workspace\n");
}

#[test]
fn allowed_git_mutations_keep_a_linked_worktree_git_file_and_record_read_only() {
    let ws = workspace();
    committed_repo(ws.path());
    git(ws.path(), &["worktree", "add", "-q", ".worktrees/feat"]);
    let git_dir = ws.path().join(".git");
    for dir in ["info", "hooks", "objects/info"] {
        std::fs::create_dir_all(git_dir.join(dir)).expect("mkdir");
    }
    for file in ["config.worktree", "objects/info/alternates"] {
        std::fs::write(git_dir.join(file), "").expect("write");
    }
    std::fs::write(git_dir.join("commondir"), ".\n").expect("commondir");
    let record = git_dir.join("worktrees/feat/commondir");
    let record_before = std::fs::read(&record).expect("the worktree's commondir");
    let mut config = config(ws.path());
    config.git_mutations = cordon_sandbox::mounts::GitMutations::Allow;
    let mut session = Session::open(config).expect("the session opens");
    let out = stdout(&sh(
        &mut session,
        "echo 'gitdir: /tmp' > .worktrees/feat/.git 2>/dev/null && echo wrote-dot-git; \
         echo /tmp > .git/worktrees/feat/commondir 2>/dev/null && echo wrote-record; \
         touch .git/objects/new && echo wrote-objects",
    ));
    drop(session);
    // The control: mutations are allowed where they are meant to be.
    assert_eq!(out, "wrote-objects\n");
    assert_eq!(std::fs::read(&record).expect("read"), record_before);
}
