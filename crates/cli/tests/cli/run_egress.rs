//! Egress in runs (DESIGN §5) with real sandboxes and the real proxy: a step with an allowlist
//! reaches an allowed loopback upstream through the proxy inside its session (names answered by
//! the operator policy's `[resolve]`, loopback opened by its `allow_private`), a denied name gets
//! `403` with its reason, a direct connection fails, and every decision is an event of the step.
//! A policy file inside the workspace is refused.

use std::path::Path;

use crate::run::{Fixture, stderr};
use crate::support::upstream;

/// The operator policy outside the workspace: both test names answer loopback, which
/// `allow_private` opens.
fn policy(dir: &Path) -> std::path::PathBuf {
    let path = dir.join("policy.toml");
    std::fs::write(
        &path,
        "allow_private = [\"127.0.0.0/8\"]\n[resolve]\n\"allowed.test\" = \"127.0.0.1\"\n\"denied.test\" = \"127.0.0.1\"\n",
    )
    .expect("write policy");
    path
}

fn pipeline(port: u16) -> String {
    format!(
        "name: demo
steps:
  - name: fetch
    network: {{allow: ['allowed.test:{port}']}}
    command: |
      curl -sS http://allowed.test:{port}/hello > allowed.txt
      curl -sS -D denied.head -o /dev/null http://denied.test:{port}/x
      curl -sS --noproxy '*' --max-time 5 http://127.0.0.1:{port}/direct > direct.txt 2>&1 || echo direct-failed >> direct.txt
      echo proxy=$HTTP_PROXY no_proxy=$NO_PROXY > env.txt
"
    )
}

#[test]
fn an_allowlisted_step_reaches_only_allowed_names_through_its_proxy_and_logs_each_decision() {
    let port = upstream();
    let f = Fixture::new(&pipeline(port));
    let policy = policy(f.dir.path());
    let policy_flag = format!("--policy={}", policy.display());
    let out = f.run(&["--no-ui", &policy_flag]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let read = |name: &str| std::fs::read_to_string(f.ws.join(name)).unwrap_or_default();
    assert_eq!(read("allowed.txt"), "hello from upstream\n");
    let denied = read("denied.head");
    assert!(
        denied.starts_with("HTTP/1.1 403") && denied.contains("not_allowed"),
        "{denied}"
    );
    assert!(
        read("direct.txt").contains("direct-failed"),
        "no route around the proxy: {}",
        read("direct.txt")
    );
    assert_eq!(
        read("env.txt"),
        "proxy=http://127.0.0.1:3128 no_proxy=localhost,127.0.0.1,::1\n"
    );

    let logs = f
        .cordon(&["logs", "--last", "--json", "--type", "egress"])
        .output()
        .expect("cordon logs");
    let events: Vec<serde_json::Value> = String::from_utf8_lossy(&logs.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    let summary: Vec<String> = events
        .iter()
        .map(|e| {
            format!(
                "{} {} {} {}",
                e["type"].as_str().unwrap_or_default(),
                e["step"].as_str().unwrap_or_default(),
                e["data"]["host"].as_str().unwrap_or_default(),
                e["data"]["reason"].as_str().unwrap_or("-"),
            )
        })
        .collect();
    assert!(
        summary.contains(&"egress.allow fetch allowed.test -".to_owned()),
        "{summary:?}"
    );
    assert!(
        summary.contains(&"egress.deny fetch denied.test not_allowed".to_owned()),
        "{summary:?}"
    );
    assert!(
        summary
            .iter()
            .any(|s| s.starts_with("egress.close fetch allowed.test")),
        "{summary:?}"
    );
    let allow = events
        .iter()
        .find(|e| e["type"] == "egress.allow")
        .expect("an allow");
    assert_eq!(allow["data"]["step"], "fetch");
    assert_eq!(allow["data"]["attempt"], 1);
    assert_eq!(allow["data"]["dialed"], format!("127.0.0.1:{port}"));
}

#[test]
fn without_the_operators_allow_private_loopback_stays_unreachable() {
    let port = upstream();
    let f = Fixture::new(&pipeline(port));
    let policy = f.dir.path().join("policy.toml");
    std::fs::write(&policy, "[resolve]\n\"allowed.test\" = \"127.0.0.1\"\n").expect("write");
    let out = f.run(&["--no-ui", &format!("--policy={}", policy.display())]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let allowed = std::fs::read_to_string(f.ws.join("allowed.txt")).unwrap_or_default();
    assert!(
        !allowed.contains("hello from upstream"),
        "loopback refused: {allowed}"
    );
    let logs = f
        .cordon(&["logs", "--last", "--json", "--type", "egress.deny"])
        .output()
        .expect("cordon logs");
    let text = String::from_utf8_lossy(&logs.stdout);
    assert!(text.contains("\"reason\":\"private_address\""), "{text}");
}

#[test]
fn a_policy_file_inside_the_workspace_is_refused() {
    let f = Fixture::new("name: demo\nsteps:\n  - {name: a, command: 'true'}\n");
    std::fs::write(f.ws.join("policy.toml"), "deny = []\n").expect("write");
    let out = f.run(&["--no-ui", "--policy=policy.toml"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("is inside the workspace") && err.contains("move it outside"),
        "{err}"
    );
    let out = f.run(&["--no-ui", "--policy=/nonexistent/policy.toml"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("--policy"), "{err}");
}

#[test]
fn a_granted_request_opens_the_destination_for_a_later_grant_taking_step() {
    let port = upstream();
    let transcript = [
        serde_json::json!({"step": "ask", "tool_calls": [
            {"name": "request_egress", "arguments": {"domain": format!("allowed.test:{port}"), "reason": "fetch the fixture"}},
            {"name": "request_egress", "arguments": {"domain": format!("denied.test:{port}"), "reason": "fetch the fixture"}}
        ]}),
        serde_json::json!({"step": "ask", "text": "done"}),
    ]
    .iter()
    .map(|l| format!("{l}\n"))
    .collect::<String>();
    let f = Fixture::new(&format!(
        "name: demo
llm: {{provider: replay, transcript: t.jsonl}}
steps:
  - name: ask
    agent: ask
  - name: fetch
    network: {{allow: [], grants: true}}
    command: |
      curl -sS http://allowed.test:{port}/ > allowed.txt
      curl -sS -D denied.head -o /dev/null http://denied.test:{port}/
"
    ));
    std::fs::create_dir(f.ws.join("agents")).expect("mkdir");
    std::fs::write(
        f.ws.join("agents/ask.agent.md"),
        "---\nname: ask\n---\nAsk for egress.\n",
    )
    .expect("write");
    std::fs::write(f.ws.join("t.jsonl"), transcript).expect("write");
    crate::run::git(&f.ws, &["add", "-A"]);
    crate::run::git(&f.ws, &["commit", "-q", "-m", "agents"]);
    let policy = policy(f.dir.path());
    let mut text = std::fs::read_to_string(&policy).expect("policy");
    text.push_str("[grants]\nallow = [\"allowed.test:*\"]\n");
    std::fs::write(&policy, text).expect("write policy");

    let out = f.run(&["--no-ui", &format!("--policy={}", policy.display())]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let read = |name: &str| std::fs::read_to_string(f.ws.join(name)).unwrap_or_default();
    assert_eq!(
        read("allowed.txt"),
        "hello from upstream\n",
        "the grant applied"
    );
    assert!(
        read("denied.head").starts_with("HTTP/1.1 403"),
        "the refused request opened nothing: {}",
        read("denied.head")
    );
    let logs = f
        .cordon(&[
            "logs",
            "--last",
            "--json",
            "--type",
            "policy",
            "--type",
            "tool.result",
        ])
        .output()
        .expect("cordon logs");
    let text = String::from_utf8_lossy(&logs.stdout);
    assert!(
        text.contains(&format!("\"type\":\"policy.grant\",\"step\":\"ask\",\"data\":{{\"domain\":\"allowed.test:{port}\"")),
        "{text}"
    );
    assert!(text.contains("\"type\":\"policy.refuse\""), "{text}");
    assert!(
        text.contains(&format!("granted allowed.test:{port}")),
        "{text}"
    );
    assert!(
        text.contains(&format!("refused denied.test:{port}: ")),
        "{text}"
    );
}

#[test]
fn an_agent_tools_egress_is_logged_inside_its_tool_call() {
    let port = upstream();
    let transcript = [
        serde_json::json!({"step": "dev", "tool_calls": [{"name": "bash", "arguments": {"command": format!("curl -sS http://allowed.test:{port}/")}}]}),
        serde_json::json!({"step": "dev", "text": "done"}),
    ]
    .iter()
    .map(|l| format!("{l}\n"))
    .collect::<String>();
    let f = Fixture::new(&format!(
        "name: demo
llm: {{provider: replay, transcript: t.jsonl}}
steps:
  - name: dev
    agent: dev
    network: {{allow: ['allowed.test:{port}']}}
"
    ));
    std::fs::create_dir(f.ws.join("agents")).expect("mkdir");
    std::fs::write(
        f.ws.join("agents/dev.agent.md"),
        "---\nname: dev\n---\nWork.\n",
    )
    .expect("write");
    std::fs::write(f.ws.join("t.jsonl"), transcript).expect("write");
    crate::run::git(&f.ws, &["add", "-A"]);
    crate::run::git(&f.ws, &["commit", "-q", "-m", "agents"]);
    let policy = policy(f.dir.path());
    let out = f.run(&["--no-ui", &format!("--policy={}", policy.display())]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let logs = f
        .cordon(&["logs", "--last", "--json"])
        .output()
        .expect("cordon logs");
    let events: Vec<serde_json::Value> = String::from_utf8_lossy(&logs.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    let kinds: Vec<&str> = events
        .iter()
        .filter_map(|e| e["type"].as_str())
        .filter(|k| k.starts_with("tool.") || k.starts_with("egress.") || *k == "sandbox.exec")
        .collect();
    // The decision is logged with the process that made it; the close may come with it or,
    // if the tunnel ends after the process, when the session closes.
    let without_close: Vec<&str> = kinds
        .iter()
        .copied()
        .filter(|k| *k != "egress.close")
        .collect();
    assert_eq!(
        without_close,
        ["tool.call", "egress.allow", "sandbox.exec", "tool.result"],
        "{kinds:?}"
    );
    assert_eq!(
        kinds.iter().filter(|k| **k == "egress.close").count(),
        1,
        "{kinds:?}"
    );
    let result = events
        .iter()
        .find(|e| e["type"] == "tool.result")
        .expect("a result");
    assert!(
        result["data"]["output"]
            .as_str()
            .unwrap_or_default()
            .contains("hello from upstream"),
        "{result}"
    );
}

#[test]
fn egress_suggest_prints_the_allow_block_for_what_a_step_was_refused() {
    let port = upstream();
    let f = Fixture::new(&pipeline(port));
    let policy = policy(f.dir.path());
    let out = f.run(&["--no-ui", &format!("--policy={}", policy.display())]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let out = f
        .cordon(&["egress", "suggest", "--last"])
        .output()
        .expect("cordon egress suggest");
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    // The refused name, as a pattern for its port; not the allowed one (already in the list).
    assert_eq!(
        text,
        format!(
            "# fetch: add to the step's `network:` (this allows exactly what it was refused or reached openly)\nnetwork:\n  allow:\n    - \"denied.test:{port}\"\n"
        )
    );
    // The printed block is a network the pipeline accepts.
    let suggested = pipeline(port).replace(
        &format!("network: {{allow: ['allowed.test:{port}']}}"),
        &format!("network: {{allow: ['allowed.test:{port}', 'denied.test:{port}']}}"),
    );
    std::fs::write(f.ws.join("pipeline.yaml"), suggested).expect("write");
    let out = crate::support::cordon()
        .args(["validate", "pipeline.yaml"])
        .current_dir(&f.ws)
        .output()
        .expect("validate");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    // An unknown run is a usage error naming the problem.
    let out = f
        .cordon(&["egress", "suggest", "0000nope"])
        .output()
        .expect("cordon egress suggest");
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
}
