//! `allow_git_mutations: true` on an ordinary `git init` repository (DESIGN §11): each session
//! works in a private git directory and its commits, refs and index are brought into the host's
//! `.git` when it ends — nothing the sandbox writes there reaches the host's git directory
//! directly, protected entries it creates stay in its own copy, a ref the host moved meanwhile is
//! never clobbered, planted refs, forged objects and submodule entries are refused, and the work
//! of a session killed with cordon is imported by the next one. Judged on the host with its own
//! git.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::run::{Fixture, git, stderr};

/// The sandbox's git with an identity.
const GIT: &str = "git -c user.name=s -c user.email=s@example.test";

fn pipeline(script: &str) -> String {
    format!(
        "name: mutations\nisolation:\n  allow_git_mutations: true\nsteps:\n  - name: change\n    \
         command: [sh, -c, '{}']\n",
        script.replace('\'', "''")
    )
}

fn subject(ws: &Path, rev: &str) -> String {
    git(ws, &["log", "-1", "--format=%s", rev])
        .trim()
        .to_owned()
}

/// The entries the sandbox must not be able to create in the host's git directory.
const PROTECTED_ABSENT: [&str; 3] = ["commondir", "config.worktree", "objects/info/alternates"];

#[test]
fn a_commit_in_the_sandbox_lands_on_a_fresh_git_init_and_the_host_git_dir_gains_no_protected_entry()
{
    let script = format!(
        "echo hello > new.txt && git add new.txt && {GIT} commit -q -m \"from the sandbox\" && \
         {GIT} tag v1 && git branch side && git branch -q -D old && echo /tmp > .git/commondir && \
         touch .git/config.worktree && echo /tmp > .git/objects/info/alternates && \
         (echo evil > .git/hooks/post-commit || true) && (echo x >> .git/config || true)"
    );
    let f = Fixture::new(&pipeline(&script));
    git(&f.ws, &["branch", "old"]);
    let config_before = std::fs::read(f.ws.join(".git/config")).expect("config");
    let out = f.run(&[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let index = std::fs::read(f.ws.join(".git/index")).expect("index");
    assert!(
        !index.windows(4).any(|w| w == b"TREE"),
        "the index is written anew without the session's cache tree"
    );
    assert!(
        git(&f.ws, &["branch", "--list", "old"]).is_empty(),
        "the branch the session deleted is gone"
    );
    assert_eq!(subject(&f.ws, "main"), "from the sandbox");
    assert_eq!(subject(&f.ws, "v1"), "from the sandbox", "the tag came too");
    assert_eq!(subject(&f.ws, "side"), "from the sandbox", "and the branch");
    assert_eq!(
        git(&f.ws, &["status", "--porcelain", "--untracked-files=no"]),
        "",
        "the index came with them: new.txt is staged as committed"
    );
    git(&f.ws, &["fsck", "--strict", "--no-dangling"]);
    for name in PROTECTED_ABSENT {
        assert!(
            std::fs::symlink_metadata(f.ws.join(".git").join(name)).is_err(),
            "the sandbox's `{name}` stayed in its own copy"
        );
    }
    assert!(!f.ws.join(".git/hooks/post-commit").exists());
    assert_eq!(
        std::fs::read(f.ws.join(".git/config")).expect("config"),
        config_before
    );
    // Nothing is left behind in the state directory.
    let left: Vec<_> = std::fs::read_dir(f.state.join("git"))
        .expect("git state")
        .flatten()
        .flat_map(|key| std::fs::read_dir(key.path()).expect("key").flatten())
        .map(|e| e.path())
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

/// Waits (at most 20 s) until a session's private git directory holds `relative`; returns it.
fn private_holds(state: &Path, relative: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let found = std::fs::read_dir(state.join("git"))
            .ok()
            .is_some_and(|keys| {
                keys.flatten().any(|key| {
                    std::fs::read_dir(key.path()).ok().is_some_and(|dirs| {
                        dirs.flatten()
                            .any(|d| d.path().is_dir() && d.path().join(relative).exists())
                    })
                })
            });
        if found {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "no private git directory came to hold {relative}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn open_gate(f: &Fixture) {
    std::fs::write(f.ws.join("gate"), "open\n").expect("write the gate");
}

#[test]
fn a_branch_the_host_moved_during_the_session_is_kept_and_the_sessions_commit_is_rescued() {
    let script = format!("{GIT} commit -q --allow-empty -m sandbox && touch .git/done && cat gate");
    let f = Fixture::gated(&pipeline(&script));
    let (mut child, _id, stderr_pipe) = f.spawn(&["run", "pipeline.yaml"]);
    private_holds(&f.state, "done");
    git(&f.ws, &["commit", "-q", "--allow-empty", "-m", "host"]);
    open_gate(&f);
    assert_eq!(child.wait().expect("wait").code(), Some(0));
    let printed = std::io::read_to_string(stderr_pipe).expect("stderr");
    assert_eq!(
        subject(&f.ws, "main"),
        "host",
        "the host's commit is not clobbered"
    );
    let rescued = git(
        &f.ws,
        &[
            "for-each-ref",
            "--format=%(refname)",
            "refs/cordon/rescued/",
        ],
    );
    let rescued = rescued.trim();
    assert!(rescued.ends_with("/heads/main"), "{rescued:?}");
    assert_eq!(subject(&f.ws, rescued), "sandbox");
    assert!(
        printed.contains("`refs/heads/main` was left as the host has it")
            && printed.contains(rescued),
        "{printed}"
    );
}

#[test]
fn a_branch_checked_out_in_the_sandbox_is_checked_out_on_the_host() {
    let script = format!("git checkout -q -b topic && {GIT} commit -q --allow-empty -m topical");
    let f = Fixture::new(&pipeline(&script));
    let out = f.run(&[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        git(&f.ws, &["symbolic-ref", "HEAD"]).trim(),
        "refs/heads/topic"
    );
    assert_eq!(subject(&f.ws, "HEAD"), "topical");
    assert_eq!(
        subject(&f.ws, "main"),
        "pipeline",
        "main stays where it was"
    );
}

#[test]
fn planted_refs_and_a_submodule_entry_are_not_imported_while_the_sessions_branch_is() {
    let script = format!(
        "{GIT} commit -q --allow-empty -m control && ln -s /etc/shadow .git/refs/heads/evil && \
         mkfifo .git/refs/heads/fifo && printf \"ref: refs/heads/../../config\\n\" > \
         .git/refs/heads/forged && git update-index --add --cacheinfo \
         160000,$(git rev-parse HEAD),sub"
    );
    let f = Fixture::new(&pipeline(&script));
    let out = f.run(&[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(subject(&f.ws, "main"), "control", "the control is imported");
    let refs = git(&f.ws, &["for-each-ref", "--format=%(refname)"]);
    assert_eq!(
        refs.trim(),
        "refs/heads/main",
        "no planted ref came: {refs}"
    );
    let staged = git(&f.ws, &["ls-files", "--stage"]);
    assert!(!staged.contains("160000"), "{staged}");
    assert!(
        stderr(&out).contains("adds the submodule entry `sub`"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn an_object_stored_under_another_objects_name_refuses_the_whole_import() {
    // The commit names `payload`'s blob, whose file then holds another blob's content.
    let script = format!(
        "one=$(echo payload | git hash-object -w --stdin) && two=$(echo evil | git hash-object \
         -w --stdin) && git update-index --add --cacheinfo 100644,$one,p.txt && {GIT} commit -q \
         -m forged && path() {{ echo .git/objects/$(echo $1 | cut -c1-2)/$(echo $1 | cut -c3-); \
         }} && cp -f $(path $two) $(path $one)"
    );
    let f = Fixture::new(&pipeline(&script));
    let out = f.run(&[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        subject(&f.ws, "main"),
        "pipeline",
        "nothing of the session came"
    );
    assert!(
        stderr(&out).contains("was not imported") && stderr(&out).contains("whose content is"),
        "{}",
        stderr(&out)
    );
    git(&f.ws, &["fsck", "--strict", "--no-dangling"]);
}

#[test]
fn the_git_work_of_a_session_killed_with_cordon_is_imported_by_the_next_session() {
    // Each session's commit is numbered by the commits it found: without the import the resumed
    // session would find one and write "sandbox 1" again.
    let script = format!(
        "n=$(git rev-list --count HEAD) && {GIT} commit -q --allow-empty -m \"sandbox $n\" && \
         touch .git/done && cat gate"
    );
    let f = Fixture::gated(&pipeline(&script));
    let (mut child, id, _stderr) = f.spawn(&["run", "pipeline.yaml"]);
    private_holds(&f.state, "done");
    child.kill().expect("SIGKILL");
    child.wait().expect("wait");
    assert_eq!(
        subject(&f.ws, "main"),
        "pipeline",
        "a killed session imports nothing"
    );

    let (mut resumed, _, stderr_pipe) = f.spawn(&["run", "--resume", &id]);
    open_gate(&f);
    assert_eq!(resumed.wait().expect("wait").code(), Some(0));
    let printed = std::io::read_to_string(stderr_pipe).expect("stderr");
    assert!(
        printed.contains("imported the git work of an interrupted session"),
        "{printed}"
    );
    assert_eq!(subject(&f.ws, "main"), "sandbox 2");
    assert_eq!(subject(&f.ws, "main~1"), "sandbox 1");
}

#[test]
fn a_step_that_commits_what_the_step_before_it_changed_records_no_stale_diff() {
    // `edit` changes the work tree; `commit` commits it in the sandbox, leaving the work tree as
    // it was: its recorded diff is empty (HEAD moved), not `edit`'s again.
    let yaml = format!(
        "name: mutations\nisolation:\n  allow_git_mutations: true\nsteps:\n  - name: edit\n    \
         command: [sh, -c, 'echo changed > new.txt']\n  - name: commit\n    command: [sh, -c, \
         'git add new.txt && {GIT} commit -q -m in-sandbox']\n"
    );
    let f = Fixture::new(&yaml);
    let out = f.run(&["--no-ui", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let diffs: Vec<(String, bool)> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|v| v["type"] == "step.finished")
        .map(|v| {
            (
                v["step"].as_str().unwrap_or_default().to_owned(),
                v["data"].get("diff").is_some(),
            )
        })
        .collect();
    assert_eq!(
        diffs,
        [("edit".to_owned(), true), ("commit".to_owned(), false)],
        "the second step's diff is against the HEAD it moved"
    );
    assert_eq!(subject(&f.ws, "HEAD"), "in-sandbox");
}
