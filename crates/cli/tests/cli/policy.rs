//! `cordon policy PIPELINE`: each step's effective egress, the grants of the pipeline's latest
//! run, the operator deny, `OPEN` steps flagged; its usage errors exit 2.

use crate::run::{Fixture, stderr};

const PIPELINE: &str = "name: demo
llm: {provider: replay, transcript: t.jsonl}
steps:
  - name: ask
    agent: ask
  - name: fetch
    network: {allow: [files.example.test], deny: ['*.corp.example.test'], grants: true}
    setup: 'true'
    setup_network: {allow: [packages.example.test]}
    command: 'true'
  - name: wide
    network: open
    command: 'true'
  - name: commit
    action: commit
";

fn fixture() -> (Fixture, std::path::PathBuf) {
    let f = Fixture::new(PIPELINE);
    std::fs::create_dir(f.ws.join("agents")).expect("mkdir");
    std::fs::write(
        f.ws.join("agents/ask.agent.md"),
        "---\nname: ask\n---\nAsk for egress.\n",
    )
    .expect("write");
    let transcript = [
        serde_json::json!({"step": "ask", "tool_calls": [
            {"name": "request_egress", "arguments": {"domain": "api.packages.example.test", "reason": "fetch"}},
            {"name": "request_egress", "arguments": {"domain": "other.example.test", "reason": "fetch"}}
        ]}),
        serde_json::json!({"step": "ask", "text": "done"}),
    ]
    .iter()
    .map(|l| format!("{l}\n"))
    .collect::<String>();
    std::fs::write(f.ws.join("t.jsonl"), transcript).expect("write");
    crate::run::git(&f.ws, &["add", "-A"]);
    crate::run::git(&f.ws, &["commit", "-q", "-m", "agents"]);
    let policy = f.dir.path().join("policy.toml");
    std::fs::write(
        &policy,
        "deny = [\"*.corp.example.test\"]\nallow_private = [\"10.20.0.0/16\"]\n[grants]\nallow = [\"*.packages.example.test\"]\n",
    )
    .expect("write policy");
    (f, policy)
}

/// The report with the temporary directory and run ids replaced, for a stable snapshot.
fn redact(f: &Fixture, text: &str) -> String {
    let dir = f.dir.path().canonicalize().expect("canonical");
    let text = text.replace(&dir.display().to_string(), "[TMP]");
    let run = run_id_after_latest_run(&text);
    match run {
        Some(id) => text.replace(&id, "[RUN]"),
        None => text,
    }
}

/// The run id after `latest run `, if any.
fn run_id_after_latest_run(text: &str) -> Option<String> {
    let start = text.find("latest run ")? + "latest run ".len();
    let id: String = text[start..].chars().take(26).collect();
    (id.len() == 26 && id.chars().all(|c| c.is_ascii_alphanumeric())).then_some(id)
}

#[test]
fn policy_prints_each_steps_egress_and_the_grants_of_the_latest_run() {
    let (f, policy) = fixture();
    let policy_flag = format!("--policy={}", policy.display());
    let before = f
        .cordon(&["policy", "pipeline.yaml", &policy_flag])
        .output()
        .expect("cordon policy");
    assert_eq!(before.status.code(), Some(0), "{}", stderr(&before));
    let before = String::from_utf8_lossy(&before.stdout);
    assert!(before.contains("latest run: none"), "{before}");

    let run = f.run(&["--no-ui", &policy_flag]);
    assert_eq!(run.status.code(), Some(0), "{}", stderr(&run));
    let out = f
        .cordon(&["policy", "pipeline.yaml", &policy_flag])
        .output()
        .expect("cordon policy");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("grants: true; granted in the latest run: api.packages.example.test"),
        "run: {}\n{text}",
        stderr(&run)
    );
    insta::assert_snapshot!(redact(&f, &text));
}

#[test]
fn policy_refuses_a_policy_file_inside_the_workspace() {
    let (f, _) = fixture();
    std::fs::write(f.ws.join("policy.toml"), "deny = []\n").expect("write");
    let out = f
        .cordon(&["policy", "pipeline.yaml", "--policy=policy.toml"])
        .output()
        .expect("cordon policy");
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("is inside the workspace")
            && stderr(&out).contains("move it outside"),
        "{}",
        stderr(&out)
    );
    std::fs::create_dir(f.ws.join("sub")).expect("mkdir");
    let out = f
        .cordon(&["policy", "pipeline.yaml", "--policy=sub/../policy.toml"])
        .output()
        .expect("cordon policy");
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    // A link in the workspace then `..`: the kernel follows the link, so does the check.
    std::fs::create_dir_all(f.ws.join("a/b/c")).expect("mkdir");
    std::fs::write(f.ws.join("a/policy.toml"), "deny = []\n").expect("write");
    std::os::unix::fs::symlink("a/b/c", f.ws.join("evil")).expect("symlink");
    let out = f
        .cordon(&["policy", "pipeline.yaml", "--policy=evil/../../policy.toml"])
        .output()
        .expect("cordon policy");
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("is inside the workspace"),
        "{}",
        stderr(&out)
    );
    // The control: `..` out of the workspace is outside it.
    let outside = f.ws.parent().expect("a parent").join("policy.toml");
    std::fs::write(&outside, "deny = []\n").expect("write");
    let out = f
        .cordon(&["policy", "pipeline.yaml", "--policy=../policy.toml"])
        .output()
        .expect("cordon policy");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}

#[test]
fn policy_names_every_problem_of_an_invalid_policy_file_and_exits_2() {
    let (f, policy) = fixture();
    std::fs::write(&policy, "deny = []\nsurprise = 1\n").expect("write");
    let out = f
        .cordon(&[
            "policy",
            "pipeline.yaml",
            &format!("--policy={}", policy.display()),
        ])
        .output()
        .expect("cordon policy");
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("the operator policy is invalid")
            && stderr(&out).contains("surprise"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn policy_of_an_invalid_pipeline_prints_its_problems_and_exits_2() {
    let f = Fixture::new("name: demo\nsteps:\n  - name: x\n    comand: 'true'\n");
    let out = f
        .cordon(&["policy", "pipeline.yaml"])
        .env("XDG_CONFIG_HOME", f.dir.path())
        .output()
        .expect("cordon policy");
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("pipeline.yaml:4:5"),
        "{}",
        stderr(&out)
    );
}
