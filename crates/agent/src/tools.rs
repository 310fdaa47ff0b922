//! The built-in tools (DESIGN §6): their specs as offered to the model and the dispatcher that
//! runs a model's call. Every tool acts through the [`ToolHost`] — a `/bin/bash` process in the
//! step's sandbox — so Landlock and the mount layout confine the agent exactly as they confine
//! a command step; nothing here resolves a path on the host.

mod bash;
mod egress;
mod files;

use std::time::{Duration, Instant};

use cordon_pipeline::Tool;
use serde::de::DeserializeOwned;

use crate::agent_loop::AgentError;
use crate::grants::Grants;
use crate::journal::Journal;
use crate::message::{ToolCall, ToolSpec};
use crate::tool_host::ToolHost;

pub use crate::tool_host::BASH;
pub use files::{FileText, read_text};

/// A bash call's timeout when the model gives none.
pub const DEFAULT_BASH_TIMEOUT: Duration = Duration::from_secs(120);
/// How long a file tool's own process may take.
const FILE_TIMEOUT: Duration = Duration::from_secs(60);

/// The spec the model sees for `tool`.
pub fn spec(tool: Tool) -> ToolSpec {
    let (description, parameters) = match tool {
        Tool::Bash => (
            "Run a command with /bin/bash -c inside the sandbox. Each call is a new process that \
             starts in the directory where the previous call ended; environment changes do not \
             persist. Background processes keep running but their later output is dropped. \
             Returns the combined stdout and stderr and the exit code.",
            serde_json::json!({
                "type": "object",
                "properties": {
                    "command": {"type": "string", "description": "The bash command line."},
                    "timeout": {"type": "number", "description": "Seconds before the command is killed (default 120)."}
                },
                "required": ["command"],
                "additionalProperties": false
            }),
        ),
        Tool::ReadFile => (
            "Read a text file. Relative paths are relative to the workspace root. Returns lines \
             `offset` (1-based, default 1) to `offset + limit - 1` (default 2000 lines).",
            serde_json::json!({
                "type": "object",
                "properties": {
                    "path": {"type": "string"},
                    "offset": {"type": "integer", "minimum": 1, "description": "First line to return, 1-based."},
                    "limit": {"type": "integer", "minimum": 1, "description": "How many lines to return."}
                },
                "required": ["path"],
                "additionalProperties": false
            }),
        ),
        Tool::WriteFile => (
            "Write a whole file, creating it and its parent directories or replacing it. Relative \
             paths are relative to the workspace root.",
            serde_json::json!({
                "type": "object",
                "properties": {
                    "path": {"type": "string"},
                    "content": {"type": "string", "description": "The complete new content."}
                },
                "required": ["path", "content"],
                "additionalProperties": false
            }),
        ),
        Tool::EditFile => (
            "Replace one exact piece of text in a file. `old_string` must occur exactly once; \
             include enough surrounding lines to make it unique. Relative paths are relative to \
             the workspace root.",
            serde_json::json!({
                "type": "object",
                "properties": {
                    "path": {"type": "string"},
                    "old_string": {"type": "string"},
                    "new_string": {"type": "string"}
                },
                "required": ["path", "old_string", "new_string"],
                "additionalProperties": false
            }),
        ),
        Tool::RequestEgress => (
            "Ask the operator for network access to a destination this step cannot reach. \
             `domain` is a host pattern such as `registry.example.com` or \
             `*.example.com:8443`; say why in `reason`. Returns `granted <pattern>` or \
             `refused <pattern>: <reason>`. A grant applies from the next step session on.",
            serde_json::json!({
                "type": "object",
                "properties": {
                    "domain": {"type": "string"},
                    "reason": {"type": "string"}
                },
                "required": ["domain", "reason"],
                "additionalProperties": false
            }),
        ),
    };
    ToolSpec {
        name: tool.as_str().to_owned(),
        description: description.to_owned(),
        parameters,
    }
}

/// What a tool call produced for the model.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Outcome {
    pub output: String,
    pub ok: bool,
    /// The attempt ends here, failed with `output` (a custom tool's [`CustomResult::fatal`]).
    ///
    /// [`CustomResult::fatal`]: crate::CustomResult::fatal
    pub fatal: bool,
}

impl Outcome {
    pub(crate) fn ok(output: impl Into<String>) -> Outcome {
        Outcome {
            output: output.into(),
            ok: true,
            fatal: false,
        }
    }

    pub(crate) fn error(output: impl Into<String>) -> Outcome {
        Outcome {
            output: output.into(),
            ok: false,
            fatal: false,
        }
    }
}

/// What a tool may use while it runs.
pub(crate) struct Context<'a> {
    pub host: &'a mut dyn ToolHost,
    pub journal: &'a mut dyn Journal,
    pub grants: &'a mut dyn Grants,
    pub custom: &'a mut dyn crate::custom::CustomTools,
    /// The step's deadline, which caps every bash timeout.
    pub deadline: Option<Instant>,
}

impl Context<'_> {
    /// `wanted`, capped by what is left of the step's time.
    pub(crate) fn cap(&self, wanted: Duration) -> Duration {
        match self.deadline {
            Some(deadline) => wanted.min(deadline.saturating_duration_since(Instant::now())),
            None => wanted,
        }
    }
}

/// The tools of one attempt and the state they keep between calls (bash's directory).
pub(crate) struct Toolbox {
    enabled: Vec<Tool>,
    /// The names of the engine's own tools (`Context::custom`).
    custom: Vec<String>,
    bash: bash::Bash,
}

impl Toolbox {
    pub(crate) fn new(enabled: &[Tool], workspace: &str, custom: Vec<String>) -> Toolbox {
        Toolbox {
            enabled: enabled.to_vec(),
            custom,
            bash: bash::Bash::new(workspace),
        }
    }

    /// The specs to offer, in the order the agent file lists the tools.
    pub(crate) fn specs(&self) -> Vec<ToolSpec> {
        self.enabled.iter().copied().map(spec).collect()
    }

    /// Runs one call. Bad names and malformed arguments become error results for the model; an
    /// `Err` means the sandbox or the store failed and the step cannot go on.
    pub(crate) fn call(
        &mut self,
        call: &ToolCall,
        cx: &mut Context<'_>,
    ) -> Result<Outcome, AgentError> {
        if self.custom.contains(&call.name) {
            let answer = cx
                .custom
                .call(
                    &call.name,
                    &call.arguments,
                    crate::custom::CustomContext {
                        journal: &mut *cx.journal,
                        grants: &mut *cx.grants,
                    },
                )
                .map_err(AgentError::Journal)?;
            return Ok(Outcome {
                output: answer.output,
                ok: answer.ok,
                fatal: answer.fatal,
            });
        }
        let Some(tool) = Tool::parse(&call.name).filter(|t| self.enabled.contains(t)) else {
            let names: Vec<String> = self
                .enabled
                .iter()
                .map(|t| format!("`{}`", t.as_str()))
                .chain(self.custom.iter().map(|name| format!("`{name}`")))
                .collect();
            return Ok(Outcome::error(format!(
                "error: there is no tool `{}`; the tools are {}",
                call.name,
                names.join(", ")
            )));
        };
        match tool {
            Tool::Bash => match arguments(tool, &call.arguments, bash::EXPECTED) {
                Ok(args) => self.bash.run(args, cx),
                Err(message) => Ok(Outcome::error(message)),
            },
            Tool::ReadFile => match arguments(tool, &call.arguments, files::READ_EXPECTED) {
                Ok(args) => files::read(args, cx),
                Err(message) => Ok(Outcome::error(message)),
            },
            Tool::WriteFile => match arguments(tool, &call.arguments, files::WRITE_EXPECTED) {
                Ok(args) => files::write(args, cx),
                Err(message) => Ok(Outcome::error(message)),
            },
            Tool::EditFile => match arguments(tool, &call.arguments, files::EDIT_EXPECTED) {
                Ok(args) => files::edit(args, cx),
                Err(message) => Ok(Outcome::error(message)),
            },
            Tool::RequestEgress => match arguments(tool, &call.arguments, egress::EXPECTED) {
                Ok(args) => egress::request(args, cx),
                Err(message) => Ok(Outcome::error(message)),
            },
        }
    }
}

/// Decodes a call's arguments, or the error message the model gets instead.
fn arguments<T: DeserializeOwned>(tool: Tool, raw: &str, expected: &str) -> Result<T, String> {
    let raw = if raw.trim().is_empty() { "{}" } else { raw };
    let value: serde_json::Value = serde_json::from_str(raw).map_err(|e| {
        format!(
            "error: the arguments for `{}` are not valid JSON ({e}); send an object like {expected}",
            tool.as_str()
        )
    })?;
    if !value.is_object() {
        return Err(format!(
            "error: the arguments for `{}` must be a JSON object like {expected}",
            tool.as_str()
        ));
    }
    serde_json::from_value(value).map_err(|e| {
        format!(
            "error: invalid arguments for `{}`: {e}; send an object like {expected}",
            tool.as_str()
        )
    })
}

/// Lossy UTF-8, for output shown to the model.
fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}
