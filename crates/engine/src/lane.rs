//! The model lane of a run (DESIGN §5): the upstream a `model_lane: true` command step's
//! requests go to — `llm.base_url` with the key read host-side from `api_key_env` — and the
//! sink that turns each forwarded call into an `llm.request` / `llm.response` pair of the step
//! with `source: "lane"`. The key is read here once, at run start, and handed only to
//! `cordon_egress::lane`, which puts it in upstream request headers; it never enters a session's
//! environment, an event or an error text.

use std::ffi::OsString;
use std::path::PathBuf;

use cordon_egress::lane::{LaneAuth, LaneCall, LaneConfig, LaneSink};
use cordon_pipeline::{Llm, Pipeline, StepKind};
use cordon_protocol::Event;
use cordon_protocol::event::LlmSource;

use crate::EngineError;
use crate::side::SideEvents;

/// The default endpoints, as the agent's providers use them.
const OPENAI_BASE_URL: &str = cordon_agent::provider::OPENAI_BASE_URL;
const ANTHROPIC_BASE_URL: &str = cordon_agent::provider::ANTHROPIC_BASE_URL;

/// The first step with `model_lane: true`, if any.
fn lane_step(pipeline: &Pipeline) -> Option<&cordon_pipeline::Step> {
    pipeline
        .steps
        .iter()
        .find(|step| matches!(&step.kind, StepKind::Command(command) if command.model_lane))
}

/// A lane step needs a real provider to forward to: `llm` with `openai` or `anthropic`.
pub fn check_provider(pipeline: &Pipeline) -> Result<(), EngineError> {
    match (lane_step(pipeline), &pipeline.llm) {
        (None, _) | (Some(_), Some(Llm::OpenAi { .. } | Llm::Anthropic { .. })) => Ok(()),
        (Some(step), Some(Llm::Replay { .. }) | None) => Err(EngineError::Unsupported(format!(
            "step `{}` has `model_lane: true`, which forwards to a real provider; set \
             `llm.provider` to openai or anthropic (with `base_url` and `api_key_env`)",
            step.name
        ))),
    }
}

/// The lane's upstream for `pipeline`, or `None` when no step has `model_lane: true`. `env` is
/// the host environment (`api_key_env`, `SSL_CERT_FILE`). A lane step without a real provider,
/// or with a missing key, is a configuration error (exit 2) before anything runs.
pub fn lane_config(
    pipeline: &Pipeline,
    env: &dyn Fn(&str) -> Option<OsString>,
) -> Result<Option<LaneConfig>, EngineError> {
    if lane_step(pipeline).is_none() {
        return Ok(None);
    }
    check_provider(pipeline)?;
    let read_key = |var: &str| -> Result<String, EngineError> {
        // `lookup` gives the user-facing error (missing, empty, malformed) naming the variable;
        // its value is private to the agent crate, so the checked variable is read again here.
        cordon_agent::ApiKey::lookup(var, env)
            .map_err(|e| EngineError::Unsupported(format!("the model lane: {e}")))?;
        Ok(env(var)
            .and_then(|v| v.into_string().ok())
            .unwrap_or_default()
            .trim()
            .to_owned())
    };
    let mut config = match &pipeline.llm {
        Some(Llm::OpenAi {
            model,
            base_url,
            api_key_env,
        }) => {
            let auth = match api_key_env {
                Some(var) => LaneAuth::Bearer(read_key(var.as_str())?),
                None => LaneAuth::None,
            };
            let base = base_url.as_deref().unwrap_or(OPENAI_BASE_URL);
            LaneConfig::new(base, auth, model)
        }
        Some(Llm::Anthropic {
            model,
            base_url,
            api_key_env,
        }) => {
            let auth = LaneAuth::XApiKey(read_key(api_key_env.as_str())?);
            let base = base_url.as_deref().unwrap_or(ANTHROPIC_BASE_URL);
            LaneConfig::new(base, auth, model)
        }
        // Refused by `check_provider` above.
        Some(Llm::Replay { .. }) | None => return Ok(None),
    };
    config.extra_roots = env("SSL_CERT_FILE")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from);
    Ok(Some(config))
}

/// Queues each lane call of one session as its events, counting it against the run's budget
/// (and refusing calls once it is exhausted).
pub(crate) struct LaneEvents {
    pub(crate) events: SideEvents,
    pub(crate) meter: crate::budget::Meter,
}

impl LaneEvents {
    fn push(&self, event: Event) {
        self.events.push(event);
    }
}

impl LaneSink for LaneEvents {
    fn request(&self, model: &str) {
        self.push(Event::LlmRequest {
            model: model.to_owned(),
            source: LlmSource::Lane,
            task: None,
        });
    }

    fn response(&self, call: &LaneCall) {
        self.meter
            .record(call.usage.input_tokens, call.usage.output_tokens);
        self.push(Event::LlmResponse {
            model: call.model.clone(),
            input_tokens: call.usage.input_tokens,
            output_tokens: call.usage.output_tokens,
            latency_ms: u64::try_from(call.latency.as_millis()).unwrap_or(u64::MAX),
            source: LlmSource::Lane,
            estimated: call.estimated.then_some(true),
        });
    }

    fn admit(&self) -> Result<(), String> {
        match self.meter.exhausted() {
            Some(exhausted) => Err(exhausted.reason()),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pipeline(llm: &str, lane: bool) -> Pipeline {
        let text = format!(
            "name: demo\n{llm}steps:\n  - name: cli\n    model_lane: {lane}\n    command: 'true'\n"
        );
        let files = std::collections::BTreeMap::from([(
            std::path::PathBuf::from("/p/pipeline.yaml"),
            text,
        )]);
        cordon_pipeline::load(std::path::Path::new("/p/pipeline.yaml"), &files)
            .map(|l| l.pipeline)
            .unwrap_or_else(|d| panic!("{d:?}"))
    }

    fn env(name: &str) -> Option<OsString> {
        (name == "KEY").then(|| OsString::from("sk-real-key-value"))
    }

    #[test]
    fn a_lane_needs_a_real_provider_and_its_key() {
        let none = lane_config(&pipeline("", false), &env).expect("ok");
        assert!(none.is_none(), "no lane step, no lane");

        let openai = "llm: {provider: openai, model: m, base_url: 'https://api.example.test/v1', api_key_env: KEY}\n";
        let config = lane_config(&pipeline(openai, true), &env)
            .expect("ok")
            .expect("a lane");
        assert_eq!(config.root, "https://api.example.test");
        assert!(matches!(config.auth, LaneAuth::Bearer(ref k) if k == "sk-real-key-value"));

        let anthropic = "llm: {provider: anthropic, model: m, api_key_env: KEY}\n";
        let config = lane_config(&pipeline(anthropic, true), &env)
            .expect("ok")
            .expect("a lane");
        assert!(matches!(config.auth, LaneAuth::XApiKey(_)));

        let missing = "llm: {provider: anthropic, model: m, api_key_env: NOT_SET}\n";
        let err = lane_config(&pipeline(missing, true), &env).expect_err("missing key");
        assert!(err.to_string().contains("`NOT_SET` is not set"), "{err}");

        let replay = "llm: {provider: replay, transcript: t.jsonl}\n";
        let err = lane_config(&pipeline(replay, true), &env).expect_err("replay");
        assert!(
            err.to_string()
                .contains("set `llm.provider` to openai or anthropic"),
            "{err}"
        );
    }
}
