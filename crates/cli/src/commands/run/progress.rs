//! What `cordon run` shows while a run goes: plain progress lines on stderr, or with `--json`
//! every event as a JSON line on stdout (stdout stays empty otherwise).

use std::io::Write;

use cordon_engine::Control;
use cordon_protocol::event::Verdict;
use cordon_protocol::{Event, Record};

/// An observer that prints each record as it is appended.
pub struct Progress {
    pub json: bool,
}

impl Progress {
    pub fn show(&mut self, record: &Record) -> Control {
        if self.json {
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "{}", record.to_json_line());
            let _ = out.flush();
            return Control::Continue;
        }
        // A closed stderr (`cordon run ... 2>&1 | head`) must not stop the run: write, don't panic.
        if let Some(line) = line(record) {
            let _ = writeln!(std::io::stderr().lock(), "{line}");
        }
        Control::Continue
    }
}

/// The plain progress line for a record, if it gets one.
pub fn line(record: &Record) -> Option<String> {
    let step = record.step.as_ref().map_or("", |s| s.as_str());
    match &record.event {
        Event::StepStarted { attempt } => Some(format!("{step:<16} attempt {attempt}  running")),
        Event::StepFinished {
            attempt,
            verdict,
            reason,
            exit_code,
            ..
        } => {
            let word = match verdict {
                Verdict::Pass => "passed",
                Verdict::Fail => "failed",
            };
            let detail = match (reason, exit_code) {
                (Some(reason), _) => format!(": {reason}"),
                (None, Some(code)) if *code != 0 => format!(": exit {code}"),
                _ => String::new(),
            };
            Some(format!("{step:<16} attempt {attempt}  {word}{detail}"))
        }
        Event::AttemptRetry { attempt, .. } => {
            Some(format!("retry            attempt {attempt}  → {step}"))
        }
        Event::SetupRan { exit_code, .. } => {
            Some(format!("{step:<16} setup ran (exit {exit_code})"))
        }
        Event::SetupCached { .. } => Some(format!("{step:<16} setup up to date")),
        Event::CommitCreated { sha } => Some(format!("{step:<16} committed {sha}")),
        Event::RunFinished { outcome, reason } => {
            Some(format!("run {} {}: {reason}", record.run, outcome.as_str()))
        }
        Event::Error { message } => Some(format!("cordon: {message}")),
        _ => None,
    }
}
