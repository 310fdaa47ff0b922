//! `Recorder`: wraps a provider and writes every answered turn as a replay transcript line with
//! its `step` and `attempt` selectors (`cordon run --record FILE`), so a real session can be
//! replayed offline.

use std::io::Write;

use cordon_protocol::{Attempt, StepName};
use serde::Serialize;

use super::{Provider, ProviderError};
use crate::message::{Request, Response};

/// A provider that also writes what it answered.
pub struct Recorder<P> {
    inner: P,
    out: Box<dyn Write + Send>,
    /// The first write error; recording stops there, the run does not.
    failed: Option<std::io::Error>,
}

#[derive(Serialize)]
struct Line<'a> {
    step: &'a str,
    attempt: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    text: Option<&'a str>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tool_calls: Vec<LineCall<'a>>,
}

#[derive(Serialize)]
struct LineCall<'a> {
    name: &'a str,
    /// The model's argument text verbatim when it is JSON (key order kept), else as a string.
    arguments: Box<serde_json::value::RawValue>,
}

impl<P: Provider> Recorder<P> {
    /// Records into `out` (the caller opens the file); each line is flushed as it is written.
    pub fn new(inner: P, out: Box<dyn Write + Send>) -> Recorder<P> {
        Recorder {
            inner,
            out,
            failed: None,
        }
    }

    /// The first error writing the transcript, if any (the caller reports it at the end).
    pub fn write_error(&self) -> Option<&std::io::Error> {
        self.failed.as_ref()
    }

    fn write(&mut self, request: &Request, response: &Response) {
        if self.failed.is_some() {
            return;
        }
        let line = Line {
            step: request.step.as_str(),
            attempt: request.attempt.get(),
            text: response.text.as_deref(),
            tool_calls: response
                .tool_calls
                .iter()
                .map(|call| LineCall {
                    name: &call.name,
                    arguments: raw_arguments(&call.arguments),
                })
                .collect(),
        };
        let mut text = serde_json::to_string(&line).unwrap_or_default();
        text.push('\n');
        if let Err(err) = self
            .out
            .write_all(text.as_bytes())
            .and_then(|()| self.out.flush())
        {
            self.failed = Some(err);
        }
    }
}

/// The arguments for a transcript line: the model's JSON object verbatim (key order kept; pretty
/// JSON is compacted so the line stays one line), else the raw text as a JSON string.
fn raw_arguments(text: &str) -> Box<serde_json::value::RawValue> {
    serde_json::from_str::<Box<serde_json::value::RawValue>>(text.trim())
        .ok()
        .filter(|raw| raw.get().starts_with('{'))
        .map(|raw| {
            if raw.get().contains(['\n', '\r']) {
                let compact = serde_json::from_str::<serde_json::Value>(raw.get())
                    .map(|v| v.to_string())
                    .unwrap_or_default();
                serde_json::value::RawValue::from_string(compact).unwrap_or(raw)
            } else {
                raw
            }
        })
        .or_else(|| {
            serde_json::to_string(text)
                .ok()
                .and_then(|quoted| serde_json::value::RawValue::from_string(quoted).ok())
        })
        .unwrap_or_else(|| {
            serde_json::value::RawValue::from_string("{}".to_owned()).unwrap_or_default()
        })
}

impl<P: Provider> Provider for Recorder<P> {
    fn complete(&mut self, request: &Request) -> Result<Response, ProviderError> {
        let response = self.inner.complete(request)?;
        self.write(request, &response);
        Ok(response)
    }

    fn skip_answered(&mut self, step: &StepName, attempt: Attempt) {
        self.inner.skip_answered(step, attempt);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::ToolCall;
    use crate::provider::Replay;
    use std::sync::{Arc, Mutex};

    #[derive(Clone, Default)]
    struct Shared(Arc<Mutex<Vec<u8>>>);

    impl Write for Shared {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0
                .lock()
                .map_err(|_| std::io::Error::other("poisoned"))?
                .extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    struct Canned(Vec<Response>);

    impl Provider for Canned {
        fn complete(&mut self, _: &Request) -> Result<Response, ProviderError> {
            Ok(self.0.remove(0))
        }
    }

    #[test]
    fn a_recorded_session_replays_to_the_same_turns() {
        let turns = vec![
            Response {
                model: "m".to_owned(),
                text: Some("writing".to_owned()),
                tool_calls: vec![
                    ToolCall {
                        id: "x1".to_owned(),
                        name: "write_file".to_owned(),
                        arguments: r#"{"path":"a.txt","content":"hi\n"}"#.to_owned(),
                    },
                    ToolCall {
                        id: "x2".to_owned(),
                        name: "bash".to_owned(),
                        arguments: "{broken".to_owned(),
                    },
                ],
                usage: Default::default(),
            },
            Response {
                model: "m".to_owned(),
                text: Some("done\nVERDICT: OK".to_owned()),
                tool_calls: Vec::new(),
                usage: Default::default(),
            },
        ];
        let sink = Shared::default();
        let mut recorder = Recorder::new(Canned(turns.clone()), Box::new(sink.clone()));
        let request = Request::empty("dev", 1);
        for _ in 0..2 {
            recorder.complete(&request).expect("answers");
        }
        let text = String::from_utf8(sink.0.lock().expect("lock").clone()).expect("utf-8");
        assert_eq!(
            text.lines().next(),
            Some(
                r#"{"step":"dev","attempt":1,"text":"writing","tool_calls":[{"name":"write_file","arguments":{"path":"a.txt","content":"hi\n"}},{"name":"bash","arguments":"{broken"}]}"#
            )
        );
        let mut replay = Replay::parse("rec.jsonl", &text).expect("a valid transcript");
        for want in &turns {
            let got = replay.complete(&request).expect("a turn");
            assert_eq!(got.text, want.text);
            let got_calls: Vec<(&str, serde_json::Value)> = got
                .tool_calls
                .iter()
                .map(|c| (c.name.as_str(), c.arguments_json()))
                .collect();
            let want_calls: Vec<(&str, serde_json::Value)> = want
                .tool_calls
                .iter()
                .map(|c| (c.name.as_str(), c.arguments_json()))
                .collect();
            assert_eq!(got_calls, want_calls);
        }
    }
}
