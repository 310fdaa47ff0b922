//! OpenAI chat completions (`POST {base_url}/chat/completions`) with function tools — also any
//! compatible server (vLLM, llama.cpp, Ollama) through `base_url`. Answers may be one JSON body
//! or server-sent events, whichever the server sends.

use std::collections::BTreeMap;
use std::io::BufReader;

use reqwest::blocking::Response as HttpResponse;
use reqwest::header::{AUTHORIZATION, CONTENT_TYPE, HeaderMap, HeaderValue};
use serde::{Deserialize, Serialize};

use super::http::{Http, HttpOptions, ReadFailure, Readers, Transport};
use super::{Provider, ProviderError, SetupError, sse};
use crate::key::ApiKey;
use crate::message::{Message, Request, Response, ToolCall, Usage};

const NAME: &str = "the OpenAI-compatible server";

/// A chat completions endpoint.
pub struct OpenAi {
    url: reqwest::Url,
    http: Http,
}

impl OpenAi {
    /// `base_url` is the API root including its version (`https://api.example.com/v1`); the key
    /// is optional because local servers often take none.
    pub fn new(
        base_url: &str,
        key: Option<ApiKey>,
        options: HttpOptions,
    ) -> Result<OpenAi, SetupError> {
        let url = super::http::endpoint(base_url, "chat/completions")?;
        Ok(OpenAi {
            url,
            http: Http::new(NAME, options, key)?,
        })
    }

    fn headers(&self) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        if let Some(key) = self.http.key()
            && let Ok(mut value) = HeaderValue::from_str(&format!("Bearer {}", key.expose()))
        {
            value.set_sensitive(true);
            headers.insert(AUTHORIZATION, value);
        }
        headers
    }

    fn auth_fix(&self) -> String {
        match self.http.key() {
            Some(key) => format!("check the key in `{}`", key.var()),
            None => "this server needs a key: set `llm.api_key_env` to the variable that holds it"
                .to_owned(),
        }
    }
}

impl Provider for OpenAi {
    fn complete(&mut self, request: &Request) -> Result<Response, ProviderError> {
        let stream = self.http.transport == Transport::Stream;
        let mut response = self.http.ask(
            &self.url,
            &self.headers(),
            &wire_request(request, stream),
            &request.model,
            &READERS,
            &self.auth_fix(),
        )?;
        if response.model.is_empty() {
            response.model.clone_from(&request.model);
        }
        Ok(response)
    }
}

/// Answers come as one body or as server-sent events, whichever the server sends.
const READERS: Readers = Readers {
    whole: read_whole,
    stream: read_stream,
};

#[derive(Serialize)]
struct ChatRequest<'a> {
    model: &'a str,
    messages: Vec<WireMessage<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<WireTool<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f64>,
    stream: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    stream_options: Option<StreamOptions>,
}

#[derive(Serialize)]
struct StreamOptions {
    include_usage: bool,
}

#[derive(Serialize)]
#[serde(tag = "role", rename_all = "lowercase")]
enum WireMessage<'a> {
    System {
        content: &'a str,
    },
    User {
        content: &'a str,
    },
    Assistant {
        content: Option<&'a str>,
        #[serde(skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<WireCall<'a>>,
    },
    Tool {
        tool_call_id: &'a str,
        content: &'a str,
    },
}

#[derive(Serialize)]
struct WireCall<'a> {
    id: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
    function: WireFunction<'a>,
}

#[derive(Serialize)]
struct WireFunction<'a> {
    name: &'a str,
    arguments: &'a str,
}

#[derive(Serialize)]
struct WireTool<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    function: WireToolFunction<'a>,
}

#[derive(Serialize)]
struct WireToolFunction<'a> {
    name: &'a str,
    description: &'a str,
    parameters: &'a serde_json::Value,
}

fn wire_request(request: &Request, stream: bool) -> ChatRequest<'_> {
    let mut messages = Vec::with_capacity(request.messages.len() + 1);
    if !request.system.is_empty() {
        messages.push(WireMessage::System {
            content: &request.system,
        });
    }
    for message in &request.messages {
        messages.push(match message {
            Message::User { text } => WireMessage::User { content: text },
            Message::Assistant { text, tool_calls } => WireMessage::Assistant {
                content: text.as_deref(),
                tool_calls: tool_calls
                    .iter()
                    .map(|call| WireCall {
                        id: &call.id,
                        kind: "function",
                        function: WireFunction {
                            name: &call.name,
                            arguments: &call.arguments,
                        },
                    })
                    .collect(),
            },
            Message::Tool {
                call_id, output, ..
            } => WireMessage::Tool {
                tool_call_id: call_id,
                content: output,
            },
        });
    }
    ChatRequest {
        model: &request.model,
        messages,
        tools: request
            .tools
            .iter()
            .map(|tool| WireTool {
                kind: "function",
                function: WireToolFunction {
                    name: &tool.name,
                    description: &tool.description,
                    parameters: &tool.parameters,
                },
            })
            .collect(),
        temperature: request.temperature,
        stream,
        stream_options: stream.then_some(StreamOptions {
            include_usage: true,
        }),
    }
}

#[derive(Deserialize)]
struct ChatResponse {
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    choices: Vec<Choice>,
    #[serde(default)]
    usage: Option<WireUsage>,
}

#[derive(Deserialize)]
struct Choice {
    #[serde(default)]
    message: Option<ChoiceMessage>,
    #[serde(default)]
    delta: Option<ChoiceMessage>,
}

#[derive(Deserialize, Default)]
struct ChoiceMessage {
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    tool_calls: Option<Vec<RespCall>>,
}

#[derive(Deserialize)]
struct RespCall {
    #[serde(default)]
    index: Option<usize>,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    function: Option<RespFunction>,
}

#[derive(Deserialize)]
struct RespFunction {
    #[serde(default)]
    name: Option<String>,
    /// A string by the protocol; some servers send an object.
    #[serde(default)]
    arguments: Option<serde_json::Value>,
}

#[derive(Deserialize, Clone, Copy)]
struct WireUsage {
    #[serde(default)]
    prompt_tokens: u64,
    #[serde(default)]
    completion_tokens: u64,
}

impl From<WireUsage> for Usage {
    fn from(u: WireUsage) -> Usage {
        Usage {
            input_tokens: u.prompt_tokens,
            output_tokens: u.completion_tokens,
        }
    }
}

fn arguments_text(value: Option<serde_json::Value>) -> String {
    match value {
        Some(serde_json::Value::String(text)) => text,
        Some(serde_json::Value::Null) | None => String::new(),
        Some(other) => other.to_string(),
    }
}

fn fatal(message: String) -> ReadFailure {
    ReadFailure::Fatal(ProviderError::Protocol {
        provider: NAME,
        message,
    })
}

fn read_whole(response: HttpResponse, model: &str) -> Result<Response, ReadFailure> {
    let bytes = response
        .bytes()
        .map_err(|e| ReadFailure::Transient(format!("the answer broke off: {e}")))?;
    let parsed: ChatResponse =
        serde_json::from_slice(&bytes).map_err(|e| fatal(format!("not a chat completion: {e}")))?;
    let message = parsed
        .choices
        .into_iter()
        .next()
        .and_then(|c| c.message)
        .ok_or_else(|| fatal("the answer has no `choices[0].message`".to_owned()))?;
    let tool_calls = message
        .tool_calls
        .unwrap_or_default()
        .into_iter()
        .map(|call| {
            let function = call.function.unwrap_or(RespFunction {
                name: None,
                arguments: None,
            });
            ToolCall {
                id: call.id.unwrap_or_default(),
                name: function.name.unwrap_or_default(),
                arguments: arguments_text(function.arguments),
            }
        })
        .collect();
    Ok(Response {
        model: parsed.model.unwrap_or_else(|| model.to_owned()),
        text: message.content.filter(|t| !t.is_empty()),
        tool_calls,
        usage: parsed.usage.map(Usage::from).unwrap_or_default(),
    })
}

fn read_stream(response: HttpResponse, model: &str) -> Result<Response, ReadFailure> {
    let mut text = String::new();
    let mut calls: BTreeMap<usize, ToolCall> = BTreeMap::new();
    let mut usage = Usage::default();
    let mut answered_model = model.to_owned();
    let mut done = false;
    sse::read(
        BufReader::new(response),
        |event| {
            if event.data.trim() == "[DONE]" {
                done = true;
                return Ok(false);
            }
            let chunk: serde_json::Value = serde_json::from_str(&event.data)
                .map_err(|e| fatal(format!("a streamed chunk is not JSON: {e}")))?;
            if let Some(message) = chunk.pointer("/error/message").and_then(|m| m.as_str()) {
                return Err(ReadFailure::Transient(format!(
                    "the server reported an error mid-stream: {message}"
                )));
            }
            let chunk: ChatResponse = serde_json::from_value(chunk)
                .map_err(|e| fatal(format!("not a chat completion chunk: {e}")))?;
            if let Some(m) = chunk.model {
                answered_model = m;
            }
            if let Some(u) = chunk.usage {
                usage = u.into();
            }
            for choice in chunk.choices {
                let delta = choice.delta.or(choice.message).unwrap_or_default();
                if let Some(content) = delta.content {
                    text.push_str(&content);
                }
                for (position, part) in delta.tool_calls.unwrap_or_default().into_iter().enumerate()
                {
                    let index = part.index.unwrap_or(position);
                    let call = calls.entry(index).or_insert_with(|| ToolCall {
                        id: String::new(),
                        name: String::new(),
                        arguments: String::new(),
                    });
                    if let Some(id) = part.id.filter(|id| !id.is_empty()) {
                        call.id = id;
                    }
                    if let Some(function) = part.function {
                        if let Some(name) = function.name {
                            call.name.push_str(&name);
                        }
                        call.arguments.push_str(&arguments_text(function.arguments));
                    }
                }
            }
            Ok(true)
        },
        |e| ReadFailure::Transient(format!("the stream broke off: {e}")),
    )?;
    if !done && text.is_empty() && calls.is_empty() {
        return Err(ReadFailure::Transient(
            "the stream ended before any answer".to_owned(),
        ));
    }
    Ok(Response {
        model: answered_model,
        text: (!text.is_empty()).then_some(text),
        tool_calls: calls.into_values().collect(),
        usage,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::ToolSpec;
    use cordon_protocol::{Attempt, StepName};

    #[test]
    fn requests_carry_system_tools_and_the_conversation_in_openai_shape() {
        let request = Request {
            step: StepName::parse("dev").expect("step"),
            attempt: Attempt::FIRST,
            model: "gpt-test".to_owned(),
            system: "be brief".to_owned(),
            messages: vec![
                Message::User {
                    text: "task".to_owned(),
                },
                Message::Assistant {
                    text: None,
                    tool_calls: vec![ToolCall {
                        id: "c1".to_owned(),
                        name: "bash".to_owned(),
                        arguments: "{\"command\":\"ls\"}".to_owned(),
                    }],
                },
                Message::Tool {
                    call_id: "c1".to_owned(),
                    output: "a.txt".to_owned(),
                    is_error: false,
                },
            ],
            tools: vec![ToolSpec {
                name: "bash".to_owned(),
                description: "run".to_owned(),
                parameters: serde_json::json!({"type": "object"}),
            }],
            temperature: Some(0.5),
        };
        let json = serde_json::to_value(wire_request(&request, false)).expect("serializes");
        assert_eq!(
            json,
            serde_json::json!({
                "model": "gpt-test",
                "messages": [
                    {"role": "system", "content": "be brief"},
                    {"role": "user", "content": "task"},
                    {"role": "assistant", "content": null, "tool_calls": [
                        {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": "{\"command\":\"ls\"}"}}
                    ]},
                    {"role": "tool", "tool_call_id": "c1", "content": "a.txt"}
                ],
                "tools": [{"type": "function", "function": {"name": "bash", "description": "run", "parameters": {"type": "object"}}}],
                "temperature": 0.5,
                "stream": false
            })
        );
    }
}
