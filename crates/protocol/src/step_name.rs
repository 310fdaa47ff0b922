//! `StepName`: a step's name, `[a-z0-9][a-z0-9_-]{0,62}`, never `success` or `failure` — or,
//! for the phase steps of an outcome run (DESIGN §13), `<task id>.<phase>`.

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

/// The phases of an outcome task, in the order a task goes through them (DESIGN §13).
pub const PHASES: &[&str] = &["plan", "execute", "scrutinize", "verify", "validate"];

/// The longest task id: `[a-z0-9][a-z0-9-]{0,31}`.
pub const MAX_TASK_ID: usize = 32;

/// Whether `text` is a task id: `[a-z0-9][a-z0-9-]{0,31}`.
pub fn is_task_id(text: &str) -> bool {
    let mut chars = text.chars();
    text.len() <= MAX_TASK_ID
        && chars
            .next()
            .is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
}

impl StepName {
    /// A step name as stored, printed or asked for: the pipeline grammar
    /// ([`StepName::parse_written`]) or an outcome run's `<task id>.<phase>`.
    pub fn parse(text: &str) -> Result<StepName, StepNameError> {
        if let Some((task, phase)) = text.split_once('.')
            && is_task_id(task)
            && PHASES.contains(&phase)
        {
            return Ok(StepName(text.to_owned()));
        }
        StepName::parse_written(text)
    }

    /// The step of `task`'s `phase` in an outcome run; `None` when `task` is not a task id or
    /// `phase` not a phase.
    pub fn task_phase(task: &str, phase: &str) -> Option<StepName> {
        (is_task_id(task) && PHASES.contains(&phase)).then(|| StepName(format!("{task}.{phase}")))
    }

    /// For a phase step of an outcome run: its task id and phase.
    pub fn task(&self) -> Option<(&str, &str)> {
        self.0.split_once('.')
    }

    /// A name written in a pipeline: `[a-z0-9][a-z0-9_-]{0,62}`, not a reserved route target.
    pub fn parse_written(text: &str) -> Result<StepName, StepNameError> {
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
    fn outcome_phase_steps_are_the_only_names_with_a_dot() {
        for (text, ok) in [
            ("t1.execute", true),
            ("fix-parser.validate", true),
            (&format!("{}.plan", "a".repeat(32)), true),
            (&format!("{}.plan", "a".repeat(33)), false),
            ("t1.deploy", false),
            ("T1.plan", false),
            ("t_1.plan", false),
            ("-t.plan", false),
            ("t1.plan.x", false),
            (".plan", false),
        ] {
            assert_eq!(StepName::parse(text).is_ok(), ok, "{text}");
            assert!(
                StepName::parse_written(text).is_err(),
                "{text} is never written"
            );
        }
        let name = StepName::task_phase("t1", "verify").expect("a phase step");
        assert_eq!(name.task(), Some(("t1", "verify")));
        assert_eq!(StepName::parse("dev").expect("name").task(), None);
        assert_eq!(StepName::task_phase("t1", "deploy"), None);
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
