//! The commit action and the host boundary against a real git repository, through the host's
//! in-process git (`cordon-git`) as the engine uses it: a planted filter, hook or attribute never
//! runs; tampering refused; idempotent by trailer.

use std::path::Path;
use std::process::Command;

use cordon_git::{Repo, StatCache};
use cordon_protocol::RunId;
use cordon_workspace::{View, WsPath};

/// The run's git as the engine drives it, with the calls these tests make.
struct Host {
    repo: Repo,
    view: View,
}

impl Host {
    fn commit(
        &self,
        message: &str,
        run: RunId,
        exclude: &[&str],
    ) -> Result<Option<cordon_git::Committed>, cordon_git::GitError> {
        let exclude: Vec<WsPath> = exclude
            .iter()
            .map(|p| WsPath::new(p).expect("path"))
            .collect();
        self.repo.commit(
            &self.view,
            message,
            &format!("Cordon-Run: {run}"),
            &exclude,
            &mut StatCache::default(),
        )
    }

    fn diff(&self) -> Result<Vec<u8>, cordon_git::GitError> {
        self.repo
            .diff(
                &self.view,
                &mut StatCache::default(),
                cordon_git::PatchLimits::default(),
            )
            .map(|d| d.patch)
    }

    fn status_short(&self) -> Result<String, cordon_git::GitError> {
        self.repo
            .status_short(&self.view, &mut StatCache::default())
    }

    fn dirty_paths(&self) -> Result<Vec<String>, cordon_git::GitError> {
        self.repo.dirty_paths(&self.view, &mut StatCache::default())
    }

    fn check_tooling(&self, paths: &[&str]) -> Result<(), cordon_git::GitError> {
        let paths: Vec<WsPath> = paths
            .iter()
            .map(|p| WsPath::new(p).expect("path"))
            .collect();
        self.repo.check_tooling(&self.view, &paths)
    }
}

fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@example.test")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@example.test")
        .output()
        .expect("git");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A repository with one commit holding `pipeline.yaml` and `src.txt`.
fn repo() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let ws = dir.path().join("ws");
    std::fs::create_dir(&ws).expect("mkdir");
    let ws = ws.canonicalize().expect("canonical");
    git(&ws, &["init", "-q", "-b", "main"]);
    std::fs::write(ws.join("pipeline.yaml"), "name: p\n").expect("write");
    std::fs::write(ws.join("src.txt"), "one\n").expect("write");
    git(&ws, &["add", "-A"]);
    git(&ws, &["commit", "-q", "-m", "initial"]);
    (dir, ws)
}

fn host(dir: &tempfile::TempDir, ws: &Path) -> Host {
    let found = cordon_sandbox::git::discover(ws)
        .expect("discover")
        .expect("a git work tree");
    let dirs = cordon_git::Dirs {
        common_dir: found.common_dir.unwrap_or_else(|| found.git_dir.clone()),
        git_dir: found.git_dir,
    };
    let view = View::open(ws).expect("view");
    let repo = Repo::open(
        &view,
        dirs,
        Some(&dir.path().join("scratch")),
        Default::default(),
        Default::default(),
    )
    .expect("repo");
    Host { repo, view }
}

const RUN: u128 = 7;

#[test]
fn commit_uses_plumbing_with_a_trailer_and_leaves_tooling_out() {
    let (dir, ws) = repo();
    let h = host(&dir, &ws);
    std::fs::write(ws.join("src.txt"), "two\n").expect("write");
    std::fs::write(ws.join("new.txt"), "new\n").expect("write");
    std::fs::write(ws.join("pipeline.yaml"), "name: changed-by-agent\n").expect("write");
    std::fs::write(ws.join("review.md"), "VERDICT: APPROVED\n").expect("write");
    let run = RunId::from_u128(RUN);
    let committed = h
        .commit("fix: p", run, &["pipeline.yaml", "review.md"])
        .expect("commit")
        .expect("a commit");
    assert!(committed.created);
    assert_eq!(git(&ws, &["rev-parse", "HEAD"]).trim(), committed.sha);
    let message = git(&ws, &["log", "-1", "--format=%B"]);
    assert_eq!(message.trim_end(), format!("fix: p\n\nCordon-Run: {run}"));
    let files = git(&ws, &["show", "--name-status", "--format=", "HEAD"]);
    assert_eq!(
        files, "A\tnew.txt\nM\tsrc.txt\n",
        "tooling and artifacts are left out"
    );
    assert_eq!(
        git(&ws, &["log", "-1", "--format=%an <%ae>"]).trim(),
        "cordon <cordon@localhost>"
    );
    // Resuming after a crash finds the commit by its trailer instead of making another.
    let again = h
        .commit("fix: p", run, &[])
        .expect("commit")
        .expect("found");
    assert_eq!(
        (again.sha.as_str(), again.created),
        (committed.sha.as_str(), false)
    );
}

#[test]
fn a_planted_gitattributes_filter_never_runs() {
    let (dir, ws) = repo();
    let marker = dir.path().join("filter-ran");
    // The user's own repository config defines a filter (trusted, unchanged since start); the
    // agent plants the attribute that would apply it to every file.
    git(
        &ws,
        &[
            "config",
            "filter.evil.clean",
            &format!("sh -c 'touch {}; cat'", marker.display()),
        ],
    );
    let h = host(&dir, &ws);
    std::fs::write(ws.join(".gitattributes"), "* filter=evil\n").expect("plant");
    std::fs::write(ws.join("src.txt"), "changed\n").expect("write");
    h.diff().expect("diff");
    h.status_short().expect("status");
    h.commit("c", RunId::from_u128(RUN), &[]).expect("commit");
    assert!(!marker.exists(), "the planted filter ran");
    assert_eq!(
        git(&ws, &["show", "HEAD:src.txt"]),
        "changed\n",
        "content staged as is"
    );
    // Control: plain `git add` does run it, so the probe can observe a filter.
    std::fs::write(ws.join("src.txt"), "again\n").expect("write");
    git(&ws, &["add", "src.txt"]);
    assert!(marker.exists(), "control: plain git runs the filter");
}

#[test]
fn a_planted_hook_never_runs() {
    let (dir, ws) = repo();
    let marker = dir.path().join("hook-ran");
    let hook = ws.join(".git/hooks/reference-transaction");
    std::fs::write(&hook, format!("#!/bin/sh\ntouch {}\n", marker.display())).expect("plant");
    std::os::unix::fs::PermissionsExt::set_mode(
        &mut std::fs::metadata(&hook).expect("meta").permissions(),
        0o755,
    );
    std::fs::set_permissions(&hook, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("chmod");
    let h = host(&dir, &ws);
    std::fs::write(ws.join("src.txt"), "changed\n").expect("write");
    h.commit("c", RunId::from_u128(RUN), &[])
        .expect("commit")
        .expect("a commit");
    assert!(!marker.exists(), "the planted hook ran");
    git(&ws, &["update-ref", "refs/heads/control", "HEAD"]);
    assert!(marker.exists(), "control: plain git runs the hook");
}

#[test]
fn changed_git_config_or_planted_commondir_is_refused_naming_the_file() {
    for planted in ["config", "commondir", "config.worktree"] {
        let (dir, ws) = repo();
        let h = host(&dir, &ws);
        let before = git(&ws, &["rev-parse", "HEAD"]);
        std::fs::write(ws.join("src.txt"), "changed\n").expect("write");
        let path = ws.join(".git").join(planted);
        let mut text = std::fs::read_to_string(&path).unwrap_or_default();
        text.push_str(if planted == "commondir" {
            "../elsewhere\n"
        } else {
            "[core]\n\tfsmonitor = true\n"
        });
        std::fs::write(&path, text).expect("plant");
        let err = h
            .commit("c", RunId::from_u128(RUN), &[])
            .expect_err("refused")
            .to_string();
        assert_eq!(
            err,
            format!(
                "refusing to commit: `{}` changed since the run started (a step may have planted git configuration); inspect it, then resume",
                path.display()
            )
        );
        let branch = std::fs::read_to_string(ws.join(".git/refs/heads/main")).expect("ref");
        assert_eq!(branch, before, "nothing was committed");
    }
}

#[test]
fn dirty_paths_tooling_checks_and_status_name_the_files() {
    let (dir, ws) = repo();
    let h = host(&dir, &ws);
    assert_eq!(h.dirty_paths().expect("status"), Vec::<String>::new());
    h.check_tooling(&["pipeline.yaml"])
        .expect("tracked and clean");
    std::fs::write(ws.join("untracked.yaml"), "x").expect("write");
    std::fs::write(ws.join("pipeline.yaml"), "name: q\n").expect("write");
    assert_eq!(
        h.dirty_paths().expect("status"),
        ["pipeline.yaml", "untracked.yaml"]
    );
    assert_eq!(
        h.check_tooling(&["untracked.yaml"])
            .expect_err("untracked")
            .to_string(),
        "tooling file `untracked.yaml` is not tracked by git; commit it first (`git add untracked.yaml && git commit`)"
    );
    assert_eq!(
        h.check_tooling(&["pipeline.yaml"])
            .expect_err("modified")
            .to_string(),
        "tooling file `pipeline.yaml` has uncommitted changes; commit or restore it before `cordon run`"
    );
    assert_eq!(
        h.status_short().expect("status"),
        " M pipeline.yaml\n A untracked.yaml\n"
    );
    let diff = String::from_utf8(h.diff().expect("diff")).expect("utf8");
    assert!(
        diff.contains("+name: q") && diff.contains("untracked.yaml"),
        "{diff}"
    );
}

#[test]
fn a_swapped_git_directory_is_refused_before_git_runs() {
    let (dir, ws) = repo();
    let h = host(&dir, &ws);
    std::fs::rename(ws.join(".git"), dir.path().join("old-git")).expect("move .git away");
    git(&ws, &["init", "-q"]);
    let err = h.status_short().expect_err("refused").to_string();
    assert_eq!(
        err,
        format!(
            "refusing to use git: `{}` was replaced since the run started; inspect the workspace",
            ws.join(".git").display()
        )
    );
}

/// A submodule's `.git` lives in the workspace, where a step can write it. Host git must never
/// recurse into it, or the submodule's own config (here a clean filter) would run on the host.
#[test]
fn a_filter_planted_in_a_submodules_git_never_runs_in_host_git() {
    let (dir, ws) = repo();
    // A gitlink at `sub`, as a repository with a submodule has.
    git(
        &ws,
        &[
            "update-index",
            "--add",
            "--cacheinfo",
            "160000,1111111111111111111111111111111111111111,sub",
        ],
    );
    git(&ws, &["commit", "-q", "-m", "submodule"]);
    // What a step can do inside the workspace: a repository at `sub` whose config defines a
    // clean filter for its files, then a change for git to clean.
    let sub = ws.join("sub");
    std::fs::create_dir(&sub).expect("mkdir");
    git(&sub, &["init", "-q"]);
    let marker = dir.path().join("filter-ran");
    std::fs::write(sub.join(".gitattributes"), "* filter=planted\n").expect("write");
    std::fs::write(sub.join("f"), "one\n").expect("write");
    git(
        &sub,
        &[
            "-c",
            "filter.planted.clean=cat",
            "add",
            "f",
            ".gitattributes",
        ],
    );
    git(
        &sub,
        &[
            "config",
            "filter.planted.clean",
            &format!("sh -c 'touch {}; cat'", marker.display()),
        ],
    );
    std::fs::write(sub.join("f"), "two\n").expect("write");

    let h = host(&dir, &ws);
    h.dirty_paths().expect("status");
    h.check_tooling(&["pipeline.yaml"]).expect("tooling");
    std::fs::write(ws.join("src.txt"), "changed\n").expect("write");
    h.commit("c", RunId::from_u128(RUN), &[])
        .expect("commit")
        .expect("a commit");
    assert!(!marker.exists(), "the submodule's planted filter ran");
    let _ = Command::new("git")
        .args(["status", "--porcelain"])
        .current_dir(&ws)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .output()
        .expect("git");
    assert!(
        marker.exists(),
        "control: plain git status recurses and runs it"
    );
}
