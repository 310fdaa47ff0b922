//! Every step attempt of a run as the page shows it (DESIGN §12): its console as it ended, its
//! diff (the blob `step.finished` recorded), the commit it made, and for an agent attempt its
//! conversation — the task message, each model turn's text and tokens, each tool call with its
//! arguments and (cut) result. Bounded throughout: the latest [`MAX_ATTEMPTS`] attempts, each
//! with at most [`MAX_TURNS`] turns and [`MAX_CALLS`] calls, texts cut to their caps.

use std::collections::VecDeque;

use cordon_protocol::event::{BlobId, Timestamp, Verdict};
use cordon_protocol::{Event, Record, StepName};
use serde::Serialize;

use crate::console::Console;

/// Attempts kept (the latest; earlier ones are counted).
pub const MAX_ATTEMPTS: usize = 50;
/// Model turns kept per attempt.
pub const MAX_TURNS: usize = 200;
/// Tool calls kept per attempt.
pub const MAX_CALLS: usize = 500;
/// Bytes kept of a turn's text, a call's arguments or the task message.
pub const MAX_TEXT: usize = 8 << 10;
/// Bytes kept of a tool call's result.
pub const MAX_RESULT: usize = 2 << 10;
/// Files of a commit listed.
const MAX_FILES: usize = 100;

/// One attempt.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct AttemptView {
    pub step: StepName,
    /// Which start of the step this is, from 1 (`data-attempt`).
    pub n: u32,
    /// The run's attempt it ran in.
    pub run_attempt: u32,
    pub started: Timestamp,
    pub finished: Option<Timestamp>,
    pub verdict: Option<Verdict>,
    pub reason: Option<String>,
    pub console: Console,
    /// The recorded diff (`/api/runs/<id>/diffs/<blob>`), when the attempt left changes.
    pub diff: Option<BlobId>,
    pub commit: Option<CommitView>,
    /// An agent attempt's task message (`llm.request{task}`).
    pub task: Option<String>,
    pub turns: Vec<Turn>,
    pub turns_omitted: u64,
    #[serde(skip)]
    calls: usize,
    /// The latest turn's text is the next output (it comes right after the answer).
    #[serde(skip)]
    awaiting_text: bool,
}

/// A commit the attempt made (`commit.created`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct CommitView {
    pub sha: String,
    pub files: Vec<String>,
    pub files_omitted: u64,
}

/// One model turn.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Turn {
    pub tokens_in: u64,
    pub tokens_out: u64,
    pub estimated: bool,
    pub text: Option<String>,
    pub calls: Vec<Call>,
}

/// One tool call of a turn.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Call {
    pub id: String,
    pub name: String,
    pub arguments: String,
    pub ok: Option<bool>,
    pub result: Option<String>,
}

/// The run's attempts, oldest first.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Attempts {
    pub list: VecDeque<AttemptView>,
    /// Attempts dropped from the front.
    pub omitted: u64,
}

impl Attempts {
    /// The latest attempt of `step`, while it is open.
    fn open(&mut self, step: &StepName) -> Option<&mut AttemptView> {
        self.list
            .iter_mut()
            .rev()
            .find(|a| &a.step == step)
            .filter(|a| a.finished.is_none())
    }

    pub fn apply(&mut self, record: &Record, starts: u32, run_attempt: u32) {
        let Some(step) = &record.step else {
            return;
        };
        match &record.event {
            Event::StepStarted { .. } => {
                self.list.push_back(AttemptView {
                    step: step.clone(),
                    n: starts,
                    run_attempt,
                    started: record.ts,
                    finished: None,
                    verdict: None,
                    reason: None,
                    console: Console::default(),
                    diff: None,
                    commit: None,
                    task: None,
                    turns: Vec::new(),
                    turns_omitted: 0,
                    calls: 0,
                    awaiting_text: false,
                });
                if self.list.len() > MAX_ATTEMPTS {
                    self.list.pop_front();
                    self.omitted += 1;
                }
            }
            Event::StepOutput { text, .. } => {
                if let Some(attempt) = self.open(step) {
                    attempt.console.push(text);
                    if std::mem::take(&mut attempt.awaiting_text)
                        && let Some(turn) = attempt.turns.last_mut()
                    {
                        turn.text = Some(cut(text.trim_end(), MAX_TEXT));
                    }
                }
            }
            Event::LlmRequest {
                task: Some(task), ..
            } => {
                if let Some(attempt) = self.open(step) {
                    attempt.task = Some(cut(task, MAX_TEXT));
                }
            }
            Event::LlmResponse {
                input_tokens,
                output_tokens,
                estimated,
                ..
            } => {
                if let Some(attempt) = self.open(step) {
                    if attempt.turns.len() >= MAX_TURNS {
                        attempt.turns_omitted += 1;
                        attempt.awaiting_text = false;
                        return;
                    }
                    attempt.turns.push(Turn {
                        tokens_in: *input_tokens,
                        tokens_out: *output_tokens,
                        estimated: estimated.unwrap_or(false),
                        ..Turn::default()
                    });
                    attempt.awaiting_text = true;
                }
            }
            Event::ToolCall {
                id,
                name,
                arguments,
                ..
            } => {
                if let Some(attempt) = self.open(step) {
                    attempt.awaiting_text = false;
                    if attempt.calls >= MAX_CALLS {
                        return;
                    }
                    if attempt.turns.is_empty() {
                        attempt.turns.push(Turn::default());
                    }
                    attempt.calls += 1;
                    if let Some(turn) = attempt.turns.last_mut() {
                        turn.calls.push(Call {
                            id: cut(id, 128),
                            name: cut(name, 128),
                            arguments: cut(&arguments.to_string(), MAX_TEXT),
                            ok: None,
                            result: None,
                        });
                    }
                }
            }
            Event::ToolResult { id, ok, output, .. } => {
                if let Some(call) = self.open(step).and_then(|a| {
                    a.turns
                        .iter_mut()
                        .rev()
                        .flat_map(|t| t.calls.iter_mut())
                        .find(|c| c.id == *id && c.ok.is_none())
                }) {
                    call.ok = Some(*ok);
                    call.result = Some(cut(output, MAX_RESULT));
                }
            }
            Event::CommitCreated {
                sha,
                files,
                files_omitted,
            } => {
                if let Some(attempt) = self.open(step) {
                    let kept: Vec<String> = files.iter().take(MAX_FILES).cloned().collect();
                    let omitted = (files.len() - kept.len()) as u64 + files_omitted.unwrap_or(0);
                    attempt.commit = Some(CommitView {
                        sha: cut(sha, 64),
                        files: kept,
                        files_omitted: omitted,
                    });
                }
            }
            Event::StepFinished {
                verdict,
                reason,
                diff,
                ..
            } => {
                if let Some(attempt) = self.open(step) {
                    attempt.finished = Some(record.ts);
                    attempt.verdict = Some(*verdict);
                    attempt.reason = reason.clone();
                    attempt.diff = *diff;
                }
            }
            _ => {}
        }
    }
}

/// `text` cut to at most `limit` bytes at a character boundary, a marker saying how much more.
fn cut(text: &str, limit: usize) -> String {
    if text.len() <= limit {
        return text.to_owned();
    }
    let mut end = limit;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… [{} more bytes]", &text[..end], text.len() - end)
}
