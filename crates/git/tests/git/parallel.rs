//! An outcome run's parallel tasks: the run-private base commit, the task worktree (read by the
//! system's git), and the three-way merge back into the main work tree — clean for different
//! files and different lines, a conflict (writing nothing) for the same line, and never through
//! a link the main work tree holds.

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;

use cordon_git::{Dirs, Guard, Identity, Merged, Repo, StatCache, Worktree};
use cordon_workspace::View;

use crate::support::{Fixture, git_out};

/// The task worktree `name` of `fx` made from its work tree as it is now.
fn task(fx: &Fixture, name: &str) -> (Worktree, Repo, View) {
    let repo = fx.repo();
    let base = repo
        .base_commit(&fx.view(), "base", &[], &mut StatCache::default())
        .unwrap();
    let dir = fx.outside().join(name);
    let made = repo.create_worktree(base, &dir).unwrap();
    let view = View::open(&made.work).unwrap();
    let task_repo = Repo::open(
        &view,
        Dirs {
            git_dir: made.git_dir.clone(),
            common_dir: fx.path().join(".git"),
        },
        None,
        Identity::default(),
        Guard::default(),
    )
    .unwrap();
    (made, task_repo, view)
}

fn merge(fx: &Fixture, task: &(Worktree, Repo, View)) -> Merged {
    fx.repo()
        .merge(&fx.view(), &task.1, &task.2, &[], &mut StatCache::default())
        .unwrap()
}

fn read(dir: &Path, rel: &str) -> String {
    std::fs::read_to_string(dir.join(rel)).unwrap()
}

#[test]
fn a_task_worktree_holds_the_work_tree_as_it_is_and_the_system_git_reads_it_as_clean() {
    let fx = Fixture::new();
    fx.write("src/lib.rs", "one\n");
    fx.write("run.sh", "#!/bin/sh\n");
    fx.chmod("run.sh", 0o755);
    fx.symlink("src/lib.rs", "lib-link");
    fx.commit_all("first");
    let head = git_out(fx.path(), &["rev-parse", "HEAD"]);
    // Uncommitted work (an accepted task with `commit: none`) is in the base.
    fx.write("src/lib.rs", "one\ntwo\n");
    fx.write("notes.md", "new\n");
    let (made, _, _) = task(&fx, "t1");
    assert_eq!(read(&made.work, "src/lib.rs"), "one\ntwo\n");
    assert_eq!(read(&made.work, "notes.md"), "new\n");
    let mode = std::fs::metadata(made.work.join("run.sh"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o111, 0o111, "the executable bit is checked out");
    assert_eq!(
        std::fs::read_link(made.work.join("lib-link")).unwrap(),
        Path::new("src/lib.rs"),
        "a link is checked out as a link"
    );
    assert_eq!(
        git_out(&made.work, &["status", "--porcelain"]),
        "",
        "the system's git sees the worktree as its HEAD"
    );
    assert_eq!(git_out(&made.work, &["rev-parse", "HEAD^"]), head);
    assert_eq!(
        git_out(fx.path(), &["rev-parse", "HEAD"]),
        head,
        "the main HEAD did not move"
    );
}

#[test]
fn two_tasks_changing_different_files_are_both_merged_into_the_main_work_tree() {
    let fx = Fixture::new();
    fx.write("a.txt", "a\n");
    fx.write("b.txt", "b\n");
    fx.write("gone.txt", "bye\n");
    fx.commit_all("first");
    let one = task(&fx, "t1");
    let two = task(&fx, "t2");
    std::fs::write(one.0.work.join("a.txt"), "a from t1\n").unwrap();
    std::fs::remove_file(one.0.work.join("gone.txt")).unwrap();
    std::fs::create_dir_all(two.0.work.join("new/dir")).unwrap();
    std::fs::write(two.0.work.join("new/dir/c.txt"), "c from t2\n").unwrap();
    std::fs::write(two.0.work.join("b.txt"), "b from t2\n").unwrap();
    assert_eq!(
        merge(&fx, &one),
        Merged::Clean {
            changed: vec!["a.txt".into(), "gone.txt".into()]
        }
    );
    assert_eq!(
        merge(&fx, &two),
        Merged::Clean {
            changed: vec!["b.txt".into(), "new/dir/c.txt".into()]
        }
    );
    assert_eq!(read(fx.path(), "a.txt"), "a from t1\n");
    assert_eq!(read(fx.path(), "b.txt"), "b from t2\n");
    assert_eq!(read(fx.path(), "new/dir/c.txt"), "c from t2\n");
    assert!(!fx.path().join("gone.txt").exists());
    // Merging again changes nothing (a resumed accept).
    assert_eq!(merge(&fx, &two), Merged::Clean { changed: vec![] });
}

#[test]
fn two_tasks_changing_different_lines_of_one_file_merge_line_by_line() {
    let fx = Fixture::new();
    fx.write("f.txt", "1\n2\n3\n4\n5\n6\n7\n8\n");
    fx.commit_all("first");
    let one = task(&fx, "t1");
    let two = task(&fx, "t2");
    std::fs::write(one.0.work.join("f.txt"), "1 one\n2\n3\n4\n5\n6\n7\n8\n").unwrap();
    std::fs::write(two.0.work.join("f.txt"), "1\n2\n3\n4\n5\n6\n7\n8 two\n").unwrap();
    assert!(matches!(merge(&fx, &one), Merged::Clean { .. }));
    assert!(matches!(merge(&fx, &two), Merged::Clean { .. }));
    assert_eq!(read(fx.path(), "f.txt"), "1 one\n2\n3\n4\n5\n6\n7\n8 two\n");
}

#[test]
fn two_tasks_changing_the_same_line_conflict_and_the_second_writes_nothing() {
    let fx = Fixture::new();
    fx.write("f.txt", "greeting = hello\n");
    fx.write("other.txt", "x\n");
    fx.commit_all("first");
    let one = task(&fx, "t1");
    let two = task(&fx, "t2");
    std::fs::write(one.0.work.join("f.txt"), "greeting = hi\n").unwrap();
    std::fs::write(two.0.work.join("f.txt"), "greeting = hey\n").unwrap();
    std::fs::write(two.0.work.join("other.txt"), "y\n").unwrap();
    assert!(matches!(merge(&fx, &one), Merged::Clean { .. }));
    let Merged::Conflict { paths, report } = merge(&fx, &two) else {
        panic!("the same line changed twice must conflict");
    };
    assert_eq!(paths, ["f.txt"]);
    assert!(
        report.contains("greeting = hi") && report.contains("greeting = hey"),
        "{report}"
    );
    assert!(report.contains("<<<<<<<"), "{report}");
    assert_eq!(read(fx.path(), "f.txt"), "greeting = hi\n");
    assert_eq!(
        read(fx.path(), "other.txt"),
        "x\n",
        "a conflicting merge writes nothing, not even its clean paths"
    );
}

#[test]
fn a_merge_never_writes_through_a_link_the_main_work_tree_holds() {
    let fx = Fixture::new();
    fx.write("dir/keep.txt", "k\n");
    fx.commit_all("first");
    let one = task(&fx, "t1");
    std::fs::write(one.0.work.join("dir/new.txt"), "planted?\n").unwrap();
    // The main work tree's `dir` becomes a link to a host directory.
    let outside = fx.outside().join("target");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::remove_dir_all(fx.path().join("dir")).unwrap();
    std::os::unix::fs::symlink(&outside, fx.path().join("dir")).unwrap();
    let result = fx
        .repo()
        .merge(&fx.view(), &one.1, &one.2, &[], &mut StatCache::default());
    assert!(
        !matches!(result, Ok(Merged::Clean { .. })),
        "the merge must not succeed through the link: {result:?}"
    );
    assert!(
        !outside.join("new.txt").exists(),
        "nothing is written through the link"
    );
}
