//! Folding events into the view, as data: each case is a list of events and what the steps and
//! the run look like afterwards.

use cordon_protocol::event::{AuditRecord, Outcome, OutputStream, Timestamp, Verdict};
use cordon_protocol::{Attempt, Event, Record, RunId, StepName};

use super::{ResourceSample, RunStatus, RunView};
use crate::graph::{Edge, Graph, GraphStep};

fn name(text: &str) -> StepName {
    StepName::parse(text).expect("step name")
}

fn attempt(n: u32) -> Attempt {
    Attempt::new(n).expect("attempt")
}

fn started(step: &'static str, n: u32) -> (Option<&'static str>, Event) {
    (
        Some(step),
        Event::StepStarted {
            attempt: attempt(n),
        },
    )
}

fn finished(step: &'static str, n: u32, verdict: Verdict) -> (Option<&'static str>, Event) {
    (
        Some(step),
        Event::StepFinished {
            attempt: attempt(n),
            verdict,
            exit_code: None,
            reason: None,
            diff: None,
            output_omitted_bytes: None,
        },
    )
}

fn output(step: &'static str, text: &str) -> (Option<&'static str>, Event) {
    (
        Some(step),
        Event::StepOutput {
            stream: OutputStream::Stdout,
            text: text.to_owned(),
        },
    )
}

fn route(from: &str, to: &str, retry: bool) -> (Option<&'static str>, Event) {
    (
        None,
        Event::Route {
            from: name(from),
            to: to.to_owned(),
            retry,
        },
    )
}

fn declared() -> Graph {
    let step = |n: &str, pass: &str, fail: &str, retry: bool| GraphStep {
        name: name(n),
        kind: None,
        on_pass: Some(Edge {
            to: pass.to_owned(),
            retry: false,
        }),
        on_fail: Some(Edge {
            to: fail.to_owned(),
            retry,
        }),
    };
    Graph {
        steps: vec![
            step("dev", "test", "failure", false),
            step("test", "success", "dev", true),
        ],
        derived: false,
        pricing: None,
    }
}

/// Folds `events` (held or not) and compares `step:status:attempts` for every step, and the
/// run's status.
fn check(
    graph: Option<Graph>,
    held: bool,
    events: Vec<(Option<&'static str>, Event)>,
    steps: &str,
    run: RunStatus,
) {
    let mut view = RunView::new(RunId::from_u128(1), "p", graph);
    view.set_held(held);
    for (i, (step, event)) in events.into_iter().enumerate() {
        let seq = u64::try_from(i).unwrap_or(0) + 1;
        view.apply(&Record {
            run: RunId::from_u128(1),
            seq,
            ts: Timestamp(seq * 1000),
            step: step.map(name),
            event,
        });
    }
    let got: Vec<String> = view
        .steps()
        .iter()
        .map(|s| format!("{}:{}:{}", s.name, s.status(view.held).as_str(), s.attempts))
        .collect();
    assert_eq!((got.join(" "), view.status()), (steps.to_owned(), run));
}

#[test]
fn an_unverifiable_verdict_is_a_status_of_its_own() {
    check(
        Some(declared()),
        true,
        vec![started("dev", 1), finished("dev", 1, Verdict::Unverifiable)],
        "dev:unverifiable:1 test:pending:0",
        RunStatus::Running,
    );
}

#[test]
fn steps_take_the_status_of_their_latest_attempt() {
    let retry = || {
        vec![
            started("dev", 1),
            finished("dev", 1, Verdict::Pass),
            route("dev", "test", false),
            started("test", 1),
            finished("test", 1, Verdict::Fail),
            route("test", "dev", true),
            (
                None,
                Event::AttemptRetry {
                    attempt: attempt(2),
                    feedback: String::new(),
                },
            ),
            started("dev", 2),
        ]
    };
    check(
        Some(declared()),
        true,
        vec![],
        "dev:pending:0 test:pending:0",
        RunStatus::Running,
    );
    check(
        Some(declared()),
        true,
        vec![started("dev", 1)],
        "dev:running:1 test:pending:0",
        RunStatus::Running,
    );
    check(
        Some(declared()),
        true,
        retry(),
        "dev:running:2 test:failed:1",
        RunStatus::Running,
    );
    // Nobody holds the run: the unfinished step is pending and the run interrupted.
    check(
        Some(declared()),
        false,
        retry(),
        "dev:pending:2 test:failed:1",
        RunStatus::Interrupted,
    );
    let mut done = retry();
    done.extend([
        finished("dev", 2, Verdict::Pass),
        started("test", 2),
        finished("test", 2, Verdict::Pass),
    ]);
    done.push((
        None,
        Event::RunFinished {
            outcome: Outcome::Success,
            reason: "ok".into(),
        },
    ));
    check(
        Some(declared()),
        false,
        done,
        "dev:passed:2 test:passed:2",
        RunStatus::Success,
    );
    // Without a declared graph, steps appear as the events name them.
    check(
        None,
        true,
        vec![
            started("b", 1),
            finished("b", 1, Verdict::Fail),
            route("b", "a", true),
        ],
        "b:failed:1 a:pending:0",
        RunStatus::Running,
    );
    // A resumed run that had finished in failure is running again.
    let failed = vec![
        started("dev", 1),
        finished("dev", 1, Verdict::Fail),
        (
            None,
            Event::RunFinished {
                outcome: Outcome::Failure,
                reason: "out of attempts".into(),
            },
        ),
    ];
    check(
        Some(declared()),
        true,
        failed.clone(),
        "dev:failed:1 test:pending:0",
        RunStatus::Failure,
    );
    let mut resumed = failed;
    resumed.push((
        None,
        Event::RunResumed {
            attempt: attempt(2),
            max_attempts: 5,
        },
    ));
    check(
        Some(declared()),
        true,
        resumed,
        "dev:failed:1 test:pending:0",
        RunStatus::Running,
    );
}

#[test]
fn a_derived_graph_learns_pass_and_fail_edges_from_routes() {
    let mut view = RunView::new(RunId::from_u128(1), "p", None);
    let events = [
        started("dev", 1),
        finished("dev", 1, Verdict::Pass),
        route("dev", "test", false),
        started("test", 1),
        finished("test", 1, Verdict::Fail),
        route("test", "dev", true),
        route("test", "dev", true),
    ];
    for (i, (step, event)) in events.into_iter().enumerate() {
        view.apply(&Record {
            run: RunId::from_u128(1),
            seq: i as u64 + 1,
            ts: Timestamp(0),
            step: step.map(name),
            event,
        });
    }
    let edges: Vec<(String, Option<Edge>, Option<Edge>)> = view
        .graph
        .steps
        .iter()
        .map(|s| (s.name.to_string(), s.on_pass.clone(), s.on_fail.clone()))
        .collect();
    let edge = |to: &str, retry| {
        Some(Edge {
            to: to.to_owned(),
            retry,
        })
    };
    assert_eq!(
        edges,
        [
            ("dev".to_owned(), edge("test", false), None),
            ("test".to_owned(), None, edge("dev", true))
        ]
    );
    let taken: Vec<(String, u32)> = view
        .routes()
        .iter()
        .map(|r| (format!("{}->{}", r.from, r.to), r.count))
        .collect();
    assert_eq!(
        taken,
        [("dev->test".to_owned(), 1), ("test->dev".to_owned(), 2)]
    );
}

#[test]
fn the_console_holds_only_the_latest_attempts_output() {
    let mut view = RunView::new(RunId::from_u128(1), "p", None);
    for (i, (step, event)) in [
        started("dev", 1),
        output("dev", "first\n"),
        started("dev", 2),
        output("dev", "second\n"),
    ]
    .into_iter()
    .enumerate()
    {
        view.apply(&Record {
            run: RunId::from_u128(1),
            seq: i as u64 + 1,
            ts: Timestamp(0),
            step: step.map(name),
            event,
        });
    }
    assert_eq!(view.steps()[0].console.text(), "second\n");
}

#[test]
fn egress_rows_group_decisions_per_step_destination_and_reason() {
    let audit =
        |decision: &str, host: &str, port: u16, reason: Option<&str>, bytes: u64| AuditRecord {
            ts: String::new(),
            listener: "l".into(),
            step: Some("test".into()),
            attempt: Some(1),
            proto: "connect".into(),
            raw_target: format!("{host}:{port}"),
            host: Some(host.into()),
            port: Some(port),
            resolved: vec![],
            dialed: None,
            decision: decision.into(),
            reason: reason.map(str::to_owned),
            bytes_up: bytes,
            bytes_down: bytes * 10,
            duration_ms: 0,
            count: 1,
        };
    let events = [
        Event::EgressAllow(audit("allow", "files.example.test", 443, None, 0)),
        Event::EgressClose(audit("allow", "files.example.test", 443, None, 5)),
        Event::EgressAllow(audit("allow", "files.example.test", 443, None, 0)),
        Event::EgressDeny(audit(
            "deny",
            "evil.example.test",
            443,
            Some("not_allowed"),
            0,
        )),
        Event::EgressDeny(audit("deny", "2001:db8::1", 443, Some("ip_literal"), 0)),
    ];
    let mut view = RunView::new(RunId::from_u128(1), "p", None);
    for (i, event) in events.into_iter().enumerate() {
        view.apply(&Record {
            run: RunId::from_u128(1),
            seq: i as u64 + 1,
            ts: Timestamp(0),
            step: None,
            event,
        });
    }
    let rows: Vec<String> = view
        .egress()
        .map(|r| {
            format!(
                "{} {} {} {} x{} {}/{}",
                r.step.as_deref().unwrap_or("-"),
                r.decision,
                r.target,
                r.reason.as_deref().unwrap_or("-"),
                r.count,
                r.bytes_up,
                r.bytes_down
            )
        })
        .collect();
    assert_eq!(
        rows,
        [
            "test allow files.example.test:443 - x2 5/50",
            "test deny [2001:db8::1]:443 ip_literal x1 0/0",
            "test deny evil.example.test:443 not_allowed x1 0/0",
        ]
    );
}

#[test]
fn a_step_keeps_its_latest_attempts_latest_resource_sample() {
    let sample = |memory: Option<u64>, disk: Option<u8>| {
        (
            Some("build"),
            Event::ResourcesSample {
                memory_bytes: memory,
                disk_percent: disk,
            },
        )
    };
    let mut view = RunView::new(RunId::from_u128(1), "p", None);
    let mut seen = Vec::new();
    for (i, (step, event)) in [
        started("build", 1),
        sample(None, Some(40)),
        sample(Some(120 << 20), Some(42)),
        started("build", 2),
    ]
    .into_iter()
    .enumerate()
    {
        view.apply(&Record {
            run: RunId::from_u128(1),
            seq: i as u64 + 1,
            ts: Timestamp(0),
            step: step.map(name),
            event,
        });
        seen.push(view.steps()[0].resources);
    }
    let latest = Some(ResourceSample {
        memory_bytes: Some(120 << 20),
        disk_percent: Some(42),
    });
    assert_eq!(seen[2], latest);
    assert_eq!(seen[3], None, "a new attempt starts without gauges");

    // In the JSON snapshot as `resources` on the step, only once there is a sample.
    let mut view = RunView::new(RunId::from_u128(1), "p", None);
    for (i, (step, event)) in [started("build", 1), sample(Some(120 << 20), Some(42))]
        .into_iter()
        .enumerate()
    {
        view.apply(&Record {
            run: RunId::from_u128(1),
            seq: i as u64 + 1,
            ts: Timestamp(0),
            step: step.map(name),
            event,
        });
        let json = serde_json::to_value(&view).expect("json");
        let resources = &json["steps"][0]["resources"];
        if i == 0 {
            assert!(resources.is_null(), "{json}");
        } else {
            assert_eq!(
                *resources,
                serde_json::json!({"memory_bytes": 125_829_120, "disk_percent": 42})
            );
        }
    }
}

#[test]
fn an_outcome_runs_tasks_follow_the_graph_decompose_submitted_and_their_moves() {
    use cordon_protocol::event::{PlannedTask, RunKind, TaskPhase};
    let planned = |ids: &[&str]| Event::TasksPlanned {
        tasks: ids
            .iter()
            .map(|id| PlannedTask {
                id: (*id).to_owned(),
                title: format!("Title {id}"),
                depends_on: if *id == "t2" {
                    vec!["t1".to_owned()]
                } else {
                    Vec::new()
                },
                description: String::new(),
                acceptance: Vec::new(),
                verify: Vec::new(),
            })
            .collect(),
    };
    let moved = |task: &str, state, revision| Event::TaskState {
        task: task.to_owned(),
        state,
        revision,
        replan: 0,
        reason: Some("why".to_owned()),
    };
    let events: Vec<(Option<&'static str>, Event)> = vec![
        (
            None,
            Event::RunStarted {
                pipeline: "p".into(),
                workspace: "/w".into(),
                attempt: attempt(1),
                max_attempts: 3,
                prompt: None,
                kind: RunKind::Outcome,
                outcome: Some("Do it.".into()),
                context: Vec::new(),
            },
        ),
        started("decompose", 1),
        // A first submission the interrupted attempt made, then the one that counts.
        (Some("decompose"), planned(&["x"])),
        (Some("decompose"), planned(&["t1", "t2"])),
        finished("decompose", 1, Verdict::Pass),
        // A graph logged by another step is not the run's.
        (Some("t1.plan"), planned(&["zz"])),
        (None, moved("t1", TaskPhase::Executing, 1)),
        (None, moved("nope", TaskPhase::Done, 0)),
        started("t1.execute", 2),
    ];
    let mut view = RunView::new(RunId::from_u128(1), "p", None);
    view.set_held(true);
    for (i, (step, event)) in events.into_iter().enumerate() {
        let seq = u64::try_from(i).unwrap_or(0) + 1;
        view.apply(&Record {
            run: RunId::from_u128(1),
            seq,
            ts: Timestamp(seq * 1000),
            step: step.map(name),
            event,
        });
    }
    assert_eq!(view.kind, RunKind::Outcome);
    assert_eq!(view.goal.as_deref(), Some("Do it."));
    let tasks: Vec<String> = view
        .tasks
        .iter()
        .map(|t| {
            format!(
                "{}:{}:{}:{}:{}",
                t.id,
                t.state.as_str(),
                t.revision,
                t.phase().unwrap_or("-"),
                t.depends_on.join(",")
            )
        })
        .collect();
    assert_eq!(tasks, ["t1:executing:1:execute:", "t2:pending:0:-:t1"]);
    // The phase steps are steps like any other.
    assert!(view.steps().iter().any(|s| s.name.as_str() == "t1.execute"));
    let json = serde_json::to_value(&view).expect("json");
    assert_eq!(json["kind"], "outcome");
    assert_eq!(json["tasks"][0]["state"], "executing");
}
