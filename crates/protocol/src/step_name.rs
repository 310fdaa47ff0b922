//! `StepName`: a step's name, `[a-z0-9][a-z0-9_-]{0,62}`, never `success` or `failure`.

use std::fmt;

/// The longest step name accepted, in bytes.
const MAX_LEN: usize = 63;

/// A validated step name. Step names appear in events, lock-free URLs and file names, so the
/// alphabet is small and the length bounded. `success` and `failure` are route targets, not steps.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct StepName(String);

/// Why a text is not a step name. Each message names the problem and the fix.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum StepNameError {
    #[error("a step name cannot be empty; use lowercase letters, digits, `-` and `_`")]
    Empty,
    #[error("step name `{0}` is longer than 63 characters; shorten it")]
    TooLong(String),
    #[error(
        "step name `{name}` must start with a lowercase letter or digit and contain only \
         `a-z`, `0-9`, `-` and `_`; try `{suggestion}`"
    )]
    BadCharacters { name: String, suggestion: String },
    #[error("`{0}` is a route target, not a step name; rename the step")]
    Reserved(String),
}

impl StepName {
    /// Checks `text` against `[a-z0-9][a-z0-9_-]{0,62}` and the reserved route targets.
    pub fn parse(text: &str) -> Result<StepName, StepNameError> {
        if text.is_empty() {
            return Err(StepNameError::Empty);
        }
        if text.len() > MAX_LEN {
            return Err(StepNameError::TooLong(text.to_owned()));
        }
        let mut chars = text.chars();
        let first_ok = chars
            .next()
            .is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
        let rest_ok =
            chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_');
        if !(first_ok && rest_ok) {
            return Err(StepNameError::BadCharacters {
                name: text.to_owned(),
                suggestion: suggest(text),
            });
        }
        if text == "success" || text == "failure" {
            return Err(StepNameError::Reserved(text.to_owned()));
        }
        Ok(StepName(text.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A nearby valid spelling: lowercased, other characters replaced by `-`, leading `-`/`_` dropped.
fn suggest(text: &str) -> String {
    let mapped: String = text
        .chars()
        .map(|c| {
            let c = c.to_ascii_lowercase();
            if c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' {
                c
            } else {
                '-'
            }
        })
        .collect();
    let trimmed = mapped.trim_start_matches(['-', '_']);
    let mut out: String = trimmed.chars().take(MAX_LEN).collect();
    if out.is_empty() {
        out.push_str("step");
    }
    out
}

impl fmt::Display for StepName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl AsRef<str> for StepName {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(text: &str, expected: Result<&str, &str>) {
        let got = StepName::parse(text)
            .map(|n| n.to_string())
            .map_err(|e| e.to_string());
        let expected = expected.map(str::to_owned).map_err(str::to_owned);
        assert_eq!(got, expected, "input {text:?}");
    }

    #[test]
    fn step_names_follow_the_documented_alphabet() {
        check("dev", Ok("dev"));
        check("0day_fix-2", Ok("0day_fix-2"));
        check(&"a".repeat(63), Ok(&"a".repeat(63)));
        check(
            "",
            Err("a step name cannot be empty; use lowercase letters, digits, `-` and `_`"),
        );
        check(
            &"a".repeat(64),
            Err(&format!(
                "step name `{}` is longer than 63 characters; shorten it",
                "a".repeat(64)
            )),
        );
        check(
            "Run Tests",
            Err(
                "step name `Run Tests` must start with a lowercase letter or digit and contain only `a-z`, `0-9`, `-` and `_`; try `run-tests`",
            ),
        );
        check(
            "-x",
            Err(
                "step name `-x` must start with a lowercase letter or digit and contain only `a-z`, `0-9`, `-` and `_`; try `x`",
            ),
        );
        check(
            "success",
            Err("`success` is a route target, not a step name; rename the step"),
        );
        check(
            "failure",
            Err("`failure` is a route target, not a step name; rename the step"),
        );
        check(
            "dév",
            Err(
                "step name `dév` must start with a lowercase letter or digit and contain only `a-z`, `0-9`, `-` and `_`; try `d-v`",
            ),
        );
    }
}
