//! Anthropic messages (`POST {base_url}/v1/messages`) with `tool_use` / `tool_result` blocks.
//! Answers may be one JSON body or server-sent events, whichever the server sends.

use std::collections::BTreeMap;
use std::io::BufReader;

use reqwest::blocking::Response as HttpResponse;
use reqwest::header::{CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use serde::{Deserialize, Serialize};

use super::http::{Http, HttpOptions, ReadFailure, Readers, Transport, endpoint};
use super::{Provider, ProviderError, SetupError, sse};
use crate::key::ApiKey;
use crate::message::{Message, Request, Response, ToolCall, Usage};

const NAME: &str = "Anthropic";
/// The API version the wire types below follow.
const VERSION: &str = "2023-06-01";
/// The answer length cap the messages API requires.
const MAX_TOKENS: u32 = 8192;

/// A messages endpoint.
pub struct Anthropic {
    url: reqwest::Url,
    http: Http,
}

impl Anthropic {
    /// `base_url` is the API root (`https://api.example.com`; a trailing `/v1` is accepted).
    pub fn new(base_url: &str, key: ApiKey, options: HttpOptions) -> Result<Anthropic, SetupError> {
        let path = if base_url.trim_end_matches('/').ends_with("/v1") {
            "messages"
        } else {
            "v1/messages"
        };
        Ok(Anthropic {
            url: endpoint(base_url, path)?,
            http: Http::new(NAME, options, Some(key))?,
        })
    }

    fn headers(&self) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        headers.insert(
            HeaderName::from_static("anthropic-version"),
            HeaderValue::from_static(VERSION),
        );
        if let Some(key) = self.http.key()
            && let Ok(mut value) = HeaderValue::from_str(key.expose())
        {
            value.set_sensitive(true);
            headers.insert(HeaderName::from_static("x-api-key"), value);
        }
        headers
    }
}

impl Provider for Anthropic {
    fn complete(&mut self, request: &Request) -> Result<Response, ProviderError> {
        let stream = self.http.transport == Transport::Stream;
        let fix = match self.http.key() {
            Some(key) => format!("check the key in `{}`", key.var()),
            None => "set `llm.api_key_env`".to_owned(),
        };
        self.http.ask(
            &self.url,
            &self.headers(),
            &wire_request(request, stream),
            &request.model,
            &READERS,
            &fix,
        )
    }
}

/// Answers come as one body or as server-sent events, whichever the server sends.
const READERS: Readers = Readers {
    whole: read_whole,
    stream: read_stream,
};

#[derive(Serialize)]
struct MessagesRequest<'a> {
    model: &'a str,
    max_tokens: u32,
    #[serde(skip_serializing_if = "str::is_empty")]
    system: &'a str,
    messages: Vec<WireMessage<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<WireTool<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f64>,
    stream: bool,
}

#[derive(Serialize)]
struct WireMessage<'a> {
    role: &'static str,
    content: Vec<Block<'a>>,
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Block<'a> {
    Text {
        text: &'a str,
    },
    ToolUse {
        id: &'a str,
        name: &'a str,
        input: serde_json::Value,
    },
    ToolResult {
        tool_use_id: &'a str,
        content: &'a str,
        #[serde(skip_serializing_if = "std::ops::Not::not")]
        is_error: bool,
    },
}

#[derive(Serialize)]
struct WireTool<'a> {
    name: &'a str,
    description: &'a str,
    input_schema: &'a serde_json::Value,
}

/// The arguments as the object `tool_use.input` must be; malformed text is wrapped so the
/// conversation can still be sent back (the model was already told it was malformed).
fn input_object(arguments: &str) -> serde_json::Value {
    match serde_json::from_str::<serde_json::Value>(arguments) {
        Ok(value @ serde_json::Value::Object(_)) => value,
        _ => serde_json::json!({ "malformed_arguments": arguments }),
    }
}

fn wire_request(request: &Request, stream: bool) -> MessagesRequest<'_> {
    let mut messages: Vec<WireMessage<'_>> = Vec::new();
    for message in &request.messages {
        let (role, blocks) = match message {
            Message::User { text } => ("user", vec![Block::Text { text }]),
            Message::Assistant { text, tool_calls } => {
                let mut blocks = Vec::new();
                if let Some(text) = text.as_deref().filter(|t| !t.trim().is_empty()) {
                    blocks.push(Block::Text { text });
                }
                for call in tool_calls {
                    blocks.push(Block::ToolUse {
                        id: &call.id,
                        name: &call.name,
                        input: input_object(&call.arguments),
                    });
                }
                ("assistant", blocks)
            }
            Message::Tool {
                call_id,
                output,
                is_error,
            } => (
                "user",
                vec![Block::ToolResult {
                    tool_use_id: call_id,
                    content: output,
                    is_error: *is_error,
                }],
            ),
        };
        // The API wants the roles to alternate: results of one turn's calls share a message.
        match messages.last_mut() {
            Some(last) if last.role == role => last.content.extend(blocks),
            _ => messages.push(WireMessage {
                role,
                content: blocks,
            }),
        }
    }
    MessagesRequest {
        model: &request.model,
        max_tokens: MAX_TOKENS,
        system: &request.system,
        messages,
        tools: request
            .tools
            .iter()
            .map(|tool| WireTool {
                name: &tool.name,
                description: &tool.description,
                input_schema: &tool.parameters,
            })
            .collect(),
        temperature: request.temperature,
        stream,
    }
}

#[derive(Deserialize)]
struct MessagesResponse {
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    content: Vec<RespBlock>,
    #[serde(default)]
    usage: Option<WireUsage>,
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum RespBlock {
    Text {
        #[serde(default)]
        text: String,
    },
    ToolUse {
        id: String,
        name: String,
        #[serde(default)]
        input: serde_json::Value,
    },
    #[serde(other)]
    Other,
}

#[derive(Deserialize, Default, Clone, Copy)]
struct WireUsage {
    #[serde(default)]
    input_tokens: Option<u64>,
    #[serde(default)]
    output_tokens: Option<u64>,
    /// Cached input, which `input_tokens` leaves out and which counts as input (DESIGN §18).
    #[serde(default)]
    cache_read_input_tokens: Option<u64>,
    #[serde(default)]
    cache_creation_input_tokens: Option<u64>,
}

impl WireUsage {
    fn cached(&self) -> u64 {
        self.cache_read_input_tokens
            .unwrap_or(0)
            .saturating_add(self.cache_creation_input_tokens.unwrap_or(0))
    }
}

fn fatal(message: String) -> ReadFailure {
    ReadFailure::Fatal(ProviderError::Protocol {
        provider: NAME,
        message,
    })
}

fn input_text(input: serde_json::Value) -> String {
    match input {
        serde_json::Value::Null => "{}".to_owned(),
        other => other.to_string(),
    }
}

fn read_whole(response: HttpResponse, model: &str) -> Result<Response, ReadFailure> {
    let bytes = response
        .bytes()
        .map_err(|e| ReadFailure::Transient(format!("the answer broke off: {e}")))?;
    let parsed: MessagesResponse =
        serde_json::from_slice(&bytes).map_err(|e| fatal(format!("not a message: {e}")))?;
    let mut text = String::new();
    let mut tool_calls = Vec::new();
    for block in parsed.content {
        match block {
            RespBlock::Text { text: t } => text.push_str(&t),
            RespBlock::ToolUse { id, name, input } => tool_calls.push(ToolCall {
                id,
                name,
                arguments: input_text(input),
            }),
            RespBlock::Other => {}
        }
    }
    let usage = parsed.usage.unwrap_or_default();
    Ok(Response {
        model: parsed.model.unwrap_or_else(|| model.to_owned()),
        text: (!text.is_empty()).then_some(text),
        tool_calls,
        usage: Usage {
            input_tokens: usage
                .input_tokens
                .unwrap_or(0)
                .saturating_add(usage.cached()),
            output_tokens: usage.output_tokens.unwrap_or(0),
        },
    })
}

/// A block being streamed.
enum Partial {
    Text(String),
    Tool {
        id: String,
        name: String,
        json: String,
    },
    Other,
}

fn read_stream(response: HttpResponse, model: &str) -> Result<Response, ReadFailure> {
    let mut blocks: BTreeMap<u64, Partial> = BTreeMap::new();
    let mut usage = Usage::default();
    // Cached input from `message_start`, kept when a later `message_delta` repeats only
    // `input_tokens`.
    let mut cached_input = 0u64;
    let mut answered_model = model.to_owned();
    let mut stopped = false;
    sse::read(
        BufReader::new(response),
        |event| {
            let data: serde_json::Value = serde_json::from_str(&event.data)
                .map_err(|e| fatal(format!("a streamed event is not JSON: {e}")))?;
            let kind = data
                .get("type")
                .and_then(|t| t.as_str())
                .unwrap_or(&event.event);
            let index = data.get("index").and_then(|i| i.as_u64()).unwrap_or(0);
            match kind {
                "message_start" => {
                    if let Some(m) = data.pointer("/message/model").and_then(|m| m.as_str()) {
                        answered_model = m.to_owned();
                    }
                    if let Some(n) = data
                        .pointer("/message/usage/input_tokens")
                        .and_then(|n| n.as_u64())
                    {
                        cached_input = data
                            .pointer("/message/usage")
                            .and_then(|u| serde_json::from_value::<WireUsage>(u.clone()).ok())
                            .map_or(0, |u| u.cached());
                        usage.input_tokens = n.saturating_add(cached_input);
                    }
                }
                "content_block_start" => {
                    let block = data.get("content_block").cloned().unwrap_or_default();
                    let partial = match block.get("type").and_then(|t| t.as_str()) {
                        Some("text") => Partial::Text(
                            block
                                .get("text")
                                .and_then(|t| t.as_str())
                                .unwrap_or("")
                                .to_owned(),
                        ),
                        Some("tool_use") => Partial::Tool {
                            id: block
                                .get("id")
                                .and_then(|t| t.as_str())
                                .unwrap_or("")
                                .to_owned(),
                            name: block
                                .get("name")
                                .and_then(|t| t.as_str())
                                .unwrap_or("")
                                .to_owned(),
                            json: String::new(),
                        },
                        _ => Partial::Other,
                    };
                    blocks.insert(index, partial);
                }
                "content_block_delta" => {
                    let delta = data.get("delta").cloned().unwrap_or_default();
                    match (
                        blocks.get_mut(&index),
                        delta.get("type").and_then(|t| t.as_str()),
                    ) {
                        (Some(Partial::Text(text)), Some("text_delta")) => {
                            text.push_str(delta.get("text").and_then(|t| t.as_str()).unwrap_or(""));
                        }
                        (Some(Partial::Tool { json, .. }), Some("input_json_delta")) => {
                            json.push_str(
                                delta
                                    .get("partial_json")
                                    .and_then(|t| t.as_str())
                                    .unwrap_or(""),
                            );
                        }
                        _ => {}
                    }
                }
                "message_delta" => {
                    if let Some(n) = data
                        .pointer("/usage/output_tokens")
                        .and_then(|n| n.as_u64())
                    {
                        usage.output_tokens = n;
                    }
                    if let Some(n) = data.pointer("/usage/input_tokens").and_then(|n| n.as_u64()) {
                        let repeated = data
                            .get("usage")
                            .and_then(|u| serde_json::from_value::<WireUsage>(u.clone()).ok())
                            .filter(|u| {
                                u.cache_read_input_tokens.is_some()
                                    || u.cache_creation_input_tokens.is_some()
                            });
                        if let Some(repeated) = repeated {
                            cached_input = repeated.cached();
                        }
                        usage.input_tokens = n.saturating_add(cached_input);
                    }
                }
                "message_stop" => {
                    stopped = true;
                    return Ok(false);
                }
                "error" => {
                    let message = data
                        .pointer("/error/message")
                        .and_then(|m| m.as_str())
                        .unwrap_or("unknown error");
                    return Err(ReadFailure::Transient(format!(
                        "the server reported an error mid-stream: {message}"
                    )));
                }
                _ => {}
            }
            Ok(true)
        },
        |e| ReadFailure::Transient(format!("the stream broke off: {e}")),
    )?;
    if !stopped {
        return Err(ReadFailure::Transient(
            "the stream ended before `message_stop`".to_owned(),
        ));
    }
    let mut text = String::new();
    let mut tool_calls = Vec::new();
    for block in blocks.into_values() {
        match block {
            Partial::Text(t) => text.push_str(&t),
            Partial::Tool { id, name, json } => tool_calls.push(ToolCall {
                id,
                name,
                arguments: if json.trim().is_empty() {
                    "{}".to_owned()
                } else {
                    json
                },
            }),
            Partial::Other => {}
        }
    }
    Ok(Response {
        model: answered_model,
        text: (!text.is_empty()).then_some(text),
        tool_calls,
        usage,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use cordon_protocol::{Attempt, StepName};

    #[test]
    fn tool_results_of_one_turn_share_a_user_message() {
        let call = |id: &str| ToolCall {
            id: id.to_owned(),
            name: "bash".to_owned(),
            arguments: "{\"command\":\"ls\"}".to_owned(),
        };
        let result = |id: &str, is_error| Message::Tool {
            call_id: id.to_owned(),
            output: "out".to_owned(),
            is_error,
        };
        let request = Request {
            step: StepName::parse("dev").expect("step"),
            attempt: Attempt::FIRST,
            model: "claude-test".to_owned(),
            system: "sys".to_owned(),
            messages: vec![
                Message::User {
                    text: "task".to_owned(),
                },
                Message::Assistant {
                    text: Some("looking".to_owned()),
                    tool_calls: vec![call("a"), call("b")],
                },
                result("a", false),
                result("b", true),
            ],
            tools: Vec::new(),
            temperature: None,
        };
        let json = serde_json::to_value(wire_request(&request, false)).expect("serializes");
        assert_eq!(
            json,
            serde_json::json!({
                "model": "claude-test",
                "max_tokens": 8192,
                "system": "sys",
                "messages": [
                    {"role": "user", "content": [{"type": "text", "text": "task"}]},
                    {"role": "assistant", "content": [
                        {"type": "text", "text": "looking"},
                        {"type": "tool_use", "id": "a", "name": "bash", "input": {"command": "ls"}},
                        {"type": "tool_use", "id": "b", "name": "bash", "input": {"command": "ls"}}
                    ]},
                    {"role": "user", "content": [
                        {"type": "tool_result", "tool_use_id": "a", "content": "out"},
                        {"type": "tool_result", "tool_use_id": "b", "content": "out", "is_error": true}
                    ]}
                ],
                "stream": false
            })
        );
    }

    #[test]
    fn malformed_arguments_are_sent_back_as_an_object() {
        assert_eq!(
            input_object("{oops"),
            serde_json::json!({"malformed_arguments": "{oops"})
        );
        assert_eq!(
            input_object("[1]"),
            serde_json::json!({"malformed_arguments": "[1]"})
        );
    }
}
