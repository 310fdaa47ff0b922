//! `cordon diff` (DESIGN §12): the changes recorded after each step attempt, and the run's — which
//! for a run that ended in a commit is what it committed; `--stat` summarises; into a pipe the
//! patch is byte for byte what `git apply` takes, on a terminal it is escaped. Judged against the
//! system's git on the same work tree.

use std::process::Command;

use crate::run::{Fixture, git, stderr};

const PIPELINE: &str = "name: d
steps:
  - name: edit
    command: printf 'two\\n' > a.txt; printf 'new\\n' > b.txt
  - name: again
    command: printf 'three\\n' >> a.txt
  - name: commit
    action: commit
    params: {message: edits}
";

fn diff(f: &Fixture, args: &[&str]) -> (Option<i32>, String, String) {
    let mut all = vec!["diff"];
    all.extend_from_slice(args);
    let out = f.cordon(&all).output().expect("cordon diff");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr(&out),
    )
}

#[test]
fn the_runs_diff_is_what_it_committed_and_each_attempt_has_its_own() {
    let f = Fixture::new(PIPELINE);
    std::fs::write(f.ws.join("a.txt"), "one\n").expect("write");
    git(&f.ws, &["add", "a.txt"]);
    git(&f.ws, &["commit", "-q", "-m", "a"]);
    let base = git(&f.ws, &["rev-parse", "HEAD"]).trim().to_owned();
    let out = f.run(&["--no-ui"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));

    // The run's: what the commit holds, applied by git to the starting tree.
    let (code, patch, err) = diff(&f, &[]);
    assert_eq!(code, Some(0), "{err}");
    let peer = f.dir.path().join("peer");
    let status = Command::new("git")
        .args(["worktree", "add", "-q", "--detach"])
        .arg(&peer)
        .arg(&base)
        .current_dir(&f.ws)
        .status()
        .expect("worktree");
    assert!(status.success());
    let mut apply = Command::new("git")
        .args(["apply", "--index"])
        .current_dir(&peer)
        .stdin(std::process::Stdio::piped())
        .spawn()
        .expect("git apply");
    std::io::Write::write_all(apply.stdin.as_mut().expect("stdin"), patch.as_bytes())
        .expect("patch");
    assert!(apply.wait().expect("apply").success(), "{patch}");
    assert_eq!(
        git(&peer, &["write-tree"]),
        git(&f.ws, &["rev-parse", "HEAD^{tree}"]),
        "the run's diff rebuilds the committed tree"
    );

    // One attempt: after `edit`, a.txt is `two` and b.txt new.
    let (_, edit, _) = diff(&f, &["--step", "edit"]);
    assert!(
        edit.contains("+two") && edit.contains("+new") && !edit.contains("+three"),
        "{edit}"
    );
    let (_, stat, _) = diff(&f, &["--step", "again", "--stat"]);
    assert_eq!(
        stat,
        " a.txt | 3 ++-\n b.txt | 1 +\n 2 files changed, 3 insertions(+), 1 deletion(-)\n"
    );
}

#[test]
fn a_step_or_attempt_the_run_never_finished_is_named_with_the_fix() {
    let f = Fixture::new(PIPELINE);
    let out = f.run(&["--no-ui"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let (code, _, err) = diff(&f, &["--step", "nope"]);
    assert_eq!(code, Some(2));
    assert!(
        err.contains("step `nope` has no finished attempt") && err.contains("again, commit, edit"),
        "{err}"
    );
    let (code, _, err) = diff(&f, &["--step", "edit", "--attempt", "2"]);
    assert_eq!(code, Some(2));
    assert!(
        err.contains("finished 1 time; pass --attempt 1 to 1"),
        "{err}"
    );
    // The commit action's own attempt changed nothing in the work tree.
    let (code, out, err) = diff(&f, &["--step", "commit"]);
    assert_eq!((code, out.as_str()), (Some(0), ""));
    assert!(
        err.contains("no changes after `commit` (attempt 1)"),
        "{err}"
    );
}
