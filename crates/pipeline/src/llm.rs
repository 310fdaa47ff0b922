//! The `llm` block: which provider agent steps talk to.

use crate::{EnvName, RelPath};

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Llm {
    /// OpenAI chat completions, or any compatible server.
    OpenAi {
        model: String,
        base_url: Option<String>,
        api_key_env: Option<EnvName>,
    },
    /// Anthropic messages.
    Anthropic {
        model: String,
        base_url: Option<String>,
        api_key_env: EnvName,
    },
    /// Replays a recorded transcript (JSON Lines), relative to the pipeline file.
    Replay {
        transcript: RelPath,
        model: Option<String>,
    },
}

impl Llm {
    pub const PROVIDERS: &'static [&'static str] = &["openai", "anthropic", "replay"];

    pub fn provider(&self) -> &'static str {
        match self {
            Llm::OpenAi { .. } => "openai",
            Llm::Anthropic { .. } => "anthropic",
            Llm::Replay { .. } => "replay",
        }
    }

    pub fn model(&self) -> Option<&str> {
        match self {
            Llm::OpenAi { model, .. } | Llm::Anthropic { model, .. } => Some(model),
            Llm::Replay { model, .. } => model.as_deref(),
        }
    }
}
