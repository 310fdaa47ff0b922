//! The OpenAI chat completions adapter against a scripted server on loopback.

use cordon_agent::provider::{OpenAi, Transport};
use cordon_agent::{AgentOutcome, ApiKey, ProviderError};
use cordon_protocol::Event;
use serde_json::{Value, json};

use crate::server::{Reply, Server};
use crate::support::{LocalHost, Memory, fast_http, run, spec};

const KEY: &str = "sk-test-KEY-0123456789";

fn key() -> Option<ApiKey> {
    Some(ApiKey::from_value("OPENAI_API_KEY", KEY).expect("key"))
}

fn provider(server: &Server, transport: Transport) -> OpenAi {
    let mut http = fast_http();
    http.transport = transport;
    OpenAi::new(&format!("{}/v1", server.url), key(), http).expect("provider")
}

pub fn tool_turn(calls: &[(&str, &str, &str)]) -> Value {
    let calls: Vec<Value> = calls
        .iter()
        .map(|(id, name, args)| {
            json!({"id": id, "type": "function", "function": {"name": name, "arguments": args}})
        })
        .collect();
    json!({
        "id": "chatcmpl-1",
        "model": "test-model-0613",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": null, "tool_calls": calls}, "finish_reason": "tool_calls"}],
        "usage": {"prompt_tokens": 100, "completion_tokens": 20}
    })
}

pub fn text_turn(text: &str) -> Value {
    json!({
        "id": "chatcmpl-2",
        "model": "test-model-0613",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 150, "completion_tokens": 7}
    })
}

#[test]
fn openai_multi_turn_tool_session_edits_the_workspace_and_finishes() {
    let server = Server::start(vec![
        Reply::ok(tool_turn(&[(
            "call_a",
            "write_file",
            r#"{"path":"src/calc.py","content":"def add(a, b):\n    return a - b\n"}"#,
        )])),
        Reply::ok(tool_turn(&[
            (
                "call_b",
                "edit_file",
                r#"{"path":"src/calc.py","old_string":"a - b","new_string":"a + b"}"#,
            ),
            ("call_c", "bash", r#"{"command":"cat src/calc.py"}"#),
        ])),
        Reply::ok(text_turn("Fixed the sign.")),
    ]);
    let mut host = LocalHost::new();
    let mut journal = Memory::default();
    let outcome = run(
        &spec(&host, 10),
        &mut provider(&server, Transport::Whole),
        &mut host,
        &mut journal,
    );

    assert_eq!(
        outcome,
        AgentOutcome::Finished {
            text: "Fixed the sign.".to_owned()
        }
    );
    assert_eq!(
        host.read("src/calc.py"),
        "def add(a, b):\n    return a + b\n"
    );
    let requests = server.received();
    assert_eq!(requests.len(), 3);
    assert_eq!(requests[0].path, "/v1/chat/completions");
    assert_eq!(
        requests[0].header("authorization"),
        Some(format!("Bearer {KEY}").as_str())
    );
    assert_eq!(
        requests[0].body["messages"][0],
        json!({"role": "system", "content": "You fix bugs."})
    );
    assert_eq!(requests[0].body["messages"][1]["content"], "Fix the bug.");
    let tools: Vec<&str> = requests[0].body["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .filter_map(|t| t["function"]["name"].as_str())
        .collect();
    assert_eq!(
        tools,
        [
            "bash",
            "read_file",
            "write_file",
            "edit_file",
            "request_egress"
        ]
    );
    // The third request carries both results of the second turn, in order.
    let last = requests[2].body["messages"].as_array().expect("messages");
    let tail: Vec<&Value> = last.iter().rev().take(2).collect();
    assert_eq!(tail[1]["tool_call_id"], "call_b");
    assert_eq!(
        tail[1]["content"],
        "edited `src/calc.py`: replaced 1 occurrence at line 2"
    );
    assert_eq!(tail[0]["tool_call_id"], "call_c");
    assert_eq!(tail[0]["content"], "def add(a, b):\n    return a + b\n");
    assert_eq!(
        journal.kinds(),
        [
            "llm.request",
            "llm.response",
            "tool.call",
            "tool.result",
            "llm.request",
            "llm.response",
            "tool.call",
            "tool.result",
            "tool.call",
            "tool.result",
            "llm.request",
            "llm.response",
        ]
    );
    assert_eq!(
        journal.console(),
        "$ write_file src/calc.py\n$ edit_file src/calc.py\n$ bash cat src/calc.py\nFixed the sign.\n"
    );
    assert!(
        journal.events.contains(&Event::LlmResponse {
            model: "test-model-0613".to_owned(),
            input_tokens: 100,
            output_tokens: 20,
            latency_ms: journal
                .events
                .iter()
                .find_map(|e| match e {
                    Event::LlmResponse { latency_ms, .. } => Some(*latency_ms),
                    _ => None,
                })
                .unwrap_or_default(),
            source: cordon_protocol::event::LlmSource::Agent,
            estimated: None,
        })
    );
}

#[test]
fn openai_key_goes_only_into_the_provider_request_never_into_tools_or_events() {
    let server = Server::start(vec![
        Reply::ok(tool_turn(&[(
            "call_a",
            "bash",
            r#"{"command":"env; echo done"}"#,
        )])),
        Reply::ok(text_turn("ok")),
    ]);
    let mut host = LocalHost::new();
    let mut journal = Memory::default();
    run(
        &spec(&host, 5),
        &mut provider(&server, Transport::Whole),
        &mut host,
        &mut journal,
    );

    assert!(server.received().iter().all(|r| r.raw.contains(KEY)));
    assert!(!journal.json().contains(KEY), "{}", journal.json());
    for run in &host.runs {
        let everything = format!("{:?}{}", run.argv(), String::from_utf8_lossy(&run.stdin));
        assert!(!everything.contains(KEY), "{everything}");
    }
    let (_, env_output) = &journal.results()[0];
    assert!(env_output.contains("done"), "{env_output}");
    assert!(!env_output.contains(KEY));
}

#[test]
fn openai_streamed_answer_is_assembled_from_chunks() {
    let chunk = |delta: Value| {
        json!({"model": "test-model-0613", "choices": [{"index": 0, "delta": delta}]}).to_string()
    };
    let server = Server::start(vec![
        Reply::Sse(vec![
            (
                "",
                chunk(json!({"role": "assistant", "content": "Let me "})),
            ),
            ("", chunk(json!({"content": "look."}))),
            (
                "",
                chunk(
                    json!({"tool_calls": [{"index": 0, "id": "call_s", "type": "function", "function": {"name": "bash", "arguments": "{\"comm"}}]}),
                ),
            ),
            (
                "",
                chunk(
                    json!({"tool_calls": [{"index": 0, "function": {"arguments": "and\":\"echo hi\"}"}}]}),
                ),
            ),
            (
                "",
                json!({"choices": [], "usage": {"prompt_tokens": 42, "completion_tokens": 9}})
                    .to_string(),
            ),
            ("", "[DONE]".to_owned()),
        ]),
        Reply::Sse(vec![
            ("", chunk(json!({"content": "All done."}))),
            ("", "[DONE]".to_owned()),
        ]),
    ]);
    let mut host = LocalHost::new();
    let mut journal = Memory::default();
    let outcome = run(
        &spec(&host, 5),
        &mut provider(&server, Transport::Stream),
        &mut host,
        &mut journal,
    );

    assert_eq!(
        outcome,
        AgentOutcome::Finished {
            text: "All done.".to_owned()
        }
    );
    assert_eq!(journal.results(), [(true, "hi\n".to_owned())]);
    let requests = server.received();
    assert_eq!(requests[0].body["stream"], true);
    assert_eq!(
        requests[0].body["stream_options"],
        json!({"include_usage": true})
    );
    assert_eq!(requests[1].body["messages"][2]["content"], "Let me look.");
    assert!(journal.events.iter().any(|e| matches!(
        e,
        Event::LlmResponse {
            input_tokens: 42,
            output_tokens: 9,
            ..
        }
    )));
}

#[test]
fn openai_non_streamed_request_still_understands_a_streaming_server() {
    let server = Server::start(vec![Reply::Sse(vec![
        (
            "",
            json!({"choices": [{"index": 0, "delta": {"content": "streamed anyway"}}]}).to_string(),
        ),
        ("", "[DONE]".to_owned()),
    ])]);
    let mut host = LocalHost::new();
    let mut journal = Memory::default();
    let outcome = run(
        &spec(&host, 5),
        &mut provider(&server, Transport::Whole),
        &mut host,
        &mut journal,
    );
    assert_eq!(
        outcome,
        AgentOutcome::Finished {
            text: "streamed anyway".to_owned()
        }
    );
    assert_eq!(server.received()[0].body["stream"], false);
}

#[test]
fn openai_429_and_a_dropped_connection_are_retried_then_succeed() {
    let server = Server::start(vec![
        Reply::Json(
            429,
            vec![("Retry-After", "0".to_owned())],
            json!({"error": {"message": "slow down"}}),
        ),
        Reply::Close,
        Reply::ok(text_turn("finally")),
    ]);
    let mut host = LocalHost::new();
    let mut journal = Memory::default();
    let outcome = run(
        &spec(&host, 5),
        &mut provider(&server, Transport::Whole),
        &mut host,
        &mut journal,
    );
    assert_eq!(
        outcome,
        AgentOutcome::Finished {
            text: "finally".to_owned()
        }
    );
    assert_eq!(server.received().len(), 3);
    // One model call as far as the run is concerned.
    assert_eq!(journal.kinds(), ["llm.request", "llm.response"]);
}

fn provider_error(script: Vec<Reply>) -> (ProviderError, usize) {
    let server = Server::start(script);
    let mut host = LocalHost::new();
    let mut journal = Memory::default();
    let err = cordon_agent::run(
        &spec(&host, 5),
        cordon_agent::Hooks {
            provider: &mut provider(&server, Transport::Whole),
            host: &mut host,
            journal: &mut journal,
            grants: &mut cordon_agent::NoGrants,
            custom: &mut cordon_agent::NoCustomTools,
        },
    )
    .expect_err("the provider fails");
    let cordon_agent::AgentError::Provider(err) = err else {
        panic!("not a provider error: {err}");
    };
    (err, server.received().len())
}

#[test]
fn openai_401_is_an_auth_error_naming_the_variable_and_is_not_retried() {
    let (err, requests) = provider_error(vec![Reply::Json(
        401,
        Vec::new(),
        json!({"error": {"message": format!("Incorrect API key provided: {KEY}")}}),
    )]);
    assert!(
        matches!(err, ProviderError::Auth { status: 401, .. }),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        "the OpenAI-compatible server refused the request with HTTP 401: Incorrect API key \
         provided: [api key]; check the key in `OPENAI_API_KEY`"
    );
    assert_eq!(requests, 1);
}

#[test]
fn openai_server_errors_exhaust_the_retries_into_unavailable() {
    let failing = || Reply::Json(503, Vec::new(), json!({"error": {"message": "overloaded"}}));
    let (err, requests) = provider_error(vec![failing(), failing(), failing()]);
    assert!(
        matches!(err, ProviderError::Unavailable { tries: 3, .. }),
        "{err:?}"
    );
    assert!(
        err.to_string()
            .contains("still failed after 3 tries (HTTP 503: overloaded)"),
        "{err}"
    );
    assert!(
        err.to_string().contains("cordon run --resume-last"),
        "{err}"
    );
    assert_eq!(requests, 3);
}

#[test]
fn openai_other_client_errors_are_rejected_without_retry() {
    let (err, requests) = provider_error(vec![Reply::Json(
        400,
        Vec::new(),
        json!({"error": {"message": "context too long"}}),
    )]);
    assert_eq!(
        err.to_string(),
        "the OpenAI-compatible server rejected the request with HTTP 400: context too long"
    );
    assert_eq!(requests, 1);
}

#[test]
fn openai_redirects_are_not_followed_so_the_key_stays_with_the_provider() {
    let elsewhere = Server::start(vec![Reply::ok(text_turn("should not be asked"))]);
    let (err, _) = provider_error(vec![Reply::Json(
        307,
        vec![("Location", format!("{}/v1/chat/completions", elsewhere.url))],
        json!({}),
    )]);
    assert!(
        matches!(err, ProviderError::Rejected { status: 307, .. }),
        "{err:?}"
    );
    assert!(elsewhere.received().is_empty());
}

#[test]
fn openai_without_a_key_sends_no_authorization_and_says_how_to_add_one() {
    let server = Server::start(vec![Reply::Json(
        401,
        Vec::new(),
        json!({"error": "need a key"}),
    )]);
    let mut p = OpenAi::new(&format!("{}/v1", server.url), None, fast_http()).expect("provider");
    let mut host = LocalHost::new();
    let mut journal = Memory::default();
    let err = cordon_agent::run(
        &spec(&host, 5),
        cordon_agent::Hooks {
            provider: &mut p,
            host: &mut host,
            journal: &mut journal,
            grants: &mut cordon_agent::NoGrants,
            custom: &mut cordon_agent::NoCustomTools,
        },
    )
    .expect_err("refused");
    assert!(err.to_string().ends_with("need a key; this server needs a key: set `llm.api_key_env` to the variable that holds it"), "{err}");
    assert_eq!(server.received()[0].header("authorization"), None);
}

#[test]
fn openai_compatible_servers_without_call_ids_or_with_object_arguments_work() {
    // Some local servers (llama.cpp, Ollama) omit ids or send the arguments as an object.
    let server = Server::start(vec![
        Reply::ok(json!({
            "choices": [{"message": {"role": "assistant", "content": "", "tool_calls": [
                {"type": "function", "function": {"name": "bash", "arguments": {"command": "echo one"}}},
                {"id": "", "type": "function", "function": {"name": "bash", "arguments": "{\"command\":\"echo two\"}"}}
            ]}}]
        })),
        Reply::ok(json!({"choices": [{"message": {"role": "assistant", "content": "ok"}}]})),
    ]);
    let mut host = LocalHost::new();
    let mut journal = Memory::default();
    let outcome = run(
        &spec(&host, 5),
        &mut provider(&server, Transport::Whole),
        &mut host,
        &mut journal,
    );
    assert_eq!(
        outcome,
        AgentOutcome::Finished {
            text: "ok".to_owned()
        }
    );
    assert_eq!(
        journal.results(),
        [(true, "one\n".to_owned()), (true, "two\n".to_owned())]
    );
    let second = &server.received()[1].body["messages"];
    assert_eq!(second[2]["tool_calls"][0]["id"], "call_1_1");
    assert_eq!(second[2]["tool_calls"][1]["id"], "call_1_2");
    assert_eq!(second[3]["tool_call_id"], "call_1_1");
    assert_eq!(second[4]["tool_call_id"], "call_1_2");
    // No usage reported: an estimate, marked so, and the requested model's name.
    assert!(journal.events.iter().any(|e| matches!(
        e,
        Event::LlmResponse { model, estimated: Some(true), input_tokens, .. } if model == "test-model" && *input_tokens > 0
    )));
}
