//! MCP tool servers (DESIGN §17): a stdio server written for these tests (`mcp/server.py`,
//! speaking the protocol's JSON-RPC over stdio) is started inside the agent step's sandbox; a
//! scripted model calls its tools through the tool loop. Judged on the host: its writes land in
//! the workspace, it cannot read the state directory beside it, its secret is scrubbed from the
//! log, its tools reach the OpenAI and the Anthropic request formats filtered by `tools:`, and a
//! server that fails fails the attempt with its stderr.

use crate::agent_run::{chat, events, openai_server, with_agent};
use crate::run::{Fixture, git, stderr};

const SERVER: &str = include_str!("mcp/server.py");
const TOKEN: &str = "mcp-token-0123456789-secret";

/// A pipeline whose agent `dev` has the MCP servers `mcp` (YAML list items) under `llm`.
fn fixture(llm: &str, mcp: &str, tools: &str) -> Fixture {
    let pipeline = format!(
        "name: mcp\nllm: {llm}\nsecrets:\n  tok: {{from: env, key: CORDON_MCP_TOKEN}}\nsteps:\n  - name: dev\n    agent: dev\n    prompt: Use the notes tools.\n    timeout: 120\n    mcp:\n{mcp}"
    );
    with_agent(
        &pipeline,
        &format!("---\nname: dev\ntools: {tools}\n---\nDo the task.\n"),
        &[("mcp_server.py", SERVER)],
    )
}

fn openai(url: &str) -> String {
    format!("{{provider: openai, model: m, base_url: '{url}', api_key_env: CORDON_E2E_KEY}}")
}

const NOTES: &str = "      - {name: notes, command: [python3, mcp_server.py], env: {GREETING: hello, TOKEN: {secret: tok}}}\n";

fn run(f: &Fixture) -> std::process::Output {
    f.cordon(&["run", "--no-ui"])
        .env("CORDON_E2E_KEY", "sk-test")
        .env("CORDON_MCP_TOKEN", TOKEN)
        .output()
        .expect("cordon run")
}

/// The `tool.result` outputs of the run, in order.
fn results(f: &Fixture) -> Vec<String> {
    events(f)
        .into_iter()
        .filter(|e| e["type"] == "tool.result")
        .map(|e| e["data"]["output"].as_str().unwrap_or_default().to_owned())
        .collect()
}

#[test]
fn an_mcp_server_runs_inside_the_sandbox_and_its_tools_reach_the_model() {
    let (url, seen) = openai_server(vec![
        chat(
            None,
            &[(
                "c1",
                "notes__write_note",
                serde_json::json!({"name": "from-mcp.txt", "text": "written by the server"}),
            )],
        ),
        chat(
            None,
            &[(
                "c2",
                "notes__read_path",
                serde_json::json!({"path": "from-mcp.txt"}),
            )],
        ),
        // A canary beside the workspace on the host.
        chat(
            None,
            &[(
                "c3",
                "notes__read_path",
                serde_json::json!({"path": "../canary.txt"}),
            )],
        ),
        chat(
            None,
            &[("c4", "notes__env", serde_json::json!({"name": "TOKEN"}))],
        ),
        chat(
            None,
            &[("c5", "notes__env", serde_json::json!({"name": "GREETING"}))],
        ),
        chat(Some("done"), &[]),
    ]);
    let f = fixture(
        &openai(&url),
        &format!("{NOTES}      - {{name: other, command: [python3, mcp_server.py]}}\n"),
        "[bash, notes__*]",
    );
    let canary = f.ws.parent().expect("parent").join("canary.txt");
    std::fs::write(&canary, "the host's canary").expect("write");
    let out = run(&f);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");

    // Its write landed in the workspace, on the host; its read of the workspace is the control
    // for the canary's.
    assert_eq!(
        std::fs::read_to_string(f.ws.join("from-mcp.txt")).expect("the server's write"),
        "written by the server"
    );
    let results = results(&f);
    assert!(
        results[0].starts_with("wrote from-mcp.txt in "),
        "{results:?}"
    );
    assert_eq!(results[1], "written by the server");
    assert!(results[2].starts_with("cannot read"), "{results:?}");
    assert!(!results[2].contains("canary"), "{results:?}");
    // Its secret reached it and is scrubbed from the log; a plain variable is not.
    assert_eq!(results[3], "[secret:tok]");
    assert_eq!(results[4], "hello");
    let log = f
        .cordon(&["logs", "--last", "--json"])
        .output()
        .expect("logs")
        .stdout;
    assert!(
        !String::from_utf8_lossy(&log).contains(TOKEN),
        "the token is never in the log"
    );
    // Each call is a tool.call with its server.
    let calls: Vec<(String, String)> = events(&f)
        .into_iter()
        .filter(|e| e["type"] == "tool.call")
        .map(|e| {
            (
                e["data"]["name"].as_str().unwrap_or_default().to_owned(),
                e["data"]["server"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    assert_eq!(calls.len(), 5, "{calls:?}");
    assert_eq!(
        calls[0],
        ("notes__write_note".to_owned(), "notes".to_owned())
    );
    assert!(
        calls.iter().all(|(_, server)| server == "notes"),
        "{calls:?}"
    );
    // The model was offered the server's tools with their schemas, in OpenAI's format, beside
    // the built-ins; `tools:` kept `other`'s out.
    let requests = seen.lock().expect("lock").clone();
    let body = &requests[0];
    assert!(
        body.contains("\"name\":\"notes__write_note\"")
            && body.contains("Writes a note file in the working directory.")
            && body.contains("\"required\":[\"name\",\"text\"]"),
        "{body}"
    );
    assert!(body.contains("\"name\":\"bash\""), "{body}");
    assert!(!body.contains("other__"), "{body}");
}

#[test]
fn mcp_tools_reach_the_anthropic_request_format_too() {
    let reply = |content: serde_json::Value| {
        serde_json::json!({"id": "msg", "type": "message", "role": "assistant", "model": "m",
            "content": content, "stop_reason": "end_turn",
            "usage": {"input_tokens": 10, "output_tokens": 2}})
    };
    let (url, seen) = openai_server(vec![
        reply(
            serde_json::json!([{"type": "tool_use", "id": "t1", "name": "notes__echo",
            "input": {"text": "through anthropic"}}]),
        ),
        reply(serde_json::json!([{"type": "text", "text": "done"}])),
    ]);
    let base = url.trim_end_matches("/v1");
    let f = fixture(
        &format!(
            "{{provider: anthropic, model: m, base_url: '{base}', api_key_env: CORDON_E2E_KEY}}"
        ),
        NOTES,
        "[read_file, notes__echo]",
    );
    let out = run(&f);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let requests = seen.lock().expect("lock").clone();
    let body = &requests[0];
    assert!(
        body.contains("\"name\":\"notes__echo\"")
            && body.contains("\"input_schema\":{")
            && body.contains("Returns its text."),
        "{body}"
    );
    // Only the listed tools: `notes__echo`, not the server's others.
    assert!(!body.contains("notes__write_note"), "{body}");
    assert_eq!(results(&f), ["through anthropic"]);
    assert!(requests[1].contains("through anthropic"), "{}", requests[1]);
}

#[test]
fn a_server_that_fails_fails_the_attempt_with_its_stderr() {
    // One that exits before its handshake: the model is never asked.
    let (url, seen) = openai_server(Vec::new());
    let f = fixture(
        &openai(&url),
        "      - {name: tickets, command: [python3, mcp_server.py, --fail-at-start]}\n",
        "[bash]",
    );
    let out = run(&f);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("MCP server `tickets` failed its handshake")
            && err.contains("cannot open the ticket database: permission denied"),
        "{err}"
    );
    assert!(seen.lock().expect("lock").is_empty());

    // One that dies during a call: the attempt ends there, with what it said.
    let (url, seen) = openai_server(vec![
        chat(None, &[("c1", "notes__crash", serde_json::json!({}))]),
        chat(Some("never asked"), &[]),
    ]);
    let f = fixture(&openai(&url), NOTES, "[bash]");
    let out = run(&f);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("MCP server `notes` failed during `crash`")
            && err.contains("the ticket service went away"),
        "{err}"
    );
    assert_eq!(
        seen.lock().expect("lock").len(),
        1,
        "no call after the server died"
    );
    let finished = events(&f)
        .into_iter()
        .find(|e| e["type"] == "step.finished")
        .expect("step.finished");
    assert_eq!(finished["data"]["verdict"], "fail");
}

#[test]
fn a_server_past_cordons_bounds_or_with_colliding_names_fails_the_attempt_naming_it() {
    let cases = [
        (
            "--collide",
            "offers `find_files`, which becomes the tool name `tickets__find_files` that another tool already has",
        ),
        (
            "--many-tools",
            "MCP server `tickets` offers 137 tools, more than the 128 cordon takes from one server",
        ),
        (
            "--pages",
            "MCP server `tickets` lists its tools in more than 8 pages, more than cordon reads",
        ),
        (
            "--huge-schema",
            "MCP server `tickets`'s tool `echo` has an input schema of",
        ),
    ];
    for (flag, want) in cases {
        let (url, seen) = openai_server(Vec::new());
        let f = fixture(
            &openai(&url),
            &format!("      - {{name: tickets, command: [python3, mcp_server.py, '{flag}']}}\n"),
            "[bash]",
        );
        let out = run(&f);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{flag}: {err}");
        assert!(err.contains(want), "{flag}: {err}");
        assert!(
            seen.lock().expect("lock").is_empty(),
            "{flag}: the model is never asked"
        );
    }
}

/// The test server in HTTP mode on the host's loopback: (the child, its port, its request log).
struct HttpServer {
    child: std::process::Child,
    port: u16,
    log: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

impl HttpServer {
    fn start() -> HttpServer {
        let dir = tempfile::tempdir().expect("tempdir");
        let script = dir.path().join("server.py");
        std::fs::write(&script, SERVER).expect("write");
        let (port_file, log) = (dir.path().join("port"), dir.path().join("requests.log"));
        std::fs::write(&log, "").expect("write");
        let child = std::process::Command::new("python3")
            .arg(&script)
            .arg("--http")
            .arg(&port_file)
            .arg(&log)
            .spawn()
            .expect("python3");
        // Bounded: 10 s for the server to say its port.
        let mut port = None;
        for _ in 0..200 {
            if let Ok(text) = std::fs::read_to_string(&port_file) {
                port = text.trim().parse().ok();
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        HttpServer {
            child,
            port: port.expect("the HTTP server's port"),
            log,
            _dir: dir,
        }
    }

    fn requests(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn with_network(f: &Fixture, network: &str) {
    let path = f.ws.join("pipeline.yaml");
    let text = std::fs::read_to_string(&path).expect("read");
    let text = text.replace(
        "    timeout: 120\n",
        &format!("    timeout: 120\n    network: {network}\n"),
    );
    std::fs::write(&path, text).expect("write");
    git(&f.ws, &["commit", "-q", "-am", "network"]);
}

fn run_with_policy(f: &Fixture) -> std::process::Output {
    let policy = f.dir.path().join("policy.toml");
    std::fs::write(&policy, "allow_private = [\"127.0.0.0/8\"]\n").expect("write");
    f.cordon(&["run", "--no-ui", &format!("--policy={}", policy.display())])
        .env("CORDON_E2E_KEY", "sk-test")
        .env("CORDON_MCP_TOKEN", TOKEN)
        .output()
        .expect("cordon run")
}

#[test]
fn an_http_mcp_server_is_reached_through_the_steps_proxy_when_its_network_allows_it() {
    let server = HttpServer::start();
    let port = server.port;
    let (url, _seen) = openai_server(vec![
        chat(
            None,
            &[("c1", "web__echo", serde_json::json!({"text": "over http"}))],
        ),
        chat(Some("done"), &[]),
    ]);
    let f = fixture(
        &openai(&url),
        &format!(
            "      - {{name: web, url: 'http://127.0.0.1:{port}/mcp', headers: {{Authorization: {{secret: tok}}}}}}\n"
        ),
        "[bash]",
    );
    with_network(&f, &format!("{{allow: ['ip:127.0.0.1:{port}']}}"));
    // The dry run names the server and its header by the secret's reference.
    let plan = f.cordon(&["run", "--dry-run"]).output().expect("dry run");
    let plan = String::from_utf8_lossy(&plan.stdout);
    assert!(
        plan.contains(&format!(
            "web: http://127.0.0.1:{port}/mcp, through the step's proxy (Authorization: [secret:tok])"
        )),
        "{plan}"
    );
    let out = run_with_policy(&f);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert_eq!(results(&f), ["over http"]);
    let calls: Vec<serde_json::Value> = events(&f)
        .into_iter()
        .filter(|e| e["type"] == "tool.call")
        .collect();
    assert_eq!(calls[0]["data"]["server"], "web");
    // The server got its token; the log never holds it.
    let requests = server.requests();
    assert!(
        requests.contains(&format!("POST /mcp {TOKEN}")),
        "{requests}"
    );
    let log = f
        .cordon(&["logs", "--last", "--json"])
        .output()
        .expect("logs")
        .stdout;
    let log = String::from_utf8_lossy(&log);
    assert!(!log.contains(TOKEN), "the token is never in the log");
    // The connection went through the step's proxy, which recorded it.
    assert!(
        events(&f).iter().any(|e| e["type"] == "egress.allow"
            && e["data"]["port"] == port
            && e["data"]["listener"]
                .as_str()
                .is_some_and(|l| l.ends_with("/host"))),
        "{log}"
    );
}

#[test]
fn an_http_mcp_server_the_steps_network_refuses_receives_nothing() {
    let server = HttpServer::start();
    let port = server.port;
    // No network: refused before anything is dialled.
    let (url, seen) = openai_server(Vec::new());
    let f = fixture(
        &openai(&url),
        &format!("      - {{name: web, url: 'http://127.0.0.1:{port}/mcp'}}\n"),
        "[bash]",
    );
    let validate = crate::support::cordon()
        .args(["validate", "pipeline.yaml"])
        .current_dir(&f.ws)
        .output()
        .expect("validate");
    assert!(
        stderr(&validate).contains("warning: MCP server `web` of step `dev` is at")
            && stderr(&validate).contains("network is `none`"),
        "{}",
        stderr(&validate)
    );
    let out = run_with_policy(&f);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("MCP server `web` is at"), "{err}");
    assert!(seen.lock().expect("lock").is_empty());
    // An allowlist without its port: the proxy refuses it, and records the refusal.
    let f = fixture(
        &openai(&url),
        &format!("      - {{name: web, url: 'http://127.0.0.1:{port}/mcp'}}\n"),
        "[bash]",
    );
    with_network(&f, "{allow: ['ip:127.0.0.1:9']}");
    let out = run_with_policy(&f);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("MCP server `web`"), "{err}");
    assert!(
        events(&f)
            .iter()
            .any(|e| e["type"] == "egress.deny" && e["data"]["port"] == port),
        "the refusal is recorded"
    );
    assert_eq!(server.requests(), "", "the server received nothing");
}

#[test]
fn a_recorded_run_with_mcp_tools_replays_offline_against_the_server() {
    let (url, _seen) = openai_server(vec![
        chat(
            None,
            &[("c1", "notes__echo", serde_json::json!({"text": "replayed"}))],
        ),
        chat(Some("done"), &[]),
    ]);
    let f = fixture(&openai(&url), NOTES, "[bash]");
    let record = f.dir.path().join("recorded.jsonl");
    let out = f
        .cordon(&["run", "--no-ui", &format!("--record={}", record.display())])
        .env("CORDON_E2E_KEY", "sk-test")
        .env("CORDON_MCP_TOKEN", TOKEN)
        .output()
        .expect("cordon run");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let transcript = std::fs::read_to_string(&record).expect("the transcript");
    assert!(
        transcript.contains("\"name\":\"notes__echo\""),
        "{transcript}"
    );
    // Offline: the transcript answers, the server runs again in the sandbox.
    std::fs::write(f.ws.join("t.jsonl"), &transcript).expect("write");
    let path = f.ws.join("pipeline.yaml");
    let pipeline = std::fs::read_to_string(&path).expect("read");
    let pipeline = pipeline.replace(&openai(&url), "{provider: replay, transcript: t.jsonl}");
    std::fs::write(&path, pipeline).expect("write");
    git(&f.ws, &["add", "-A"]);
    git(&f.ws, &["commit", "-q", "-m", "replay"]);
    let out = run(&f);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(results(&f), ["replayed"]);
}

#[test]
fn the_offline_mcp_example_works_its_ticket_through_the_server() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let out = crate::support::run_example("mcp-tickets", tmp.path());
    let err = stderr(&out);
    let shown = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{err}\n{shown}");
    // The fix and the ticket the server closed are the run's changes.
    assert!(
        shown.contains("greet.py") && shown.contains("tickets.json"),
        "{shown}"
    );
    assert!(
        err.contains("tickets__read_ticket  {\"id\":\"TICKET-7\"}  → ok"),
        "{err}"
    );
    assert!(err.contains("test  passed   attempt 1"), "{err}");
}

#[test]
fn a_server_that_floods_the_client_with_requests_is_cut_off() {
    let (url, seen) = openai_server(vec![
        chat(None, &[("c1", "notes__flood", serde_json::json!({}))]),
        chat(Some("never asked"), &[]),
    ]);
    let f = fixture(&openai(&url), NOTES, "[bash]");
    let out = run(&f);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("MCP server `notes` was cut off during `flood`: it sent more than 1024 requests of its own"),
        "{err}"
    );
    assert_eq!(seen.lock().expect("lock").len(), 1);
}

#[test]
fn a_call_past_the_steps_timeout_ends_the_attempt_saying_what_bounds_it() {
    let (url, seen) = openai_server(vec![
        chat(
            None,
            &[("c1", "notes__sleep", serde_json::json!({"seconds": 60}))],
        ),
        chat(Some("never asked"), &[]),
    ]);
    let f = fixture(&openai(&url), NOTES, "[bash]");
    let path = f.ws.join("pipeline.yaml");
    let text = std::fs::read_to_string(&path).expect("read");
    std::fs::write(&path, text.replace("timeout: 120", "timeout: 3")).expect("write");
    git(&f.ws, &["commit", "-q", "-am", "short timeout"]);
    let out = run(&f);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("MCP server `notes` did not answer `sleep` within")
            && err.contains("raise it, or make the tool answer sooner"),
        "{err}"
    );
    assert_eq!(
        seen.lock().expect("lock").len(),
        1,
        "no call after the timeout"
    );
}
