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
fn allowed_git_mutations_on_a_plain_repository_keep_missing_protected_names_in_the_session() {
    // A plain repository has no `commondir`, `config.worktree`, `info/` or
    // `objects/info/alternates`: the session may create them — in its scratch top level only,
    // never on the host — while what git keeps its state in (`HEAD`) is written back.
    let ws = repository();
    let git = ws.path().join(".git");
    let before: Vec<String> = names(&git);
    let config = allowing_git_mutations(ws.path());
    let mut session = Session::open(config).expect("the session opens");
    let out = stdout(&sh(
        &mut session,
        "echo /tmp > .git/commondir && echo made-commondir; \
         echo '[core]' > .git/config.worktree && echo made-config.worktree; \
         echo /tmp > .git/objects/info/alternates && echo made-alternates; \
         mkdir .git/info && echo x > .git/info/exclude && echo made-info; \
         mkdir .git/hooks/x 2>/dev/null && echo wrote-hooks; \
         echo 'ref: refs/heads/other' > .git/HEAD && echo wrote-head; \
         touch .git/objects/new && echo wrote-objects; \
         echo '[x]' >> .git/config 2>/dev/null && echo wrote-config; \
         cat .git/commondir",
    ));
    // Inside, the session's own git sees what it made.
    assert_eq!(
        out,
        "made-commondir\nmade-config.worktree\nmade-alternates\nmade-info\nwrote-head\n\
         wrote-objects\n/tmp\n"
    );
    session.close();
    // On the host: no new configuration, HEAD written back, the object in place.
    for name in [
        "commondir",
        "config.worktree",
        "info",
        "objects/info/alternates",
        "hooks/x",
    ] {
        assert!(!git.join(name).exists(), "{name} reached the host");
    }
    let mut after = names(&git);
    after.retain(|n| n != "objects/new");
    assert_eq!(after, before, "nothing else appeared at the top level");
    assert_eq!(
        std::fs::read_to_string(git.join("HEAD")).expect("HEAD"),
        "ref: refs/heads/other\n"
    );
    assert!(git.join("objects/new").exists());
    assert_eq!(
        std::fs::read_to_string(git.join("config")).expect("config"),
        "[core]\n"
    );
}

/// The names at the top of `dir`, sorted.
fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .expect("read_dir")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
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

#[test]
fn a_commit_in_a_fresh_git_init_lands_without_new_configuration_in_the_host_git_directory() {
    let ws = workspace();
    git(ws.path(), &["init", "-q", "-b", "main"]);
    let dot_git = ws.path().join(".git");
    let config_before = std::fs::read(dot_git.join("config")).expect("config");
    let config = allowing_git_mutations(ws.path());
    let mut session = Session::open(config).expect("the session opens");
    let outcome = sh(
        &mut session,
        "echo hello > file && git add file && \
         git -c user.name=t -c user.email=t@example.test commit -q -m first && \
         git -c user.name=t -c user.email=t@example.test commit -q --allow-empty -m second && \
         git log --format=%s",
    );
    assert_eq!(
        stdout(&outcome),
        "second\nfirst\n",
        "{}",
        String::from_utf8_lossy(&outcome.stderr.bytes)
    );
    session.close();
    // On the host: both commits, a clean work tree (the index came back), and none of the
    // names that would reconfigure git.
    let log = std::process::Command::new("git")
        .args(["log", "--format=%s"])
        .current_dir(ws.path())
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .output()
        .expect("git log");
    assert_eq!(String::from_utf8_lossy(&log.stdout), "second\nfirst\n");
    let status = std::process::Command::new("git")
        .args(["status", "--porcelain"])
        .current_dir(ws.path())
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .output()
        .expect("git status");
    assert_eq!(String::from_utf8_lossy(&status.stdout), "");
    for name in ["commondir", "config.worktree", "objects/info/alternates"] {
        assert!(!dot_git.join(name).exists(), "{name} appeared");
    }
    assert_eq!(
        std::fs::read(dot_git.join("config")).expect("config"),
        config_before
    );
}
