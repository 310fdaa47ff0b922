//! Secrets: named references (`gh`) declared once at pipeline level and used by steps.

use std::fmt;

use crate::EnvName;

/// A secret's reference name, shown as `[secret:<ref>]` wherever its value is scrubbed:
/// `[a-z0-9][a-z0-9_-]{0,62}`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SecretName(String);

impl SecretName {
    pub fn parse(text: &str) -> Option<SecretName> {
        let mut chars = text.chars();
        let first = chars.next()?;
        let ok = text.len() <= 63
            && (first.is_ascii_lowercase() || first.is_ascii_digit())
            && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_');
        ok.then(|| SecretName(text.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for SecretName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Where a secret's value comes from, resolved host-side when a run starts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Secret {
    /// `{from: env, key: GH_TOKEN}`: the host variable `key`, set under the same name in the
    /// sandbox of each step that lists the secret.
    Env { key: EnvName },
}

impl Secret {
    pub const SOURCES: &'static [&'static str] = &["env"];
}
