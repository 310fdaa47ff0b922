//! Agent steps through the `AgentDriver` seam, with a scripted driver: verdicts routed,
//! artifacts and failures handed to the next attempt as feedback, events logged through the
//! engine's journal, open tool calls answered on resume.

use cordon_agent::{Journal, JournalError};
use cordon_engine::DriverError;
use cordon_engine::{AgentDriver, AgentTask, AgentVerdict, Control, Engine, StepSession};
use cordon_protocol::Event;
use cordon_protocol::event::Outcome;

use crate::harness::Harness;

/// A journal error as the driver's own error (the engine already knows why it stopped).
fn journal_error(err: JournalError) -> DriverError {
    DriverError::Journal(err)
}

/// Writes `review.md` with the verdict of its attempt, fails the first attempt as a reviewer
/// would, and records the feedback it was given.
struct Reviewer {
    workspace: std::path::PathBuf,
    seen_feedback: Vec<usize>,
}

impl AgentDriver for Reviewer {
    fn run(
        &mut self,
        task: &AgentTask<'_>,
        _session: &mut dyn StepSession,
        journal: &mut dyn Journal,
    ) -> Result<AgentVerdict, DriverError> {
        self.seen_feedback.push(task.feedback.len());
        let verdict = if task.attempt.get() == 1 {
            "NEEDS CHANGES"
        } else {
            "APPROVED"
        };
        journal
            .event(Event::ToolCall {
                id: "1".into(),
                name: "write_file".into(),
                arguments: serde_json::json!({"path": "review.md"}),
                server: None,
            })
            .map_err(journal_error)?;
        std::fs::write(
            self.workspace.join("review.md"),
            format!("notes\nVERDICT: {verdict}\n"),
        )
        .expect("write review.md");
        Ok(if task.attempt.get() == 1 {
            AgentVerdict::fail("`review.md` says `VERDICT: NEEDS CHANGES`")
        } else {
            AgentVerdict::pass()
        })
    }
}

#[test]
fn an_agent_verdict_from_its_artifact_routes_and_its_feedback_reaches_the_next_attempt() {
    let yaml = "name: p\nllm: {provider: replay, transcript: t.jsonl}\nsteps:\n  - {name: review, agent: review, artifact: review.md, verdicts: {pass: APPROVED, fail: NEEDS CHANGES}, on_fail: {goto: review, retry: true}}\n";
    let files: std::collections::BTreeMap<std::path::PathBuf, String> = [(
        "agents/review.agent.md".into(),
        "---\nname: review\n---\nReview.\n".to_owned(),
    )]
    .into_iter()
    .collect();
    let pipeline =
        cordon_pipeline::load_str("pipeline.yaml", yaml, std::path::Path::new(""), &files)
            .expect("valid")
            .pipeline;
    let mut h = Harness::new("name: p\nsteps:\n  - {name: x, command: x}\n");
    h.pipeline = pipeline;
    let mut driver = Reviewer {
        workspace: h.workspace.clone(),
        seen_feedback: Vec::new(),
    };
    let mut observer = |_: &cordon_protocol::Record| Control::Continue;
    let cx = h.context(Some(&mut driver));
    let mut engine = Engine::new(cx, &mut observer).expect("engine");
    engine.start(3, None).expect("start");
    assert_eq!(
        engine.drive().expect("drive"),
        cordon_engine::Ending::Finished(Outcome::Success)
    );
    drop(engine);
    assert_eq!(
        h.trace(),
        [
            "review@1:fail",
            "->review (retry)",
            "retry 2",
            "review@2:pass",
            "->success",
            "=success"
        ]
    );
    assert_eq!(
        driver.seen_feedback,
        [0, 1],
        "the second attempt got the first one's feedback"
    );
    let feedback = h.state().feedback;
    assert!(
        feedback[0].contains("`review.md` says `VERDICT: NEEDS CHANGES`")
            && feedback[0].contains("--- review.md ---\nnotes\n"),
        "{feedback:?}"
    );
    assert!(h.records().iter().any(|r| r.event.kind() == "tool.call"));
}

/// Calls one tool and never answers it itself (the engine stops it right after the call).
struct Caller;

impl AgentDriver for Caller {
    fn run(
        &mut self,
        _task: &AgentTask<'_>,
        _session: &mut dyn StepSession,
        journal: &mut dyn Journal,
    ) -> Result<AgentVerdict, DriverError> {
        journal
            .event(Event::ToolCall {
                id: "call-1".into(),
                name: "bash".into(),
                arguments: serde_json::json!({"command": "make"}),
                server: None,
            })
            .map_err(journal_error)?;
        journal
            .event(Event::ToolResult {
                id: "call-1".into(),
                ok: true,
                interrupted: None,
                output: "ok".into(),
            })
            .map_err(journal_error)?;
        Ok(AgentVerdict::pass())
    }
}

#[test]
fn an_unanswered_tool_call_gets_an_interrupted_result_on_resume() {
    let yaml = "name: p\nllm: {provider: replay, transcript: t.jsonl}\nsteps:\n  - {name: dev, agent: dev}\n";
    let files: std::collections::BTreeMap<std::path::PathBuf, String> = [(
        "agents/dev.agent.md".into(),
        "---\nname: dev\n---\nWork.\n".to_owned(),
    )]
    .into_iter()
    .collect();
    let mut h = Harness::new("name: p\nsteps:\n  - {name: x, command: x}\n");
    h.pipeline = cordon_pipeline::load_str("pipeline.yaml", yaml, std::path::Path::new(""), &files)
        .expect("valid")
        .pipeline;
    for stop_after_call in [true, false] {
        let mut driver = Caller;
        let mut observer = |r: &cordon_protocol::Record| {
            if stop_after_call && r.event.kind() == "tool.call" {
                Control::Stop
            } else {
                Control::Continue
            }
        };
        let cx = h.context(Some(&mut driver));
        let mut engine = Engine::new(cx, &mut observer).expect("engine");
        if stop_after_call {
            engine.start(3, None).expect("start");
        } else {
            engine.resume(3).expect("resume");
        }
        engine.drive().expect("drive");
    }
    let tools: Vec<String> = h
        .records()
        .iter()
        .filter_map(|r| match &r.event {
            Event::ToolCall { id, .. } => Some(format!("call {id}")),
            Event::ToolResult {
                id, interrupted, ..
            } => Some(format!("result {id} interrupted={interrupted:?}")),
            Event::StepStarted { .. } => Some("started".to_owned()),
            _ => None,
        })
        .collect();
    assert_eq!(
        tools,
        [
            "started",
            "call call-1",
            "result call-1 interrupted=Some(true)",
            "started",
            "call call-1",
            "result call-1 interrupted=None"
        ]
    );
    assert!(h.state().open_tool_calls.is_empty());
}

/// Says every attempt cannot be verified.
struct Unsure;

impl AgentDriver for Unsure {
    fn run(
        &mut self,
        _task: &AgentTask<'_>,
        _session: &mut dyn StepSession,
        _journal: &mut dyn Journal,
    ) -> Result<AgentVerdict, DriverError> {
        Ok(AgentVerdict::unverifiable(
            "the final message says `VERDICT: UNVERIFIABLE`",
        ))
    }
}

fn unverifiable_run(routes: &str) -> Vec<String> {
    let yaml = format!(
        "name: p\nllm: {{provider: replay, transcript: t.jsonl}}\nsteps:\n  - {{name: check, agent: review, verdicts: {{pass: PASS, fail: FAIL, unverifiable: UNVERIFIABLE}}{routes}}}\n  - {{name: manual, command: manual, on_pass: failure}}\n"
    );
    let files: std::collections::BTreeMap<std::path::PathBuf, String> = [(
        "agents/review.agent.md".into(),
        "---\nname: review\n---\nReview.\n".to_owned(),
    )]
    .into_iter()
    .collect();
    let pipeline =
        cordon_pipeline::load_str("pipeline.yaml", &yaml, std::path::Path::new(""), &files)
            .expect("valid")
            .pipeline;
    let mut h = Harness::new("name: p\nsteps:\n  - {name: x, command: x}\n");
    h.pipeline = pipeline;
    let mut driver = Unsure;
    let mut observer = |_: &cordon_protocol::Record| Control::Continue;
    let cx = h.context(Some(&mut driver));
    let mut engine = Engine::new(cx, &mut observer).expect("engine");
    engine.start(3, None).expect("start");
    engine.drive().expect("drive");
    drop(engine);
    h.trace()
}

#[test]
fn an_unverifiable_verdict_takes_its_own_route_and_by_default_the_fail_route() {
    assert_eq!(
        unverifiable_run(", on_unverifiable: manual, on_fail: failure"),
        [
            "check@1:unverifiable",
            "->manual",
            "manual@1:pass",
            "->failure",
            "=failure"
        ]
    );
    assert_eq!(
        unverifiable_run(", on_fail: manual"),
        [
            "check@1:unverifiable",
            "->manual",
            "manual@1:pass",
            "->failure",
            "=failure"
        ],
        "without on_unverifiable the verdict goes where a fail goes"
    );
    assert_eq!(
        unverifiable_run(", on_pass: manual"),
        ["check@1:unverifiable", "->failure", "=failure"]
    );
}
