//! The host never trusts the workspace (DESIGN §10), end to end through `cordon run` with real
//! sandboxes: every attack a step can stage in the work tree is judged on the host — a canary
//! file outside the workspace never reaches an event, a blob, a model request or a git object, is
//! never deleted; nothing blocks; the state directory stays bounded; a `git` planted on `PATH`
//! never runs; no control character reaches the terminal. Each has a control showing the host
//! user can read the canary and the sandbox cannot.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::run::{Fixture, git, stderr};

const CANARY: &str = "canary-93c1: the host user's private key";

/// A canary file outside the workspace: readable by the host user, out of the sandbox's reach.
fn canary(f: &Fixture) -> PathBuf {
    let outside = f.dir.path().join("home");
    std::fs::create_dir_all(&outside).expect("mkdir");
    let key = outside.join("id_ed25519");
    std::fs::write(&key, CANARY).expect("write the canary");
    assert_eq!(
        std::fs::read_to_string(&key).expect("control: the host reads it"),
        CANARY
    );
    // Control: inside a sandbox the canary is not there.
    let out = crate::support::cordon()
        .args(["exec", "-w"])
        .arg(&f.ws)
        .args(["--", "cat"])
        .arg(&key)
        .output()
        .expect("cordon exec");
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("No such file or directory"),
        "{}",
        stderr(&out)
    );
    assert!(!String::from_utf8_lossy(&out.stdout).contains(CANARY));
    key
}

/// Every byte the state directory holds (the database, its WAL, scratch files).
fn state_bytes(f: &Fixture) -> Vec<u8> {
    let mut all = Vec::new();
    let mut stack = vec![f.state.clone()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if let Ok(bytes) = std::fs::read(&path) {
                all.extend(bytes);
            }
        }
    }
    all
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w == needle.as_bytes())
}

/// `cordon run` with a deadline: a run that blocks on workspace content fails the test instead
/// of hanging it.
fn run_within(f: &Fixture, args: &[&str], env: &[(&str, &str)], limit: Duration) -> Output {
    let mut cmd = f.cordon(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let start = Instant::now();
    loop {
        if child.try_wait().expect("wait").is_some() {
            return child.wait_with_output().expect("output");
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let out = child.wait_with_output().expect("output");
            panic!(
                "cordon run did not end within {limit:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The start of `text`, for an assertion message (a log can hold megabytes).
fn head(text: &str) -> &str {
    let mut end = text.len().min(2000);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

fn logs(f: &Fixture) -> String {
    let out = f
        .cordon(&["logs", "--last", "--json"])
        .output()
        .expect("cordon logs");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn a_produces_link_to_a_host_file_never_reaches_events_blobs_or_feedback() {
    let f = Fixture::new("name: p\nsteps: []\n");
    let key = canary(&f);
    let pipeline = format!(
        "name: p\nmax_attempts: 2\nsteps:\n  - name: build\n    command: ln -sf {} summary.md\n    produces: [summary.md]\n    on_fail: {{goto: build, retry: true}}\n",
        key.display()
    );
    std::fs::write(f.ws.join("pipeline.yaml"), pipeline).expect("write");
    git(&f.ws, &["commit", "-qam", "pipeline"]);
    let out = run_within(
        &f,
        &["run", "pipeline.yaml", "--no-ui"],
        &[],
        Duration::from_secs(120),
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let log = logs(&f);
    assert!(
        log.contains("summary.md is a symbolic link, not a regular file"),
        "the attempt fails naming the path and its type: {}",
        head(&log)
    );
    assert!(log.contains("\"type\":\"attempt.retry\""), "{}", head(&log));
    assert!(!log.contains(CANARY));
    assert!(
        !contains(&state_bytes(&f), CANARY),
        "no stored byte holds the canary"
    );
    assert_eq!(std::fs::read_to_string(&key).expect("still there"), CANARY);
}

#[test]
fn an_agent_never_sees_a_host_file_through_a_planted_output_link() {
    let f = Fixture::new("name: p\nsteps: []\n");
    let key = canary(&f);
    let link =
        serde_json::json!({"command": format!("ln -sf {} summary.md", key.display())}).to_string();
    let (url, seen) = crate::agent_run::openai_server(vec![
        serde_json::json!({"choices": [{"message": {"role": "assistant", "content": null, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": link}}
        ]}}]}),
        serde_json::json!({"choices": [{"message": {"role": "assistant", "content": "done"}}]}),
        serde_json::json!({"choices": [{"message": {"role": "assistant", "content": "done again"}}]}),
    ]);
    let pipeline = format!(
        "name: p\nmax_attempts: 2\nllm: {{provider: openai, model: m, base_url: '{url}', api_key_env: CORDON_HB_KEY}}\nsteps:\n  - name: dev\n    agent: dev\n    produces: [summary.md]\n    on_fail: {{goto: dev, retry: true}}\n"
    );
    std::fs::write(f.ws.join("pipeline.yaml"), pipeline).expect("write");
    std::fs::create_dir(f.ws.join("agents")).expect("mkdir");
    std::fs::write(
        f.ws.join("agents/dev.agent.md"),
        "---\nname: dev\n---\nWork.\n",
    )
    .expect("write");
    git(&f.ws, &["add", "-A"]);
    git(&f.ws, &["commit", "-qm", "agent"]);
    let out = run_within(
        &f,
        &["run", "pipeline.yaml", "--no-ui"],
        &[("CORDON_HB_KEY", "sk-host-boundary-key")],
        Duration::from_secs(120),
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let requests = seen.lock().expect("lock").clone();
    assert_eq!(
        requests.len(),
        3,
        "attempt 1 (two calls) and attempt 2 (one)"
    );
    assert!(
        requests[2].contains("is a symbolic link, not a regular file"),
        "the retry's feedback reached the model, without the file: {}",
        requests[2]
    );
    assert!(
        requests.iter().all(|r| !r.contains(CANARY)),
        "no request held the canary"
    );
    assert!(!contains(&state_bytes(&f), CANARY));
}

#[test]
fn a_symlinked_parent_makes_the_host_neither_read_nor_delete_outside() {
    let f = Fixture::new("name: p\nsteps: []\n");
    let key = canary(&f);
    let home = key.parent().expect("dir").to_path_buf();
    let pipeline = format!(
        "name: p\nmax_attempts: 2\nsteps:\n  - name: build\n    command: ln -sfn {} out\n    produces: [out/id_ed25519]\n    on_fail: {{goto: build, retry: true}}\n",
        home.display()
    );
    std::fs::write(f.ws.join("pipeline.yaml"), pipeline).expect("write");
    git(&f.ws, &["commit", "-qam", "pipeline"]);
    // Control: the joined path a naive host would use reaches the canary once the link exists.
    std::os::unix::fs::symlink(&home, f.ws.join("probe")).expect("link");
    assert!(f.ws.join("probe/id_ed25519").exists());
    std::fs::remove_file(f.ws.join("probe")).expect("unlink");
    let out = run_within(
        &f,
        &["run", "pipeline.yaml", "--no-ui"],
        &[],
        Duration::from_secs(120),
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert_eq!(
        std::fs::read_to_string(&key).expect("the host file was not deleted"),
        CANARY
    );
    let log = logs(&f);
    assert!(log.contains("lies below a symbolic link"), "{}", head(&log));
    assert!(!contains(&state_bytes(&f), CANARY));
}

#[test]
fn fifos_devices_and_sparse_outputs_cost_the_host_a_bounded_read() {
    let f = Fixture::new(
        "name: p\nmax_attempts: 2\nsteps:\n  - name: build\n    command: mkfifo a.md; ln -sf /dev/zero b.md; truncate -s 20G c.md; exit 1\n    produces: [a.md, b.md, c.md]\n    on_fail: {goto: build, retry: true}\n",
    );
    let before = state_bytes(&f).len();
    let out = run_within(
        &f,
        &["run", "pipeline.yaml", "--no-ui"],
        &[],
        Duration::from_secs(120),
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let log = logs(&f);
    assert!(
        log.contains("`a.md` is a FIFO, not a regular file"),
        "{}",
        head(&log)
    );
    assert!(
        log.contains("`b.md` is a symbolic link, not a regular file"),
        "{}",
        head(&log)
    );
    assert!(
        log.contains("[cordon: a binary file of 21474836480 bytes, not shown]"),
        "the sparse file is named, not read into the feedback: {}",
        head(&log)
    );
    assert!(
        contains(
            &state_bytes(&f),
            "c.md (21474836480 bytes, sparse or larger than"
        ),
        "the host's git does not read the holes, and the step's diff says so"
    );
    let grown = state_bytes(&f).len().saturating_sub(before);
    assert!(grown < 8 << 20, "the state dir grew by {grown} bytes");
}

#[test]
fn a_directory_where_a_file_was_expected_does_not_wedge_resume() {
    let f = Fixture::gated(
        "name: p\nsteps:\n  - name: build\n    command: mkdir -p out.md/keep; cat gate; echo done > other.txt\n    produces: [out.md]\n",
    );
    let (mut child, id, _stderr) = f.spawn(&["run", "pipeline.yaml", "--no-ui"]);
    // The step has started (its session holds the gate open); kill the host process.
    let start = Instant::now();
    while !f.ws.join("out.md/keep").exists() {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the step never started"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    child.kill().expect("SIGKILL");
    let _ = child.wait();
    // The gate is a FIFO again for the rerun; open it from here once the step waits on it.
    let gate = f.ws.join("gate");
    let _ = std::fs::remove_file(&gate);
    let status = Command::new("mkfifo").arg(&gate).status().expect("mkfifo");
    assert!(status.success());
    let opener = std::thread::spawn(move || {
        let _ = std::fs::write(&gate, "open\n");
    });
    let out = run_within(
        &f,
        &["run", "--resume", &id, "--no-ui"],
        &[],
        Duration::from_secs(120),
    );
    let _ = opener.join();
    let err = stderr(&out);
    assert_eq!(
        out.status.code(),
        Some(1),
        "the resumed step ran to a verdict: {err}"
    );
    let log = logs(&f);
    assert!(log.contains("it was left in place"), "{}", head(&log));
    assert!(
        log.contains("out.md is a directory, not a regular file"),
        "{}",
        head(&log)
    );
    assert!(f.ws.join("out.md/keep").is_dir());
    assert!(
        f.ws.join("other.txt").exists(),
        "the rerun got past the gate"
    );
}

fn all_objects(ws: &Path) -> String {
    String::from_utf8_lossy(
        &Command::new("git")
            .args(["cat-file", "--batch-all-objects", "--batch", "--unordered"])
            .current_dir(ws)
            .output()
            .expect("git")
            .stdout,
    )
    .into_owned()
}

#[test]
fn the_commit_action_commits_no_host_file_through_a_symlinked_parent() {
    let f = Fixture::new("name: p\nsteps: []\n");
    let key = canary(&f);
    let home = key.parent().expect("dir").to_path_buf();
    std::fs::rename(&key, home.join("settings.toml")).expect("rename");
    std::fs::create_dir(f.ws.join("conf")).expect("mkdir");
    std::fs::write(f.ws.join("conf/settings.toml"), "debug = false\n").expect("write");
    let pipeline = format!(
        "name: p\nsteps:\n  - name: swap\n    command: rm -rf conf && ln -s {} conf\n  - name: commit\n    action: commit\n    params: {{message: swap}}\n",
        home.display()
    );
    std::fs::write(f.ws.join("pipeline.yaml"), pipeline).expect("write");
    git(&f.ws, &["add", "-A"]);
    git(&f.ws, &["commit", "-qm", "base"]);
    let out = run_within(
        &f,
        &["run", "pipeline.yaml", "--no-ui"],
        &[],
        Duration::from_secs(120),
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let tree = git(&f.ws, &["ls-tree", "HEAD", "conf"]);
    assert!(
        tree.starts_with("120000 blob"),
        "conf is committed as a link: {tree}"
    );
    assert!(
        !all_objects(&f.ws).contains(CANARY),
        "no object holds the host file"
    );
    assert_eq!(
        git(&f.ws, &["status", "--porcelain"]),
        "",
        "the index matches the commit"
    );
}

#[test]
fn a_newline_in_a_file_name_commits_no_other_path() {
    let f = Fixture::new("name: p\nsteps: []\n");
    let evil = "name: p\nnetwork: open\nsteps: []\n";
    std::fs::write(f.dir.path().join("evil.yaml"), evil).expect("write");
    let blob = git(
        &f.ws,
        &[
            "hash-object",
            "-w",
            f.dir.path().join("evil.yaml").to_str().expect("utf8"),
        ],
    );
    let name = format!("x\n100644 {}\tpipeline.yaml", blob.trim());
    let script = format!(
        "printf harmless > \"$(printf '{}')\"",
        name.replace('\n', "\\n").replace('\t', "\\t")
    );
    let pipeline = format!(
        "name: p\nsteps:\n  - name: plant\n    command: {}\n  - name: commit\n    action: commit\n    params: {{message: plant}}\n",
        serde_json::to_string(&script).expect("json")
    );
    std::fs::write(f.ws.join("pipeline.yaml"), &pipeline).expect("write");
    git(&f.ws, &["commit", "-qam", "pipeline"]);
    let out = run_within(
        &f,
        &["run", "pipeline.yaml", "--no-ui"],
        &[],
        Duration::from_secs(120),
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(git(&f.ws, &["show", "HEAD:pipeline.yaml"]), pipeline);
    let names = git(&f.ws, &["ls-tree", "-r", "-z", "--name-only", "HEAD"]);
    let names: Vec<&str> = names.split('\0').filter(|n| !n.is_empty()).collect();
    assert_eq!(names.len(), 2, "{names:?}");
    assert!(names.contains(&name.as_str()), "{names:?}");
}

#[test]
fn a_git_planted_on_path_inside_the_workspace_never_runs_on_the_host() {
    let f = Fixture::new(
        "name: p\nsteps:\n  - name: plant\n    command: mkdir -p bin && printf '#!/bin/sh\\ntouch \"$MARKER\"\\nexit 1\\n' > bin/git && chmod +x bin/git && echo change > file.txt\n  - name: commit\n    action: commit\n    params: {message: change}\n",
    );
    let marker = f.dir.path().join("planted-git-ran");
    let path = format!(
        "{}:{}",
        f.ws.join("bin").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = run_within(
        &f,
        &["run", "pipeline.yaml", "--no-ui"],
        &[("PATH", &path), ("MARKER", marker.to_str().expect("utf8"))],
        Duration::from_secs(120),
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(!marker.exists(), "the planted git ran on the host");
    assert_eq!(git(&f.ws, &["show", "HEAD:file.txt"]), "change\n");
    // Control: a host that resolves `git` through this PATH runs the planted one.
    let ran = Command::new("git")
        .arg("status")
        .env("PATH", &path)
        .env("MARKER", &marker)
        .current_dir(&f.ws)
        .status()
        .expect("spawn");
    assert!(
        !ran.success() && marker.exists(),
        "control: the planted git runs"
    );
}

#[test]
fn output_past_the_limit_is_counted_not_stored() {
    let f = Fixture::new(
        "name: p\nisolation: {output_limit: 1M}\nsteps:\n  - name: loud\n    command: head -c 50000000 /dev/zero | tr '\\0' x | fold -w 100\n",
    );
    let before = state_bytes(&f).len();
    let out = run_within(
        &f,
        &["run", "pipeline.yaml", "--no-ui"],
        &[],
        Duration::from_secs(300),
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let grown = state_bytes(&f).len().saturating_sub(before);
    assert!(
        grown < 6 << 20,
        "50 MB of output grew the state dir by {grown} bytes"
    );
    let log = logs(&f);
    let finished: serde_json::Value = log
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).expect("json"))
        .find(|e| e["type"] == "step.finished")
        .expect("step.finished");
    let omitted = finished["data"]["output_omitted_bytes"]
        .as_u64()
        .expect("counted");
    // 50,000,000 bytes in 100-byte lines with newlines: 50,500,000, less at most 1 MiB stored.
    assert!(omitted > 49_000_000 && omitted <= 50_500_000, "{omitted}");
}

#[test]
fn escape_sequences_from_the_sandbox_never_reach_the_terminal_raw() {
    let f = Fixture::gated(
        "name: p\nsteps:\n  - name: noisy\n    command: printf '\\033]0;pwned\\007\\033]52;c;ZXZpbA==\\007\\r\\033[2Kpassed\\n'; touch \"$(printf 'name\\033[31m')\"; cat gate\n  - name: commit\n    action: commit\n    params: {message: m}\n",
    );
    let (mut child, id, _stderr) = f.spawn(&["run", "pipeline.yaml", "--no-ui"]);
    let start = Instant::now();
    while !f.ws.join("name\x1b[31m").exists() {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the step never started"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    child.kill().expect("SIGKILL");
    let _ = child.wait();
    let gate = f.ws.join("gate");
    let _ = std::fs::remove_file(&gate);
    std::fs::write(&gate, "open\n").expect("a plain file now: the rerun reads it at once");
    let resumed = run_within(
        &f,
        &["run", "--resume", &id, "--no-ui"],
        &[],
        Duration::from_secs(120),
    );
    assert_eq!(resumed.status.code(), Some(0), "{}", stderr(&resumed));
    let plain_logs = f.cordon(&["logs", &id]).output().expect("cordon logs");
    let json_logs = f
        .cordon(&["logs", &id, "--json"])
        .output()
        .expect("cordon logs");
    // A file a step left behind makes the worktree dirty: a fresh run with a commit action is
    // refused, listing it.
    std::fs::write(f.ws.join("left\x1b]0;title\x07"), "").expect("write");
    let refused = f.run(&["--no-ui"]);
    assert_eq!(refused.status.code(), Some(2), "{}", stderr(&refused));
    for (what, bytes) in [
        ("resume stderr", &resumed.stderr),
        ("logs", &plain_logs.stdout),
        ("logs --json", &json_logs.stdout),
        ("refusal", &refused.stderr),
    ] {
        assert!(
            !bytes.iter().any(|&b| b == 0x1b || b == 0x07 || b == b'\r'),
            "{what} holds a raw control character: {}",
            String::from_utf8_lossy(bytes)
        );
    }
    assert!(
        String::from_utf8_lossy(&resumed.stderr).contains("name\\033[31m"),
        "the kept change is shown escaped: {}",
        stderr(&resumed)
    );
    assert!(String::from_utf8_lossy(&plain_logs.stdout).contains("\\e]52;c;ZXZpbA==\\x07"));
    assert!(
        stderr(&refused).contains("left\\e]0;title\\x07"),
        "{}",
        stderr(&refused)
    );
    let _ = std::fs::set_permissions(&gate, std::fs::Permissions::from_mode(0o644));
}

/// A client inside the session sending `same` refused requests for one name and `distinct` for
/// as many names, each over the proxy (reconnecting whenever the proxy closes).
const FLOOD: &str = r#"
import socket, sys
same, distinct = int(sys.argv[1]), int(sys.argv[2])
conn = reader = None
def ask(host):
    global conn, reader
    for _ in range(3):
        if conn is None:
            conn = socket.create_connection(("127.0.0.1", 3128))
            reader = conn.makefile("rb")
        try:
            conn.sendall(f"GET http://{host}/ HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
            status = reader.readline()
            length, close = 0, False
            while True:
                line = reader.readline()
                if line in (b"\r\n", b""):
                    break
                name, _, value = line.decode().partition(":")
                if name.lower() == "content-length":
                    length = int(value)
                if name.lower() == "connection" and "close" in value.lower():
                    close = True
            reader.read(length)
            if close or not status:
                conn.close()
                conn = None
            if status:
                return
        except OSError:
            conn = None
    raise SystemExit(f"no answer for {host}")
for i in range(same):
    ask("denied.test")
for i in range(distinct):
    ask(f"h{i}.denied.test")
print("sent", same + distinct)
"#;

#[test]
fn a_sessions_egress_records_are_coalesced_and_capped() {
    let f = Fixture::new("name: p\nsteps: []\n");
    std::fs::write(f.ws.join("flood.py"), FLOOD).expect("write");
    std::fs::write(
        f.ws.join("pipeline.yaml"),
        "name: p\nsteps:\n  - name: flood\n    network: {allow: [allowed.test]}\n    timeout: 600\n    command: [python3, flood.py, '3000', '10500']\n",
    )
    .expect("write");
    git(&f.ws, &["add", "-A"]);
    git(&f.ws, &["commit", "-qm", "flood"]);
    let out = run_within(
        &f,
        &["run", "pipeline.yaml", "--no-ui"],
        &[],
        Duration::from_secs(600),
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let log = logs(&f);
    let events: Vec<serde_json::Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).expect("json"))
        .collect();
    let deny: Vec<&serde_json::Value> = events
        .iter()
        .filter(|e| e["type"] == "egress.deny")
        .collect();
    let counted: u64 = deny
        .iter()
        .map(|e| e["data"]["count"].as_u64().unwrap_or(1))
        .sum();
    let dropped: Vec<u64> = events
        .iter()
        .filter(|e| e["type"] == "egress.dropped")
        .map(|e| e["data"]["count"].as_u64().expect("count"))
        .collect();
    // 3,000 repeats of one name become a handful of records (one a second, plus the first).
    let same = deny
        .iter()
        .filter(|e| e["data"]["host"] == "denied.test")
        .count();
    assert!((1..=2 + 600).contains(&same), "{same} records for one name");
    // The session keeps at most 10,000 egress records; the rest is one dropped count.
    let records = events
        .iter()
        .filter(|e| {
            let kind = e["type"].as_str().unwrap_or_default();
            kind.starts_with("egress.") && kind != "egress.dropped"
        })
        .count();
    assert_eq!(records, 10_000, "the cap");
    assert_eq!(dropped.len(), 1, "one egress.dropped");
    let others: u64 = events
        .iter()
        .filter(|e| e["type"] == "egress.close" || e["type"] == "egress.allow")
        .map(|e| e["data"]["count"].as_u64().unwrap_or(1))
        .sum();
    assert!(
        counted + dropped[0] >= 13_500 && counted + dropped[0] <= 13_500 + others,
        "every refused request is counted once: {counted} + {}",
        dropped[0]
    );
}

#[test]
fn the_audit_file_of_cordon_exec_follows_the_same_bounds() {
    let f = Fixture::new("name: p\nsteps: []\n");
    std::fs::write(f.ws.join("flood.py"), FLOOD).expect("write");
    let audit = f.dir.path().join("audit.jsonl");
    let out = crate::support::cordon()
        .args(["exec", "--allow", "allowed.test", "--audit"])
        .arg(&audit)
        .arg("-w")
        .arg(&f.ws)
        .args(["--", "python3", "flood.py", "3000", "10500"])
        .output()
        .expect("cordon exec");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = std::fs::read_to_string(&audit).expect("the audit file");
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("json"))
        .collect();
    let dropped: u64 = lines.iter().filter_map(|l| l["dropped"].as_u64()).sum();
    let records: Vec<&serde_json::Value> =
        lines.iter().filter(|l| l["dropped"].is_null()).collect();
    assert_eq!(records.len(), 10_000, "the cap");
    let counted: u64 = records
        .iter()
        .filter(|r| r["decision"] == "deny")
        .map(|r| r["count"].as_u64().unwrap_or(1))
        .sum();
    assert!(counted + dropped >= 13_500, "{counted} + {dropped}");
    assert!(text.len() < 8 << 20, "{} bytes", text.len());
}

#[test]
fn masked_secrets_are_never_committed_read_or_deleted_by_the_host() {
    // `hide` spelled as a user might (`./secrets//`): the same mask on the host as in the sandbox.
    let pipeline = "name: p\nisolation:\n  hide: [./secrets//]\nsteps:\n  - name: build\n    command: cat .env .env.local secrets/key 2>&1; echo change > file.txt; true > .gitignore\n  - name: commit\n    action: commit\n    params: {message: change}\n";
    let f = Fixture::new(pipeline);
    // The user's secrets, untracked and (a user who forgot) not even ignored; one with a name
    // that is not UTF-8.
    std::fs::write(f.ws.join(".env"), CANARY).expect("write");
    std::fs::write(f.ws.join(".env.local"), CANARY).expect("write");
    std::fs::write(
        f.ws.join(<std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(b".env\xff")),
        CANARY,
    )
    .expect("write");
    std::fs::create_dir(f.ws.join("secrets")).expect("mkdir");
    std::fs::write(f.ws.join("secrets/key"), CANARY).expect("write");
    let out = run_within(
        &f,
        &["run", "pipeline.yaml", "--no-ui"],
        &[],
        Duration::from_secs(120),
    );
    assert_eq!(out.status.code(), Some(0), "{}", head(&stderr(&out)));
    // Control: the commit happened, with the step's change.
    let tree = git(&f.ws, &["ls-tree", "-r", "--name-only", "HEAD"]);
    assert_eq!(tree, ".gitignore\nfile.txt\npipeline.yaml\n");
    assert!(!all_objects(&f.ws).contains(CANARY), "a secret reached git");
    assert!(
        !contains(&state_bytes(&f), CANARY),
        "a secret reached the state dir"
    );
    assert!(!logs(&f).contains(CANARY));
    for name in [".env", ".env.local", "secrets/key"] {
        assert_eq!(
            std::fs::read_to_string(f.ws.join(name)).expect("kept"),
            CANARY
        );
    }

    // A pipeline that names a secret as an output: the host neither deletes nor reads it.
    let pipeline = "name: p\nisolation:\n  hide: [secrets]\nsteps:\n  - name: build\n    command: 'true'\n    produces: [.env]\n";
    std::fs::write(f.ws.join("pipeline.yaml"), pipeline).expect("write");
    git(&f.ws, &["commit", "-qam", "produces .env"]);
    let out = run_within(
        &f,
        &["run", "pipeline.yaml", "--no-ui"],
        &[],
        Duration::from_secs(120),
    );
    assert_eq!(out.status.code(), Some(1), "{}", head(&stderr(&out)));
    assert!(
        stderr(&out).contains("is masked in every sandbox"),
        "{}",
        head(&stderr(&out))
    );
    assert_eq!(
        std::fs::read_to_string(f.ws.join(".env")).expect("kept"),
        CANARY
    );
    assert!(!contains(&state_bytes(&f), CANARY));
}
