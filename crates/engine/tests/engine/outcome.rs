//! Outcome runs (DESIGN §13) with a scripted model that plays the five roles through the
//! engine's own tools: invalid then valid graphs, a verify failure followed by a revision,
//! REVISE and REPLAN, budgets, a failed task with a skipped dependent beside an independent
//! task that finishes, grants requested in a plan inside and outside the bounds, per-task
//! commits, and a crash after every event converging to the same result.

use std::collections::BTreeMap;
use std::path::PathBuf;

use cordon_agent::{CustomContext, GrantDecision, Grants, Journal};
use cordon_egress::Pattern;
use cordon_engine::{
    AgentDriver, AgentTask, AgentVerdict, Control, DriverError, Ending, Engine, StepSession,
    TaskFold,
};
use cordon_protocol::event::{LlmSource, Outcome, TaskPhase};
use cordon_protocol::{Event, Record};
use serde_json::{Value, json};

use crate::fake::{Behaviour, fails};
use crate::harness::Harness;

const PIPELINE: &str = "name: outcome
llm: {provider: replay, transcript: t.jsonl}
outcome:
  decompose: planner
  plan: planner
  execute: {agent: dev, network: {allow: [], grants: true}}
  scrutinize: critic
  validate: {agent: critic, prompt: Be strict.}
  verify: [lint]
  max_revisions: 2
  max_replans: 1
  commit: none
";

const OUTCOME: &str = "Add a --json flag to the report command.";

fn pipeline(yaml: &str) -> cordon_pipeline::Pipeline {
    let files: BTreeMap<PathBuf, String> = ["planner", "dev", "critic"]
        .into_iter()
        .map(|name| {
            (
                PathBuf::from(format!("agents/{name}.agent.md")),
                format!("---\nname: {name}\n---\nYou are the {name}.\n"),
            )
        })
        .collect();
    match cordon_pipeline::load_str("pipeline.yaml", yaml, std::path::Path::new(""), &files) {
        Ok(loaded) => loaded.pipeline,
        Err(diagnostics) => panic!("the test pipeline is invalid: {diagnostics:?}"),
    }
}

/// The operator's `[grants]` bounds of these tests: `*.example.com` only.
struct Bounds;

impl Grants for Bounds {
    fn request(&mut self, pattern: &Pattern, _reason: &str) -> GrantDecision {
        if pattern.to_string().ends_with(".example.com") {
            GrantDecision::Granted
        } else {
            GrantDecision::Refused("outside the operator's `[grants]` bounds".to_owned())
        }
    }
}

/// The five roles, scripted by (step, attempt) only, so a resumed run is answered exactly as
/// the first was.
#[derive(Default)]
struct Roles {
    /// The engine-tool calls (`submit_tasks` / `submit_plan` arguments) of an attempt.
    calls: BTreeMap<(String, u32), Vec<Value>>,
    /// Files an attempt writes into the workspace.
    writes: BTreeMap<(String, u32), Vec<(String, String)>>,
    /// The final message of an attempt (default `done`).
    texts: BTreeMap<(String, u32), String>,
    /// What every attempt was told (step, attempt, its prompt) and what the tools answered.
    seen: Vec<(String, u32, String)>,
    answers: Vec<String>,
    /// Tokens each attempt's one model call reports.
    tokens: u64,
}

impl Roles {
    fn call(mut self, step: &str, attempt: u32, arguments: Value) -> Roles {
        self.calls
            .entry((step.to_owned(), attempt))
            .or_default()
            .push(arguments);
        self
    }

    fn write(mut self, step: &str, attempt: u32, path: &str, content: &str) -> Roles {
        self.writes
            .entry((step.to_owned(), attempt))
            .or_default()
            .push((path.to_owned(), content.to_owned()));
        self
    }

    fn say(mut self, step: &str, attempt: u32, text: &str) -> Roles {
        self.texts
            .insert((step.to_owned(), attempt), text.to_owned());
        self
    }

    fn prompt_of(&self, step: &str, attempt: u32) -> &str {
        self.seen
            .iter()
            .rev()
            .find(|(s, a, _)| s == step && *a == attempt)
            .map_or("", |(_, _, p)| p.as_str())
    }
}

impl AgentDriver for Roles {
    fn run(
        &mut self,
        task: &AgentTask<'_>,
        _session: &mut dyn StepSession,
        journal: &mut dyn Journal,
    ) -> Result<AgentVerdict, DriverError> {
        let step = task.step.name.to_string();
        let attempt = task.attempt.get();
        self.seen.push((
            step.clone(),
            attempt,
            task.agent.prompt.clone().unwrap_or_default(),
        ));
        journal
            .event(Event::LlmRequest {
                model: "m".into(),
                source: LlmSource::Agent,
                task: None,
            })
            .map_err(DriverError::Journal)?;
        journal
            .event(Event::LlmResponse {
                model: "m".into(),
                input_tokens: self.tokens,
                output_tokens: 0,
                latency_ms: 1,
                source: LlmSource::Agent,
                estimated: None,
            })
            .map_err(DriverError::Journal)?;
        let name = if step == "decompose" {
            "submit_tasks"
        } else {
            "submit_plan"
        };
        let calls = self
            .calls
            .get(&(step.clone(), attempt))
            .cloned()
            .unwrap_or_default();
        for (index, arguments) in calls.into_iter().enumerate() {
            let id = format!("c{index}");
            journal
                .event(Event::ToolCall {
                    id: id.clone(),
                    name: name.into(),
                    arguments: arguments.clone(),
                    server: None,
                })
                .map_err(DriverError::Journal)?;
            let tools = task.custom.expect("the phase offers its own tool");
            let answer = tools
                .borrow_mut()
                .call(
                    name,
                    &arguments.to_string(),
                    CustomContext {
                        journal: &mut *journal,
                        grants: &mut Bounds,
                    },
                )
                .map_err(DriverError::Journal)?;
            journal
                .event(Event::ToolResult {
                    id,
                    ok: answer.ok,
                    interrupted: None,
                    output: answer.output.clone(),
                })
                .map_err(DriverError::Journal)?;
            self.answers.push(answer.output);
        }
        for (path, content) in self
            .writes
            .get(&(step.clone(), attempt))
            .cloned()
            .unwrap_or_default()
        {
            // Into the attempt's own workspace: a parallel task's worktree, or the main one.
            // A content starting with `+` is appended to what the file holds.
            let full = task.workspace.join(path);
            let content = match content.strip_prefix('+') {
                Some(more) => std::fs::read_to_string(&full).unwrap_or_default() + more,
                None => content,
            };
            std::fs::write(full, content).expect("write");
        }
        let text = self
            .texts
            .get(&(step, attempt))
            .cloned()
            .unwrap_or_else(|| "done".to_owned());
        Ok(AgentVerdict {
            text: Some(text),
            ..AgentVerdict::pass()
        })
    }
}

/// The roles shared by the drivers the engine forks for parallel tasks (one attempt at a time).
#[derive(Clone)]
struct Shared(std::sync::Arc<std::sync::Mutex<Roles>>);

impl AgentDriver for Shared {
    fn run(
        &mut self,
        task: &AgentTask<'_>,
        session: &mut dyn StepSession,
        journal: &mut dyn Journal,
    ) -> Result<AgentVerdict, DriverError> {
        self.0.lock().expect("roles").run(task, session, journal)
    }

    fn fork(&self) -> Option<Box<dyn AgentDriver + Send>> {
        Some(Box::new(self.clone()))
    }
}

/// Starts (when fresh) or resumes the outcome run and drives it; `stop_after`: stop once the log
/// holds that many events, as if the process died there.
fn drive(
    h: &mut Harness,
    roles: &mut dyn AgentDriver,
    stop_after: Option<u64>,
) -> Result<Ending, String> {
    let fresh = h.records().is_empty();
    let mut observer = |record: &Record| match stop_after {
        Some(k) if record.seq >= k => Control::Stop,
        _ => Control::Continue,
    };
    let cx = h.context(Some(roles));
    let mut engine = Engine::new(cx, &mut observer).map_err(|e| e.to_string())?;
    if fresh {
        engine
            .start_run(3, None, Some(OUTCOME.to_owned()), Vec::new())
            .map_err(|e| e.to_string())?;
        if stop_after.is_some_and(|k| k <= 1) {
            return Ok(Ending::Stopped);
        }
    } else if !engine.state().is_finished() {
        engine.resume(3).map_err(|e| e.to_string())?;
    }
    engine.drive().map_err(|e| e.to_string())
}

fn finish(h: &mut Harness, roles: &mut dyn AgentDriver) -> Outcome {
    match drive(h, roles, None) {
        Ok(Ending::Finished(outcome)) => outcome,
        other => panic!("the run did not finish: {other:?}"),
    }
}

fn tasks(h: &Harness) -> TaskFold {
    TaskFold::replay(&h.records())
}

/// Each task's state, revisions and replans.
fn summary(fold: &TaskFold) -> Vec<(String, TaskPhase, u32, u32)> {
    fold.tasks
        .iter()
        .map(|t| {
            let p = &fold.progress[&t.id];
            (t.id.clone(), p.state, p.revision, p.replan)
        })
        .collect()
}

/// The phase steps in the order they finished, with their verdicts.
fn phases(h: &Harness) -> Vec<String> {
    crate::harness::trace(&h.records())
        .into_iter()
        .filter(|t| t.contains('@'))
        .collect()
}

fn plan(steps: &[&str]) -> Value {
    json!({"steps": steps})
}

/// The reference outcome: an invalid graph fixed in the same conversation; `t1` fails its first
/// verify, is revised, then the validator asks for another revision before accepting; `t2`
/// (after `t1`) is sent back to plan once; `t3` is independent.
fn reference() -> Roles {
    let invalid = json!({"tasks": [
        {"id": "t1", "title": "Parse the flag", "depends_on": ["t2"]},
        {"id": "t2", "title": "Print JSON", "depends_on": ["t1"]}
    ]});
    let valid = json!({"tasks": [
        {"id": "t1", "title": "Parse the flag", "description": "Accept --json.", "acceptance": ["--json is accepted"], "verify": ["test-t1"]},
        {"id": "t2", "title": "Print JSON", "depends_on": ["t1"], "verify": ["test-t2"]},
        {"id": "t3", "title": "Document it"}
    ]});
    Roles {
        tokens: 10,
        ..Roles::default()
    }
    .call("decompose", 1, invalid)
    .call("decompose", 1, valid)
    .call("t1.plan", 1, plan(&["edit the parser"]))
    .write("t1.execute", 1, "flag.txt", "--json\n")
    .say("t1.scrutinize", 1, "The flag is parsed but never tested.")
    .say("t1.scrutinize", 2, "Looks right now.")
    .say(
        "t1.validate",
        1,
        "Needs a test for --json.\nVERDICT: REVISE",
    )
    .say("t1.validate", 2, "Good.\nVERDICT: ACCEPT")
    .call("t2.plan", 1, plan(&["print everything"]))
    .say(
        "t2.validate",
        1,
        "The plan prints secrets.\nVERDICT: REPLAN",
    )
    .call("t2.plan", 2, plan(&["print only the report"]))
    .say("t2.validate", 2, "VERDICT: ACCEPT")
    .call("t3.plan", 1, plan(&["write docs"]))
    .say("t3.validate", 1, "VERDICT: ACCEPT")
}

fn scripted(h: &mut Harness) {
    h.fake.on(
        "test-t1",
        1,
        Behaviour {
            stdout: "1 test failed: --json unknown\n".into(),
            ..fails(1, "assertion failed\n")
        },
    );
}

fn harness() -> Harness {
    let mut h = Harness::new("name: p\nsteps:\n  - {name: x, command: x}\n");
    h.pipeline = pipeline(PIPELINE);
    scripted(&mut h);
    h
}

#[test]
fn an_outcome_goes_from_a_graph_through_every_phase_of_each_task() {
    let mut h = harness();
    let mut roles = reference();
    assert_eq!(finish(&mut h, &mut roles), Outcome::Success);
    let fold = tasks(&h);
    assert_eq!(
        summary(&fold),
        [
            ("t1".to_owned(), TaskPhase::Done, 2, 0),
            ("t2".to_owned(), TaskPhase::Done, 0, 1),
            ("t3".to_owned(), TaskPhase::Done, 0, 0),
        ]
    );
    assert_eq!(
        phases(&h),
        [
            "decompose@1:pass",
            "t1.plan@1:pass",
            "t1.execute@1:pass",
            "t1.scrutinize@1:pass",
            "t1.verify@1:fail",
            "t1.execute@2:pass",
            "t1.scrutinize@2:pass",
            "t1.verify@2:pass",
            "t1.validate@1:fail",
            "t1.execute@3:pass",
            "t1.scrutinize@3:pass",
            "t1.verify@3:pass",
            "t1.validate@2:pass",
            "t2.plan@1:pass",
            "t2.execute@1:pass",
            "t2.scrutinize@1:pass",
            "t2.verify@1:pass",
            "t2.validate@1:fail",
            "t2.plan@2:pass",
            "t2.execute@2:pass",
            "t2.scrutinize@2:pass",
            "t2.verify@2:pass",
            "t2.validate@2:pass",
            "t3.plan@1:pass",
            "t3.execute@1:pass",
            "t3.scrutinize@1:pass",
            "t3.verify@1:pass",
            "t3.validate@1:pass",
        ]
    );
    // The invalid graph was answered with its problem in the same conversation.
    assert!(
        roles.answers[0].starts_with("error: `submit_tasks` was not accepted")
            && roles.answers[0].contains("the dependencies form a cycle"),
        "{:?}",
        roles.answers[0]
    );
    assert!(roles.answers[1].starts_with("accepted 3 tasks: t1, t2, t3"));
    assert!(roles.prompt_of("decompose", 1).contains(OUTCOME));
    // Every phase's message holds the task; each adds what its phase works on.
    for phase in ["plan", "execute", "scrutinize", "validate"] {
        let prompt = roles.prompt_of(&format!("t1.{phase}"), 1);
        assert!(
            prompt.contains("## Task `t1`: Parse the flag")
                && prompt.contains("Accept --json.")
                && prompt.contains("- --json is accepted"),
            "t1.{phase}: {prompt}"
        );
    }
    let revision = roles.prompt_of("t1.execute", 2);
    assert!(
        revision.contains("## Revision 1: what to fix")
            && revision.contains("verify failed: `test-t1` exited with status 1")
            && revision.contains("1 test failed: --json unknown"),
        "the revision got the verify output: {revision}"
    );
    assert!(
        roles
            .prompt_of("t1.execute", 1)
            .contains("1. edit the parser")
    );
    let second = roles.prompt_of("t1.execute", 3);
    assert!(
        second.contains("## Revision 2") && second.contains("Needs a test for --json."),
        "{second}"
    );
    // Validate 1 follows the second scrutinize (the first verify failed in between).
    let validate = roles.prompt_of("t1.validate", 1);
    assert!(
        validate.contains("## The critic's findings\n\nLooks right now.")
            && validate.contains("VERDICT: REPLAN")
            && validate.ends_with("Be strict."),
        "the validator got the critic's findings and its own prompt: {validate}"
    );
    let replan = roles.prompt_of("t2.plan", 2);
    assert!(
        replan.contains("replan 1") && replan.contains("The plan prints secrets."),
        "{replan}"
    );
    // The first execute after a replan is no revision.
    assert!(!roles.prompt_of("t2.execute", 2).contains("## Revision"));
    // Only execute and verify write: decompose, the planner, the critic and the validator
    // run on a read-only workspace.
    for opened in &h.fake.opened {
        assert_eq!(
            opened.read_only,
            !(opened.step.ends_with(".execute") || opened.step.ends_with(".verify")),
            "{}",
            opened.step
        );
    }
    let line = h
        .records()
        .iter()
        .find(|r| r.step.as_ref().is_some_and(|s| s.as_str() == "t2.verify"))
        .expect("a t2.verify event")
        .to_json_line();
    assert!(line.contains(r#""data":{"task":"t2""#), "{line}");
}

#[test]
fn a_failed_task_skips_its_dependents_and_an_independent_task_still_finishes() {
    let mut h = Harness::new("name: p\nsteps:\n  - {name: x, command: x}\n");
    h.pipeline = pipeline(&PIPELINE.replace("max_revisions: 2", "max_revisions: 0"));
    scripted(&mut h);
    let mut roles = reference();
    assert_eq!(finish(&mut h, &mut roles), Outcome::Failure);
    let fold = tasks(&h);
    assert_eq!(
        summary(&fold),
        [
            ("t1".to_owned(), TaskPhase::Failed, 0, 0),
            ("t2".to_owned(), TaskPhase::Skipped, 0, 0),
            ("t3".to_owned(), TaskPhase::Done, 0, 0),
        ]
    );
    assert!(
        fold.progress["t1"]
            .reason
            .as_deref()
            .is_some_and(|r| r.contains("`max_revisions` (0) is used up")),
        "{:?}",
        fold.progress["t1"].reason
    );
    assert_eq!(
        fold.progress["t2"].reason.as_deref(),
        Some("it depends on `t1`, which failed")
    );
    assert_eq!(
        h.state().reason.as_deref(),
        Some("failed: `t1`; skipped: `t2`")
    );
    assert!(
        !phases(&h).iter().any(|p| p.starts_with("t2.")),
        "a skipped task runs nothing"
    );
}

#[test]
fn grants_asked_for_in_a_plan_are_decided_at_once_and_scoped_to_the_task_across_resume() {
    let mut h = harness();
    let mut roles = reference().call(
        "t1.plan",
        1,
        json!({"steps": ["fetch"], "egress": [
            {"domain": "pkg.example.com", "reason": "the schema"},
            {"domain": "collector.test", "reason": "telemetry"}
        ]}),
    );
    // The first call of `t1.plan` attempt 1 has no egress; the script's second one asks.
    // Stop right after t1's first verify started, then resume: the grant still applies to
    // t1's execute after the revision.
    let stop = {
        let mut probe = harness();
        let mut probe_roles = reference().call(
            "t1.plan",
            1,
            json!({"steps": ["fetch"], "egress": [
                {"domain": "pkg.example.com", "reason": "the schema"},
                {"domain": "collector.test", "reason": "telemetry"}
            ]}),
        );
        finish(&mut probe, &mut probe_roles);
        probe
            .records()
            .iter()
            .find(|r| {
                r.step.as_ref().is_some_and(|s| s.as_str() == "t1.verify")
                    && matches!(r.event, Event::StepStarted { .. })
            })
            .expect("t1.verify started")
            .seq
    };
    assert_eq!(drive(&mut h, &mut roles, Some(stop)), Ok(Ending::Stopped));
    assert_eq!(finish(&mut h, &mut roles), Outcome::Success);
    let answer = roles
        .answers
        .iter()
        .find(|a| a.contains("granted"))
        .expect("the plan's answer");
    assert!(
        answer.contains("granted pkg.example.com")
            && answer.contains("refused collector.test: outside the operator's `[grants]` bounds"),
        "{answer}"
    );
    let grants: Vec<(String, Option<String>)> = h
        .records()
        .iter()
        .filter_map(|r| match &r.event {
            Event::PolicyGrant { domain, task, .. } => Some((domain.clone(), task.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(
        grants,
        [("pkg.example.com".to_owned(), Some("t1".to_owned()))]
    );
    assert!(h.records().iter().any(|r| matches!(
        &r.event,
        Event::PolicyRefuse { domain, task: Some(t), .. } if domain == "collector.test" && t == "t1"
    )));
    for opened in &h.fake.opened {
        let expected: &[&str] = if opened.step == "t1.execute" {
            &["pkg.example.com"]
        } else {
            &[]
        };
        assert_eq!(opened.grants, expected, "{}", opened.step);
    }
    assert_eq!(
        h.fake
            .opened
            .iter()
            .filter(|o| o.step == "t1.execute")
            .count(),
        3,
        "every execute of t1 (after the resume too) had the grant"
    );
}

#[test]
fn a_plan_asking_for_egress_when_execute_takes_no_grants_is_told_so() {
    let mut h = Harness::new("name: p\nsteps:\n  - {name: x, command: x}\n");
    h.pipeline = pipeline(&PIPELINE.replace(
        "execute: {agent: dev, network: {allow: [], grants: true}}",
        "execute: dev",
    ));
    scripted(&mut h);
    let mut roles = reference().call(
        "t3.plan",
        1,
        json!({"steps": ["x"], "egress": [{"domain": "pkg.example.com", "reason": "r"}]}),
    );
    finish(&mut h, &mut roles);
    assert!(
        roles
            .answers
            .iter()
            .any(|a| a
                .contains("refused pkg.example.com: this task's execute phase takes no grants")),
        "{:?}",
        roles.answers
    );
    assert!(
        !h.records()
            .iter()
            .any(|r| matches!(r.event, Event::PolicyGrant { .. }))
    );
}

#[test]
fn a_decompose_without_a_valid_graph_fails_the_run_after_its_attempts() {
    let mut h = harness();
    let mut roles = Roles::default().call("decompose", 1, json!({"tasks": []}));
    assert_eq!(finish(&mut h, &mut roles), Outcome::Failure);
    assert_eq!(
        phases(&h),
        ["decompose@1:fail", "decompose@2:fail", "decompose@3:fail"]
    );
    assert!(
        roles.prompt_of("decompose", 2).contains(
            "It ended without an accepted graph: it ended without an accepted `submit_tasks` call"
        ),
        "the next attempt is told why: {}",
        roles.prompt_of("decompose", 2)
    );
    let reason = h.state().reason.unwrap_or_default();
    assert!(
        reason.starts_with("decompose ended without a valid task graph in 3 attempts")
            && reason.contains("it ended without an accepted `submit_tasks` call"),
        "{reason}"
    );
}

#[test]
fn a_budget_stops_the_outcome_run_resumably_and_a_higher_limit_finishes_it() {
    let mut h = harness();
    h.pipeline.budget.tokens = std::num::NonZeroU64::new(45);
    let mut roles = reference();
    let stopped = drive(&mut h, &mut roles, None).expect_err("the budget stops the run");
    assert!(
        stopped.contains("budget exhausted: tokens 50 of 45"),
        "{stopped}"
    );
    assert!(
        h.records()
            .iter()
            .any(|r| matches!(r.event, Event::BudgetExhausted { .. }))
    );
    assert!(!h.state().is_finished(), "resumable");
    h.overrides.tokens = std::num::NonZeroU64::new(10_000);
    assert_eq!(finish(&mut h, &mut roles), Outcome::Success);
    assert_eq!(
        summary(&tasks(&h))
            .iter()
            .map(|(_, state, ..)| *state)
            .collect::<Vec<_>>(),
        [TaskPhase::Done; 3]
    );
}

#[test]
fn resume_after_any_event_of_an_outcome_run_converges_to_the_same_result() {
    let mut reference_run = harness();
    let mut roles = reference();
    finish(&mut reference_run, &mut roles);
    let expected = (phases(&reference_run), summary(&tasks(&reference_run)));
    let total = reference_run.records().len() as u64;
    assert!(
        total > 100,
        "long enough to be interesting ({total} events)"
    );
    for k in 1..=total {
        let mut h = harness();
        let mut roles = reference();
        assert_eq!(
            drive(&mut h, &mut roles, Some(k)),
            Ok(Ending::Stopped),
            "k = {k}"
        );
        if k % 3 == 0 && k < total {
            let _ = drive(&mut h, &mut roles, Some(k + 5));
        }
        assert_eq!(finish(&mut h, &mut roles), Outcome::Success, "k = {k}");
        let fold = tasks(&h);
        assert_eq!(
            (phases(&h), summary(&fold)),
            expected,
            "after a crash at event {k}"
        );
        // Every tool call has exactly one result, and the sequence is contiguous.
        let records = h.records();
        let calls = records
            .iter()
            .filter(|r| r.event.kind() == "tool.call")
            .count();
        let results = records
            .iter()
            .filter(|r| r.event.kind() == "tool.result")
            .count();
        assert_eq!(calls, results, "k = {k}");
        assert!(
            records
                .iter()
                .enumerate()
                .all(|(i, r)| r.seq == i as u64 + 1),
            "k = {k}"
        );
    }
}

/// The harness's workspace as a git repository with one commit, the engine's git over it.
fn with_git(h: &mut Harness) {
    let git = |args: &[&str]| {
        let out = std::process::Command::new("git")
            .args(args)
            .current_dir(&h.workspace)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@example.test")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@example.test")
            .output()
            .expect("git");
        assert!(out.status.success(), "git {args:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    std::fs::write(h.workspace.join("README.md"), "start\n").expect("write");
    git(&["init", "-q", "-b", "main"]);
    git(&["add", "-A"]);
    git(&["commit", "-q", "-m", "start"]);
    let env = |_: &str| None;
    h.host = cordon_engine::run::open_workspace(
        &h.workspace,
        &h.pipeline,
        Some(&h.dir.path().join("scratch")),
        &env,
    )
    .expect("the engine's git");
}

fn log(h: &Harness) -> String {
    let out = std::process::Command::new("git")
        .args([
            "log",
            "--format=%s|%(trailers:key=Cordon-Task,valueonly,separator=)",
        ])
        .current_dir(&h.workspace)
        .output()
        .expect("git log");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn each_commit_mode_commits_as_it_says_and_once_across_a_resume() {
    for (mode, expected) in [
        (
            "per_task",
            "t3: Document it|t3\nt2: Print JSON|t2\nt1: Parse the flag|t1\nstart|\n",
        ),
        ("end", "Add a --json flag to the report command.|\nstart|\n"),
        ("none", "start|\n"),
    ] {
        let mut h = Harness::new("name: p\nsteps:\n  - {name: x, command: x}\n");
        h.pipeline = pipeline(&PIPELINE.replace("commit: none", &format!("commit: {mode}")));
        scripted(&mut h);
        with_git(&mut h);
        let mut roles = reference()
            .write("t2.execute", 1, "json.txt", "{}\n")
            .write("t3.execute", 1, "docs.txt", "--json\n");
        // Stop right after the first commit, then resume: every commit is made once.
        let first_commit = {
            let mut probe = Harness::new("name: p\nsteps:\n  - {name: x, command: x}\n");
            probe.pipeline = h.pipeline.clone();
            scripted(&mut probe);
            with_git(&mut probe);
            let mut probe_roles = reference()
                .write("t2.execute", 1, "json.txt", "{}\n")
                .write("t3.execute", 1, "docs.txt", "--json\n");
            finish(&mut probe, &mut probe_roles);
            probe
                .records()
                .iter()
                .find(|r| matches!(r.event, Event::CommitCreated { .. }))
                .map(|r| r.seq)
        };
        if let Some(seq) = first_commit {
            assert_eq!(drive(&mut h, &mut roles, Some(seq)), Ok(Ending::Stopped));
        }
        assert_eq!(finish(&mut h, &mut roles), Outcome::Success, "{mode}");
        assert_eq!(log(&h), expected, "commit: {mode}");
        let created = h
            .records()
            .iter()
            .filter(|r| matches!(r.event, Event::CommitCreated { .. }))
            .count();
        assert_eq!(
            created,
            expected.lines().count() - 1,
            "commit: {mode}: one commit.created per commit"
        );
    }
}

#[test]
fn a_verify_that_changes_the_work_tree_fails_so_only_reviewed_work_is_committed() {
    let mut h = Harness::new("name: p\nsteps:\n  - {name: x, command: x}\n");
    h.pipeline = pipeline(&PIPELINE.replace("commit: none", "commit: per_task"));
    with_git(&mut h);
    // The first verify of t1 passes its command but writes a file nobody reviewed.
    h.fake.on(
        "test-t1",
        1,
        Behaviour {
            writes: vec![("sneaky.txt".into(), "unreviewed\n".into())],
            ..Behaviour::default()
        },
    );
    let mut roles = reference();
    assert_eq!(finish(&mut h, &mut roles), Outcome::Success);
    let verify = h
        .records()
        .iter()
        .find_map(|r| match &r.event {
            Event::StepFinished {
                verdict: cordon_protocol::event::Verdict::Fail,
                reason: Some(reason),
                ..
            } if r.step.as_ref().is_some_and(|s| s.as_str() == "t1.verify") => Some(reason.clone()),
            _ => None,
        })
        .expect("t1's first verify failed");
    assert!(
        verify.starts_with("verify changed the work tree that execute left"),
        "{verify}"
    );
    // The revision's execute took the file in, so the critic saw it before it was committed.
    let critic = roles.prompt_of("t1.scrutinize", 2);
    assert!(critic.contains("sneaky.txt"), "{critic}");
    assert!(log(&h).contains("t1: Parse the flag|t1"));
}

#[test]
fn a_commit_that_cannot_be_made_fails_the_task_or_the_run_saying_why() {
    // No git under the harness's workspace: `cordon do` refuses that at start, so this is the
    // path of a commit that fails later (the repository broke under the run).
    let mut h = Harness::new("name: p\nsteps:\n  - {name: x, command: x}\n");
    h.pipeline = pipeline(&PIPELINE.replace("commit: none", "commit: per_task"));
    scripted(&mut h);
    let mut roles = reference();
    assert_eq!(finish(&mut h, &mut roles), Outcome::Failure);
    let fold = tasks(&h);
    assert_eq!(fold.progress["t1"].state, TaskPhase::Failed);
    assert_eq!(
        fold.progress["t1"].reason.as_deref(),
        Some(
            "accepted, but its commit failed: committing needs the workspace's git; run cordon in \
             a git work tree, or drop the commit"
        )
    );
    assert_eq!(fold.progress["t2"].state, TaskPhase::Skipped);

    let mut h = Harness::new("name: p\nsteps:\n  - {name: x, command: x}\n");
    h.pipeline = pipeline(&PIPELINE.replace("commit: none", "commit: end"));
    scripted(&mut h);
    let mut roles = reference();
    assert_eq!(finish(&mut h, &mut roles), Outcome::Failure);
    assert_eq!(
        h.state().reason.as_deref(),
        Some(
            "every task is done, but the run's commit failed: committing needs the workspace's \
             git; run cordon in a git work tree, or drop the commit"
        )
    );
    assert_eq!(
        summary(&tasks(&h))
            .iter()
            .map(|(_, state, ..)| *state)
            .collect::<Vec<_>>(),
        [TaskPhase::Done; 3]
    );
}

/// Two independent tasks, `parallel: 2`, each committed: `t1` writes `a.txt`, `t2` writes
/// `b.txt` (or `shared` for both), and (with `meet`) their verify commands meet each other.
fn parallel_harness(shared: Option<(&str, &str)>, meet_up: bool) -> (Harness, Shared, PathBuf) {
    let mut h = Harness::new("name: p\nsteps:\n  - {name: x, command: x}\n");
    h.pipeline = pipeline(
        &PIPELINE
            .replace("commit: none", "commit: per_task\n  parallel: 2")
            .replace("verify: [lint]", "verify: []"),
    );
    with_git(&mut h);
    let meet = h.dir.path().join("meet");
    std::fs::create_dir_all(&meet).expect("mkdir");
    for (mine, theirs) in [("t1", "t2"), ("t2", "t1")].into_iter().filter(|_| meet_up) {
        h.fake.on(
            &format!("verify-{mine}"),
            1,
            Behaviour {
                meet: Some((meet.join(mine), meet.join(theirs))),
                ..Behaviour::default()
            },
        );
    }
    let graph = json!({"tasks": [
        {"id": "t1", "title": "First", "verify": ["verify-t1"]},
        {"id": "t2", "title": "Second", "verify": ["verify-t2"]}
    ]});
    let (one, two) = match shared {
        Some((a, b)) => (("shared.txt", a), ("shared.txt", b)),
        None => (("a.txt", "from t1\n"), ("b.txt", "from t2\n")),
    };
    let roles = Roles::default()
        .call("decompose", 1, graph)
        .call("t1.plan", 1, plan(&["one"]))
        .call("t2.plan", 1, plan(&["two"]))
        .write("t1.execute", 1, one.0, one.1)
        .write("t2.execute", 1, two.0, two.1)
        .say("t1.validate", 1, "VERDICT: ACCEPT")
        .say("t2.validate", 1, "VERDICT: ACCEPT")
        .say("t1.validate", 2, "VERDICT: ACCEPT")
        .say("t2.validate", 2, "VERDICT: ACCEPT");
    (
        h,
        Shared(std::sync::Arc::new(std::sync::Mutex::new(roles))),
        meet,
    )
}

#[test]
fn two_parallel_tasks_run_at_once_in_their_own_worktrees_and_both_are_merged_and_committed() {
    let (mut h, mut roles, meet) = parallel_harness(None, true);
    assert_eq!(finish(&mut h, &mut roles), Outcome::Success);
    // Both verify commands saw each other: they ran at the same time.
    assert!(meet.join("t1").exists() && meet.join("t2").exists());
    assert_eq!(
        summary(&tasks(&h)),
        [
            ("t1".into(), TaskPhase::Done, 0, 0),
            ("t2".into(), TaskPhase::Done, 0, 0)
        ]
    );
    assert_eq!(
        std::fs::read_to_string(h.workspace.join("a.txt")).expect("a"),
        "from t1\n"
    );
    assert_eq!(
        std::fs::read_to_string(h.workspace.join("b.txt")).expect("b"),
        "from t2\n"
    );
    let log = log(&h);
    assert!(
        log.contains("t1: First|t1") && log.contains("t2: Second|t2"),
        "{log}"
    );
    assert_eq!(
        log.lines().count(),
        3,
        "two task commits on the start: {log}"
    );
    // Every phase of a task ran in that task's worktree; decompose in the main workspace.
    let forked = h.fake.forked.lock().expect("forked").clone();
    assert!(!forked.is_empty());
    for (workspace, opened) in &forked {
        let task = opened.step.split('.').next().expect("a task");
        assert!(
            workspace.ends_with(format!("worktrees/{}/{task}/work", h.run)),
            "{} ran in {}",
            opened.step,
            workspace.display()
        );
        let writes = opened.step.ends_with(".execute") || opened.step.ends_with(".verify");
        assert_eq!(opened.read_only, !writes, "{}", opened.step);
    }
    assert!(h.fake.opened.iter().all(|o| o.step == "decompose"));
    assert!(
        !h.dir
            .path()
            .join("state/worktrees")
            .join(h.run.to_string())
            .exists(),
        "the run's worktrees are removed when it ends"
    );
    let records = h.records();
    assert!(
        records
            .iter()
            .enumerate()
            .all(|(i, r)| r.seq == i as u64 + 1)
    );
    // Each task's diff is its own change only.
    let diff_of = |step: &str| {
        records
            .iter()
            .rev()
            .find_map(|r| match (&r.step, &r.event) {
                (
                    Some(s),
                    Event::StepFinished {
                        diff: Some(blob), ..
                    },
                ) if s.as_str() == step => h.store.blob(*blob).expect("blob"),
                _ => None,
            })
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default()
    };
    let one = diff_of("t1.execute");
    assert!(one.contains("a.txt") && !one.contains("b.txt"), "{one}");
}

#[test]
fn two_parallel_tasks_changing_the_same_line_conflict_and_the_later_is_revised_on_top() {
    let (mut h, mut roles, _) = parallel_harness(Some(("value = 1\n", "value = 2\n")), true);
    std::fs::write(h.workspace.join("shared.txt"), "value = 0\n").expect("write");
    // Committed, so both tasks change the same line of a tracked file.
    for args in [
        vec!["add", "shared.txt"],
        vec![
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@example.test",
            "commit",
            "-qm",
            "shared",
        ],
    ] {
        let status = std::process::Command::new("git")
            .args(&args)
            .current_dir(&h.workspace)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .status()
            .expect("git");
        assert!(status.success());
    }
    // Whichever merges second conflicts; its second execute builds on the other's line.
    {
        let mut inner = roles.0.lock().expect("roles");
        let taken = std::mem::take(&mut *inner);
        *inner = taken
            .write("t1.execute", 2, "shared.txt", "+and t1\n")
            .write("t2.execute", 2, "shared.txt", "+and t2\n");
    }
    assert_eq!(finish(&mut h, &mut roles), Outcome::Success);
    let fold = tasks(&h);
    let revised: Vec<&String> = fold
        .tasks
        .iter()
        .map(|t| &t.id)
        .filter(|id| fold.progress[*id].revision == 1)
        .collect();
    assert_eq!(revised.len(), 1, "{:?}", summary(&fold));
    let (loser, winner) = if revised[0] == "t1" {
        ("t1", "t2")
    } else {
        ("t2", "t1")
    };
    let conflicted = h.records().iter().any(|r| {
        matches!(&r.event, Event::TaskState { task, state: TaskPhase::Executing, reason: Some(reason), .. }
            if task == loser && reason.contains("conflicted") && reason.contains("<<<<<<<"))
    });
    assert!(conflicted, "the conflict is the revision's findings");
    let roles = roles.0.lock().expect("roles");
    assert!(
        roles
            .prompt_of(&format!("{loser}.execute"), 2)
            .contains("conflicted"),
        "the second execute is told about the conflict"
    );
    let value = |task: &str| {
        if task == "t1" {
            "value = 1"
        } else {
            "value = 2"
        }
    };
    assert_eq!(
        std::fs::read_to_string(h.workspace.join("shared.txt")).expect("shared"),
        format!("{}\nand {loser}\n", value(winner)),
        "the revision ran on a fresh worktree holding the accepted task"
    );
    assert_eq!(log(&h).lines().count(), 4, "two task commits: {}", log(&h));
}

#[test]
fn a_parallel_run_stopped_after_any_event_resumes_to_the_same_result() {
    // Without the meeting commands: a task stopped while waiting for the other would wait out
    // its bound.
    let (mut reference, mut roles, _) = parallel_harness(None, false);
    assert_eq!(finish(&mut reference, &mut roles), Outcome::Success);
    let total = reference.records().len() as u64;
    // Every fifth event (and the last few), each a fresh run stopped there and resumed.
    let mut ks: Vec<u64> = (2..total).step_by(5).collect();
    ks.extend(total.saturating_sub(3)..total);
    for k in ks {
        let (mut h, mut roles, _) = parallel_harness(None, false);
        assert_eq!(
            drive(&mut h, &mut roles, Some(k)),
            Ok(Ending::Stopped),
            "k = {k}"
        );
        assert_eq!(finish(&mut h, &mut roles), Outcome::Success, "k = {k}");
        assert_eq!(summary(&tasks(&h)), summary(&tasks(&reference)), "k = {k}");
        assert_eq!(
            std::fs::read_to_string(h.workspace.join("a.txt")).expect("a"),
            "from t1\n"
        );
        assert_eq!(
            std::fs::read_to_string(h.workspace.join("b.txt")).expect("b"),
            "from t2\n"
        );
        assert_eq!(log(&h).lines().count(), 3, "k = {k}: {}", log(&h));
        let records = h.records();
        assert!(
            records
                .iter()
                .enumerate()
                .all(|(i, r)| r.seq == i as u64 + 1),
            "k = {k}"
        );
    }
}
