//! Agents: provider adapters (OpenAI chat completions, Anthropic messages, replay), the
//! tool-calling loop and the built-in tools, which run inside the step's sandbox through a
//! [`ToolHost`] the engine implements.
//!
//! Entry points: [`provider::from_llm`] builds a [`Provider`] for a pipeline's `llm` block;
//! [`run`] drives one agent step attempt; [`verdict::judge`] reads a `VERDICT:` line.
//! Nothing here touches the host filesystem of the workspace: every file tool goes through the
//! sandbox, so Landlock and the mount layout apply to the agent exactly as to a command step.
#![forbid(unsafe_code)]

mod agent_loop;
mod console;
mod custom;
mod grants;
mod journal;
mod key;
mod message;
mod output;
pub mod provider;
mod task;
mod tool_host;
pub mod tools;
pub mod verdict;

pub use agent_loop::{AgentError, AgentOutcome, AgentSpec, Hooks, run};
pub use custom::{CustomContext, CustomResult, CustomTools, NoCustomTools};
pub use grants::{GrantDecision, Grants, NoGrants};
pub use journal::{Journal, JournalError};
pub use key::{ApiKey, KeyError};
pub use message::{Message, Request, Response, ToolCall, ToolSpec, Usage};
pub use output::{OutputBuffer, TruncateLimits};
pub use provider::{Provider, ProviderError};
pub use task::{ContextFile, Task};
pub use tool_host::{BashOutput, BashRun, Stream, ToolHost, ToolHostError};
