//! `cordon run` end to end, with real sandboxes: output lines, exit codes, the host boundary,
//! locks, resume, signals, and a run killed with SIGKILL at random moments.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

use crate::support::cordon;

/// A git work tree with `pipeline.yaml` committed, and a state directory beside it.
pub struct Fixture {
    pub dir: tempfile::TempDir,
    pub ws: PathBuf,
    pub state: PathBuf,
}

pub fn git(dir: &Path, args: &[&str]) -> String {
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

impl Fixture {
    pub fn new(pipeline: &str) -> Fixture {
        let dir = tempfile::tempdir().expect("tempdir");
        let ws = dir.path().join("ws");
        std::fs::create_dir(&ws).expect("mkdir");
        let ws = ws.canonicalize().expect("canonical");
        git(&ws, &["init", "-q", "-b", "main"]);
        std::fs::write(ws.join("pipeline.yaml"), pipeline).expect("write");
        git(&ws, &["add", "-A"]);
        git(&ws, &["commit", "-q", "-m", "pipeline"]);
        let state = dir.path().join("state");
        Fixture { dir, ws, state }
    }

    /// `cordon ARGS... --state-dir STATE` run in the workspace.
    /// A fixture for `pipeline` whose workspace holds the fifo `gate`: a step reading it blocks
    /// until the test writes to it.
    pub fn gated(pipeline: &str) -> Fixture {
        let f = Fixture::new(pipeline);
        let status = Command::new("mkfifo")
            .arg(f.ws.join("gate"))
            .status()
            .expect("mkfifo");
        assert!(status.success());
        f
    }

    pub fn cordon(&self, args: &[&str]) -> Command {
        let mut cmd = cordon();
        cmd.args(args)
            .arg("--state-dir")
            .arg(&self.state)
            .current_dir(&self.ws);
        cmd
    }

    pub fn run(&self, extra: &[&str]) -> Output {
        let mut args = vec!["run", "pipeline.yaml"];
        args.extend_from_slice(extra);
        self.cordon(&args).output().expect("cordon run")
    }

    /// A run started in the background, after its `run <ID>` line (so `run.started` is
    /// durable and the locks are held).
    pub fn spawn(&self, args: &[&str]) -> (Child, String, BufReader<std::process::ChildStderr>) {
        let mut child = self
            .cordon(args)
            .stderr(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .expect("spawn");
        let mut stderr = BufReader::new(child.stderr.take().expect("stderr"));
        let mut line = String::new();
        stderr.read_line(&mut line).expect("first line");
        let id = line
            .trim()
            .strip_prefix("run ")
            .unwrap_or_else(|| panic!("line 1 is `run <ID>`: {line:?}"))
            .to_owned();
        (child, id, stderr)
    }
}

pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn code(out: &Output) -> Option<i32> {
    out.status.code()
}

const PASSING: &str = "name: demo
steps:
  - name: build
    command: echo building; echo built > out.txt
    produces: [out.txt]
  - name: test
    command: [sh, -c, 'test -f out.txt && echo tests pass']
";

#[test]
fn run_prints_its_id_first_keeps_stdout_empty_and_exits_0() {
    let f = Fixture::new(PASSING);
    let out = f.run(&[]);
    let err = stderr(&out);
    assert_eq!(code(&out), Some(0), "{err}");
    let first = err.lines().next().unwrap_or_default();
    let id = first.strip_prefix("run ").expect("line 1 is `run <ID>`");
    assert_eq!(id.len(), 26, "{first}");
    assert!(
        id.chars()
            .all(|c| c.is_ascii_digit() || c.is_ascii_lowercase()),
        "{first}"
    );
    assert!(out.stdout.is_empty(), "stdout is empty without --json");
    assert!(err.contains("\ntest   passed   attempt 1"), "{err}");
    assert_eq!(
        std::fs::read_to_string(f.ws.join("out.txt"))
            .ok()
            .as_deref(),
        Some("built\n"),
        "the step ran in the workspace"
    );
}

#[test]
fn run_json_prints_every_event_as_a_contract_line() {
    let f = Fixture::new(PASSING);
    let out = f.run(&["--json"]);
    assert_eq!(code(&out), Some(0), "{}", stderr(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let mut types = Vec::new();
    for (i, line) in stdout.lines().enumerate() {
        let value: serde_json::Value = serde_json::from_str(line).expect("a JSON line");
        let keys: Vec<&str> = value
            .as_object()
            .expect("object")
            .keys()
            .map(String::as_str)
            .collect();
        let mut sorted = vec!["data", "run", "seq", "step", "ts", "type"];
        sorted.sort_unstable();
        assert_eq!(keys, sorted, "{line}");
        assert!(
            line.starts_with("{\"run\":\""),
            "keys in contract order: {line}"
        );
        assert_eq!(value["seq"], i + 1, "{line}");
        types.push(value["type"].as_str().unwrap_or_default().to_owned());
    }
    assert_eq!(types.first().map(String::as_str), Some("run.started"));
    assert_eq!(types.last().map(String::as_str), Some("run.finished"));
    assert!(types.iter().any(|t| t == "step.output"), "{types:?}");
}

#[test]
fn a_failing_pipeline_exits_1_with_the_failure_in_the_log() {
    let f = Fixture::new(
        "name: demo\nsteps:\n  - {name: test, command: 'echo 3 failed >&2; exit 3'}\n",
    );
    let out = f.run(&[]);
    let err = stderr(&out);
    assert_eq!(code(&out), Some(1), "{err}");
    assert!(
        err.contains("\ntest  failed   attempt 1") && err.contains("s  exit 3\n"),
        "{err}"
    );
    let runs = f.cordon(&["runs"]).output().expect("runs");
    assert!(
        String::from_utf8_lossy(&runs.stdout).contains("  failure "),
        "{}",
        String::from_utf8_lossy(&runs.stdout)
    );
}

#[test]
fn a_retry_loop_feeds_back_and_stops_at_the_attempt_budget() {
    let f = Fixture::new(
        "name: demo\nmax_attempts: 2\nsteps:\n  - {name: dev, command: 'echo try >> tries.txt'}\n  - {name: test, command: 'echo nope; exit 1', on_fail: {goto: dev, retry: true}}\n",
    );
    let out = f.run(&[]);
    assert_eq!(code(&out), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("attempt budget exhausted"),
        "{}",
        stderr(&out)
    );
    assert_eq!(
        std::fs::read_to_string(f.ws.join("tries.txt"))
            .ok()
            .as_deref(),
        Some("try\ntry\n")
    );
    // A higher budget continues the exhausted run where it stopped.
    let out = f
        .cordon(&["run", "--resume-last", "--max-attempts", "3"])
        .output()
        .expect("resume");
    assert_eq!(code(&out), Some(1), "{}", stderr(&out));
    assert_eq!(
        std::fs::read_to_string(f.ws.join("tries.txt"))
            .ok()
            .as_deref(),
        Some("try\ntry\ntry\n")
    );
}

#[test]
fn a_dirty_worktree_with_a_commit_action_exits_2_listing_the_paths() {
    let f = Fixture::new(
        "name: demo\nsteps:\n  - {name: build, command: 'true'}\n  - {name: commit, action: commit}\n",
    );
    std::fs::write(f.ws.join("stray.txt"), "x").expect("write");
    let out = f.run(&[]);
    assert_eq!(code(&out), Some(2));
    assert_eq!(
        stderr(&out),
        "cordon: the pipeline has a commit action and the worktree is dirty; commit or stash these paths first:\n  stray.txt\n"
    );
    assert!(
        !f.state.join("cordon.db").exists()
            || f.cordon(&["runs"])
                .output()
                .expect("runs")
                .stdout
                .is_empty(),
        "no run was created"
    );
}

#[test]
fn the_commit_action_commits_the_steps_work_with_the_run_trailer() {
    let f = Fixture::new(
        "name: demo\nsteps:\n  - {name: build, command: 'echo new > feature.txt'}\n  - {name: commit, action: commit, params: {message: 'feat: {name}'}}\n",
    );
    let out = f.run(&[]);
    let err = stderr(&out);
    assert_eq!(code(&out), Some(0), "{err}");
    let id = err
        .lines()
        .next()
        .and_then(|l| l.strip_prefix("run "))
        .unwrap_or_default()
        .to_owned();
    assert_eq!(
        git(&f.ws, &["log", "-1", "--format=%B"]).trim_end(),
        format!("feat: demo\n\nCordon-Run: {id}")
    );
    assert_eq!(
        git(&f.ws, &["show", "--name-only", "--format=", "HEAD"]),
        "feature.txt\n"
    );
}

#[test]
fn uncommitted_tooling_is_refused() {
    let f = Fixture::new(PASSING);
    std::fs::write(f.ws.join("pipeline.yaml"), format!("{PASSING}# edited\n")).expect("write");
    let out = f.run(&[]);
    assert_eq!(code(&out), Some(2));
    assert_eq!(
        stderr(&out),
        "cordon: tooling file `pipeline.yaml` has uncommitted changes; commit or restore it before `cordon run`\n"
    );
}

#[test]
fn a_state_dir_inside_the_workspace_is_refused() {
    let f = Fixture::new(PASSING);
    let out = cordon()
        .args(["run", "pipeline.yaml", "--state-dir", "state"])
        .current_dir(&f.ws)
        .output()
        .expect("run");
    assert_eq!(code(&out), Some(2));
    assert!(
        stderr(&out).contains("is inside the workspace"),
        "{}",
        stderr(&out)
    );
    assert!(!f.ws.join("state").exists());
}

#[test]
fn a_missing_secret_variable_exits_2_naming_ref_and_variable() {
    let f = Fixture::new(
        "name: demo\nsecrets: {gh: {from: env, key: CORDON_TEST_TOKEN}}\nsteps:\n  - {name: a, command: 'true', secrets: [gh]}\n",
    );
    let out = f
        .cordon(&["run", "pipeline.yaml"])
        .env_remove("CORDON_TEST_TOKEN")
        .output()
        .expect("run");
    assert_eq!(code(&out), Some(2));
    assert_eq!(
        stderr(&out),
        "cordon: secret `gh` reads the variable `CORDON_TEST_TOKEN`, which is not set; export CORDON_TEST_TOKEN before `cordon run`\n"
    );
}

#[test]
fn secrets_reach_their_step_and_never_the_log() {
    let f = Fixture::new(
        "name: demo\nsecrets: {gh: {from: env, key: CORDON_TEST_TOKEN}}\nsteps:\n  - {name: a, command: 'echo \"token=$CORDON_TEST_TOKEN\"', secrets: [gh]}\n  - {name: b, command: 'echo \"b sees [$CORDON_TEST_TOKEN]\"'}\n",
    );
    let out = f
        .cordon(&["run", "pipeline.yaml", "--json"])
        .env("CORDON_TEST_TOKEN", "tok-1234567890")
        .output()
        .expect("run");
    assert_eq!(code(&out), Some(0), "{}", stderr(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("token=[secret:gh]"),
        "the step saw the value, the log the mark: {stdout}"
    );
    assert!(
        stdout.contains("b sees []"),
        "other steps do not get it: {stdout}"
    );
    let logs = f.cordon(&["logs", "--json"]).output().expect("logs");
    assert!(!String::from_utf8_lossy(&logs.stdout).contains("tok-1234567890"));
    assert!(!stdout.contains("tok-1234567890") && !stderr(&out).contains("tok-1234567890"));
}

#[test]
fn resume_says_when_there_is_nothing_to_resume_or_the_run_finished() {
    let f = Fixture::new(PASSING);
    let out = f
        .cordon(&["run", "--resume-last"])
        .output()
        .expect("resume");
    assert_eq!(
        (code(&out), stderr(&out)),
        (Some(2), "cordon: no run to resume\n".to_owned())
    );
    let out = f
        .cordon(&["run", "--resume", "0123"])
        .output()
        .expect("resume");
    assert_eq!(code(&out), Some(2), "{}", stderr(&out));
    let first = f.run(&[]);
    let id = stderr(&first)
        .lines()
        .next()
        .and_then(|l| l.strip_prefix("run "))
        .unwrap_or_default()
        .to_owned();
    let out = f
        .cordon(&["run", "--resume", &id[..10]])
        .output()
        .expect("resume");
    assert_eq!(
        (code(&out), stderr(&out)),
        (Some(0), format!("run {id} already finished: success\n"))
    );
    std::fs::write(f.dir.path().join("other.yaml"), PASSING).expect("write");
    let other = f.dir.path().join("other.yaml");
    let out = f
        .cordon(&["run", "--resume", &id])
        .arg(&other)
        .output()
        .expect("resume");
    assert_eq!(code(&out), Some(2));
    assert!(
        stderr(&out).contains("resume it with its own pipeline"),
        "{}",
        stderr(&out)
    );
}

const BLOCKING: &str = "name: demo
steps:
  - name: wait
    command: cat gate
  - name: after
    command: echo after > after.txt
";

fn open_gate(f: &Fixture) {
    std::fs::write(f.ws.join("gate"), "open\n").expect("write the gate");
}

#[test]
fn a_held_run_cannot_be_resumed_and_its_workspace_cannot_start_another() {
    let f = Fixture::gated(BLOCKING);
    let (mut child, id, _stderr) = f.spawn(&["run", "pipeline.yaml"]);
    let out = f
        .cordon(&["run", "--resume", &id])
        .output()
        .expect("resume");
    assert_eq!(code(&out), Some(2));
    assert!(
        stderr(&out).contains(&format!("run {id} is held by another cordon process")),
        "{}",
        stderr(&out)
    );
    let out = f.run(&[]);
    assert_eq!(code(&out), Some(2));
    assert!(
        stderr(&out).contains("is held by a live run"),
        "{}",
        stderr(&out)
    );
    let runs = f.cordon(&["runs", "--json"]).output().expect("runs");
    assert!(String::from_utf8_lossy(&runs.stdout).contains("\"status\":\"running\""));
    open_gate(&f);
    assert_eq!(child.wait().expect("wait").code(), Some(0));
}

fn signal(child: &Child, name: &str) {
    let status = Command::new("kill")
        .arg(format!("-{name}"))
        .arg(child.id().to_string())
        .status()
        .expect("kill");
    assert!(status.success());
}

#[test]
fn sigint_and_sigterm_exit_130_and_143_leaving_the_run_resumable() {
    for (name, expected) in [("INT", 130), ("TERM", 143)] {
        let f = Fixture::gated(BLOCKING);
        let (mut child, id, _stderr) = f.spawn(&["run", "pipeline.yaml"]);
        signal(&child, name);
        assert_eq!(
            child.wait().expect("wait").code(),
            Some(expected),
            "SIG{name}"
        );
        // The run lock is released when the last copy of its descriptor closes. A session
        // helper cloned (without exec) while the signal landed can hold a copy for the moment it
        // takes to notice its parent is gone, so the run may show `running` for that moment;
        // wait for it, bounded, rather than race it. (Follow-up: have those helpers close every
        // descriptor but their own first.)
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let listing = loop {
            let runs = f.cordon(&["runs"]).output().expect("runs");
            let text = String::from_utf8_lossy(&runs.stdout).into_owned();
            if text.contains("interrupted") || std::time::Instant::now() > deadline {
                break text;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        };
        assert!(listing.contains("interrupted"), "{listing}");
        // The interruption is in the log, with its signal (2 or 15).
        let logs = f
            .cordon(&["logs", &id, "--json", "--type", "run.interrupted"])
            .output()
            .expect("logs");
        let line = String::from_utf8_lossy(&logs.stdout).into_owned();
        let event: serde_json::Value = serde_json::from_str(line.trim()).expect("one event");
        assert_eq!(event["data"]["signal"], expected - 128, "SIG{name}: {line}");
        let (mut resumed, resumed_id, _resumed_stderr) = f.spawn(&["run", "--resume", &id]);
        assert_eq!(resumed_id, id, "line 1 on resume too");
        open_gate(&f);
        assert_eq!(resumed.wait().expect("wait").code(), Some(0), "SIG{name}");
        assert!(f.ws.join("after.txt").exists());
    }
}

/// A pseudo-random number below `bound` from the kernel.
fn random_below(bound: u64) -> u64 {
    let mut bytes = [0u8; 8];
    let _ = std::io::Read::read_exact(
        &mut std::fs::File::open("/dev/urandom").expect("urandom"),
        &mut bytes,
    );
    u64::from_le_bytes(bytes) % bound
}

#[test]
fn a_run_killed_at_random_moments_resumes_to_success_with_a_consistent_log() {
    let mut yaml = String::from("name: long\nsteps:\n");
    // Long enough that twenty kills land before the run can finish between them.
    const STEPS: usize = 64;
    for i in 0..STEPS {
        yaml.push_str(&format!(
            "  - {{name: s{i}, command: 'sleep 0.03; echo {i} >> done.txt'}}\n"
        ));
    }
    let f = Fixture::new(&yaml);
    let mut kills = 0;
    let mut launches = 0;
    let mut finished = false;
    // Each launch is killed after a random 10-160 ms until 20 kills have landed on a live run;
    // then the run is resumed to its end.
    while !finished && launches < 200 {
        launches += 1;
        // A kill can land before the run exists; then the next launch starts it afresh.
        let runs = f.cordon(&["runs", "--json"]).output().expect("runs");
        let args: &[&str] = if runs.stdout.is_empty() {
            &["run", "pipeline.yaml"]
        } else {
            &["run", "--resume-last"]
        };
        let mut child = f
            .cordon(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn");
        if kills < 20 {
            std::thread::sleep(std::time::Duration::from_millis(10 + random_below(150)));
            if child.try_wait().expect("try_wait").is_none() {
                child.kill().expect("SIGKILL");
                kills += 1;
            }
        }
        let status = child.wait().expect("wait");
        finished = status.code() == Some(0);
    }
    assert!(kills >= 20, "{kills} kills landed");
    assert!(finished, "resumed to success");
    let logs = f.cordon(&["logs", "--json"]).output().expect("logs");
    let records: Vec<serde_json::Value> = String::from_utf8_lossy(&logs.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("json"))
        .collect();
    let mut finished_steps = std::collections::BTreeSet::new();
    let mut route = Vec::new();
    for (i, record) in records.iter().enumerate() {
        assert_eq!(record["seq"], i + 1, "contiguous sequence");
        let key = (
            record["step"].as_str().unwrap_or_default().to_owned(),
            record["data"]["attempt"].as_u64(),
        );
        match record["type"].as_str() {
            Some("step.started") => assert!(
                !finished_steps.contains(&key),
                "{key:?} started after finishing"
            ),
            Some("step.finished") => {
                assert!(finished_steps.insert(key.clone()), "{key:?} finished twice");
                assert_eq!(record["data"]["verdict"], "pass");
            }
            Some("route") => {
                route.push(record["data"]["to"].as_str().unwrap_or_default().to_owned())
            }
            _ => {}
        }
    }
    let expected: Vec<String> = (1..STEPS)
        .map(|i| format!("s{i}"))
        .chain(["success".to_owned()])
        .collect();
    assert_eq!(route, expected, "a valid route: every step once, in order");
    let done = std::fs::read_to_string(f.ws.join("done.txt")).expect("done.txt");
    for i in 0..STEPS {
        assert!(done.lines().any(|l| l == i.to_string()), "step {i} ran");
    }
}

#[test]
fn root_env_files_are_masked_inside_every_step() {
    let f = Fixture::new(
        "name: demo\nsteps:\n  - {name: peek, command: 'cat .env; cat .env.example'}\n",
    );
    std::fs::write(f.ws.join(".env"), "API_KEY=host-only-value\n").expect("write");
    std::fs::write(f.ws.join(".env.example"), "API_KEY=example\n").expect("write");
    let out = f.run(&["--json"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!stdout.contains("host-only-value"), "{stdout}");
    assert!(
        stdout.contains("API_KEY=example"),
        "control: the example file is readable: {stdout}"
    );
}

#[test]
fn a_step_timeout_fails_the_attempt_with_the_reason() {
    let f = Fixture::new("name: demo\nsteps:\n  - {name: slow, command: 'sleep 30', timeout: 1}\n");
    let out = f.run(&[]);
    assert_eq!(code(&out), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("\nslow  failed   attempt 1")
            && stderr(&out).contains("s  timed out after 1 s\n"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn setup_runs_once_is_cached_and_reruns_with_refresh() {
    let f = Fixture::new(
        "name: demo\nsteps:\n  - {name: test, setup: 'echo x >> setup-runs.txt', command: 'test -f setup-runs.txt'}\n",
    );
    let setups = |f: &Fixture| {
        let out = f
            .cordon(&["logs", "--json", "--type", "setup"])
            .output()
            .expect("logs");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| {
                serde_json::from_str::<serde_json::Value>(l).expect("json")["type"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned()
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(code(&f.run(&[])), Some(0));
    assert_eq!(setups(&f), ["setup.ran"]);
    assert_eq!(code(&f.run(&[])), Some(0));
    assert_eq!(setups(&f), ["setup.cached"]);
    assert_eq!(code(&f.run(&["--refresh"])), Some(0));
    assert_eq!(setups(&f), ["setup.ran"]);
    assert_eq!(
        std::fs::read_to_string(f.ws.join("setup-runs.txt"))
            .ok()
            .as_deref(),
        Some("x\nx\n")
    );
}

#[test]
fn logs_follow_prints_a_live_run_until_it_finishes() {
    let f = Fixture::gated(BLOCKING);
    let (mut child, id, _stderr) = f.spawn(&["run", "pipeline.yaml"]);
    let follower = f
        .cordon(&["logs", &id, "--follow", "--json", "--type", "run"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("logs --follow");
    open_gate(&f);
    assert_eq!(child.wait().expect("wait").code(), Some(0));
    let out = follower.wait_with_output().expect("follower");
    let types: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).expect("json")["type"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        })
        .collect();
    assert_eq!(types, ["run.started", "run.finished"]);
}

#[test]
fn a_missing_sandbox_layer_exits_3_before_a_run_exists() {
    let f = Fixture::new(PASSING);
    let out = f
        .cordon(&["run", "pipeline.yaml"])
        .env("CORDON_PROBE_REMOVE", "landlock")
        .output()
        .expect("run");
    assert_eq!(code(&out), Some(3), "{}", stderr(&out));
    assert!(
        stderr(&out)
            .starts_with("cordon: refusing to run: the sandbox layer `landlock` is not available"),
        "{}",
        stderr(&out)
    );
    assert!(!f.ws.join("out.txt").exists(), "no step ran");
    let runs = f.cordon(&["runs", "--json"]).output().expect("runs");
    assert!(runs.stdout.is_empty(), "no run was created");
    assert_eq!(
        code(&f.run(&[])),
        Some(0),
        "control: with every layer it runs"
    );
}

#[test]
fn tooling_files_are_read_only_inside_every_step() {
    // The step succeeds only if every change to a tooling file is refused and the control, a
    // write to an ordinary file of the workspace, lands.
    let f = Fixture::new(
        "name: demo\ncontext_files: [docs/ctx.md]\nsteps:\n  - name: tamper\n    command: >-\n      \
         (echo x >> pipeline.yaml) 2>/dev/null && exit 11;\n      \
         rm docs/ctx.md 2>/dev/null && exit 12;\n      \
         mv docs docs2 2>/dev/null && exit 13;\n      \
         echo ok > out.txt\n",
    );
    std::fs::create_dir(f.ws.join("docs")).expect("mkdir");
    std::fs::write(f.ws.join("docs/ctx.md"), "context\n").expect("write");
    git(&f.ws, &["add", "-A"]);
    git(&f.ws, &["commit", "-q", "-m", "context"]);
    let pipeline = std::fs::read_to_string(f.ws.join("pipeline.yaml")).expect("read");
    let out = f.run(&[]);
    assert_eq!(code(&out), Some(0), "{}", stderr(&out));
    assert_eq!(
        std::fs::read_to_string(f.ws.join("out.txt")).expect("the control write landed"),
        "ok\n"
    );
    assert_eq!(
        std::fs::read_to_string(f.ws.join("pipeline.yaml")).expect("read"),
        pipeline
    );
    assert_eq!(
        std::fs::read_to_string(f.ws.join("docs/ctx.md")).expect("read"),
        "context\n"
    );
}

#[test]
fn an_env_pass_naming_a_secrets_key_refuses_the_run_before_anything_runs() {
    let f = Fixture::new(
        "name: p\nsecrets:\n  gh: {from: env, key: GH_TOKEN}\nsteps:\n  - {name: a, command: 'echo ran > ran.txt', secrets: [gh]}\n",
    );
    let policy = f.dir.path().join("policy.toml");
    let run = |text: &str| {
        std::fs::write(&policy, text).expect("write");
        f.cordon(&["run", "pipeline.yaml", "--no-ui"])
            .arg(format!("--policy={}", policy.display()))
            .env("GH_TOKEN", "ghp-canary")
            .output()
            .expect("cordon run")
    };
    let out = run("[env]\npass = [\"GH_TOKEN\"]\n");
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("`[env] pass` names `GH_TOKEN`, which is the key of the secret `gh`"),
        "{}",
        stderr(&out)
    );
    assert!(!f.ws.join("ran.txt").exists());
    // Control: the same run without it passes.
    let out = run("");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}

#[test]
fn a_failed_step_shows_the_end_of_its_output_unless_quiet() {
    let f = Fixture::new(
        "name: tails\nsteps:\n  - name: test\n    command: [sh, -c, 'for i in $(seq 30); do echo line $i; done; printf \"\\033]0;x\\007 boom\\n\" >&2; exit 1']\n",
    );
    let out = f.run(&["--no-ui"]);
    let err = stderr(&out);
    assert_eq!(code(&out), Some(1), "{err}");
    assert!(err.contains("\ntest  failed   attempt 1"), "{err}");
    assert!(
        err.contains("    … (11 earlier lines: `cordon logs --step test`)\n    line 12\n"),
        "{err}"
    );
    assert!(err.contains("    line 30\n"), "{err}");
    // What the step printed is escaped: its title sequence is shown, not sent.
    assert!(err.contains("    \\e]0;x\\x07 boom\n"), "{err}");
    assert!(!err.contains('\u{1b}'), "{err}");
    // The control: with --quiet the step line stays and the tail goes.
    let out = f.run(&["--no-ui", "--quiet"]);
    let err = stderr(&out);
    assert!(err.contains("\ntest  failed   attempt 1"), "{err}");
    assert!(!err.contains("line 30"), "{err}");
}

#[test]
fn a_resumed_run_keeps_its_own_prompt_and_refuses_another() {
    let f = Fixture::gated(BLOCKING);
    let (mut child, id, _stderr) = f.spawn(&["run", "pipeline.yaml", "--prompt", "the first task"]);
    signal(&child, "INT");
    assert_eq!(child.wait().expect("wait").code(), Some(130));
    let out = f
        .cordon(&["run", "--resume", &id, "--prompt", "another task"])
        .output()
        .expect("cordon run");
    assert_eq!(code(&out), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains(&format!(
            "run {id} keeps the task it started with; resume it without --prompt"
        )),
        "{}",
        stderr(&out)
    );
    // The control: the same prompt (or none) resumes, with the task recorded at the start.
    let (mut resumed, _, _err) = f.spawn(&["run", "--resume", &id, "--prompt", "the first task"]);
    open_gate(&f);
    assert_eq!(resumed.wait().expect("wait").code(), Some(0));
    let logs = f
        .cordon(&["logs", &id, "--json", "--type", "run.started"])
        .output()
        .expect("logs");
    let started: serde_json::Value =
        serde_json::from_str(String::from_utf8_lossy(&logs.stdout).trim()).expect("one event");
    assert_eq!(started["data"]["prompt"], "the first task");
}
