//! `[limits]` end to end: a step that fills its sandbox's small tmpfs while it keeps running is
//! stopped mid-step and fails with `disk exhausted: …` (long before its own timeout), with the
//! warning naming the filesystem; a step that stays well below the limits passes, sampled.

use std::path::PathBuf;

use crate::run::Fixture;

/// An operator policy beside the workspace with these limits.
fn policy(f: &Fixture, limits: &str) -> PathBuf {
    let path = f.dir.path().join("policy.toml");
    std::fs::write(&path, format!("[limits]\n{limits}\n")).expect("write the policy");
    path
}

fn events(f: &Fixture) -> Vec<serde_json::Value> {
    let logs = f.cordon(&["logs", "--json"]).output().expect("cordon logs");
    assert!(logs.status.success(), "{logs:?}");
    String::from_utf8_lossy(&logs.stdout)
        .lines()
        .map(|line| serde_json::from_str(line).expect("an event line"))
        .collect()
}

fn of_type<'e>(events: &'e [serde_json::Value], kind: &str) -> Vec<&'e serde_json::Value> {
    events.iter().filter(|e| e["type"] == kind).collect()
}

#[test]
fn a_step_filling_its_tmpfs_is_stopped_mid_step_with_disk_exhausted() {
    // The command fills /tmp to the brim, then would sleep far past any sample.
    let f = Fixture::new(
        "name: fill\nisolation:\n  tmp_size: 1M\nsteps:\n  - name: fill\n    command: cat /dev/zero > /tmp/fill 2>/dev/null; sleep 60\n    timeout: 90\n",
    );
    let policy = policy(&f, "disk_warn = 50\ndisk_abort = 90");
    let out = f.run(&["--no-ui", "--policy", policy.to_str().expect("utf-8")]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("warning: the sandbox's /tmp (`isolation.tmp_size`) is "),
        "plain mode prints the warning: {stderr}"
    );

    let events = events(&f);
    let finished = of_type(&events, "step.finished");
    let reason = finished[0]["data"]["reason"].as_str().expect("a reason");
    assert!(
        reason.starts_with("disk exhausted: ") && reason.ends_with("% used (limit 90%)"),
        "{reason}"
    );
    let exec = of_type(&events, "sandbox.exec");
    assert_eq!(
        exec[0]["data"]["timed_out"], false,
        "stopped by the guard, not the step timeout"
    );
    assert_eq!(exec[0]["data"]["exit_code"], 137, "its tree was killed");
    let samples = of_type(&events, "resources.sample");
    assert!(
        samples
            .iter()
            .any(|s| s["data"]["disk_percent"].as_u64().is_some_and(|p| p >= 90)),
        "{samples:?}"
    );
}

#[test]
fn a_step_using_little_of_its_tmpfs_passes_and_is_sampled() {
    // The control: the same small tmpfs and limits, a tenth of it used.
    let f = Fixture::new(
        "name: fill\nisolation:\n  tmp_size: 1M\nsteps:\n  - name: fill\n    command: head -c 100000 /dev/zero > /tmp/fill\n    timeout: 90\n",
    );
    let policy = policy(&f, "disk_warn = 50\ndisk_abort = 90");
    let out = f.run(&["--no-ui", "--policy", policy.to_str().expect("utf-8")]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let events = events(&f);
    // (The workspace's own filesystem is the host's: it may warn, but /tmp must not.)
    let warnings = of_type(&events, "resources.warning");
    assert!(
        !warnings.iter().any(|w| w["data"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("/tmp"))),
        "{warnings:?}"
    );
    let samples = of_type(&events, "resources.sample");
    assert!(!samples.is_empty(), "the step was sampled");
}

#[test]
fn a_memory_capped_step_is_sampled_against_its_cap_or_refused_where_caps_cannot_be_enforced() {
    let f = Fixture::new(
        "name: mem\nisolation:\n  memory: 256M\nsteps:\n  - name: use\n    command: head -c 20000000 /dev/zero | tail -c 1 > /dev/null; sleep 1.5\n",
    );
    let policy = policy(&f, "mem_warn = 90");
    let out = f.run(&["--no-ui", "--policy", policy.to_str().expect("utf-8")]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !is_root() {
        // v1 cgroups cannot be delegated to a user: a requested cap refuses the run (exit 3).
        assert_eq!(out.status.code(), Some(3), "{stderr}");
        assert!(
            stderr.contains("the memory cap cannot be enforced"),
            "{stderr}"
        );
        return;
    }
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let events = events(&f);
    let samples = of_type(&events, "resources.sample");
    assert!(
        samples
            .iter()
            .any(|s| s["data"]["memory_bytes"].as_u64().is_some_and(|b| b > 0)),
        "the session's memory is sampled under its cap: {samples:?}"
    );
}

fn is_root() -> bool {
    std::os::unix::fs::MetadataExt::uid(&std::fs::metadata("/proc/self").expect("stat /proc/self"))
        == 0
}

#[test]
fn an_agent_tool_call_filling_the_tmpfs_is_stopped_and_the_attempt_fails_without_another_model_call()
 {
    let transcript = [
        serde_json::json!({"step": "dev", "attempt": 1, "tool_calls": [{"name": "bash", "arguments": {"command": "cat /dev/zero > /tmp/fill 2>/dev/null; sleep 60"}}]}),
        serde_json::json!({"step": "dev", "attempt": 1, "text": "done"}),
    ]
    .iter()
    .map(|l| format!("{l}\n"))
    .collect::<String>();
    let f = Fixture::new(
        "name: fill\nllm: {provider: replay, transcript: t.jsonl}\nisolation:\n  tmp_size: 1M\nsteps:\n  - name: dev\n    agent: dev\n    timeout: 90\n",
    );
    std::fs::create_dir(f.ws.join("agents")).expect("mkdir");
    std::fs::write(
        f.ws.join("agents/dev.agent.md"),
        "---\nname: dev\n---\nFill the disk.\n",
    )
    .expect("write the agent");
    std::fs::write(f.ws.join("t.jsonl"), transcript).expect("write the transcript");
    crate::run::git(&f.ws, &["add", "-A"]);
    crate::run::git(&f.ws, &["commit", "-q", "-m", "agents"]);
    let policy = policy(&f, "disk_warn = 50\ndisk_abort = 90");
    let out = f.run(&["--no-ui", "--policy", policy.to_str().expect("utf-8")]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");

    let events = events(&f);
    let finished = of_type(&events, "step.finished");
    let reason = finished[0]["data"]["reason"].as_str().expect("a reason");
    assert!(
        reason.starts_with("disk exhausted: ") && reason.ends_with("% used (limit 90%)"),
        "{reason}"
    );
    assert_eq!(
        of_type(&events, "llm.request").len(),
        1,
        "no model call after the disk was exhausted"
    );
    assert_eq!(
        of_type(&events, "tool.result").len(),
        of_type(&events, "tool.call").len(),
        "every tool call has its result"
    );
    let exec = of_type(&events, "sandbox.exec");
    assert_eq!(
        exec[0]["data"]["exit_code"], 137,
        "the tool's tree was killed"
    );
    assert!(
        of_type(&events, "resources.warning")
            .iter()
            .any(|w| w["data"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("/tmp"))),
        "the warning names the sandbox's /tmp"
    );
}
