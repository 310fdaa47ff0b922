//! Token counts read from an answer as it passes through the lane: the `usage` objects of an
//! OpenAI chat completion, an OpenAI response and an Anthropic message, whole or streamed as
//! server-sent events. Reading never holds the answer back; a line or body too large to inspect
//! is skipped, and the counts stay 0.

use serde_json::Value;

/// Token counts of one call.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
}

/// Largest SSE line, or whole JSON body, that is inspected.
const MAX_INSPECTED: usize = 4 << 20;

/// Collects [`Usage`] from the bytes of an answer, fed in the order they pass through.
pub(crate) struct UsageScanner {
    streamed: bool,
    buffer: Vec<u8>,
    /// Set once the buffer overflowed: the current line (or the body) is skipped.
    skipping: bool,
    usage: Usage,
    /// Anthropic's cached input (`cache_read_input_tokens` + `cache_creation_input_tokens`),
    /// which its `input_tokens` leaves out and which counts as input (DESIGN §18).
    cached: u64,
    /// The answer reached its end: a whole JSON body, or a stream's last event (`[DONE]`,
    /// `message_stop`, `response.completed`).
    complete: bool,
}

impl UsageScanner {
    /// A scanner for an answer of this `Content-Type` (`text/event-stream` is read line by line).
    pub(crate) fn new(content_type: &str) -> UsageScanner {
        UsageScanner {
            streamed: content_type
                .trim_start()
                .to_ascii_lowercase()
                .starts_with("text/event-stream"),
            buffer: Vec::new(),
            skipping: false,
            usage: Usage::default(),
            cached: 0,
            complete: false,
        }
    }

    pub(crate) fn feed(&mut self, bytes: &[u8]) {
        if !self.streamed {
            if self.buffer.len() + bytes.len() > MAX_INSPECTED {
                self.skipping = true;
                self.buffer = Vec::new();
            }
            if !self.skipping {
                self.buffer.extend_from_slice(bytes);
            }
            return;
        }
        let mut rest = bytes;
        while let Some(end) = rest.iter().position(|&b| b == b'\n') {
            if !self.skipping {
                self.buffer.extend_from_slice(&rest[..end]);
                let line = std::mem::take(&mut self.buffer);
                self.line(&line);
            }
            self.skipping = false;
            self.buffer.clear();
            rest = &rest[end + 1..];
        }
        if self.buffer.len() + rest.len() > MAX_INSPECTED {
            self.skipping = true;
            self.buffer = Vec::new();
        } else if !self.skipping {
            self.buffer.extend_from_slice(rest);
        }
    }

    /// The counts, once the answer has ended, and whether it was whole (a stream cut short
    /// reports its final output count never).
    pub(crate) fn finish(mut self) -> (Usage, bool) {
        let buffer = std::mem::take(&mut self.buffer);
        if !self.skipping {
            if self.streamed {
                self.line(&buffer);
            } else if let Ok(value) = serde_json::from_slice::<Value>(&buffer) {
                self.absorb(&value);
                self.complete = true;
            }
        }
        let mut usage = self.usage;
        usage.input_tokens = usage.input_tokens.saturating_add(self.cached);
        (usage, self.complete)
    }

    fn line(&mut self, line: &[u8]) {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let Some(data) = line.strip_prefix(b"data:") else {
            return;
        };
        if data.trim_ascii() == b"[DONE]" {
            self.complete = true;
            return;
        }
        if let Ok(value) = serde_json::from_slice::<Value>(data) {
            if matches!(
                value.get("type").and_then(Value::as_str),
                Some("message_stop" | "response.completed")
            ) {
                self.complete = true;
            }
            self.absorb(&value);
        }
    }

    /// Every usage object an event or body carries; a later count replaces an earlier one
    /// (Anthropic's `message_delta` carries the final output count, OpenAI's last chunk the
    /// totals).
    fn absorb(&mut self, value: &Value) {
        let candidates = [
            value.get("usage"),
            value.get("message").and_then(|m| m.get("usage")),
            value.get("response").and_then(|r| r.get("usage")),
        ];
        for usage in candidates.into_iter().flatten() {
            let count = |keys: &[&str]| keys.iter().find_map(|k| usage.get(*k)?.as_u64());
            if let Some(n) = count(&["prompt_tokens", "input_tokens"]) {
                self.usage.input_tokens = n;
            }
            if let Some(n) = count(&["completion_tokens", "output_tokens"]) {
                self.usage.output_tokens = n;
            }
            let cache: Vec<u64> = ["cache_read_input_tokens", "cache_creation_input_tokens"]
                .iter()
                .filter_map(|k| usage.get(*k)?.as_u64())
                .collect();
            if !cache.is_empty() {
                self.cached = cache.iter().fold(0u64, |a, b| a.saturating_add(*b));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(content_type: &str, pieces: &[&str], expected: (u64, u64)) {
        let mut scanner = UsageScanner::new(content_type);
        for piece in pieces {
            scanner.feed(piece.as_bytes());
        }
        let (usage, _) = scanner.finish();
        assert_eq!(
            (usage.input_tokens, usage.output_tokens),
            expected,
            "{content_type} {pieces:?}"
        );
    }

    #[test]
    fn usage_is_read_from_whole_and_streamed_answers_of_every_provider_shape() {
        let cases: &[(&str, &[&str], (u64, u64))] = &[
            // Anthropic's cached input counts as input.
            (
                "application/json",
                &[
                    r#"{"type":"message","usage":{"input_tokens":5,"cache_read_input_tokens":100,"cache_creation_input_tokens":20,"output_tokens":2}}"#,
                ],
                (125, 2),
            ),
            (
                "text/event-stream",
                &[
                    "data: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":9,\"cache_read_input_tokens\":40,\"output_tokens\":1}}}\n\n",
                    "data: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":7}}\n\n",
                ],
                (49, 7),
            ),
            (
                "application/json",
                &[
                    r#"{"choices":[],"usage":{"prompt_tokens":11,"#,
                    r#""completion_tokens":7}}"#,
                ],
                (11, 7),
            ),
            (
                "application/json",
                &[r#"{"type":"message","usage":{"input_tokens":5,"output_tokens":2}}"#],
                (5, 2),
            ),
            ("application/json", &["not json"], (0, 0)),
            (
                "text/event-stream; charset=utf-8",
                &[
                    "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":9,\"output_tokens\":1}}}\n\n",
                    "event: message_delta\ndata: {\"type\":\"message_del",
                    "ta\",\"usage\":{\"output_tokens\":4}}\r\n\r\n",
                ],
                (9, 4),
            ),
            (
                "text/event-stream",
                &[
                    "data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\n",
                    "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":8}}\n\n",
                    "data: [DONE]\n\n",
                ],
                (3, 8),
            ),
            (
                "text/event-stream",
                &[
                    "data: {\"type\":\"response.completed\",\"response\":{\"usage\":{\"input_tokens\":12,\"output_tokens\":6}}}",
                ],
                (12, 6),
            ),
        ];
        for (content_type, pieces, expected) in cases {
            check(content_type, pieces, *expected);
        }
    }

    #[test]
    fn an_answer_is_whole_only_when_its_end_arrived() {
        let whole = |content_type: &str, pieces: &[&str]| {
            let mut scanner = UsageScanner::new(content_type);
            for piece in pieces {
                scanner.feed(piece.as_bytes());
            }
            scanner.finish().1
        };
        assert!(whole(
            "application/json",
            &[r#"{"usage":{"prompt_tokens":1}}"#]
        ));
        assert!(!whole("application/json", &[r#"{"usage":{"prompt_tok"#]));
        assert!(whole(
            "text/event-stream",
            &["data: {}\n\n", "data: [DONE]\n\n"]
        ));
        assert!(whole(
            "text/event-stream",
            &["data: {\"type\":\"message_stop\"}\n\n"]
        ));
        // Cut short after its start: not whole.
        assert!(!whole(
            "text/event-stream",
            &[
                "data: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":9}}}\n\n"
            ]
        ));
    }
}
