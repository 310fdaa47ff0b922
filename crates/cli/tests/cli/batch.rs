//! `cordon batch` with the local backend, judged by the effect on the host: each task runs on
//! its own fresh clone with its own vars, the source repositories are untouched, an interrupted
//! batch resumes its runs, and bad input is refused before anything is created.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use crate::run::git;
use crate::support::cordon;

/// A source repository, a directory holding the batch's pipeline, and a state directory.
pub struct Batch {
    pub dir: tempfile::TempDir,
    pub repo: PathBuf,
    pub tooling: PathBuf,
    pub state: PathBuf,
}

impl Batch {
    pub fn new(pipeline: &str) -> Batch {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().canonicalize().expect("canonical");
        let repo = root.join("repo");
        std::fs::create_dir(&repo).expect("mkdir");
        git(&repo, &["init", "-q", "-b", "main"]);
        std::fs::write(repo.join("README"), "source\n").expect("write");
        git(&repo, &["add", "-A"]);
        git(&repo, &["commit", "-q", "-m", "init"]);
        git(&repo, &["tag", "v1"]);
        let tooling = root.join("tooling");
        std::fs::create_dir(&tooling).expect("mkdir");
        std::fs::write(tooling.join("pipeline.yaml"), pipeline).expect("write");
        Batch {
            repo,
            tooling,
            state: root.join("state"),
            dir,
        }
    }

    pub fn tasks(&self, lines: &str) -> PathBuf {
        let path = self.dir.path().join("tasks.jsonl");
        std::fs::write(&path, lines).expect("write tasks");
        path
    }

    /// `cordon ARGS... --state-dir STATE`.
    pub fn cordon(&self, args: &[&str]) -> Command {
        let mut cmd = cordon();
        cmd.args(args).arg("--state-dir").arg(&self.state);
        cmd
    }

    pub fn submit(&self, tasks: &Path, extra: &[&str]) -> Output {
        let pipeline = self.tooling.join("pipeline.yaml");
        let mut args = vec!["batch", pipeline.to_str().unwrap_or_default(), "--tasks"];
        args.push(tasks.to_str().unwrap_or_default());
        args.extend_from_slice(extra);
        self.cordon(&args).output().expect("cordon batch")
    }

    /// The batch id the first stderr line names.
    pub fn id(out: &Output) -> String {
        let stderr = String::from_utf8_lossy(&out.stderr);
        stderr
            .lines()
            .next()
            .and_then(|l| l.strip_prefix("batch "))
            .unwrap_or_else(|| panic!("no `batch ID` line: {stderr}"))
            .to_owned()
    }

    /// `batch status ID --json`, as (task, status, run) per task.
    pub fn status(&self, id: &str) -> Vec<(String, String, Option<String>)> {
        let out = self
            .cordon(&["batch", "status", id, "--json"])
            .output()
            .expect("status");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|line| {
                let v: serde_json::Value = serde_json::from_str(line).expect("json");
                (
                    v["task"].as_str().unwrap_or_default().to_owned(),
                    v["status"].as_str().unwrap_or_default().to_owned(),
                    v["run"].as_str().map(str::to_owned),
                )
            })
            .collect()
    }

    pub fn clone_of(&self, id: &str, task: &str) -> PathBuf {
        self.state.join("batches").join(id).join(task)
    }
}

const PIPELINE: &str = "name: demo
steps:
  - name: build
    command: echo \"built $CORDON_VAR_n\" >> built.txt && test \"$CORDON_VAR_n\" != bad
";

#[test]
fn a_batch_runs_each_task_on_its_own_clone_with_its_vars_and_exits_1_when_one_fails() {
    let b = Batch::new(PIPELINE);
    let tasks = b.tasks(&format!(
        "{{\"id\":\"one\",\"repo\":\"repo\",\"ref\":\"main\",\"vars\":{{\"n\":\"1\"}}}}\n\
         {{\"id\":\"two\",\"repo\":\"{}\",\"ref\":\"v1\",\"vars\":{{\"n\":\"2\"}}}}\n\
         \n\
         {{\"id\":\"three\",\"repo\":\"repo\",\"vars\":{{\"n\":\"bad\"}}}}\n",
        b.repo.display()
    ));
    let out = b.submit(&tasks, &["--jobs", "2"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let id = Batch::id(&out);
    assert!(
        stderr.contains(&format!("batch {id}: 2 of 3 tasks succeeded")),
        "{stderr}"
    );
    for (task, n) in [("one", "1"), ("two", "2")] {
        let built = std::fs::read_to_string(b.clone_of(&id, task).join("built.txt"));
        assert_eq!(
            built.ok().as_deref(),
            Some(format!("built {n}\n").as_str()),
            "{task}"
        );
    }
    // The source repository is untouched: no file, no branch, no commit from the batch.
    assert!(!b.repo.join("built.txt").exists());
    assert_eq!(
        git(&b.repo, &["branch", "--format=%(refname:short)"]),
        "main\n"
    );
    assert_eq!(git(&b.repo, &["rev-list", "--count", "HEAD"]), "1\n");
    // Each clone has the tooling committed on top of the task's ref.
    let log = git(&b.clone_of(&id, "one"), &["log", "--format=%s"]);
    assert_eq!(
        log,
        "cordon batch: the pipeline and its agent files\ninit\n"
    );
    let status = b.status(&id);
    let shown: Vec<(&str, &str)> = status
        .iter()
        .map(|(t, s, _)| (t.as_str(), s.as_str()))
        .collect();
    assert_eq!(
        shown,
        [("one", "success"), ("two", "success"), ("three", "failure")]
    );
    let runs = b
        .cordon(&["runs", "--batch", &id[..8]])
        .output()
        .expect("runs");
    let listed = String::from_utf8_lossy(&runs.stdout);
    for (_, _, run) in &status {
        assert!(
            listed.contains(run.as_deref().unwrap_or("none")),
            "{listed}"
        );
    }
    assert_eq!(listed.lines().count(), 3, "{listed}");
}

#[test]
fn an_interrupted_batch_stops_its_runs_resumably_and_resume_finishes_them() {
    let b = Batch::new(
        "name: slow
steps:
  - name: wait
    command: test \"$CORDON_VAR_n\" = 7 && { test -f second || (touch second && sleep 60); }
",
    );
    // The resumed runs need their vars again: they come from the store, not the events.
    let tasks = b.tasks(
        "{\"id\":\"a\",\"repo\":\"repo\",\"vars\":{\"n\":\"7\"}}\n\
         {\"id\":\"b\",\"repo\":\"repo\",\"vars\":{\"n\":\"7\"}}\n",
    );
    let pipeline = b.tooling.join("pipeline.yaml");
    let mut child = b
        .cordon(&[
            "batch",
            pipeline.to_str().unwrap_or_default(),
            "--tasks",
            tasks.to_str().unwrap_or_default(),
        ])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    // Both steps are sleeping once each clone has its marker.
    let deadline = Instant::now() + Duration::from_secs(60);
    let batches = b.state.join("batches");
    let started = || {
        std::fs::read_dir(&batches)
            .ok()
            .and_then(|mut d| d.next())
            .and_then(|e| e.ok())
            .is_some_and(|e| {
                ["a", "b"]
                    .iter()
                    .all(|t| e.path().join(t).join("second").exists())
            })
    };
    while !started() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().expect("wait");
            panic!(
                "the tasks never started: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(300));
    let pid = i32::try_from(child.id()).expect("pid");
    assert!(
        Command::new("kill")
            .args(["-INT", &pid.to_string()])
            .status()
            .expect("kill")
            .success()
    );
    let out = child.wait_with_output().expect("wait");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{stderr}");
    let id = Batch::id(&out);
    assert!(
        stderr.contains(&format!("continue with `cordon batch resume {id}`")),
        "{stderr}"
    );
    let before = b.status(&id);
    assert!(
        before
            .iter()
            .all(|(_, s, r)| s == "interrupted" && r.is_some()),
        "{before:?}"
    );
    let resumed = b
        .cordon(&["batch", "resume", &id])
        .output()
        .expect("resume");
    assert_eq!(
        resumed.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&resumed.stderr)
    );
    let after = b.status(&id);
    // The same runs, resumed (their workspaces kept the marker), not new ones.
    for ((_, _, run_before), (_, status, run_after)) in before.iter().zip(&after) {
        assert_eq!((status.as_str(), run_after), ("success", run_before));
    }
}

#[test]
fn a_bad_tasks_file_is_refused_line_by_line_and_creates_nothing() {
    let b = Batch::new(PIPELINE);
    let tasks = b.tasks(
        "{\"id\":\"ok\",\"repo\":\"repo\"}\n{\"id\":\"no spaces\",\"repo\":\"repo\"}\n\
         {\"id\":\"x\",\"repo\":\"ssh://forge.example.com/r\"}\n",
    );
    let out = b.submit(&tasks, &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("tasks.jsonl:2: the id `no spaces` is not 1 to 64 letters"),
        "{stderr}"
    );
    assert!(
        stderr.contains("tasks.jsonl:3: the repo `ssh://forge.example.com/r` is neither"),
        "{stderr}"
    );
    assert!(
        stderr.contains(
            "has 2 problem(s); fix them, then submit the batch again (nothing was created)"
        ),
        "{stderr}"
    );
    assert!(!b.state.join("batches").exists());
    let status = b
        .cordon(&["batch", "status", "01"])
        .output()
        .expect("status");
    assert_eq!(status.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&status.stderr).contains("no batch matches `01`"));
    let runs = b.cordon(&["runs", "--batch", "01"]).output().expect("runs");
    assert_eq!(runs.status.code(), Some(2));
    // The control: the same file without the bad lines is taken.
    let good = b.tasks("{\"id\":\"ok\",\"repo\":\"repo\",\"vars\":{\"n\":\"1\"}}\n");
    assert_eq!(b.submit(&good, &[]).status.code(), Some(0));
}

#[test]
fn a_task_whose_ref_is_missing_fails_with_the_fix_while_the_others_run() {
    let b = Batch::new(PIPELINE);
    let tasks = b.tasks(
        "{\"id\":\"gone\",\"repo\":\"repo\",\"ref\":\"no-such-branch\",\"vars\":{\"n\":\"1\"}}\n\
         {\"id\":\"fine\",\"repo\":\"repo\",\"vars\":{\"n\":\"1\"}}\n",
    );
    let out = b.submit(&tasks, &["--jobs", "1"]);
    assert_eq!(out.status.code(), Some(1));
    let id = Batch::id(&out);
    let status = b.status(&id);
    assert_eq!(status[0].1, "pending", "{status:?}");
    assert_eq!(status[1].1, "success", "{status:?}");
    let log =
        std::fs::read_to_string(b.state.join("batches").join(&id).join("gone.log")).expect("log");
    assert!(
        log.contains("has no branch, tag or commit `no-such-branch`; fix the task's `ref`"),
        "{log}"
    );
}

#[test]
fn a_hostile_source_repository_runs_no_hook_filter_or_monitor_on_the_host() {
    let b = Batch::new(PIPELINE);
    let marker = b.dir.path().join("pwned");
    let trap = format!("touch {}", marker.display());
    // Armed in the source's own config and hooks, and in its tree.
    git(&b.repo, &["config", "core.fsmonitor", &trap]);
    git(&b.repo, &["config", "filter.evil.smudge", &trap]);
    let hook = b.repo.join(".git/hooks/post-checkout");
    std::fs::write(&hook, format!("#!/bin/sh\n{trap}\n")).expect("hook");
    std::fs::set_permissions(&hook, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("chmod");
    std::fs::write(b.repo.join(".gitattributes"), "* filter=evil\n").expect("attributes");
    std::fs::write(
        b.repo.join(".gitmodules"),
        "[submodule \"s\"]\n\tpath = s\n\turl = ext::sh -c touch% /tmp/never\n",
    )
    .expect("modules");
    git(&b.repo, &["-c", "core.fsmonitor=false", "add", "-A"]);
    git(
        &b.repo,
        &["-c", "core.fsmonitor=false", "commit", "-q", "-m", "armed"],
    );
    let _ = std::fs::remove_file(&marker);
    let tasks = b.tasks("{\"id\":\"t\",\"repo\":\"repo\",\"vars\":{\"n\":\"1\"}}\n");
    let out = b.submit(&tasks, &[]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        !marker.exists(),
        "a trap of the source repository ran on the host"
    );
    // The control: the trap is armed — git run the ordinary way in the source fires it.
    let _ = Command::new("git")
        .args(["checkout", "-q", "main"])
        .current_dir(&b.repo)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .status();
    assert!(marker.exists(), "the control trap did not fire");
}

#[test]
fn a_repository_with_its_own_cordon_batch_entry_is_refused_naming_it() {
    let b = Batch::new(PIPELINE);
    std::fs::create_dir(b.repo.join(".cordon-batch")).expect("mkdir");
    std::fs::write(b.repo.join(".cordon-batch/x"), "x").expect("write");
    git(&b.repo, &["add", "-A"]);
    git(&b.repo, &["commit", "-q", "-m", "entry"]);
    let tasks = b.tasks("{\"id\":\"t\",\"repo\":\"repo\"}\n");
    let out = b.submit(&tasks, &[]);
    assert_eq!(out.status.code(), Some(1));
    let log = std::fs::read_to_string(b.state.join("batches").join(Batch::id(&out)).join("t.log"))
        .expect("log");
    assert!(
        log.contains("has a `.cordon-batch` entry, where cordon puts the batch's pipeline"),
        "{log}"
    );
}

#[test]
fn a_pipeline_whose_agent_files_sit_outside_its_directory_is_refused() {
    let b = Batch::new(
        "name: demo
agents_dir: ../agents
steps:
  - name: dev
    agent: dev
",
    );
    let tasks = b.tasks("{\"id\":\"t\",\"repo\":\"repo\"}\n");
    let out = b.submit(&tasks, &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(!b.state.join("batches").exists());
}

#[test]
fn a_tasks_prompt_reaches_its_run_with_its_vars_filled_in() {
    let b = Batch::new(PIPELINE);
    let tasks = b.tasks(
        "{\"id\":\"p\",\"repo\":\"repo\",\"prompt\":\"Fix issue {vars.n} in {x}\",\"vars\":{\"n\":\"42\"}}\n",
    );
    let out = b.submit(&tasks, &[]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let status = b.status(&Batch::id(&out));
    let run = status[0].2.clone().expect("run");
    let logs = b
        .cordon(&["logs", &run, "--json", "--type", "run.started"])
        .output()
        .expect("logs");
    let text = String::from_utf8_lossy(&logs.stdout);
    assert!(
        text.contains("\"prompt\":\"Fix issue 42 in {x}\""),
        "{text}"
    );
}
