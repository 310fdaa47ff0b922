//! The resource guardrail: samples when a sandboxed step starts, while its command (or an agent's
//! tool call) runs, and when it ended become `resources.sample` events; crossing `disk_warn` or
//! `mem_warn` a single `resources.warning`; a disk past `disk_abort` stops the running command
//! and fails the step with the contract's reason — judged on the attempt's own samples only.

use std::rc::Rc;

use cordon_agent::{Journal, JournalError};
use cordon_engine::DriverError;
use cordon_engine::executor::Gauges;
use cordon_engine::resources::{DiskLimits, Limits, Memory};
use cordon_engine::{AgentDriver, AgentTask, AgentVerdict, Control, Engine, StepSession};
use cordon_protocol::Event;
use cordon_protocol::event::{Outcome, OutputStream};

use crate::fake::{Behaviour, MAX_TICKS};
use crate::harness::{Harness, guard};

const LIMITS: Limits = Limits {
    disk: DiskLimits {
        warn: 85,
        abort: 95,
    },
    mem_warn: 90,
};

const WORKSPACE_WARNING: &str = "the workspace filesystem is 97% full, past the 95% limit: the \
                                 step is stopped and fails; free space or raise `[limits] \
                                 disk_abort` in the operator policy";

/// `step: type detail` for every resource event, `sandbox.exec` and step end.
fn resources(h: &Harness) -> Vec<String> {
    h.records()
        .iter()
        .filter_map(|r| {
            let step = r.step.as_ref().map_or("-", |s| s.as_str());
            match &r.event {
                Event::ResourcesSample {
                    disk_percent,
                    memory_bytes,
                } => Some(match memory_bytes {
                    Some(bytes) => format!(
                        "{step}: sample {} mem {}",
                        disk_percent.unwrap_or(0),
                        bytes >> 20
                    ),
                    None => format!("{step}: sample {}", disk_percent.unwrap_or(0)),
                }),
                Event::ResourcesWarning { message } => Some(format!("{step}: warning {message}")),
                Event::SandboxExec { exit_code, .. } => Some(format!("{step}: exec {exit_code}")),
                Event::StepFinished {
                    verdict, reason, ..
                } => Some(format!(
                    "{step}: finished {verdict:?} {}",
                    reason.as_deref().unwrap_or("")
                )),
                _ => None,
            }
        })
        .collect()
}

fn running(gauges: Vec<Gauges>) -> Behaviour {
    Behaviour {
        until_stopped: true,
        gauges,
        ..Behaviour::default()
    }
}

fn tmp(percent: u8) -> Gauges {
    Gauges {
        tmp_percent: Some(percent),
        ..Gauges::default()
    }
}

#[test]
fn a_command_still_running_when_the_disk_passes_disk_abort_is_stopped_and_the_step_fails() {
    let mut h = Harness::new("name: p\nsteps:\n  - {name: fill, command: fill}\n");
    h.fake.on("fill", 0, running(vec![]));
    h.limits = Some(LIMITS);
    // The start, two ticks while it runs (the second past abort), nothing afterwards.
    h.disk_samples.borrow_mut().extend([50, 60, 97]);
    assert_eq!(h.run_to_end(3), Outcome::Failure);
    assert_eq!(
        *h.fake.stopped.borrow(),
        ["fill"],
        "the command was stopped while it ran"
    );
    assert_eq!(
        resources(&h),
        [
            "fill: sample 50".to_owned(),
            "fill: sample 60".to_owned(),
            "fill: sample 97".to_owned(),
            format!("fill: warning {WORKSPACE_WARNING}"),
            "fill: exec 137".to_owned(),
            "fill: finished Fail disk exhausted: 97% used (limit 95%)".to_owned(),
        ]
    );
}

#[test]
fn a_running_command_is_not_stopped_while_the_disk_stays_below_disk_abort() {
    // The control of the test above: the same command, the disk never past abort, runs to
    // its own end.
    let mut h = Harness::new("name: p\nsteps:\n  - {name: fill, command: fill}\n");
    h.fake.on("fill", 0, running(vec![]));
    h.limits = Some(LIMITS);
    h.disk_samples
        .borrow_mut()
        .extend(std::iter::repeat_n(60, MAX_TICKS + 2));
    assert_eq!(h.run_to_end(3), Outcome::Success);
    assert!(h.fake.stopped.borrow().is_empty());
    assert_eq!(
        resources(&h),
        ["fill: sample 60", "fill: exec 0", "fill: finished Pass "]
    );
}

#[test]
fn the_sandbox_tmpfs_past_disk_abort_stops_the_command_and_is_named() {
    let mut h = Harness::new("name: p\nsteps:\n  - {name: fill, command: fill}\n");
    h.fake.on("fill", 0, running(vec![tmp(40), tmp(100)]));
    h.limits = Some(LIMITS);
    h.disk_samples.borrow_mut().extend([10, 10, 10, 10]);
    assert_eq!(h.run_to_end(3), Outcome::Failure);
    assert_eq!(*h.fake.stopped.borrow(), ["fill"]);
    let found = resources(&h);
    assert_eq!(
        found,
        [
            "fill: sample 10",
            "fill: sample 40",
            "fill: sample 100",
            "fill: warning the sandbox's /tmp (`isolation.tmp_size`) is 100% full, past the 95% \
             limit: the step is stopped and fails; raise `isolation.tmp_size`, delete files in \
             /tmp or raise `[limits] disk_abort` in the operator policy",
            "fill: exec 137",
            "fill: finished Fail disk exhausted: 100% used (limit 95%)",
        ]
    );
}

#[test]
fn a_step_past_disk_abort_fails_and_the_next_step_is_judged_afresh() {
    let yaml = "name: p\nsteps:\n  - {name: fill, command: fill, on_fail: {goto: clean, retry: true}}\n  - {name: clean, command: clean, on_pass: success}\n";
    let mut h = Harness::new(yaml);
    h.fake.on("fill", 0, Behaviour::default());
    h.fake.on("clean", 0, Behaviour::default());
    h.limits = Some(LIMITS);
    // fill: 80% at the start, 97% at the end; clean: 97% at the start (the state fill left),
    // 40% after it freed space.
    h.disk_samples.borrow_mut().extend([80, 97, 97, 40]);
    assert_eq!(h.run_to_end(3), Outcome::Success);
    assert_eq!(
        resources(&h),
        [
            "fill: sample 80".to_owned(),
            "fill: sample 97".to_owned(),
            format!("fill: warning {WORKSPACE_WARNING}"),
            "fill: exec 0".to_owned(),
            "fill: finished Fail disk exhausted: 97% used (limit 95%)".to_owned(),
            "clean: sample 97".to_owned(),
            "clean: warning the workspace filesystem is 97% full (warning at 85%, the step fails \
             at 95%); free space or raise `[limits]` in the operator policy"
                .to_owned(),
            "clean: sample 40".to_owned(),
            "clean: exec 0".to_owned(),
            "clean: finished Pass ".to_owned(),
        ],
        "a disk clean found past abort is not held against it"
    );
}

#[test]
fn a_stale_exhausted_sample_never_fails_a_later_step() {
    let yaml = "name: p\nsteps:\n  - {name: fill, command: fill, on_fail: {goto: next, retry: true}}\n  - {name: next, command: next, on_pass: success}\n";
    let mut h = Harness::new(yaml);
    h.fake.on("fill", 0, running(vec![]));
    h.fake.on("next", 0, Behaviour::default());
    h.limits = Some(LIMITS);
    // fill is stopped at 99%; next starts with the space freed.
    h.disk_samples.borrow_mut().extend([50, 99, 30, 30]);
    assert_eq!(h.run_to_end(3), Outcome::Success);
    let found = resources(&h);
    assert!(
        found.contains(&"fill: finished Fail disk exhausted: 99% used (limit 95%)".to_owned()),
        "{found:?}"
    );
    assert_eq!(
        found.last().map(String::as_str),
        Some("next: finished Pass "),
        "{found:?}"
    );
}

#[test]
fn crossing_disk_warn_warns_once_per_attempt_and_passes() {
    let mut h = Harness::new("name: p\nsteps:\n  - {name: a, command: a}\n");
    h.fake.on("a", 0, Behaviour::default());
    h.limits = Some(LIMITS);
    h.disk_samples.borrow_mut().extend([86, 90]);
    assert_eq!(h.run_to_end(3), Outcome::Success);
    let found = resources(&h);
    assert_eq!(found.len(), 5, "{found:?}");
    assert_eq!(
        found.iter().filter(|l| l.contains("warning")).count(),
        1,
        "{found:?}"
    );
}

#[test]
fn memory_past_mem_warn_of_the_cap_warns_once_and_never_fails_the_step() {
    let mut h = Harness::new("name: p\nsteps:\n  - {name: build, command: build}\n");
    let memory = |mib: u64| Gauges {
        memory: Some(Memory {
            used: mib << 20,
            cap: 512 << 20,
        }),
        tmp_percent: None,
    };
    // Runs on (never stopped) through usage at 100, 470 and then 500 MiB of 512 MiB.
    h.fake.on(
        "build",
        0,
        running(vec![memory(100), memory(470), memory(500)]),
    );
    h.limits = Some(LIMITS);
    h.disk_samples
        .borrow_mut()
        .extend(std::iter::repeat_n(20, MAX_TICKS + 2));
    assert_eq!(h.run_to_end(3), Outcome::Success);
    assert_eq!(
        resources(&h),
        [
            "build: sample 20",
            "build: sample 20 mem 100",
            "build: sample 20 mem 470",
            "build: warning the sandbox uses 470 MiB of its 512 MiB memory cap (91%, warning at \
             90%); at the cap the kernel kills processes (out of memory): raise \
             `isolation.memory` (`--memory` for `cordon exec`) or `[limits] mem_warn` in the \
             operator policy",
            "build: sample 20 mem 500",
            "build: exec 0",
            "build: finished Pass ",
        ]
    );
}

#[test]
fn without_limits_or_samples_nothing_is_recorded_or_judged() {
    for (limits, samples) in [(None, vec![99, 99]), (Some(LIMITS), vec![])] {
        let mut h = Harness::new("name: p\nsteps:\n  - {name: a, command: a}\n");
        h.fake.on("a", 0, Behaviour::default());
        h.limits = limits;
        h.disk_samples.borrow_mut().extend(samples);
        assert_eq!(h.run_to_end(3), Outcome::Success);
        assert_eq!(resources(&h), ["a: exec 0", "a: finished Pass "]);
    }
}

/// Calls `fill` as a tool, then asks the model again (as the real loop does), then would call
/// another tool: the engine refuses the model call once the disk is exhausted.
struct Filler {
    model_calls_after_fill: Option<Result<(), String>>,
}

impl AgentDriver for Filler {
    fn run(
        &mut self,
        _task: &AgentTask<'_>,
        session: &mut dyn StepSession,
        journal: &mut dyn Journal,
    ) -> Result<AgentVerdict, DriverError> {
        let journal_error = |err: JournalError| DriverError::Journal(err);
        journal
            .event(Event::ToolCall {
                id: "call-1".into(),
                name: "bash".into(),
                arguments: serde_json::json!({"command": "fill"}),
                server: None,
            })
            .map_err(journal_error)?;
        let result = session
            .run(&["fill".to_owned()], &mut |_: OutputStream, _: &[u8]| {})
            .expect("the tool process runs");
        if let Some(side) = session.side_events() {
            for event in side.drain() {
                journal.event(event).map_err(journal_error)?;
            }
        }
        journal
            .event(Event::ToolResult {
                id: "call-1".into(),
                ok: false,
                interrupted: None,
                output: format!("exit {}", result.exit_code),
            })
            .map_err(journal_error)?;
        let asked = journal.event(Event::LlmRequest {
            model: "m".into(),
            source: cordon_protocol::event::LlmSource::Agent,
            task: None,
        });
        self.model_calls_after_fill = Some(match &asked {
            Ok(()) => Ok(()),
            Err(err) => Err(err.message.clone()),
        });
        asked.map_err(journal_error)?;
        Ok(AgentVerdict::pass())
    }
}

#[test]
fn an_agent_tool_call_past_disk_abort_is_stopped_and_the_attempt_fails_without_more_model_calls() {
    let yaml = "name: p\nllm: {provider: replay, transcript: t.jsonl}\nsteps:\n  - {name: dev, agent: dev}\n";
    let files: std::collections::BTreeMap<std::path::PathBuf, String> = [(
        "agents/dev.agent.md".into(),
        "---\nname: dev\n---\nDevelop.\n".to_owned(),
    )]
    .into_iter()
    .collect();
    let pipeline =
        cordon_pipeline::load_str("pipeline.yaml", yaml, std::path::Path::new(""), &files)
            .expect("valid")
            .pipeline;
    let mut h = Harness::new("name: p\nsteps:\n  - {name: x, command: x}\n");
    h.pipeline = pipeline;
    h.fake.on("fill", 0, running(vec![]));
    h.disk_samples.borrow_mut().extend([50, 99, 99]);
    let samples = Rc::clone(&h.disk_samples);
    let mut driver = Filler {
        model_calls_after_fill: None,
    };
    let mut observer = |_: &cordon_protocol::Record| Control::Continue;
    let cx = h.context(Some(&mut driver));
    let mut engine = Engine::new(cx, &mut observer).expect("engine");
    engine.set_resource_guard(guard(Some(LIMITS), samples).expect("a guard"));
    engine.start(3, None).expect("start");
    assert_eq!(
        engine.drive().expect("drive"),
        cordon_engine::Ending::Finished(Outcome::Failure)
    );
    drop(engine);
    assert_eq!(*h.fake.stopped.borrow(), ["fill"]);
    assert_eq!(
        driver.model_calls_after_fill,
        Some(Err("disk exhausted: 99% used (limit 95%)".to_owned())),
        "the next model call was refused"
    );
    let found = resources(&h);
    assert_eq!(
        found.last().map(String::as_str),
        Some("dev: finished Fail disk exhausted: 99% used (limit 95%)"),
        "{found:?}"
    );
    assert!(
        !h.records().iter().any(|r| r.event.kind() == "llm.request"),
        "no model call after the disk was exhausted"
    );
}

#[test]
fn a_setup_hook_filling_the_disk_is_stopped_and_fails_the_run_with_the_reason() {
    let mut h = Harness::new("name: p\nsteps:\n  - {name: test, command: test, setup: install}\n");
    h.fake.on("install", 0, running(vec![tmp(30), tmp(99)]));
    h.limits = Some(LIMITS);
    h.disk_samples.borrow_mut().extend([10, 10, 10]);
    assert_eq!(h.run_to_end(3), Outcome::Failure);
    assert_eq!(*h.fake.stopped.borrow(), ["install"]);
    let ended = h.records().into_iter().find_map(|r| match r.event {
        Event::RunFinished { reason, .. } => Some(reason),
        _ => None,
    });
    assert_eq!(
        ended.as_deref(),
        Some("the setup of `test` failed: disk exhausted: 99% used (limit 95%)")
    );
    assert!(
        !h.records().iter().any(|r| r.event.kind() == "step.started"),
        "the step never started"
    );
}
