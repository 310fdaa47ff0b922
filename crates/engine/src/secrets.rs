//! Secrets: resolved host-side at run start from the `env` provider, injected only into the
//! sandboxes of the steps that list them, and scrubbed — replaced by `[secret:<ref>]` — from
//! every event, blob and printed line.

use std::collections::BTreeMap;

use cordon_pipeline::{Pipeline, Secret, SecretName};
use cordon_protocol::Event;

/// Values shorter than this are refused: scrubbing a short value would mangle ordinary text.
pub const MIN_SECRET_LEN: usize = 8;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SecretsError {
    #[error(
        "secret `{name}` reads the variable `{key}`, which is not set; export {key} before `cordon run`"
    )]
    Missing { name: String, key: String },
    #[error(
        "secret `{name}` (from `{key}`) is shorter than {MIN_SECRET_LEN} bytes; cordon refuses it because \
         scrubbing so short a value would corrupt ordinary output — use a real token"
    )]
    TooShort { name: String, key: String },
}

/// The run's resolved secrets.
#[derive(Clone, Debug, Default)]
pub struct Secrets {
    /// (ref, variable, value), longest value first so overlapping values scrub whole.
    values: Vec<(SecretName, String, String)>,
}

impl Secrets {
    /// Resolves every declared secret through `lookup` (the host environment in the cli).
    pub fn resolve(
        pipeline: &Pipeline,
        lookup: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Secrets, SecretsError> {
        let mut values = Vec::new();
        for (name, secret) in &pipeline.secrets {
            match secret {
                Secret::Env { key } => {
                    let value = lookup(key.as_str()).ok_or_else(|| SecretsError::Missing {
                        name: name.to_string(),
                        key: key.to_string(),
                    })?;
                    if value.len() < MIN_SECRET_LEN {
                        return Err(SecretsError::TooShort {
                            name: name.to_string(),
                            key: key.to_string(),
                        });
                    }
                    values.push((name.clone(), key.to_string(), value));
                }
            }
        }
        values.sort_by_key(|v| std::cmp::Reverse(v.2.len()));
        Ok(Secrets { values })
    }

    /// The value of the secret `name`, when it was declared and resolved.
    pub fn value(&self, name: &SecretName) -> Option<&str> {
        self.values
            .iter()
            .find(|(n, _, _)| n == name)
            .map(|(_, _, v)| v.as_str())
    }

    /// Every secret's reference and value (what a delivered commit must not hold).
    pub fn named_values(&self) -> Vec<(String, String)> {
        self.values
            .iter()
            .map(|(name, _, value)| (name.to_string(), value.clone()))
            .collect()
    }

    /// The variables a step that lists `names` gets.
    pub fn env_for(&self, names: &[SecretName]) -> Vec<(String, String)> {
        let wanted: BTreeMap<&SecretName, ()> = names.iter().map(|n| (n, ())).collect();
        self.values
            .iter()
            .filter(|(name, _, _)| wanted.contains_key(name))
            .map(|(_, key, value)| (key.clone(), value.clone()))
            .collect()
    }

    /// `text` with every secret value replaced by `[secret:<ref>]`.
    pub fn scrub(&self, text: &str) -> String {
        let mut out = text.to_owned();
        for (name, _, value) in &self.values {
            if out.contains(value.as_str()) {
                out = out.replace(value.as_str(), &format!("[secret:{name}]"));
            }
        }
        out
    }

    /// `bytes` with every secret value replaced (blobs such as diffs).
    pub fn scrub_bytes(&self, bytes: &[u8]) -> Vec<u8> {
        let mut out = bytes.to_vec();
        for (name, _, value) in &self.values {
            let needle = value.as_bytes();
            let mark = format!("[secret:{name}]");
            let mut result = Vec::with_capacity(out.len());
            let mut i = 0;
            while i < out.len() {
                if out[i..].starts_with(needle) {
                    result.extend_from_slice(mark.as_bytes());
                    i += needle.len();
                } else {
                    result.push(out[i]);
                    i += 1;
                }
            }
            out = result;
        }
        out
    }

    /// The event with every secret scrubbed from every string in it, raw or JSON-escaped.
    pub fn scrub_event(&self, event: &Event) -> Event {
        if self.values.is_empty() {
            return event.clone();
        }
        let data = event.data_json();
        let mut scrubbed = data.clone();
        for (name, _, value) in &self.values {
            let escaped = serde_json_escape(value);
            scrubbed = scrubbed.replace(&escaped, &format!("[secret:{name}]"));
        }
        if scrubbed == data {
            return event.clone();
        }
        Event::from_parts(event.kind(), &scrubbed).unwrap_or_else(|_| Event::Error {
            message: format!(
                "a `{}` event was withheld because scrubbing a secret from it broke its shape",
                event.kind()
            ),
        })
    }

    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }
}

/// How a value appears inside a JSON string.
fn serde_json_escape(value: &str) -> String {
    let quoted = serde_json::to_string(value).unwrap_or_default();
    quoted
        .get(1..quoted.len().saturating_sub(1))
        .unwrap_or(value)
        .to_owned()
}
