//! The git directory: a read-only mount point (cannot be written or renamed); with
//! `allow_git_mutations` writable except what would let a sandbox reconfigure the host's git.

use std::path::Path;

use cordon_sandbox::Session;
use cordon_sandbox::mounts::GitMutations;

use crate::support::*;

fn repository() -> tempfile::TempDir {
    let ws = workspace();
    for dir in [".git/objects/info", ".git/refs", ".git/hooks"] {
        std::fs::create_dir_all(ws.path().join(dir)).expect("mkdir");
    }
    std::fs::write(ws.path().join(".git/HEAD"), "ref: refs/heads/main\n").expect("HEAD");
    std::fs::write(ws.path().join(".git/config"), "[core]\n").expect("config");
    ws
}

const PROBE: &str = "touch .git/objects/new 2>/dev/null && echo wrote-objects; \
    echo '[x]' >> .git/config 2>/dev/null && echo wrote-config; \
    touch .git/hooks/pre-commit 2>/dev/null && echo wrote-hook; \
    echo /tmp > .git/commondir 2>/dev/null && echo wrote-commondir; \
    mv .git .git-moved 2>/dev/null && echo renamed; \
    touch control && echo wrote-workspace";

fn run(ws: &Path, mutations: GitMutations) -> String {
    let mut config = config(ws);
    config.git_mutations = mutations;
    let mut session = Session::open(config).expect("the session opens");
    stdout(&sh(&mut session, PROBE))
}

#[test]
fn git_directory_is_read_only_and_cannot_be_renamed() {
    let ws = repository();
    let out = run(ws.path(), GitMutations::Deny);
    // The workspace write is the control: the probe writes where nothing stops it.
    assert_eq!(out, "wrote-workspace\n");
    let git = ws.path().join(".git");
    assert!(git.join("HEAD").exists() && !ws.path().join(".git-moved").exists());
    assert!(
        !git.join("objects/new").exists()
            && !git.join("hooks/pre-commit").exists()
            && !git.join("commondir").exists()
    );
    assert_eq!(
        std::fs::read_to_string(git.join("config")).expect("config"),
        "[core]\n"
    );
}

/// A git directory with every protected entry present, as `allow_git_mutations` needs.
fn protected_repository() -> tempfile::TempDir {
    let ws = repository();
    let git = ws.path().join(".git");
    std::fs::create_dir_all(git.join("info")).expect("mkdir info");
    for file in ["config.worktree", "objects/info/alternates"] {
        std::fs::write(git.join(file), "").expect("write");
    }
    // A commondir naming the git directory itself: the same directory, so nothing else mounted.
    std::fs::write(git.join("commondir"), ".\n").expect("commondir");
    ws
}

const MUTATION_PROBE: &str = "touch .git/objects/new 2>/dev/null && echo wrote-objects; \
    echo '[x]' >> .git/config 2>/dev/null && echo wrote-config; \
    touch .git/hooks/pre-commit 2>/dev/null && echo wrote-hook; \
    echo /tmp > .git/commondir 2>/dev/null && echo wrote-commondir; \
    echo /tmp > .git/objects/info/alternates 2>/dev/null && echo wrote-alternates; \
    echo '[core]' > .git/config.worktree 2>/dev/null && echo wrote-config.worktree; \
    mv .git/objects .git/objects2 2>/dev/null && echo renamed-objects; \
    mv .git/objects/info .git/objects/info2 2>/dev/null && echo renamed-info; \
    mv .git .git-moved 2>/dev/null && echo renamed; \
    touch control && echo wrote-workspace";

#[test]
fn allowed_git_mutations_still_protect_config_hooks_commondir_and_alternates() {
    let ws = protected_repository();
    let config = allowing_git_mutations(ws.path());
    let mut session = Session::open(config).expect("the session opens");
    let out = stdout(&sh(&mut session, MUTATION_PROBE));
    // Writing objects is the control: mutations are allowed where nothing protects.
    assert_eq!(out, "wrote-objects\nwrote-workspace\n");
    let git = ws.path().join(".git");
    assert!(git.join("objects/new").exists());
    assert_eq!(
        std::fs::read_to_string(git.join("config")).expect("config"),
        "[core]\n"
    );
    assert_eq!(
        std::fs::read_to_string(git.join("commondir")).expect("commondir"),
        ".\n"
    );
    assert_eq!(
        std::fs::read_to_string(git.join("objects/info/alternates")).expect("alternates"),
        ""
    );
    assert!(!git.join("hooks/pre-commit").exists());
    assert!(git.join("HEAD").exists(), "the git directory was renamed");
}

#[test]
fn allowed_git_mutations_refuse_when_a_protected_entry_is_absent() {
    // A plain repository has no commondir: the sandbox could create one, so the session refuses.
    let ws = repository();
    let config = allowing_git_mutations(ws.path());
    let err = Session::open(config).err().expect("the session is refused");
    let text = err.to_string();
    assert!(
        text.contains("allow_git_mutations") && text.contains("does not exist"),
        "{text}"
    );
    // Control: without mutations the same repository opens.
    drop(open(ws.path()));
}

#[test]
fn allowed_git_mutations_refuse_a_symlinked_protected_entry() {
    let ws = protected_repository();
    let git = ws.path().join(".git");
    std::fs::remove_file(git.join("objects/info/alternates")).expect("rm");
    std::os::unix::fs::symlink("/etc/hostname", git.join("objects/info/alternates"))
        .expect("symlink");
    let config = allowing_git_mutations(ws.path());
    let err = Session::open(config).err().expect("the session is refused");
    assert!(err.to_string().contains("symbolic link"), "{err}");
}

#[test]
fn a_symlinked_dot_git_is_refused_with_the_fix() {
    let ws = repository();
    std::fs::rename(ws.path().join(".git"), ws.path().join("real-git")).expect("mv");
    std::os::unix::fs::symlink("real-git", ws.path().join(".git")).expect("symlink");
    let err = Session::open(config(ws.path()))
        .err()
        .expect("the session is refused");
    assert!(err.to_string().contains("symbolic link"), "{err}");
}

#[test]
fn a_worktree_sees_its_repository_read_only() {
    let root = workspace();
    let main = root.path().join("main");
    std::fs::create_dir(&main).expect("mkdir");
    git(&main, &["init", "-q"]);
    git(&main, &["commit", "-q", "--allow-empty", "-m", "first"]);
    git(&main, &["worktree", "add", "-q", "../wt"]);
    let wt = root.path().join("wt");
    let mut session = open(&wt);
    let common = main.join(".git");
    let script = format!(
        "git log --format=%s; touch {0}/planted 2>/dev/null && echo planted; echo x > .git 2>/dev/null && echo repointed; touch control && echo control",
        common.display()
    );
    let out = sh(&mut session, &script);
    assert_eq!(stdout(&out), "first\ncontrol\n", "{out:?}");
    assert!(!common.join("planted").exists());
    assert!(
        std::fs::read_to_string(wt.join(".git"))
            .expect("read .git")
            .starts_with("gitdir: ")
    );
}
