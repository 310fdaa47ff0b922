//! A run's workspace carried to another machine: recorded at a step's end, rebuilt in a clone
//! that has only the run's origin, and judged by the system's git.

use cordon_git::{Carried, StatCache};
use cordon_workspace::View;

use crate::support::{Fixture, git, git_out};

/// The fixture's work tree carried against the commit `origin` (hex), nothing excluded.
fn carry(fx: &Fixture, origin: &str) -> Result<Carried, cordon_git::GitError> {
    fx.repo().carry(
        &fx.view(),
        cordon_git::ObjectId::from_hex(origin.as_bytes()).unwrap(),
        &[],
        &mut StatCache::default(),
    )
}

#[test]
fn a_carried_workspace_rebuilds_exactly_in_a_clone_of_the_origin_alone() {
    let fx = Fixture::new();
    fx.write("a.txt", "one\n");
    fx.write("keep.txt", "kept\n");
    fx.write("sub/x.txt", "x\n");
    fx.write(".gitignore", "target/\n");
    fx.commit_all("origin");
    let origin = git_out(fx.path(), &["rev-parse", "HEAD"]);
    // The run's own commit on top (a batch's tooling, a commit action).
    fx.write(".cordon-batch/pipeline.yaml", "name: p\n");
    fx.commit_all("tooling");
    let head = git_out(fx.path(), &["rev-parse", "HEAD"]);
    // What the steps left uncommitted.
    fx.write("a.txt", "one\ntwo\n");
    fx.remove("keep.txt");
    std::fs::remove_dir_all(fx.path().join("sub")).unwrap();
    fx.write("sub", "now a file\n");
    fx.write("new/deep/file.rs", "fn main() {}\n");
    fx.write("run.sh", "#!/bin/sh\n");
    fx.chmod("run.sh", 0o755);
    fx.symlink("a.txt", "link");
    fx.write("target/debug/out", "built, ignored\n");

    let carried = carry(&fx, &origin).unwrap();
    assert_eq!(carried.head.to_string(), head);
    let peer = fx.copy();
    git(&peer, &["add", "-A"]);
    assert_eq!(
        carried.tree.to_string(),
        git_out(&peer, &["write-tree"]),
        "the carried tree is git's staging of the work tree"
    );
    let bytes = carried.encode();
    let carried = Carried::decode(&bytes).unwrap();

    // Another machine: a repository holding the origin and nothing after it.
    let source = fx.outside().join("source");
    git(
        fx.outside().as_path(),
        &["init", "-q", "--bare", source.to_str().unwrap()],
    );
    git(
        fx.path(),
        &[
            "push",
            "-q",
            source.to_str().unwrap(),
            &format!("{origin}:refs/heads/main"),
        ],
    );
    let clone = fx.outside().join("clone");
    git(
        fx.outside().as_path(),
        &[
            "clone",
            "-q",
            "--no-checkout",
            source.to_str().unwrap(),
            clone.to_str().unwrap(),
        ],
    );
    let missing = std::process::Command::new(crate::support::system_git())
        .args(["cat-file", "-e", &head])
        .current_dir(&clone)
        .status()
        .unwrap();
    assert!(!missing.success(), "the clone lacks the run's commit");
    let there = Fixture::at(clone.clone());
    let rebuilt = there.repo();
    rebuilt.import_carried(&carried).unwrap();
    git(&clone, &["checkout", "-q", "-B", "cordon-batch", &head]);
    let rebuilt = there.repo();
    rebuilt
        .restore_carried(&View::open(&clone).unwrap(), &carried)
        .unwrap();

    git(&clone, &["fsck", "--strict", "--no-dangling"]);
    git(&clone, &["add", "-A"]);
    assert_eq!(git_out(&clone, &["write-tree"]), carried.tree.to_string());
    assert_eq!(
        std::fs::read_to_string(clone.join("sub")).unwrap(),
        "now a file\n"
    );
    assert_eq!(
        std::fs::read_link(clone.join("link")).unwrap().to_str(),
        Some("a.txt")
    );
    use std::os::unix::fs::PermissionsExt as _;
    let mode = std::fs::metadata(clone.join("run.sh"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o111, 0o111, "the executable bit is carried");
    assert!(!clone.join("keep.txt").exists());
    assert!(!clone.join("target").exists(), "ignored files stay behind");
}

#[test]
fn a_damaged_or_oversized_record_is_refused_when_read() {
    let fx = Fixture::new();
    fx.write("a.txt", "one\n");
    fx.commit_all("origin");
    let origin = git_out(fx.path(), &["rev-parse", "HEAD"]);
    fx.write("a.txt", "two\n");
    let carried = carry(&fx, &origin).unwrap();
    // Unchanged origin: only the work tree's tree and its one changed blob.
    assert_eq!(carried.object_count(), 2);
    let bytes = carried.encode();
    let cases: [(&[u8], &str); 4] = [
        (b"not a record", "not one cordon writes"),
        (&bytes[..bytes.len() - 1], "cut short"),
        (&bytes[..20], "cut short"),
        (
            &[&bytes[..15 + 3 * 41], b"b\xff\xff\xff\xff\xff\xff\xff\xff"].concat(),
            "larger than cordon carries",
        ),
    ];
    for (input, want) in cases {
        let err = Carried::decode(input).unwrap_err().to_string();
        assert!(err.contains(want), "{want}: {err}");
    }
}

#[test]
fn a_work_tree_past_the_records_bound_is_refused_before_any_blob_is_written() {
    let fx = Fixture::new();
    fx.write("a.txt", "one\n");
    fx.commit_all("origin");
    let origin = git_out(fx.path(), &["rev-parse", "HEAD"]);
    // One 4 MiB file under 65 names (hard links): read once, but 260 MiB of files to carry.
    fx.write_bytes("big.bin", &vec![7u8; 4 << 20]);
    for n in 0..64 {
        std::fs::hard_link(
            fx.path().join("big.bin"),
            fx.path().join(format!("big-{n}.bin")),
        )
        .unwrap();
    }
    let objects = |dir: &std::path::Path| git_out(dir, &["count-objects"]);
    let before = objects(fx.path());
    let err = carry(&fx, &origin).unwrap_err().to_string();
    assert!(
        err.contains("more than cordon carries to another machine (256 MiB"),
        "{err}"
    );
    assert_eq!(objects(fx.path()), before, "no blob was written");
    // The control: with a few of the names, the record is taken.
    for n in 8..64 {
        fx.remove(&format!("big-{n}.bin"));
    }
    carry(&fx, &origin).unwrap();
}
