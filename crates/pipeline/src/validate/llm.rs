//! Decoding `llm`: the provider and the keys each provider requires.

use super::{env_name, rel_path};
use crate::Llm;
use crate::decode;
use crate::diagnostic::FileSink;
use crate::keys;
use crate::yaml::Node;

pub(crate) fn llm(out: &mut FileSink<'_>, node: &Node) -> Option<Llm> {
    let fields = decode::fields(out, node, &keys::LLM)?;
    let provider_node = fields.get("provider")?;
    let provider = decode::string(out, provider_node, "provider")?;
    let model = fields.get("model").map(|n| decode::string(out, n, "model"));
    let base_url = fields.get("base_url").map(|n| base_url(out, n));
    let mut ok =
        model.as_ref().is_none_or(Option::is_some) && base_url.as_ref().is_none_or(Option::is_some);
    let model = model.flatten();
    let base_url = base_url.flatten();
    let require = |out: &mut FileSink<'_>, key: &str, example: &str| {
        out.error(
            fields.at,
            format!("`llm` needs `{key}` with provider `{provider}`; add `{key}: {example}`"),
        );
    };
    let refuse_transcript = |out: &mut FileSink<'_>| {
        if let Some(at) = fields.key_at("transcript") {
            out.error(
                at,
                "`transcript` is for the replay provider only; remove it or set `provider: replay`",
            );
            false
        } else {
            true
        }
    };
    match provider.as_str() {
        "openai" => {
            let api_key_env = fields
                .get("api_key_env")
                .map(|n| env_name(out, n, "api_key_env", "OPENAI_API_KEY"));
            ok &= refuse_transcript(out);
            if model.is_none() && fields.get("model").is_none() {
                require(out, "model", "gpt-4.1");
            }
            let api_key_env = match api_key_env {
                Some(Some(v)) => Some(v),
                Some(None) => return None,
                None => None,
            };
            (ok && model.is_some()).then(|| Llm::OpenAi {
                model: model.unwrap_or_default(),
                base_url,
                api_key_env,
            })
        }
        "anthropic" => {
            let api_key_env = fields
                .get("api_key_env")
                .map(|n| env_name(out, n, "api_key_env", "ANTHROPIC_API_KEY"));
            ok &= refuse_transcript(out);
            if fields.get("model").is_none() {
                require(out, "model", "claude-sonnet-4");
            }
            if fields.get("api_key_env").is_none() {
                require(out, "api_key_env", "ANTHROPIC_API_KEY");
            }
            let (Some(model), Some(Some(api_key_env))) = (model, api_key_env) else {
                return None;
            };
            ok.then_some(Llm::Anthropic {
                model,
                base_url,
                api_key_env,
            })
        }
        "replay" => {
            for key in ["base_url", "api_key_env"] {
                if let Some(at) = fields.key_at(key) {
                    out.warning(
                        at,
                        format!("`{key}` is not used by the replay provider; remove it"),
                    );
                }
            }
            let transcript = match fields.get("transcript") {
                Some(n) => rel_path(out, n, "transcript"),
                None => {
                    require(out, "transcript", "replay/fix.jsonl");
                    None
                }
            };
            (ok).then_some(())?;
            Some(Llm::Replay {
                transcript: transcript?,
                model,
            })
        }
        other => {
            let hint = match decode::closest(other, Llm::PROVIDERS.iter().copied()) {
                Some(best) => format!("did you mean `{best}`?"),
                None => {
                    "use `openai` (or any compatible server), `anthropic` or `replay`".to_owned()
                }
            };
            out.error(
                provider_node.at,
                format!(
                    "unknown provider {} in `llm`; {hint}",
                    decode::quoted(other)
                ),
            );
            None
        }
    }
}

fn base_url(out: &mut FileSink<'_>, node: &Node) -> Option<String> {
    let text = decode::string(out, node, "base_url")?;
    let rest = text
        .strip_prefix("https://")
        .or_else(|| text.strip_prefix("http://"));
    if rest.is_none_or(|r| r.is_empty() || r.starts_with('/')) || text.contains(char::is_whitespace)
    {
        out.error(
            node.at,
            format!("`base_url` must be an http or https URL, like `https://api.example.com/v1`; found {}", decode::quoted(&text)),
        );
        return None;
    }
    Some(text)
}
