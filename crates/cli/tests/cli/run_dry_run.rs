//! `cordon run --dry-run`: the resolved plan, touching nothing and needing no key; without
//! `--dry-run` the same pipeline (it has agent steps) is refused until agents can run.

use std::path::Path;

use crate::run::git;
use crate::support::cordon;
use crate::validate::transcript;

const PIPELINE: &str = r#"name: fix-failing-tests
llm:
  provider: openai
  model: gpt-4.1
  base_url: https://api.example.com/v1
  api_key_env: OPENAI_API_KEY
context_files: [README.md]
max_attempts: 3
isolation:
  memory: 2G
  pids: 512
  cpus: 1.5
  tmp_size: 512M
  read_only: [~/.rustup]
  hide: [secrets/]
network: none
secrets: {gh: {from: env, key: GH_TOKEN}}
steps:
  - name: dev
    agent: dev
    produces: [summary.md]
    prompt: Make the failing tests pass.
    on_pass: test
  - name: test
    setup: python3 -m venv .venv && .venv/bin/pip install -r requirements.txt
    setup_network: {allow: [packages.example.com, files.example.com]}
    command: [.venv/bin/python, -m, unittest, -q]
    timeout: 600
    env: {PYTHONDONTWRITEBYTECODE: "1"}
    on_pass: review
    on_fail: {goto: dev, retry: true}
  - name: review
    agent: review
    artifact: review.md
    verdicts: {pass: APPROVED, fail: NEEDS CHANGES}
    network: {allow: ["*.docs.example.com"], deny: [private.docs.example.com], grants: true}
    on_pass: fetch
    on_fail: {goto: dev, retry: true}
  - name: fetch
    command: ./scripts/fetch-fixtures
    network: open
    secrets: [gh]
    model_lane: true
  - name: commit
    action: commit
    params: {message: "fix: {name}"}
"#;

/// A git work tree holding the pipeline above, its tooling committed (what `cordon run` requires).
fn workspace() -> tempfile::TempDir {
    let dir = uncommitted_workspace();
    git(dir.path(), &["add", "--all"]);
    git(dir.path(), &["commit", "--quiet", "--message", "tooling"]);
    dir
}

/// `cordon run --dry-run` on the work tree's pipeline: the exit code and stderr.
fn dry_run(dir: &Path) -> (Option<i32>, String) {
    let out = cordon()
        .args(["run", "--dry-run"])
        .arg(dir.join("ci/pipeline.yaml"))
        .output()
        .expect("run");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The same work tree before anything was committed.
fn uncommitted_workspace() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    git(root, &["init", "--quiet"]);
    std::fs::create_dir_all(root.join("ci/agents")).expect("mkdir agents");
    std::fs::write(root.join("ci/README.md"), "The project.\n").expect("write");
    std::fs::write(root.join("ci/pipeline.yaml"), PIPELINE).expect("write");
    std::fs::write(
        root.join("ci/agents/dev.agent.md"),
        "---\nname: dev\n---\nFix it.\n",
    )
    .expect("write");
    std::fs::write(
        root.join("ci/agents/review.agent.md"),
        "---\nname: review\nmodel: reviewer-model\nmax_iterations: 12\ntools: [read_file, bash]\ntemperature: 0.2\n---\nReview it.\n",
    )
    .expect("write");
    dir
}

fn listing(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("read_dir").flatten() {
            let path = entry.path();
            let meta = entry.metadata().expect("metadata");
            out.push(format!(
                "{} {} {:?}",
                path.display(),
                meta.len(),
                meta.modified().ok()
            ));
            if meta.is_dir() {
                stack.push(path);
            }
        }
    }
    out.sort();
    out
}

#[test]
fn dry_run_prints_the_resolved_plan_without_an_api_key() {
    let dir = workspace();
    let out = transcript(
        cordon()
            .args(["run", "--dry-run"])
            .arg(dir.path().join("ci/pipeline.yaml"))
            .env_remove("OPENAI_API_KEY")
            .env_remove("GH_TOKEN"),
        dir.path(),
    );
    insta::assert_snapshot!(out);
}

#[test]
fn dry_run_touches_nothing() {
    let dir = workspace();
    let before = listing(dir.path());
    let out = cordon()
        .args(["run", "--dry-run"])
        .arg(dir.path().join("ci/pipeline.yaml"))
        .output()
        .expect("run");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(listing(dir.path()), before);
}

#[test]
fn dry_run_finds_the_work_tree_from_a_relative_path() {
    let dir = workspace();
    let out = cordon()
        .args(["run", "--dry-run", "pipeline.yaml"])
        .current_dir(dir.path().join("ci"))
        .output()
        .expect("run");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let canonical = dir.path().canonicalize().expect("canonical");
    assert!(
        stdout.contains(&format!("workspace    {}\n", canonical.display())),
        "{stdout}"
    );
}

#[test]
fn dry_run_max_attempts_flag_overrides_the_pipeline() {
    let dir = workspace();
    let out = cordon()
        .args(["run", "--dry-run", "--max-attempts", "7"])
        .arg(dir.path().join("ci/pipeline.yaml"))
        .output()
        .expect("run");
    assert!(String::from_utf8_lossy(&out.stdout).contains("max attempts 7 (--max-attempts)\n"));
    let zero = cordon()
        .args(["run", "--dry-run", "--max-attempts", "0"])
        .arg(dir.path().join("ci/pipeline.yaml"))
        .output()
        .expect("run");
    assert_eq!(zero.status.code(), Some(2), "0 attempts is a usage error");
}

#[test]
fn dry_run_outside_a_git_work_tree_says_to_pass_w_or_run_git_init() {
    let dir = workspace();
    std::fs::remove_dir_all(dir.path().join(".git")).expect("rm .git");
    let out = transcript(
        cordon()
            .args(["run", "--dry-run"])
            .arg(dir.path().join("ci/pipeline.yaml")),
        dir.path(),
    );
    insta::assert_snapshot!(out);
}

#[test]
fn dry_run_workspace_flag_must_be_a_work_tree_containing_the_pipeline() {
    let dir = workspace();
    let out = transcript(
        cordon()
            .args(["run", "--dry-run", "-w"])
            .arg(dir.path().join("ci"))
            .arg(dir.path().join("ci/pipeline.yaml")),
        dir.path(),
    );
    insta::assert_snapshot!("workspace_flag_not_a_work_tree", out);
    let other = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir(other.path().join(".git")).expect("mkdir");
    let out = cordon()
        .args(["run", "--dry-run", "-w"])
        .arg(other.path())
        .arg(dir.path().join("ci/pipeline.yaml"))
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("is outside the workspace"));
    let out = cordon()
        .args(["run", "--dry-run", "-w"])
        .arg(dir.path())
        .arg(dir.path().join("ci/pipeline.yaml"))
        .output()
        .expect("run");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn dry_run_of_an_invalid_pipeline_prints_its_problems_and_exits_2() {
    let dir = workspace();
    std::fs::write(
        dir.path().join("ci/pipeline.yaml"),
        "name: x\nsteps:\n  - {name: a, comand: make}\n",
    )
    .expect("write");
    let out = transcript(
        cordon()
            .args(["run", "--dry-run"])
            .arg(dir.path().join("ci/pipeline.yaml")),
        dir.path(),
    );
    insta::assert_snapshot!(out);
}

#[test]
fn dry_run_warns_when_the_run_would_refuse_its_uncommitted_tooling() {
    let dir = uncommitted_workspace();
    let (code, stderr) = dry_run(dir.path());
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stderr.contains("cordon: warning: `cordon run` would refuse:")
            && stderr.contains("commit the pipeline and its tooling files first"),
        "{stderr}"
    );
    // Tracked but changed, with a commit action: both refusals are named.
    git(dir.path(), &["add", "--all"]);
    git(dir.path(), &["commit", "--quiet", "--message", "tooling"]);
    std::fs::write(
        dir.path().join("ci/agents/dev.agent.md"),
        "---\nname: dev\n---\nChanged.\n",
    )
    .expect("write");
    let (_, stderr) = dry_run(dir.path());
    assert!(
        stderr.contains("tooling file `ci/agents/dev.agent.md` has uncommitted changes")
            && stderr.contains("the worktree is dirty"),
        "{stderr}"
    );
    // The control: committed again, no warning.
    git(
        dir.path(),
        &["commit", "--quiet", "--all", "--message", "again"],
    );
    let (_, stderr) = dry_run(dir.path());
    assert!(!stderr.contains("would refuse"), "{stderr}");
}
