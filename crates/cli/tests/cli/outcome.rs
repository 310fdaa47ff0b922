//! Outcome runs through the binary with real sandboxes (DESIGN §13): the offline example ends in
//! one commit per task; `kill -9` at moments spread over the run and a resume end in the same
//! commits, each made once; the critic cannot write the workspace (judged on the host, with the
//! executor's write as the control); `cordon do` and `cordon run` refuse the other kind of
//! pipeline with the fix.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use crate::run::{git, stderr};
use crate::support::cordon_bin;

pub(crate) const OUTCOME: &str =
    "Add a --json option to report.py that prints the counts as JSON, and document it.";

fn example() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/outcome-report-json")
}

/// The example copied into a fresh repository with one commit; (tempdir, workspace, state).
pub(crate) fn workspace() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let ws = dir.path().join("ws");
    std::fs::create_dir(&ws).expect("mkdir");
    let ws = ws.canonicalize().expect("canonical");
    copy(&example(), &ws);
    std::fs::remove_file(ws.join("run.sh")).expect("rm run.sh");
    git(&ws, &["init", "-q", "-b", "main"]);
    git(&ws, &["add", "-A"]);
    git(&ws, &["commit", "-q", "-m", "before"]);
    let state = dir.path().join("state");
    (dir, ws, state)
}

fn copy(from: &Path, to: &Path) {
    for entry in std::fs::read_dir(from).expect("read_dir") {
        let entry = entry.expect("entry");
        let target = to.join(entry.file_name());
        if entry.file_type().expect("type").is_dir() {
            std::fs::create_dir_all(&target).expect("mkdir");
            copy(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).expect("copy");
        }
    }
}

pub(crate) fn cordon(ws: &Path, state: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new(cordon_bin());
    cmd.args(args)
        .arg("--state-dir")
        .arg(state)
        .current_dir(ws)
        .env("NO_COLOR", "1");
    cmd
}

/// The commits after the first, oldest first: (subject, Cordon-Task trailer).
fn task_commits(ws: &Path) -> Vec<(String, String)> {
    git(
        ws,
        &[
            "log",
            "--reverse",
            "--format=%s%x09%(trailers:key=Cordon-Task,valueonly)",
            "HEAD~2..HEAD",
        ],
    )
    .lines()
    .filter(|l| !l.trim().is_empty())
    .map(|l| {
        let (subject, task) = l.split_once('\t').unwrap_or((l, ""));
        (subject.to_owned(), task.trim().to_owned())
    })
    .collect()
}

fn expected_commits() -> Vec<(String, String)> {
    vec![
        ("t1: Add a --json option".to_owned(), "t1".to_owned()),
        ("t2: Document --json".to_owned(), "t2".to_owned()),
    ]
}

#[test]
fn the_offline_outcome_example_commits_each_accepted_task() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let out = crate::support::run_example("outcome-report-json", tmp.path());
    let err = stderr(&out);
    let log = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{err}\n{log}");
    assert!(
        log.contains("t2: Document --json") && log.contains("t1: Add a --json option"),
        "{log}"
    );
    // decompose → two tasks → a verify failure → a revision → done, in the terminal's words.
    for line in [
        "planned 2 tasks: t1, t2",
        "t1.verify      failed   attempt 1",
        "task t1  executing  revision 1, replans 0: verify failed: `python3 -m unittest -q` exited with status 1",
        "task t1  done  revision 1, replans 0",
        "task t2  done",
        "success: every task is done (t1, t2)",
    ] {
        assert!(err.contains(line), "{line:?} not in:\n{err}");
    }
    let table = err
        .lines()
        .skip_while(|l| !l.starts_with("task  title"))
        .take(3)
        .collect::<Vec<_>>()
        .join("\n");
    assert!(
        table.contains("t1    Add a --json option") && table.contains("done"),
        "the task table: {table}"
    );
}

#[test]
fn outcome_runs_killed_at_any_moment_resume_to_the_same_commits() {
    // The reference: how many events the whole run logs.
    let (_dir, ws, state) = workspace();
    let out = cordon(&ws, &state, &["do", OUTCOME, "--no-ui", "--json"])
        .output()
        .expect("cordon do");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let total = String::from_utf8_lossy(&out.stdout).lines().count();
    assert!(total > 100, "{total} events");
    assert_eq!(task_commits(&ws), expected_commits());
    // Moments spread over the run (a fixed spread, so a failure names its moment): decompose,
    // t1's plan, its first execute, the failing verify, the revision, the commits.
    for fraction in [3, 11, 23, 37, 50, 64, 78, 91, 99] {
        let kill_at = total * fraction / 100;
        let (_dir, ws, state) = workspace();
        let mut child = cordon(&ws, &state, &["do", OUTCOME, "--no-ui", "--json"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn");
        let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
        let mut seen = 0;
        while seen < kill_at {
            match lines.next() {
                Some(Ok(_)) => seen += 1,
                _ => break,
            }
        }
        // kill -9: no handler runs; the sessions die with their parent.
        child.kill().expect("kill -9");
        let _ = child.wait();
        let resumed: Output = cordon(&ws, &state, &["run", "--resume-last", "--no-ui"])
            .output()
            .expect("resume");
        let err = stderr(&resumed);
        // Killed after its last event, the run had already finished.
        assert!(
            resumed.status.code() == Some(0),
            "killed after {seen} of {total} events ({fraction}%): {err}"
        );
        assert_eq!(
            task_commits(&ws),
            expected_commits(),
            "killed after {seen} of {total} events: one commit per task, none twice"
        );
        let status = git(&ws, &["status", "--porcelain"]);
        assert_eq!(status, "", "nothing left uncommitted: {status}");
    }
}

/// An outcome pipeline whose critic tries to write the workspace (a file tool and a shell).
const WRITER: &str = "name: writer
llm: {provider: replay, transcript: replay.jsonl}
isolation: {caches: [uv]}
outcome:
  decompose: a
  plan: a
  execute: a
  scrutinize: a
  validate: a
  commit: none
";

#[test]
fn only_execute_writes_the_workspace_and_the_planner_critic_and_validator_cannot() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(ws.join("agents")).expect("mkdir");
    let ws = ws.canonicalize().expect("canonical");
    std::fs::write(ws.join("outcome.yaml"), WRITER).expect("write");
    std::fs::write(ws.join("agents/a.agent.md"), "---\nname: a\n---\nWork.\n").expect("write");
    std::fs::write(ws.join("kept.txt"), "original\n").expect("write");
    let turns = [
        serde_json::json!({"step": "decompose", "tool_calls": [{"name": "submit_tasks", "arguments": {"tasks": [{"id": "t1", "title": "One"}]}}]}),
        serde_json::json!({"step": "decompose", "text": "ok"}),
        serde_json::json!({"step": "t1.plan", "tool_calls": [{"name": "write_file", "arguments": {"path": "planner.txt", "content": "x"}}, {"name": "submit_plan", "arguments": {"steps": ["write"]}}]}),
        serde_json::json!({"step": "t1.plan", "text": "ok"}),
        serde_json::json!({"step": "t1.execute", "tool_calls": [
            {"name": "write_file", "arguments": {"path": "made.txt", "content": "by execute\n"}},
            {"name": "bash", "arguments": {"command": "echo x > \"$UV_CACHE_DIR/made-by-execute\""}}
        ]}),
        serde_json::json!({"step": "t1.execute", "text": "ok"}),
        serde_json::json!({"step": "t1.scrutinize", "tool_calls": [
            {"name": "write_file", "arguments": {"path": "kept.txt", "content": "changed by the critic\n"}},
            {"name": "bash", "arguments": {"command": "echo x > critic.txt; rm -f made.txt; mkdir -p /tmp/.cordon-cache/uv; echo x > /tmp/.cordon-cache/uv/poison; echo critic-ran"}}
        ]}),
        serde_json::json!({"step": "t1.scrutinize", "text": "nothing to add"}),
        serde_json::json!({"step": "t1.validate", "tool_calls": [{"name": "bash", "arguments": {"command": "echo v > validator.txt; echo validator-ran"}}]}),
        serde_json::json!({"step": "t1.validate", "text": "VERDICT: ACCEPT"}),
    ];
    let transcript: String = turns.iter().map(|t| format!("{t}\n")).collect();
    std::fs::write(ws.join("replay.jsonl"), transcript).expect("write");
    git(&ws, &["init", "-q", "-b", "main"]);
    git(&ws, &["add", "-A"]);
    git(&ws, &["commit", "-q", "-m", "before"]);
    let state = dir.path().join("state");
    let out = cordon(&ws, &state, &["do", "Write a file.", "--no-ui", "--json"])
        .output()
        .expect("cordon do");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    // The control: execute wrote its file.
    assert_eq!(
        std::fs::read_to_string(ws.join("made.txt")).expect("made.txt"),
        "by execute\n"
    );
    // The critic: nothing changed, nothing created, nothing removed.
    assert_eq!(
        std::fs::read_to_string(ws.join("kept.txt")).expect("kept.txt"),
        "original\n"
    );
    assert!(!ws.join("critic.txt").exists());
    // Nor the persistent cache: the execute's file is there (the control), the critic's is not.
    let caches: Vec<String> = walk(&state.join("caches"))
        .into_iter()
        .filter_map(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .collect();
    assert!(caches.contains(&"made-by-execute".to_owned()), "{caches:?}");
    assert!(!caches.contains(&"poison".to_owned()), "{caches:?}");
    // Nor the planner nor the validator.
    assert!(!ws.join("planner.txt").exists());
    assert!(!ws.join("validator.txt").exists());
    let log = String::from_utf8_lossy(&out.stdout);
    assert!(
        log.contains("critic-ran") || log.contains("Read-only file system"),
        "the critic's shell ran in its sandbox: {log}"
    );
    assert!(
        log.contains(r#""type":"task.state","step":null,"data":{"task":"t1","state":"done""#),
        "{log}"
    );
}

#[test]
fn cordon_do_and_cordon_run_each_refuse_the_other_kind_of_pipeline_with_the_fix() {
    let (_dir, ws, state) = workspace();
    let run = cordon(&ws, &state, &["run", "outcome.yaml", "--no-ui"])
        .output()
        .expect("run");
    assert_eq!(run.status.code(), Some(2));
    assert!(
        stderr(&run)
            .contains("is an outcome pipeline (`outcome:`); start it with `cordon do \"OUTCOME\""),
        "{}",
        stderr(&run)
    );
    std::fs::write(
        ws.join("pipeline.yaml"),
        "name: p\nsteps:\n  - {name: a, command: 'true'}\n",
    )
    .expect("write");
    git(&ws, &["add", "-A"]);
    git(&ws, &["commit", "-q", "-m", "steps"]);
    let wrong = cordon(
        &ws,
        &state,
        &["do", "x", "--pipeline", "pipeline.yaml", "--no-ui"],
    )
    .output()
    .expect("do");
    assert_eq!(wrong.status.code(), Some(2));
    assert!(
        stderr(&wrong)
            .contains("has `steps`, not `outcome`; `cordon do` needs an outcome pipeline"),
        "{}",
        stderr(&wrong)
    );
    let empty = cordon(&ws, &state, &["do", " ", "--no-ui"])
        .output()
        .expect("do");
    assert_eq!(empty.status.code(), Some(2));
    assert!(
        stderr(&empty).contains("the OUTCOME is empty"),
        "{}",
        stderr(&empty)
    );
    let elsewhere = tempfile::tempdir().expect("tempdir");
    let missing = cordon(elsewhere.path(), &state, &["do", "x", "--no-ui"])
        .output()
        .expect("do");
    assert_eq!(missing.status.code(), Some(2));
    assert!(
        stderr(&missing).contains("there is no ./outcome.yaml here")
            && stderr(&missing).contains("cordon init --outcome"),
        "{}",
        stderr(&missing)
    );
    // Nothing ran: no run was recorded.
    let runs = cordon(&ws, &state, &["runs", "--json"])
        .output()
        .expect("runs");
    assert_eq!(String::from_utf8_lossy(&runs.stdout), "");
}

#[test]
fn runs_lists_an_outcome_run_as_kind_outcome() {
    let (_dir, ws, state) = workspace();
    let out = cordon(&ws, &state, &["do", OUTCOME, "--no-ui"])
        .output()
        .expect("do");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let runs = cordon(&ws, &state, &["runs", "--json"])
        .output()
        .expect("runs");
    let line: serde_json::Value =
        serde_json::from_str(String::from_utf8_lossy(&runs.stdout).trim()).expect("one line");
    assert_eq!(line["kind"], "outcome");
    assert_eq!(line["status"], "success");
    assert!(line["tokens_in"].as_u64().unwrap_or(0) > 0);
}

/// Every file below `dir`.
fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            files.extend(walk(&path));
        } else {
            files.push(path);
        }
    }
    files
}

/// Two independent tasks with `parallel: 2`: each writes its own file and records, from inside
/// its sandbox, where it ran and what git sees there.
const PARALLEL: &str = "name: parallel
llm: {provider: replay, transcript: replay.jsonl}
outcome:
  decompose: a
  plan: a
  execute: a
  scrutinize: a
  validate: a
  verify: [\"test -f a.txt || test -f b.txt\"]
  parallel: 2
  commit: per_task
";

/// The repository of [`PARALLEL`] with its transcript, committed; (tempdir, workspace, state,
/// the first commit).
pub(crate) fn parallel_workspace() -> (tempfile::TempDir, PathBuf, PathBuf, String) {
    let dir = tempfile::tempdir().expect("tempdir");
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(ws.join("agents")).expect("mkdir");
    let ws = ws.canonicalize().expect("canonical");
    std::fs::write(ws.join("outcome.yaml"), PARALLEL).expect("write");
    std::fs::write(ws.join("agents/a.agent.md"), "---\nname: a\n---\nWork.\n").expect("write");
    std::fs::write(ws.join(".env"), "SECRET=host-only\n").expect("write");
    std::fs::write(ws.join(".gitignore"), ".env\n").expect("write");
    let mut turns = vec![
        serde_json::json!({"step": "decompose", "tool_calls": [{"name": "submit_tasks", "arguments": {"tasks": [{"id": "t1", "title": "Write a"}, {"id": "t2", "title": "Write b"}]}}]}),
        serde_json::json!({"step": "decompose", "text": "ok"}),
    ];
    for (task, file) in [("t1", "a.txt"), ("t2", "b.txt")] {
        turns.extend([
            serde_json::json!({"step": format!("{task}.plan"), "tool_calls": [{"name": "submit_plan", "arguments": {"steps": ["write"]}}]}),
            serde_json::json!({"step": format!("{task}.plan"), "text": "ok"}),
            serde_json::json!({"step": format!("{task}.execute"), "tool_calls": [
                {"name": "write_file", "arguments": {"path": file, "content": format!("from {task}\n")}},
                {"name": "bash", "arguments": {"command": format!("pwd > {task}-where.txt; git rev-parse HEAD^ > {task}-parent.txt 2>&1; cat .env > {task}-env.txt 2>&1; true")}}
            ]}),
            serde_json::json!({"step": format!("{task}.execute"), "text": "ok"}),
            serde_json::json!({"step": format!("{task}.scrutinize"), "text": "fine"}),
            serde_json::json!({"step": format!("{task}.validate"), "text": "VERDICT: ACCEPT"}),
        ]);
    }
    let transcript: String = turns.iter().map(|t| format!("{t}\n")).collect();
    std::fs::write(ws.join("replay.jsonl"), transcript).expect("write");
    git(&ws, &["init", "-q", "-b", "main"]);
    git(&ws, &["add", "-A"]);
    git(&ws, &["commit", "-q", "-m", "before"]);
    let head = git(&ws, &["rev-parse", "HEAD"]);
    let state = dir.path().join("state");
    (dir, ws, state, head)
}

#[test]
fn parallel_tasks_run_in_their_own_worktrees_in_real_sandboxes_and_are_merged_and_committed() {
    let (_dir, ws, state, head) = parallel_workspace();
    let out = cordon(&ws, &state, &["do", "Write two files.", "--no-ui"])
        .output()
        .expect("cordon do");
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    for task in ["t1", "t2"] {
        let file = if task == "t1" { "a.txt" } else { "b.txt" };
        assert_eq!(
            std::fs::read_to_string(ws.join(file)).expect("merged"),
            format!("from {task}\n")
        );
        let run = std::fs::read_dir(state.join("worktrees"))
            .map(|mut d| d.next().is_some())
            .unwrap_or(false);
        assert!(!run, "the run's worktrees are removed when it ends");
        let wher = std::fs::read_to_string(ws.join(format!("{task}-where.txt"))).expect("where");
        assert!(
            wher.trim().ends_with(&format!("/{task}/work")) && wher.contains("/worktrees/"),
            "{task} ran in its worktree: {wher}"
        );
        // The worktree's git reads the repository: its HEAD's parent is the main HEAD.
        let parent =
            std::fs::read_to_string(ws.join(format!("{task}-parent.txt"))).expect("parent");
        assert_eq!(
            parent.trim(),
            head.trim(),
            "git inside {task}'s sandbox: {parent}"
        );
        // The root `.env` (ignored, masked) is not in a worktree.
        let env = std::fs::read_to_string(ws.join(format!("{task}-env.txt"))).expect("env");
        assert!(!env.contains("host-only"), "{env}");
    }
    assert_eq!(
        git(
            &ws,
            &[
                "log",
                "--format=%(trailers:key=Cordon-Task,valueonly,separator=)",
                &format!("{}..HEAD", head.trim())
            ]
        )
        .lines()
        .filter(|l| !l.trim().is_empty())
        .count(),
        2,
        "one commit per task"
    );
    assert_eq!(
        git(&ws, &["status", "--porcelain"]),
        "",
        "everything is committed"
    );
}

#[test]
fn a_parallel_outcome_run_killed_at_any_moment_resumes_to_the_same_commits() {
    let (_dir, ws, state, _) = parallel_workspace();
    let out = cordon(
        &ws,
        &state,
        &["do", "Write two files.", "--no-ui", "--json"],
    )
    .output()
    .expect("cordon do");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let total = String::from_utf8_lossy(&out.stdout).lines().count();
    for fraction in [10, 35, 60, 85] {
        let kill_at = total * fraction / 100;
        let (_dir, ws, state, head) = parallel_workspace();
        let mut child = cordon(
            &ws,
            &state,
            &["do", "Write two files.", "--no-ui", "--json"],
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
        let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
        let mut seen = 0;
        while seen < kill_at {
            match lines.next() {
                Some(Ok(_)) => seen += 1,
                _ => break,
            }
        }
        child.kill().expect("kill -9");
        let _ = child.wait();
        let resumed = cordon(&ws, &state, &["run", "--resume-last", "--no-ui"])
            .output()
            .expect("resume");
        assert_eq!(
            resumed.status.code(),
            Some(0),
            "killed after {seen} of {total} events: {}",
            stderr(&resumed)
        );
        for (file, text) in [("a.txt", "from t1\n"), ("b.txt", "from t2\n")] {
            assert_eq!(
                std::fs::read_to_string(ws.join(file)).expect("merged"),
                text
            );
        }
        let tasks = git(
            &ws,
            &[
                "log",
                "--format=%(trailers:key=Cordon-Task,valueonly,separator=)",
                &format!("{}..HEAD", head.trim()),
            ],
        );
        let mut tasks: Vec<&str> = tasks.lines().filter(|l| !l.trim().is_empty()).collect();
        tasks.sort_unstable();
        assert_eq!(
            tasks,
            ["t1", "t2"],
            "killed after {seen} of {total}: one commit per task"
        );
        assert_eq!(
            git(&ws, &["status", "--porcelain"]),
            "",
            "killed after {seen}"
        );
        let left = std::fs::read_dir(state.join("worktrees"))
            .map(|mut d| d.next().is_some())
            .unwrap_or(false);
        assert!(
            !left,
            "killed after {seen}: the worktrees are removed at the end"
        );
    }
}
