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
        self.status_of(self.cordon(&["batch", "status", id, "--json"]))
    }

    /// [`Batch::status`] of a batch in the shared store `url`.
    #[cfg(feature = "scale-out")]
    pub fn status_in(&self, id: &str, url: &str) -> Vec<(String, String, Option<String>)> {
        self.status_of(self.cordon(&["batch", "status", id, "--json", "--store", url]))
    }

    fn status_of(&self, mut command: Command) -> Vec<(String, String, Option<String>)> {
        let out = command.output().expect("status");
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

    /// `cordon batch` on the tooling's pipeline and `tasks`, running (stderr piped), leading its
    /// own process group as a terminal's foreground command does.
    pub fn spawn(&self, tasks: &Path, extra: &[&str]) -> std::process::Child {
        let pipeline = self.tooling.join("pipeline.yaml");
        let mut args = vec![
            "batch",
            pipeline.to_str().unwrap_or_default(),
            "--tasks",
            tasks.to_str().unwrap_or_default(),
        ];
        args.extend_from_slice(extra);
        let mut command = self.cordon(&args);
        std::os::unix::process::CommandExt::process_group(&mut command, 0);
        command
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn cordon batch")
    }

    /// The batch id, once each of `tasks`' clones has the marker `second` (its step sleeping),
    /// waited for `limit` at most; `child` is stopped and its stderr shown when it never comes.
    pub fn wait_marked(
        &self,
        child: &mut std::process::Child,
        tasks: &[&str],
        limit: Duration,
    ) -> String {
        let deadline = Instant::now() + limit;
        loop {
            let batch = std::fs::read_dir(self.state.join("batches"))
                .ok()
                .and_then(|mut d| d.next())
                .and_then(Result::ok)
                .filter(|e| {
                    tasks
                        .iter()
                        .all(|t| e.path().join(t).join("second").exists())
                });
            if let Some(batch) = batch {
                return batch.file_name().to_string_lossy().into_owned();
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let mut stderr = String::new();
                if let Some(mut pipe) = child.stderr.take() {
                    let _ = std::io::Read::read_to_string(&mut pipe, &mut stderr);
                }
                panic!("the tasks never started: {stderr}");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn clone_of(&self, id: &str, task: &str) -> PathBuf {
        self.state.join("batches").join(id).join(task)
    }
}

/// A command's stderr as text.
pub fn text(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// `SIGKILL` to the first worker of the batch `child`.
fn kill_worker(child: &std::process::Child) {
    let worker = first_child(child.id());
    assert!(
        Command::new("kill")
            .args(["-KILL", &worker])
            .status()
            .expect("kill")
            .success()
    );
}

/// The first child process of `parent` (a local batch's worker).
fn first_child(parent: u32) -> String {
    std::fs::read_to_string(format!("/proc/{parent}/task/{parent}/children"))
        .unwrap_or_default()
        .split_whitespace()
        .next()
        .expect("a worker")
        .to_owned()
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
    let mut child = b.spawn(&tasks, &[]);
    // Both steps are sleeping once each clone has its marker.
    b.wait_marked(&mut child, &["a", "b"], Duration::from_secs(60));
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

#[test]
fn a_worker_killed_mid_step_leaves_its_run_resumable_and_resume_continues_it() {
    let b = Batch::new(
        "name: slow
steps:
  - name: wait
    command: test -f second || (touch second && sleep 60)
",
    );
    let tasks = b.tasks("{\"id\":\"a\",\"repo\":\"repo\"}\n");
    let mut child = b.spawn(&tasks, &[]);
    b.wait_marked(&mut child, &["a"], Duration::from_secs(60));
    kill_worker(&child);
    let out = child.wait_with_output().expect("wait");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let id = Batch::id(&out);
    let before = b.status(&id);
    assert_eq!(before[0].1, "interrupted", "{before:?}");
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
    assert_eq!(
        (after[0].1.as_str(), &after[0].2),
        ("success", &before[0].2)
    );
}

#[test]
fn a_tampered_task_in_the_store_is_refused_and_nothing_outside_the_state_directory_is_touched() {
    let b = Batch::new(PIPELINE);
    let tasks = b.tasks("{\"id\":\"t\",\"repo\":\"repo\",\"vars\":{\"n\":\"1\"}}\n");
    let out = b.submit(&tasks, &[]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let id = Batch::id(&out);
    let victim = b.dir.path().join("victim");
    std::fs::create_dir(&victim).expect("mkdir");
    std::fs::write(victim.join("data"), "important").expect("write");
    let conn = rusqlite::Connection::open(b.state.join("cordon.db")).expect("db");
    conn.execute(
        "UPDATE batch_tasks SET id = '../../../victim\u{1b}]0;x\u{7}', run = NULL",
        [],
    )
    .expect("tamper");
    drop(conn);
    let out = b
        .cordon(&["batch", "resume", &id])
        .output()
        .expect("resume");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        !stderr.contains('\u{1b}'),
        "a stored id reached the terminal raw: {stderr:?}"
    );
    assert_eq!(
        std::fs::read_to_string(victim.join("data")).ok().as_deref(),
        Some("important")
    );
    assert!(!victim.join(".git").exists());
    let log =
        std::fs::read_to_string(b.state.join("batches").join(&id).join("task-0.log")).expect("log");
    assert!(
        log.contains("task 0 of batch") && log.contains("in the store is damaged"),
        "{log}"
    );
    let status = b
        .cordon(&["batch", "status", &id])
        .output()
        .expect("status");
    assert!(!String::from_utf8_lossy(&status.stdout).contains('\u{1b}'));
}

#[test]
fn a_local_repository_that_borrows_another_repositorys_objects_or_git_directory_is_refused() {
    let b = Batch::new(PIPELINE);
    let secret = b.dir.path().join("secret");
    std::fs::create_dir(&secret).expect("mkdir");
    git(&secret, &["init", "-q", "-b", "main"]);
    std::fs::write(secret.join("key"), "TOPSECRET").expect("write");
    git(&secret, &["add", "-A"]);
    git(&secret, &["commit", "-q", "-m", "secret"]);
    // A gitfile pointing at the secret repository.
    let gitfile = b.dir.path().join("gitfile");
    std::fs::create_dir(&gitfile).expect("mkdir");
    std::fs::write(
        gitfile.join(".git"),
        format!("gitdir: {}/.git\n", secret.display()),
    )
    .expect("gitfile");
    // A linked object store and refs.
    let linked = b.dir.path().join("linked");
    std::fs::create_dir_all(linked.join(".git")).expect("mkdir");
    for entry in ["objects", "refs", "HEAD"] {
        std::os::unix::fs::symlink(
            secret.join(".git").join(entry),
            linked.join(".git").join(entry),
        )
        .expect("link");
    }
    // Alternates into the secret repository's objects.
    let borrowing = b.dir.path().join("borrowing");
    git(
        b.dir.path(),
        &[
            "clone",
            "-q",
            "--shared",
            secret.to_str().unwrap_or_default(),
            "borrowing",
        ],
    );
    for (task, want) in [
        ("gitfile", "has a `.git` that is a link or a file"),
        ("linked", "has a link at `objects` in its git directory"),
        (
            "borrowing",
            "borrows from another (`objects/info/alternates`)",
        ),
    ] {
        let tasks = b.tasks(&format!("{{\"id\":\"{task}\",\"repo\":\"{task}\"}}\n"));
        let out = b.submit(&tasks, &[]);
        assert_eq!(out.status.code(), Some(1), "{task}");
        let id = Batch::id(&out);
        let log = std::fs::read_to_string(
            b.state
                .join("batches")
                .join(&id)
                .join(format!("{task}.log")),
        )
        .expect("log");
        assert!(log.contains(want), "{task}: {log}");
        assert!(
            !b.clone_of(&id, task).join("key").exists(),
            "{task}: the secret was cloned"
        );
    }
    let _ = borrowing;
}

#[test]
fn a_checkout_larger_than_the_bound_is_refused_before_a_file_is_written() {
    let b = Batch::new(PIPELINE);
    // One 100 MiB blob of zeros (a few hundred KiB packed), named 90 times: 9 GiB checked out.
    let big = b.dir.path().join("big");
    let file = std::fs::File::create(&big).expect("create");
    file.set_len(100 << 20).expect("size");
    drop(file);
    let blob = git(
        &b.repo,
        &["hash-object", "-w", big.to_str().unwrap_or_default()],
    );
    let tree: String = (0..90)
        .map(|i| format!("100644 blob {}\tf{i}\n", blob.trim()))
        .collect();
    let mut mktree = Command::new("git")
        .arg("mktree")
        .current_dir(&b.repo)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("mktree");
    std::io::Write::write_all(&mut mktree.stdin.take().expect("stdin"), tree.as_bytes())
        .expect("write tree");
    let tree = String::from_utf8_lossy(&mktree.wait_with_output().expect("tree").stdout)
        .trim()
        .to_owned();
    let commit = git(&b.repo, &["commit-tree", &tree, "-m", "bomb"]);
    git(&b.repo, &["update-ref", "refs/heads/bomb", commit.trim()]);
    let tasks = b.tasks(
        "{\"id\":\"bomb\",\"repo\":\"repo\",\"ref\":\"bomb\"}\n\
         {\"id\":\"fine\",\"repo\":\"repo\",\"vars\":{\"n\":\"1\"}}\n",
    );
    let out = b.submit(&tasks, &["--jobs", "1"]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let id = Batch::id(&out);
    let log =
        std::fs::read_to_string(b.state.join("batches").join(&id).join("bomb.log")).expect("log");
    assert!(
        log.contains("would check out 9000 MiB, more than the 8192 MiB"),
        "{log}"
    );
    assert!(!b.clone_of(&id, "bomb").join("f0").exists());
    // The control: the same repository at its ordinary ref is taken.
    assert_eq!(b.status(&id)[1].1, "success");
}

#[test]
fn a_batch_killed_outright_stops_its_workers_and_their_runs_stay_resumable() {
    let b = Batch::new(
        "name: slow
steps:
  - name: wait
    command: test -f second || (touch second && sleep 60)
",
    );
    let tasks = b.tasks("{\"id\":\"a\",\"repo\":\"repo\"}\n");
    let mut child = b.spawn(&tasks, &[]);
    let id = b.wait_marked(&mut child, &["a"], Duration::from_secs(60));
    let worker = first_child(child.id());
    child.kill().expect("kill -9 the batch");
    let _ = child.wait();
    let gone = Instant::now() + Duration::from_secs(30);
    while std::path::Path::new(&format!("/proc/{worker}")).exists() {
        assert!(Instant::now() < gone, "the worker outlived its batch");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(b.status(&id)[0].1, "interrupted");
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
}

#[test]
fn a_tasks_file_that_cannot_be_read_as_text_and_a_jobs_count_out_of_range_are_refused() {
    let b = Batch::new(PIPELINE);
    let binary = b.dir.path().join("binary.jsonl");
    std::fs::write(&binary, b"{\"id\":\"\xff\"}\n").expect("write");
    let directory = b.dir.path().join("dir.jsonl");
    std::fs::create_dir(&directory).expect("mkdir");
    let fifo = b.dir.path().join("fifo.jsonl");
    assert!(
        Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .expect("mkfifo")
            .success()
    );
    let missing = b.dir.path().join("missing.jsonl");
    let good = b.tasks("{\"id\":\"t\",\"repo\":\"repo\",\"vars\":{\"n\":\"1\"}}\n");
    for (tasks, extra, want) in [
        (&binary, &[][..], "is not UTF-8 text; save it as UTF-8"),
        (
            &directory,
            &[][..],
            "is not a regular file; write the tasks to a file and name it",
        ),
        // A FIFO is refused at once, never waited on for a writer.
        (&fifo, &[][..], "is not a regular file"),
        (&missing, &[][..], "name a readable file of task lines"),
        (
            &good,
            &["--jobs", "65"][..],
            "expected a number of tasks from 1 to 64",
        ),
        (
            &good,
            &["--jobs", "0"][..],
            "expected a number of tasks from 1 to 64",
        ),
    ] {
        let out = b.submit(tasks, extra);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{want}: {stderr}");
        assert!(stderr.contains(want), "{want}: {stderr}");
        assert!(
            !b.state.join("batches").exists(),
            "{want}: a batch was created"
        );
    }
    // The control: the good file with a count in range is taken.
    assert_eq!(b.submit(&good, &["--jobs", "64"]).status.code(), Some(0));
}

/// A pipeline that changes the clone in every way a workspace record carries (a commit, a
/// deleted tracked file, a link, an executable, an ignored file), then sleeps in `wait` while
/// `$SLOW` is set (passed by the operator policy, so a resume without it goes on).
const CARRIED: &str = "name: carried
steps:
  - name: make
    command: mkdir -p out && echo made > out/made.txt && rm README && ln -s out/made.txt link
  - name: save
    action: commit
  - name: later
    command: printf '#!/bin/sh\\n' > run.sh && chmod +x run.sh && echo '*.log' > .gitignore && echo built > build.log
  - name: wait
    command: test -z \"$SLOW\" || (touch second && sleep 60)
  - name: check
    command: test \"$(cat out/made.txt)\" = made && test ! -e README && test -L link && test -x run.sh && test ! -e build.log && test ! -e second
";

/// A batch of one task of [`CARRIED`], its worker killed in `wait` and its clone removed (as on
/// another machine): the batch id, the policy file, and the run.
fn carried_and_lost(b: &Batch) -> (String, PathBuf, String) {
    let (id, policy, run) = carried_and_killed(b);
    std::fs::remove_dir_all(b.clone_of(&id, "a")).expect("remove the clone");
    (id, policy, run)
}

/// `cordon batch resume ID --policy POLICY` without `$SLOW`: its output, and task `a`'s worker
/// log.
fn resume_carried(b: &Batch, id: &str, policy: &Path) -> (Output, String) {
    let out = b
        .cordon(&[
            "batch",
            "resume",
            id,
            "--policy",
            policy.to_str().unwrap_or_default(),
        ])
        .env_remove("SLOW")
        .output()
        .expect("resume");
    let log =
        std::fs::read_to_string(b.state.join("batches").join(id).join("a.log")).unwrap_or_default();
    (out, log)
}

/// Makes this machine's note of the last step boundary `run`'s clone reached name the one
/// before it, as when the run went on on another machine.
fn note_an_earlier_boundary(b: &Batch, run: &str) {
    let marker = b.state.join("runs").join(run).join("carried");
    let noted: u64 = std::fs::read_to_string(&marker)
        .expect("the note")
        .trim()
        .parse()
        .expect("a seq");
    std::fs::write(&marker, (noted - 1).to_string()).expect("write");
}

/// [`carried_and_lost`] with the clone kept.
fn carried_and_killed(b: &Batch) -> (String, PathBuf, String) {
    let policy = b.dir.path().join("policy.toml");
    std::fs::write(&policy, "[env]\npass = [\"SLOW\"]\n").expect("write policy");
    let tasks = b.tasks("{\"id\":\"a\",\"repo\":\"repo\"}\n");
    let pipeline = b.tooling.join("pipeline.yaml");
    let mut command = b.cordon(&[
        "batch",
        pipeline.to_str().unwrap_or_default(),
        "--tasks",
        tasks.to_str().unwrap_or_default(),
        "--policy",
        policy.to_str().unwrap_or_default(),
    ]);
    std::os::unix::process::CommandExt::process_group(&mut command, 0);
    let mut child = command
        .env("SLOW", "1")
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn cordon batch");
    b.wait_marked(&mut child, &["a"], Duration::from_secs(120));
    kill_worker(&child);
    let out = child.wait_with_output().expect("wait");
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let id = Batch::id(&out);
    let run = b.status(&id)[0].2.clone().expect("the task has a run");
    (id, policy, run)
}

#[test]
fn a_run_resumed_without_its_workspace_is_rebuilt_from_its_record_and_goes_on_from_its_last_step() {
    let b = Batch::new(CARRIED);
    let (id, policy, run) = carried_and_lost(&b);
    let (resumed, log) = resume_carried(&b, &id, &policy);
    assert_eq!(resumed.status.code(), Some(0), "{}\n{log}", text(&resumed));
    assert!(
        log.contains(&format!("rebuilt run {run}'s workspace from its record")),
        "{log}"
    );
    let status = b.status(&id);
    assert_eq!(
        (status[0].1.as_str(), status[0].2.as_deref()),
        ("success", Some(run.as_str()))
    );
    // The rebuilt clone, judged on the host: the run's commit is HEAD's, the work tree is as the
    // steps left it, and nothing ignored or made after the record came along.
    let clone = b.clone_of(&id, "a");
    assert_eq!(
        std::fs::read_to_string(clone.join("out/made.txt")).expect("made"),
        "made\n"
    );
    assert_eq!(
        std::fs::read_link(clone.join("link"))
            .expect("link")
            .to_str(),
        Some("out/made.txt")
    );
    assert!(!clone.join("README").exists() && !clone.join("build.log").exists());
    let log = git(&clone, &["log", "--format=%s", "-3"]);
    assert_eq!(
        log.lines().collect::<Vec<_>>()[1..],
        ["cordon batch: the pipeline and its agent files", "init"],
        "{log}"
    );
    git(&clone, &["fsck", "--strict", "--no-dangling"]);
    // The source repository is as it was.
    assert_eq!(git(&b.repo, &["rev-list", "--count", "HEAD"]).trim(), "1");
}

#[test]
fn a_run_whose_last_step_has_no_record_is_not_rebuilt_and_says_where_to_resume_it() {
    let b = Batch::new(CARRIED);
    let (id, policy, run) = carried_and_lost(&b);
    // The worker stopped between `step.finished` and its record: the latest record is then an
    // earlier step's, which would lose the last step's work.
    let conn = rusqlite::Connection::open(b.state.join("cordon.db")).expect("db");
    let moved = conn
        .execute(
            "UPDATE workspace_trees SET seq = seq - 1 WHERE run = ?1",
            [&run],
        )
        .expect("update");
    assert_eq!(moved, 1, "one record is kept per run");
    drop(conn);
    let (resumed, log) = resume_carried(&b, &id, &policy);
    assert_eq!(resumed.status.code(), Some(1), "{}", text(&resumed));
    assert!(
        log.contains(
            "cannot be rebuilt here (its last step finished without its workspace \
                         recorded); resume it with `cordon run --resume"
        ),
        "{log}"
    );
    assert!(!b.clone_of(&id, "a").exists(), "nothing is left half-made");
    assert_eq!(b.status(&id)[0].1, "interrupted");
}

#[test]
fn a_clone_left_behind_by_a_machine_the_run_moved_away_from_is_rebuilt_not_resumed() {
    // The control: this machine took the run's latest record, so its clone is resumed as it is,
    // with what the killed step left (`second`, which the last step refuses).
    let kept = Batch::new(CARRIED);
    let (id, policy, _) = carried_and_killed(&kept);
    let (out, _) = resume_carried(&kept, &id, &policy);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert_eq!(kept.status(&id)[0].1, "failure");

    // Another machine went on with the run after this one's clone stopped (this machine's note
    // names an earlier step boundary than the log's last): the clone here is rebuilt from the
    // latest record instead.
    let b = Batch::new(CARRIED);
    let (id, policy, run) = carried_and_killed(&b);
    note_an_earlier_boundary(&b, &run);
    // `cordon run --resume` refuses the clone left here, naming the command that rebuilds it.
    let by_hand = b
        .cordon(&[
            "run",
            "--resume",
            &run,
            "--policy",
            policy.to_str().unwrap_or_default(),
        ])
        .env_remove("SLOW")
        .output()
        .expect("run --resume");
    assert_eq!(by_hand.status.code(), Some(2), "{}", text(&by_hand));
    assert!(
        text(&by_hand).contains(&format!(
            "went on on another machine after its workspace here was last used; resume it with \
             `cordon batch resume {id}`"
        )),
        "{}",
        text(&by_hand)
    );
    let (out, log) = resume_carried(&b, &id, &policy);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(
        log.contains(&format!(
            "run {run} went on elsewhere after its clone here was last recorded"
        )) && log.contains("rebuilt run"),
        "{log}"
    );
    assert!(!b.clone_of(&id, "a").join("second").exists());

    // Another machine finished a step and took no record of it (it stopped first, or its work
    // tree was past the bound), and this machine's clone is of the step before: the clone here
    // is behind the log, and the store's record too, so the run is not resumed here at all.
    let c = Batch::new(CARRIED);
    let (id, policy, run) = carried_and_killed(&c);
    note_an_earlier_boundary(&c, &run);
    let conn = rusqlite::Connection::open(c.state.join("cordon.db")).expect("db");
    conn.execute(
        "UPDATE workspace_trees SET seq = seq - 1 WHERE run = ?1",
        [&run],
    )
    .expect("update");
    drop(conn);
    let (out, log) = resume_carried(&c, &id, &policy);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        log.contains("went on elsewhere")
            && log.contains("its last step finished without its workspace recorded"),
        "{log}"
    );
    assert_eq!(c.status(&id)[0].1, "interrupted");
}

#[test]
fn a_workspace_too_large_to_record_is_said_in_the_log_and_named_when_a_rebuild_is_refused() {
    // 4 MiB under 65 names: 260 MiB of files, past the 256 MiB a record carries.
    let b = Batch::new(
        "name: large
steps:
  - name: big
    command: head -c 4194304 /dev/zero > big && for i in $(seq 64); do ln big big-$i; done
  - name: wait
    command: test -z \"$SLOW\" || (touch second && sleep 60)
",
    );
    let (id, policy, run) = carried_and_lost(&b);
    let logs = b
        .cordon(&["logs", &run, "--json"])
        .output()
        .expect("cordon logs");
    let logs = String::from_utf8_lossy(&logs.stdout);
    assert!(
        logs.contains("the workspace could not be recorded for a resume on another machine"),
        "{logs}"
    );
    let (resumed, log) = resume_carried(&b, &id, &policy);
    assert_eq!(resumed.status.code(), Some(1), "{}", text(&resumed));
    assert!(
        log.contains("cannot be rebuilt here (the workspace could not be recorded")
            && log.contains("more than cordon carries to another machine (256 MiB"),
        "{log}"
    );
}

#[test]
fn a_run_whose_repository_lost_its_origin_commit_is_not_rebuilt_and_says_why() {
    let b = Batch::new(CARRIED);
    let (id, policy, _) = carried_and_lost(&b);
    // The source's history rewritten: the commit the run's clone was made from is gone.
    git(&b.repo, &["commit", "-q", "--amend", "-m", "rewritten"]);
    git(&b.repo, &["tag", "-d", "v1"]);
    git(&b.repo, &["reflog", "expire", "--expire=now", "--all"]);
    git(&b.repo, &["gc", "-q", "--prune=now"]);
    let (out, log) = resume_carried(&b, &id, &policy);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        log.contains("no longer has the run's origin commit")
            && log.contains("resumed only on the machine that began it"),
        "{log}"
    );
    assert!(!b.clone_of(&id, "a").exists(), "nothing is left half-made");
    assert_eq!(b.status(&id)[0].1, "interrupted");
}
