//! The `replay` provider: model turns read from a JSON Lines transcript (DESIGN §6), one turn
//! per line: `{"step":"dev","attempt":1,"text":"…","tool_calls":[{"name":…,"arguments":{…}}]}`.
//!
//! A turn goes to the first model call of a matching (step, attempt) that it has not served yet,
//! in file order; `step` and `attempt` are optional selectors and a turn without them matches any
//! call. Tool-call ids are generated. A resumed step gets its turns from the start again: the
//! engine replays, through [`Provider::skip_answered`], only the calls of steps that finished.

use cordon_protocol::{Attempt, StepName};
use serde::Deserialize;

use super::{Provider, ProviderError};
use crate::message::{Request, Response, ToolCall};

/// A parsed transcript and which of its turns have been served.
#[derive(Clone, Debug)]
pub struct Replay {
    turns: Vec<Turn>,
    served: Vec<bool>,
    /// Makes generated tool-call ids unique across processes of one run (a resumed step is
    /// served the same turns again, and its earlier calls are already in the log).
    nonce: String,
    calls: u64,
}

#[derive(Clone, Debug, PartialEq)]
struct Turn {
    step: Option<StepName>,
    attempt: Option<Attempt>,
    text: Option<String>,
    tool_calls: Vec<(String, String)>,
}

/// One line as written in the file.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Line {
    #[serde(default)]
    step: Option<String>,
    #[serde(default)]
    attempt: Option<u32>,
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    tool_calls: Vec<LineCall>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LineCall {
    name: String,
    /// An object; a string is taken as the raw argument text (so a transcript can replay
    /// malformed arguments).
    #[serde(default)]
    arguments: Option<serde_json::Value>,
}

/// Why a transcript cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TranscriptError {
    #[error(
        "{file}:{line}: not a replay turn: {message}; write one JSON object per line like \
         {{\"step\":\"dev\",\"attempt\":1,\"text\":\"…\",\"tool_calls\":[{{\"name\":\"bash\",\"arguments\":{{\"command\":\"ls\"}}}}]}}"
    )]
    Line {
        file: String,
        line: usize,
        message: String,
    },
    #[error("the replay transcript `{file}` was not read; commit it and run again")]
    NotRead { file: String },
}

impl Replay {
    /// Parses a transcript; `file` names it in error messages.
    pub fn parse(file: &str, text: &str) -> Result<Replay, TranscriptError> {
        let mut turns = Vec::new();
        for (index, raw) in text.lines().enumerate() {
            if raw.trim().is_empty() {
                continue;
            }
            let error = |message: String| TranscriptError::Line {
                file: file.to_owned(),
                line: index + 1,
                message,
            };
            let line: Line = serde_json::from_str(raw).map_err(|e| error(e.to_string()))?;
            let step = line
                .step
                .map(|s| StepName::parse(&s).map_err(|e| error(e.to_string())))
                .transpose()?;
            let attempt = line
                .attempt
                .map(|a| Attempt::new(a).ok_or_else(|| error("`attempt` starts at 1".to_owned())))
                .transpose()?;
            let tool_calls = line
                .tool_calls
                .into_iter()
                .map(|call| {
                    let arguments = match call.arguments {
                        None => "{}".to_owned(),
                        Some(serde_json::Value::String(raw)) => raw,
                        Some(value) => value.to_string(),
                    };
                    (call.name, arguments)
                })
                .collect();
            turns.push(Turn {
                step,
                attempt,
                text: line.text,
                tool_calls,
            });
        }
        Ok(Replay {
            served: vec![false; turns.len()],
            turns,
            nonce: process_nonce(),
            calls: 0,
        })
    }

    /// How many turns the transcript holds.
    pub fn len(&self) -> usize {
        self.turns.len()
    }

    pub fn is_empty(&self) -> bool {
        self.turns.is_empty()
    }

    /// Marks the turn for the next call of `(step, attempt)` served and returns its index.
    fn take(&mut self, step: &StepName, attempt: Attempt) -> Option<usize> {
        let index = self.turns.iter().enumerate().position(|(i, turn)| {
            !self.served[i]
                && turn.step.as_ref().is_none_or(|s| s == step)
                && turn.attempt.is_none_or(|a| a == attempt)
        })?;
        self.served[index] = true;
        Some(index)
    }
}

impl Provider for Replay {
    fn complete(&mut self, request: &Request) -> Result<Response, ProviderError> {
        let index = self.take(&request.step, request.attempt).ok_or_else(|| {
            ProviderError::ReplayExhausted {
                step: request.step.clone(),
                attempt: request.attempt,
            }
        })?;
        self.calls += 1;
        let turn = &self.turns[index];
        let tool_calls = turn
            .tool_calls
            .iter()
            .enumerate()
            .map(|(k, (name, arguments))| ToolCall {
                id: format!("replay_{}_{}_{}", self.nonce, self.calls, k + 1),
                name: name.clone(),
                arguments: arguments.clone(),
            })
            .collect();
        Ok(Response {
            model: request.model.clone(),
            text: turn.text.clone(),
            tool_calls,
            usage: Default::default(),
        })
    }

    fn skip_answered(&mut self, step: &StepName, attempt: Attempt) {
        let _ = self.take(step, attempt);
    }
}

/// A short value that differs between processes: the low bits of the clock and the pid.
fn process_nonce() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    format!("{:x}{:x}", std::process::id() & 0xffff, nanos & 0xfffff)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TRANSCRIPT: &str = r#"
{"step":"dev","attempt":1,"text":"dev 1a","tool_calls":[{"name":"bash","arguments":{"command":"ls"}}]}
{"text":"anyone 1"}
{"step":"dev","text":"dev any"}
{"attempt":2,"text":"attempt 2 any step"}
{"step":"dev","attempt":1,"text":"dev 1b"}
{"step":"review","attempt":2,"text":"review 2"}
"#;

    fn call(replay: &mut Replay, step: &str, attempt: u32) -> String {
        let request = Request::empty(step, attempt);
        match replay.complete(&request) {
            Ok(response) => response.text.unwrap_or_default(),
            Err(err) => err.to_string(),
        }
    }

    fn check(calls: &[(&str, u32)], expected: &[&str]) {
        let mut replay = Replay::parse("t.jsonl", TRANSCRIPT).expect("parses");
        let got: Vec<String> = calls
            .iter()
            .map(|(s, a)| call(&mut replay, s, *a))
            .collect();
        assert_eq!(got, expected, "calls {calls:?}");
    }

    #[test]
    fn turns_go_to_the_first_unserved_matching_line_in_file_order() {
        check(
            &[("dev", 1), ("dev", 1), ("dev", 1), ("dev", 1)],
            &["dev 1a", "anyone 1", "dev any", "dev 1b"],
        );
        check(
            &[("review", 2), ("review", 2), ("review", 2), ("review", 2)],
            &[
                "anyone 1",
                "attempt 2 any step",
                "review 2",
                "replay transcript exhausted at review attempt 2",
            ],
        );
        check(
            &[("test", 1), ("dev", 1), ("dev", 1), ("dev", 1)],
            &["anyone 1", "dev 1a", "dev any", "dev 1b"],
        );
        check(&[("other", 3)], &["anyone 1"]);
        check(
            &[("other", 3), ("other", 3)],
            &["anyone 1", "replay transcript exhausted at other attempt 3"],
        );
    }

    #[test]
    fn skipped_calls_are_not_served_again_but_an_unskipped_step_starts_over() {
        let mut replay = Replay::parse("t.jsonl", TRANSCRIPT).expect("parses");
        // An earlier process: dev attempt 1 made two calls and finished.
        replay.skip_answered(&StepName::parse("dev").expect("step"), Attempt::FIRST);
        replay.skip_answered(&StepName::parse("dev").expect("step"), Attempt::FIRST);
        assert_eq!(call(&mut replay, "dev", 1), "dev any");
        assert_eq!(call(&mut replay, "dev", 1), "dev 1b");
    }

    #[test]
    fn generated_tool_call_ids_are_unique_and_arguments_kept_verbatim() {
        let text = r#"{"tool_calls":[{"name":"bash","arguments":{"command":"ls"}},{"name":"bash","arguments":"{not json"},{"name":"bash"}]}"#;
        let mut replay = Replay::parse("t.jsonl", text).expect("parses");
        let request = Request::empty("dev", 1);
        let response = replay.complete(&request).expect("a turn");
        let args: Vec<&str> = response
            .tool_calls
            .iter()
            .map(|c| c.arguments.as_str())
            .collect();
        assert_eq!(args, [r#"{"command":"ls"}"#, "{not json", "{}"]);
        let mut ids: Vec<&str> = response.tool_calls.iter().map(|c| c.id.as_str()).collect();
        ids.dedup();
        assert_eq!(ids.len(), 3);
    }

    fn check_error(text: &str, expected: &str) {
        let err = Replay::parse("replay/fix.jsonl", text).expect_err("invalid");
        assert!(err.to_string().contains(expected), "{err}");
    }

    #[test]
    fn bad_lines_are_reported_with_file_and_line() {
        check_error(
            "\n{\"text\":1}",
            "replay/fix.jsonl:2: not a replay turn: invalid type",
        );
        check_error(
            "{\"txt\":\"x\"}",
            "replay/fix.jsonl:1: not a replay turn: unknown field `txt`",
        );
        check_error(
            "{\"attempt\":0}",
            "replay/fix.jsonl:1: not a replay turn: `attempt` starts at 1",
        );
        check_error(
            "{\"step\":\"Dev\"}",
            "replay/fix.jsonl:1: not a replay turn: step name `Dev`",
        );
        check_error(
            "{\"tool_calls\":[{\"arguments\":{}}]}",
            "missing field `name`",
        );
    }
}
