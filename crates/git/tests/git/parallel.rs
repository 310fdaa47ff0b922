//! An outcome run's parallel tasks: the run-private base commit, the task worktree (read by the
//! system's git), and the three-way merge back into the main work tree — clean for different
//! files and different lines, a conflict (writing nothing) for the same line, and never through
//! a link the main work tree holds.

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;

use cordon_git::{Dirs, Guard, Identity, Merged, ObjectId, Repo, StatCache, Worktree};
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

/// Merges `task` on top of the run's accepted commit (its base when `accepted` has none yet),
/// which a clean merge moves on.
fn merge(fx: &Fixture, task: &(Worktree, Repo, View), accepted: &mut Option<ObjectId>) -> Merged {
    let current = accepted.unwrap_or_else(|| task.1.head().unwrap());
    let merged = fx
        .repo()
        .merge(
            &fx.view(),
            &task.1,
            &task.2,
            &[],
            (current, "accepted"),
            &mut StatCache::default(),
        )
        .unwrap();
    if let Merged::Clean { accepted: next, .. } = &merged {
        *accepted = Some(*next);
    }
    merged
}

/// The paths a clean merge changed.
fn changed(merged: Merged) -> Vec<String> {
    match merged {
        Merged::Clean { changed, .. } => changed,
        other => panic!("a clean merge: {other:?}"),
    }
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
    let mut accepted = None;
    assert_eq!(
        changed(merge(&fx, &one, &mut accepted)),
        ["a.txt", "gone.txt"]
    );
    assert_eq!(
        changed(merge(&fx, &two, &mut accepted)),
        ["b.txt", "new/dir/c.txt"]
    );
    assert_eq!(read(fx.path(), "a.txt"), "a from t1\n");
    assert_eq!(read(fx.path(), "b.txt"), "b from t2\n");
    assert_eq!(read(fx.path(), "new/dir/c.txt"), "c from t2\n");
    assert!(!fx.path().join("gone.txt").exists());
    // The accepted tree holds both tasks' changes and nothing else.
    let tree = |id: &ObjectId| {
        git_out(
            fx.path(),
            &["ls-tree", "-r", "--name-only", &id.to_string()],
        )
    };
    let after = accepted.unwrap();
    assert_eq!(tree(&after), "a.txt\nb.txt\nnew/dir/c.txt");
    // Merging again changes nothing (a resumed accept) and accepts the same tree.
    let mut again = Some(after);
    assert!(changed(merge(&fx, &two, &mut again)).is_empty());
    assert_eq!(tree(&again.unwrap()), tree(&after));
}

#[test]
fn the_accepted_tree_holds_only_what_tasks_changed_not_files_a_task_stopped_ignoring() {
    let fx = Fixture::new();
    fx.write(".gitignore", "*.key\n");
    fx.write("a.txt", "a\n");
    fx.commit_all("first");
    // Ignored on the host: never in a worktree.
    fx.write("id.key", "TOPSECRET\n");
    let one = task(&fx, "t1");
    assert!(!one.0.work.join("id.key").exists());
    // The task stops ignoring `*.key`.
    std::fs::write(one.0.work.join(".gitignore"), "nothing\n").unwrap();
    let mut accepted = None;
    assert_eq!(changed(merge(&fx, &one, &mut accepted)), [".gitignore"]);
    let accepted = accepted.unwrap();
    let files = git_out(
        fx.path(),
        &["ls-tree", "-r", "--name-only", &accepted.to_string()],
    );
    assert_eq!(
        files, ".gitignore\na.txt",
        "the host's id.key is not accepted"
    );
    // A later task's worktree is made from the accepted commit: no id.key in it either.
    let later = fx.outside().join("t2");
    let made = fx.repo().create_worktree(accepted, &later).unwrap();
    assert!(!made.work.join("id.key").exists());
    // The control: the main work tree still holds it, and a work-tree commit would take it.
    assert!(fx.path().join("id.key").exists());
    // Committing the accepted tree commits no id.key.
    let committed = fx
        .repo()
        .commit_accepted(
            accepted,
            "t1: stop ignoring",
            "Cordon-Run: r\nCordon-Task: t1",
        )
        .unwrap()
        .unwrap();
    assert!(committed.created);
    assert_eq!(
        git_out(fx.path(), &["ls-tree", "-r", "--name-only", "HEAD"]),
        ".gitignore\na.txt"
    );
    // Once: the trailers on HEAD say it is made.
    let again = fx
        .repo()
        .commit_accepted(
            accepted,
            "t1: stop ignoring",
            "Cordon-Run: r\nCordon-Task: t1",
        )
        .unwrap()
        .unwrap();
    assert!(!again.created);
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
    let mut accepted = None;
    assert!(matches!(
        merge(&fx, &one, &mut accepted),
        Merged::Clean { .. }
    ));
    assert!(matches!(
        merge(&fx, &two, &mut accepted),
        Merged::Clean { .. }
    ));
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
    let mut accepted = None;
    assert!(matches!(
        merge(&fx, &one, &mut accepted),
        Merged::Clean { .. }
    ));
    let Merged::Conflict { paths, report } = merge(&fx, &two, &mut accepted) else {
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
    let base = one.1.head().unwrap();
    let result = fx.repo().merge(
        &fx.view(),
        &one.1,
        &one.2,
        &[],
        (base, "accepted"),
        &mut StatCache::default(),
    );
    assert!(
        !matches!(result, Ok(Merged::Clean { .. })),
        "the merge must not succeed through the link: {result:?}"
    );
    assert!(
        !outside.join("new.txt").exists(),
        "nothing is written through the link"
    );
}

#[test]
fn names_git_refuses_and_linked_control_files_are_neither_merged_nor_committed() {
    let fx = Fixture::new();
    fx.write("a.txt", "a\n");
    fx.commit_all("first");
    let one = task(&fx, "t1");
    let work = &one.0.work;
    std::fs::create_dir_all(work.join(".git ")).unwrap();
    std::fs::write(
        work.join(".git /config"),
        "[core]\n\tfsmonitor = touch /tmp/x\n",
    )
    .unwrap();
    std::fs::create_dir_all(work.join("n")).unwrap();
    std::fs::write(work.join("n/git~1"), "b\n").unwrap();
    std::fs::write(work.join("n/.g\u{200c}it"), "c\n").unwrap();
    std::os::unix::fs::symlink("/etc/passwd", work.join(".gitmodules")).unwrap();
    std::fs::write(work.join("kept.txt"), "the control\n").unwrap();
    let mut accepted = None;
    assert_eq!(changed(merge(&fx, &one, &mut accepted)), ["kept.txt"]);
    assert!(!fx.path().join(".git ").exists());
    assert!(!fx.path().join(".gitmodules").exists());
    // A work-tree commit skips them as well.
    std::fs::create_dir_all(fx.path().join("e/.git.")).unwrap();
    std::fs::write(fx.path().join("e/.git./config"), "x").unwrap();
    std::os::unix::fs::symlink("x", fx.path().join(".gitattributes")).unwrap();
    let committed = fx
        .repo()
        .commit(
            &fx.view(),
            "c",
            "Cordon-Run: r",
            &[],
            &mut StatCache::default(),
        )
        .unwrap()
        .unwrap();
    assert_eq!(committed.files, ["kept.txt"]);
}
