//! `EnvName`: an environment variable name, `[A-Za-z_][A-Za-z0-9_]*`.

use std::fmt;

/// A validated environment variable name. Values never appear in YAML, only names.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct EnvName(String);

impl EnvName {
    pub fn parse(text: &str) -> Option<EnvName> {
        let mut chars = text.chars();
        let first = chars.next()?;
        let ok = (first.is_ascii_alphabetic() || first == '_')
            && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
        ok.then(|| EnvName(text.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for EnvName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}
