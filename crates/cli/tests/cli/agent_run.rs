//! Agent steps through the binary with real sandboxes: the offline example ends in a commit; the
//! key reaches only the provider (a scripted OpenAI server on loopback), never the sandbox or the
//! log; an agent step killed in the middle of a tool call resumes with that call answered as
//! interrupted and its turns replayed from the start.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::run::{Fixture, git, stderr};

#[test]
fn the_offline_example_fixes_the_bug_and_ends_in_a_commit() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/fix-calculator/run.sh");
    let out = crate::support::run_example("fix-calculator", tmp.path());
    let err = stderr(&out);
    let log = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{err}\n{log}");
    assert!(
        log.contains("fix: fix-calculator"),
        "the last commit is cordon's: {log}"
    );
    assert!(log.contains("calc.py"), "{log}");
    assert!(
        !log.contains("review.md"),
        "the artifact is not committed: {log}"
    );
    // The checkout itself is untouched: no run artifacts next to the script.
    assert!(!script.with_file_name("review.md").exists());
}

/// A scripted OpenAI-compatible server: answers with `replies` in order, records each request.
pub(crate) fn openai_server(replies: Vec<serde_json::Value>) -> (String, Arc<Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}/v1", listener.local_addr().expect("addr"));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = Arc::clone(&seen);
    std::thread::spawn(move || {
        let mut replies = replies.into_iter();
        for stream in listener.incoming().flatten() {
            let mut reader = BufReader::new(stream.try_clone().expect("clone"));
            let mut head = String::new();
            let mut length = 0;
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 {
                    break;
                }
                if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    length = v.trim().parse().unwrap_or(0);
                }
                head.push_str(&line);
                if line == "\r\n" {
                    break;
                }
            }
            let mut body = vec![0; length];
            let _ = reader.read_exact(&mut body);
            log.lock()
                .expect("lock")
                .push(format!("{head}{}", String::from_utf8_lossy(&body)));
            let reply = replies
                .next()
                .unwrap_or_else(|| serde_json::json!({"error": {"message": "unscripted"}}));
            let text = reply.to_string();
            let mut stream = stream;
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{text}",
                text.len()
            );
        }
    });
    (url, seen)
}

pub(crate) fn agent_fixture(llm: &str, extra_files: &[(&str, &str)]) -> Fixture {
    let pipeline = format!(
        "name: demo\nllm: {llm}\nsteps:\n  - name: dev\n    agent: dev\n    timeout: 120\n"
    );
    with_agent(
        &pipeline,
        "---\nname: dev\n---\nDo the task.\n",
        extra_files,
    )
}

/// A fixture of `pipeline` with `agents/dev.agent.md` holding `agent` and the `extra` files,
/// all committed.
pub(crate) fn with_agent(pipeline: &str, agent: &str, extra: &[(&str, &str)]) -> Fixture {
    let f = Fixture::new(pipeline);
    std::fs::create_dir(f.ws.join("agents")).expect("mkdir");
    std::fs::write(f.ws.join("agents/dev.agent.md"), agent).expect("write");
    for (path, text) in extra {
        if let Some(parent) = f.ws.join(path).parent() {
            std::fs::create_dir_all(parent).expect("mkdir");
        }
        std::fs::write(f.ws.join(path), text).expect("write");
    }
    git(&f.ws, &["add", "-A"]);
    git(&f.ws, &["commit", "-q", "-m", "agents"]);
    f
}

pub(crate) fn events(f: &Fixture) -> Vec<serde_json::Value> {
    let out = f
        .cordon(&["logs", "--last", "--json"])
        .output()
        .expect("cordon logs");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect()
}

#[test]
fn the_api_key_reaches_only_the_provider_never_the_sandbox_or_the_log() {
    const KEY: &str = "sk-e2e-0123456789-secret";
    let (url, seen) = openai_server(vec![
        serde_json::json!({"choices": [{"message": {"role": "assistant", "content": null, "tool_calls": [
            {"id": "call_env", "type": "function", "function": {"name": "bash", "arguments": "{\"command\":\"env; echo env-listed\"}"}}
        ]}}]}),
        serde_json::json!({"choices": [{"message": {"role": "assistant", "content": "done"}}]}),
    ]);
    let f = agent_fixture(
        &format!("{{provider: openai, model: m, base_url: '{url}', api_key_env: CORDON_E2E_KEY}}"),
        &[],
    );
    let out = f
        .cordon(&["run", "pipeline.yaml"])
        .env("CORDON_E2E_KEY", KEY)
        .output()
        .expect("cordon run");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));

    let requests = seen.lock().expect("lock").clone();
    assert_eq!(requests.len(), 2);
    assert!(
        requests
            .iter()
            .all(|r| r.contains(&format!("Bearer {KEY}"))),
        "the provider gets the key"
    );
    let events = events(&f);
    let env_output = events
        .iter()
        .find(|e| e["type"] == "tool.result")
        .map(|e| e["data"]["output"].as_str().unwrap_or_default().to_owned())
        .expect("the env call's result");
    assert!(
        env_output.contains("env-listed") && env_output.contains("PATH="),
        "env ran: {env_output}"
    );
    assert!(
        !env_output.contains(KEY) && !env_output.contains("CORDON_E2E_KEY"),
        "{env_output}"
    );
    let all: String = events.iter().map(|e| e.to_string()).collect();
    assert!(!all.contains(KEY), "no event holds the key");
    assert!(!String::from_utf8_lossy(&out.stderr).contains(KEY));
}

#[test]
fn a_missing_key_is_exit_2_naming_the_variable_before_any_sandbox() {
    let f = agent_fixture(
        "{provider: openai, model: m, base_url: 'http://127.0.0.1:9/v1', api_key_env: CORDON_E2E_ABSENT}",
        &[],
    );
    let out = f
        .cordon(&["run", "pipeline.yaml"])
        .env_remove("CORDON_E2E_ABSENT")
        .output()
        .expect("cordon run");
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("`CORDON_E2E_ABSENT` is not set"), "{err}");
    assert!(!err.contains("sandbox.session"), "{err}");
}

#[test]
fn an_agent_step_killed_mid_tool_call_resumes_with_the_call_answered_as_interrupted() {
    let transcript = [
        serde_json::json!({"step": "dev", "attempt": 1, "tool_calls": [{"name": "bash", "arguments": {"command": "echo run >> runs.log"}}]}),
        serde_json::json!({"step": "dev", "attempt": 1, "tool_calls": [{"name": "bash", "arguments": {"command": "if [ -e .blocked ]; then echo second; else touch .blocked; exec sleep 120; fi"}}]}),
        serde_json::json!({"step": "dev", "attempt": 1, "text": "done"}),
    ]
    .iter()
    .map(|l| format!("{l}\n"))
    .collect::<String>();
    let f = agent_fixture(
        "{provider: replay, transcript: t.jsonl}",
        &[("t.jsonl", &transcript)],
    );
    let mut child = f
        .cordon(&["run", "pipeline.yaml", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
    let stdout = BufReader::new(child.stdout.take().expect("stdout"));
    let mut calls = 0;
    for line in stdout.lines() {
        let line = line.expect("a line");
        if line.contains("\"type\":\"tool.call\"") {
            calls += 1;
            if calls == 2 {
                break;
            }
        }
    }
    assert_eq!(calls, 2, "the run reached the blocking call");
    // The blocking command has started once its marker exists (bounded wait on the effect).
    let deadline = Instant::now() + Duration::from_secs(30);
    while !f.ws.join(".blocked").exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(f.ws.join(".blocked").exists(), "the tool call ran");
    child.kill().expect("SIGKILL");
    child.wait().expect("reaped");

    let out = f
        .cordon(&["run", "--resume-last"])
        .output()
        .expect("resume");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        std::fs::read_to_string(f.ws.join("runs.log"))
            .ok()
            .as_deref(),
        Some("run\nrun\n"),
        "turns replayed from the start"
    );

    let mut results: BTreeMap<String, Vec<serde_json::Value>> = BTreeMap::new();
    let mut call_ids = Vec::new();
    for event in events(&f) {
        match event["type"].as_str() {
            Some("tool.call") => {
                call_ids.push(event["data"]["id"].as_str().unwrap_or_default().to_owned())
            }
            Some("tool.result") => results
                .entry(event["data"]["id"].as_str().unwrap_or_default().to_owned())
                .or_default()
                .push(event["data"].clone()),
            _ => {}
        }
    }
    assert_eq!(call_ids.len(), 4, "{call_ids:?}");
    for id in &call_ids {
        assert_eq!(
            results.get(id).map(Vec::len),
            Some(1),
            "exactly one result for {id}"
        );
    }
    let interrupted: Vec<&serde_json::Value> = results
        .values()
        .flatten()
        .filter(|r| r["interrupted"] == true)
        .collect();
    assert_eq!(interrupted.len(), 1, "{results:?}");
    assert_eq!(results[&call_ids[1]][0]["interrupted"], true);
    assert_eq!(results[&call_ids[3]][0]["output"], "second\n");
}

pub(crate) fn chat(
    content: Option<&str>,
    calls: &[(&str, &str, serde_json::Value)],
) -> serde_json::Value {
    let calls: Vec<serde_json::Value> = calls
        .iter()
        .map(|(id, name, args)| {
            serde_json::json!({"id": id, "type": "function", "function": {"name": name, "arguments": args.to_string()}})
        })
        .collect();
    let mut message = serde_json::json!({"role": "assistant", "content": content});
    if !calls.is_empty() {
        message["tool_calls"] = serde_json::Value::Array(calls);
    }
    serde_json::json!({"choices": [{"message": message}], "usage": {"prompt_tokens": 10, "completion_tokens": 2}})
}

const GATED: &str = "steps:
  - name: dev
    agent: dev
    timeout: 120
  - name: test
    command: test -e fixed || { echo GATE-FAILED-MARKER; exit 1; }
    on_fail: {goto: dev, retry: true}
";

fn gated_fixture(llm: &str, extra: &[(&str, &str)]) -> Fixture {
    with_agent(
        &format!("name: demo\nllm: {llm}\n{GATED}"),
        "---\nname: dev\n---\nMake the gate pass.\n",
        extra,
    )
}

#[test]
fn a_failed_gate_reaches_the_next_attempt_and_a_recorded_session_replays_offline() {
    let (url, seen) = openai_server(vec![
        chat(Some("nothing to do"), &[]),
        chat(
            None,
            &[(
                "c1",
                "write_file",
                serde_json::json!({"path": "fixed", "content": "yes\n"}),
            )],
        ),
        chat(Some("fixed it"), &[]),
    ]);
    let f = gated_fixture(
        &format!("{{provider: openai, model: m, base_url: '{url}', api_key_env: CORDON_E2E_KEY}}"),
        &[],
    );
    let transcript = f.dir.path().join("recorded.jsonl");
    let record = format!("--record={}", transcript.display());
    let out = f
        .cordon(&["run", "pipeline.yaml", &record])
        .env("CORDON_E2E_KEY", "sk-e2e-record-0123456789")
        .output()
        .expect("cordon run");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let requests = seen.lock().expect("lock").clone();
    assert_eq!(requests.len(), 3);
    assert!(!requests[0].contains("GATE-FAILED-MARKER"));
    assert!(
        requests[1].contains("GATE-FAILED-MARKER"),
        "attempt 2's task message holds the gate's output"
    );
    assert!(
        requests[1].contains("Feedback from earlier attempts"),
        "{}",
        requests[1]
    );

    let recorded = std::fs::read_to_string(&transcript).expect("the transcript");
    let lines: Vec<serde_json::Value> = recorded
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON"))
        .collect();
    assert_eq!(
        lines,
        [
            serde_json::json!({"step": "dev", "attempt": 1, "text": "nothing to do"}),
            serde_json::json!({"step": "dev", "attempt": 2, "tool_calls": [{"name": "write_file", "arguments": {"path": "fixed", "content": "yes\n"}}]}),
            serde_json::json!({"step": "dev", "attempt": 2, "text": "fixed it"}),
        ]
    );
    // The recording replays offline to the same route.
    let replayed = gated_fixture(
        "{provider: replay, transcript: t.jsonl}",
        &[("t.jsonl", &recorded)],
    );
    let out = replayed.run(&[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        std::fs::read_to_string(replayed.ws.join("fixed"))
            .ok()
            .as_deref(),
        Some("yes\n")
    );
}

#[test]
fn the_run_prompt_reaches_every_agent_task_and_is_recorded_in_run_started() {
    let (url, seen) = openai_server(vec![serde_json::json!({"choices": [{"message": {
        "role": "assistant", "content": "done"}}]})]);
    let f = agent_fixture(
        &format!("{{provider: openai, model: m, base_url: '{url}', api_key_env: CORDON_E2E_KEY}}"),
        &[],
    );
    // From the pipeline's directory, without naming it: `./pipeline.yaml` is the default.
    let out = f
        .cordon(&["run", "--no-ui", "--prompt", "Rename the module to calc2."])
        .env("CORDON_E2E_KEY", "sk-test")
        .output()
        .expect("cordon run");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let requests = seen.lock().expect("lock").clone();
    assert_eq!(requests.len(), 1);
    assert!(
        requests[0].contains("## Task") && requests[0].contains("Rename the module to calc2."),
        "{}",
        requests[0]
    );
    let started = events(&f)
        .into_iter()
        .find(|e| e["type"] == "run.started")
        .expect("run.started");
    assert_eq!(started["data"]["prompt"], "Rename the module to calc2.");
}

#[test]
fn prompt_files_are_read_without_following_a_link_and_a_missing_pipeline_names_the_fix() {
    let f = agent_fixture(
        "{provider: openai, model: m, base_url: 'http://127.0.0.1:9/v1'}",
        &[],
    );
    let outside = tempfile::tempdir().expect("tempdir");
    std::fs::write(outside.path().join("secret"), "the user's key").expect("write");
    std::os::unix::fs::symlink(outside.path().join("secret"), f.ws.join("task.md")).expect("link");
    let out = f
        .cordon(&["run", "--no-ui", "--prompt-file", "task.md"])
        .output()
        .expect("cordon run");
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("--prompt-file task.md:"),
        "{}",
        stderr(&out)
    );
    assert!(!stderr(&out).contains("the user's key"));
    // A file that is not UTF-8 text, and one past 1 MiB: refused naming the problem.
    std::fs::remove_file(f.ws.join("task.md")).expect("rm");
    std::fs::write(f.ws.join("task.md"), b"\xff\xfe").expect("write");
    let out = f
        .cordon(&["run", "--no-ui", "--prompt-file", "task.md"])
        .output()
        .expect("cordon run");
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("--prompt-file task.md: is not UTF-8 text"),
        "{}",
        stderr(&out)
    );
    std::fs::write(f.ws.join("task.md"), vec![b'a'; (1 << 20) + 1]).expect("write");
    let out = f
        .cordon(&["run", "--no-ui", "--prompt-file", "task.md"])
        .output()
        .expect("cordon run");
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("--prompt-file task.md: is larger than 1024 KiB"),
        "{}",
        stderr(&out)
    );
    // No PIPELINE and no ./pipeline.yaml: exit 2 with both ways out.
    let empty = tempfile::tempdir().expect("tempdir");
    let out = crate::support::cordon()
        .args(["run", "--no-ui"])
        .current_dir(empty.path())
        .output()
        .expect("cordon run");
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("no PIPELINE given and there is no ./pipeline.yaml here"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn an_agent_step_shows_one_line_per_tool_call_with_its_result() {
    let (url, _seen) = openai_server(vec![
        serde_json::json!({"choices": [{"message": {"role": "assistant", "content": null, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "bash", "arguments": "{\"command\":\"echo hi; exit 3\"}"}}
        ]}}]}),
        serde_json::json!({"choices": [{"message": {"role": "assistant", "content": "done"}}]}),
    ]);
    let f = agent_fixture(
        &format!("{{provider: openai, model: m, base_url: '{url}', api_key_env: CORDON_E2E_KEY}}"),
        &[],
    );
    let out = f
        .cordon(&["run", "--no-ui"])
        .env("CORDON_E2E_KEY", "sk-test")
        .output()
        .expect("cordon run");
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(
        err.contains("\n  bash  echo hi; exit 3  → exit 3  "),
        "{err}"
    );
    // The final message's first line, under the step's line.
    assert!(err.contains("\n  done\n"), "{err}");
}
