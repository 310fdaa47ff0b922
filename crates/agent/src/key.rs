//! `ApiKey`: a provider key read host-side from the variable `api_key_env` names. Its value is
//! only ever put into the provider's request headers; `Debug` and `Display` never show it.

use std::ffi::OsString;
use std::fmt;

use cordon_pipeline::EnvName;

/// A provider API key. Deliberately neither `Display` nor a `Debug` that shows the value.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKey {
    value: String,
    /// The variable it came from, for error messages.
    var: String,
}

/// Why no key could be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    #[error(
        "the API key variable `{var}` is not set; export it in the shell that runs cordon \
         (cordon sends it only to the provider, never into a sandbox)"
    )]
    Missing { var: String },
    #[error("the API key variable `{var}` is empty; set it to the provider's key")]
    Empty { var: String },
    #[error(
        "the API key in `{var}` holds characters an HTTP header cannot carry (not visible \
         ASCII); check that the variable holds only the key"
    )]
    Malformed { var: String },
}

impl ApiKey {
    /// Reads the key from this process's environment.
    pub fn from_env(var: &EnvName) -> Result<ApiKey, KeyError> {
        ApiKey::lookup(var.as_str(), |name| std::env::var_os(name))
    }

    /// Reads the key through `get` (tests pass a map instead of the environment).
    pub fn lookup(
        var: &str,
        get: impl FnOnce(&str) -> Option<OsString>,
    ) -> Result<ApiKey, KeyError> {
        let var_owned = var.to_owned();
        let raw = get(var).ok_or_else(|| KeyError::Missing {
            var: var_owned.clone(),
        })?;
        let value = raw
            .into_string()
            .map_err(|_| KeyError::Malformed {
                var: var_owned.clone(),
            })?
            .trim()
            .to_owned();
        if value.is_empty() {
            return Err(KeyError::Empty { var: var_owned });
        }
        if !value.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(KeyError::Malformed { var: var_owned });
        }
        Ok(ApiKey {
            value,
            var: var_owned,
        })
    }

    /// A key given directly (tests, the model lane).
    pub fn from_value(var: &str, value: &str) -> Result<ApiKey, KeyError> {
        ApiKey::lookup(var, |_| Some(OsString::from(value)))
    }

    /// The secret itself, for a request header.
    pub(crate) fn expose(&self) -> &str {
        &self.value
    }

    /// The variable's name.
    pub fn var(&self) -> &str {
        &self.var
    }

    /// `text` with every occurrence of the key replaced by `[api key]`, for error messages a
    /// provider may have echoed the key into.
    pub fn scrub(&self, text: &str) -> String {
        text.replace(&self.value, "[api key]")
    }
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ApiKey(${})", self.var)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(value: Option<&str>, expected: Result<&str, &str>) {
        let got = ApiKey::lookup("OPENAI_API_KEY", |_| value.map(OsString::from));
        match (got, expected) {
            (Ok(key), Ok(want)) => assert_eq!(key.expose(), want),
            (Err(err), Err(want)) => assert!(err.to_string().contains(want), "{err}"),
            (got, want) => panic!("{value:?}: got {got:?}, want {want:?}"),
        }
    }

    #[test]
    fn keys_are_read_trimmed_and_refused_with_the_variable_named() {
        check(Some("sk-test-123"), Ok("sk-test-123"));
        check(Some("  sk-test-123\n"), Ok("sk-test-123"));
        check(None, Err("`OPENAI_API_KEY` is not set; export it"));
        check(Some(""), Err("`OPENAI_API_KEY` is empty"));
        check(Some("sk test"), Err("cannot carry"));
    }

    #[test]
    fn debug_never_shows_the_key() {
        let key = ApiKey::from_value("K", "sk-very-secret").expect("valid");
        assert_eq!(format!("{key:?}"), "ApiKey($K)");
        assert_eq!(key.scrub("bad key sk-very-secret!"), "bad key [api key]!");
    }
}
