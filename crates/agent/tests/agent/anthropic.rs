//! The Anthropic messages adapter against a scripted server on loopback.

use cordon_agent::provider::{Anthropic, Transport};
use cordon_agent::{AgentOutcome, ApiKey, ProviderError};
use cordon_protocol::Event;
use serde_json::{Value, json};

use crate::server::{Reply, Server};
use crate::support::{LocalHost, Memory, fast_http, run, spec};

const KEY: &str = "sk-ant-test-KEY-987654321";

fn provider(server: &Server, transport: Transport) -> Anthropic {
    let mut http = fast_http();
    http.transport = transport;
    let key = ApiKey::from_value("ANTHROPIC_API_KEY", KEY).expect("key");
    Anthropic::new(&server.url, key, http).expect("provider")
}

fn message(content: Value, stop: &str) -> Value {
    json!({
        "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-test-1",
        "content": content, "stop_reason": stop,
        "usage": {"input_tokens": 321, "output_tokens": 12}
    })
}

#[test]
fn anthropic_multi_turn_tool_session_sends_tool_results_back() {
    let server = Server::start(vec![
        Reply::ok(message(
            json!([
                {"type": "text", "text": "Reading first."},
                {"type": "tool_use", "id": "toolu_1", "name": "read_file", "input": {"path": "notes.txt"}},
                {"type": "tool_use", "id": "toolu_2", "name": "read_file", "input": {"path": "missing.txt"}}
            ]),
            "tool_use",
        )),
        Reply::ok(message(
            json!([{"type": "text", "text": "Done.\nVERDICT: APPROVED"}]),
            "end_turn",
        )),
    ]);
    let mut host = LocalHost::new();
    host.write("notes.txt", "one\ntwo\n");
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
            text: "Done.\nVERDICT: APPROVED".to_owned()
        }
    );
    let requests = server.received();
    assert_eq!(requests[0].path, "/v1/messages");
    assert_eq!(requests[0].header("x-api-key"), Some(KEY));
    assert_eq!(requests[0].header("anthropic-version"), Some("2023-06-01"));
    assert_eq!(requests[0].header("authorization"), None);
    assert_eq!(requests[0].body["system"], "You fix bugs.");
    assert_eq!(requests[0].body["tools"][0]["name"], "bash");
    assert!(requests[0].body["tools"][0]["input_schema"].is_object());
    assert_eq!(
        requests[1].body["messages"][2],
        json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "one\ntwo\n"},
            {"type": "tool_result", "tool_use_id": "toolu_2", "is_error": true,
             "content": "error: `missing.txt` does not exist (relative paths start at the workspace root)"}
        ]})
    );
    assert!(journal.events.iter().any(|e| matches!(
        e,
        Event::LlmResponse {
            input_tokens: 321,
            output_tokens: 12,
            ..
        }
    )));
}

#[test]
fn anthropic_streamed_answer_is_assembled_from_events() {
    let server = Server::start(vec![
        Reply::Sse(vec![
            ("message_start", json!({"type": "message_start", "message": {"model": "claude-test-1", "usage": {"input_tokens": 50, "output_tokens": 1}}}).to_string()),
            ("content_block_start", json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}).to_string()),
            ("ping", json!({"type": "ping"}).to_string()),
            ("content_block_delta", json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Running."}}).to_string()),
            ("content_block_stop", json!({"type": "content_block_stop", "index": 0}).to_string()),
            ("content_block_start", json!({"type": "content_block_start", "index": 1, "content_block": {"type": "tool_use", "id": "toolu_s", "name": "bash", "input": {}}}).to_string()),
            ("content_block_delta", json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "{\"command\": \"echo "}}).to_string()),
            ("content_block_delta", json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "streamed\"}"}}).to_string()),
            ("content_block_stop", json!({"type": "content_block_stop", "index": 1}).to_string()),
            ("message_delta", json!({"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 30}}).to_string()),
            ("message_stop", json!({"type": "message_stop"}).to_string()),
        ]),
        Reply::Sse(vec![
            ("message_start", json!({"type": "message_start", "message": {"model": "claude-test-1", "usage": {"input_tokens": 60}}}).to_string()),
            ("content_block_start", json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": "Fin"}}).to_string()),
            ("content_block_delta", json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "ished."}}).to_string()),
            ("message_stop", json!({"type": "message_stop"}).to_string()),
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
            text: "Finished.".to_owned()
        }
    );
    assert_eq!(journal.results(), [(true, "streamed\n".to_owned())]);
    let requests = server.received();
    assert_eq!(requests[0].body["stream"], true);
    assert_eq!(
        requests[1].body["messages"][1]["content"][1],
        json!({"type": "tool_use", "id": "toolu_s", "name": "bash", "input": {"command": "echo streamed"}})
    );
    assert!(journal.events.iter().any(|e| matches!(
        e,
        Event::LlmResponse {
            input_tokens: 50,
            output_tokens: 30,
            ..
        }
    )));
}

#[test]
fn anthropic_stream_cut_before_message_stop_is_retried() {
    let server = Server::start(vec![
        Reply::Sse(vec![(
            "message_start",
            json!({"type": "message_start", "message": {"model": "claude-test-1"}}).to_string(),
        )]),
        Reply::ok(message(
            json!([{"type": "text", "text": "second try"}]),
            "end_turn",
        )),
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
            text: "second try".to_owned()
        }
    );
    assert_eq!(server.received().len(), 2);
}

#[test]
fn anthropic_403_is_an_auth_error_naming_the_variable() {
    let server = Server::start(vec![Reply::Json(
        403,
        Vec::new(),
        json!({"type": "error", "error": {"type": "permission_error", "message": "no access to this model"}}),
    )]);
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
    .expect_err("refused");
    let cordon_agent::AgentError::Provider(err) = err else {
        panic!("not a provider error: {err}");
    };
    assert!(matches!(err, ProviderError::Auth { status: 403, .. }));
    assert_eq!(
        err.to_string(),
        "Anthropic refused the request with HTTP 403: no access to this model; check the key in `ANTHROPIC_API_KEY`"
    );
}

#[test]
fn cached_input_counts_as_input_whole_and_streamed() {
    let cached = |transport, reply| {
        let server = Server::start(vec![reply]);
        let host = LocalHost::new();
        let mut journal = Memory::default();
        let mut host = host;
        run(
            &spec(&host, 2),
            &mut provider(&server, transport),
            &mut host,
            &mut journal,
        );
        journal.events.iter().find_map(|e| match e {
            Event::LlmResponse { input_tokens, .. } => Some(*input_tokens),
            _ => None,
        })
    };
    let mut whole = message(json!([{"type": "text", "text": "Done."}]), "end_turn");
    whole["usage"] = json!({"input_tokens": 5, "cache_read_input_tokens": 300, "cache_creation_input_tokens": 16, "output_tokens": 2});
    assert_eq!(cached(Transport::Whole, Reply::ok(whole)), Some(321));
    let streamed = Reply::Sse(vec![
        ("message_start", json!({"type": "message_start", "message": {"model": "claude-test-1", "usage": {"input_tokens": 7, "cache_read_input_tokens": 93, "output_tokens": 1}}}).to_string()),
        ("content_block_start", json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}).to_string()),
        ("content_block_delta", json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Done."}}).to_string()),
        ("content_block_stop", json!({"type": "content_block_stop", "index": 0}).to_string()),
        ("message_delta", json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"input_tokens": 7, "output_tokens": 3}}).to_string()),
        ("message_stop", json!({"type": "message_stop"}).to_string()),
    ]);
    assert_eq!(cached(Transport::Stream, streamed), Some(100));
}
