//! The provider-neutral conversation: what the loop sends ([`Request`]) and what comes back
//! ([`Response`]). Each adapter translates these to and from its own wire types.

use cordon_protocol::{Attempt, StepName};

/// A tool as offered to the model: its name, what it does and a JSON Schema of its arguments.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    pub parameters: serde_json::Value,
}

/// One tool call the model asked for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolCall {
    /// The provider's id (generated for replay), echoed in the result.
    pub id: String,
    pub name: String,
    /// The arguments exactly as the model wrote them (JSON text, possibly malformed).
    pub arguments: String,
}

impl ToolCall {
    /// The arguments as JSON, or the raw text as a JSON string when it does not parse.
    pub fn arguments_json(&self) -> serde_json::Value {
        serde_json::from_str(&self.arguments)
            .unwrap_or_else(|_| serde_json::Value::String(self.arguments.clone()))
    }
}

/// One message of the conversation after the system prompt.
#[derive(Clone, Debug, PartialEq)]
pub enum Message {
    /// The task message (the only user message cordon writes).
    User { text: String },
    /// A model turn: optional text and the tool calls it made.
    Assistant {
        text: Option<String>,
        tool_calls: Vec<ToolCall>,
    },
    /// The result of one tool call.
    Tool {
        call_id: String,
        output: String,
        is_error: bool,
    },
}

/// One model call.
#[derive(Clone, Debug, PartialEq)]
pub struct Request {
    /// Which step attempt is asking (replay selects turns by these; the recorder writes them).
    pub step: StepName,
    pub attempt: Attempt,
    pub model: String,
    /// The agent file's body.
    pub system: String,
    pub messages: Vec<Message>,
    pub tools: Vec<ToolSpec>,
    pub temperature: Option<f64>,
}

/// The bytes a token stands for when the upstream reports no usage (DESIGN §18).
pub const BYTES_PER_TOKEN: u64 = 4;

impl Request {
    /// The tokens this request is estimated to cost when the upstream reports none: its text
    /// (system prompt, messages, tool calls and results, tool definitions), 4 bytes a token.
    pub fn estimated_tokens(&self) -> u64 {
        let mut bytes = self.system.len();
        for message in &self.messages {
            bytes += match message {
                Message::User { text } => text.len(),
                Message::Assistant { text, tool_calls } => {
                    text.as_ref().map_or(0, String::len) + calls_len(tool_calls)
                }
                Message::Tool {
                    call_id, output, ..
                } => call_id.len() + output.len(),
            };
        }
        for tool in &self.tools {
            bytes += tool.name.len() + tool.description.len() + tool.parameters.to_string().len();
        }
        (bytes as u64).div_ceil(BYTES_PER_TOKEN)
    }
}

impl Response {
    /// The tokens this answer is estimated to cost when the upstream reports none.
    pub fn estimated_tokens(&self) -> u64 {
        let bytes = self.text.as_ref().map_or(0, String::len) + calls_len(&self.tool_calls);
        (bytes as u64).div_ceil(BYTES_PER_TOKEN)
    }
}

fn calls_len(calls: &[ToolCall]) -> usize {
    calls
        .iter()
        .map(|c| c.id.len() + c.name.len() + c.arguments.len())
        .sum()
}

#[cfg(test)]
impl Request {
    /// A call by `step` attempt `attempt` to model `m` with nothing in it, for the tests of
    /// providers that answer from a script (replay, the recorder) and ignore the conversation.
    pub(crate) fn empty(step: &str, attempt: u32) -> Request {
        Request {
            step: StepName::parse(step).expect("step"),
            attempt: Attempt::new(attempt).expect("attempt"),
            model: "m".to_owned(),
            system: String::new(),
            messages: Vec::new(),
            tools: Vec::new(),
            temperature: None,
        }
    }
}

/// Token counts as the provider reported them (0 when it did not).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
}

/// One model turn.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Response {
    /// The model that answered, as the provider named it (the requested one when it did not).
    pub model: String,
    pub text: Option<String>,
    /// No tool calls means the agent has finished.
    pub tool_calls: Vec<ToolCall>,
    pub usage: Usage,
}
