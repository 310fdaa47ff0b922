//! The loop with the replay provider and the local tool host: budgets, malformed arguments,
//! one result per call, truncation, scrubbing, egress requests.

use std::time::Duration;

use cordon_agent::provider::Replay;
use cordon_agent::{AgentOutcome, TruncateLimits};
use cordon_protocol::{Attempt, Event, StepName};
use serde_json::json;

use crate::support::{LocalHost, Memory, run, spec};

fn replay(lines: &[serde_json::Value]) -> Replay {
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    Replay::parse("t.jsonl", &text).expect("a transcript")
}

fn bash(command: &str) -> serde_json::Value {
    json!({"tool_calls": [{"name": "bash", "arguments": {"command": command}}]})
}

#[test]
fn malformed_arguments_go_back_to_the_model_as_errors() {
    let mut provider = replay(&[
        json!({"tool_calls": [
            {"name": "bash", "arguments": "{\"command\": \"ls"},
            {"name": "bash", "arguments": {"cmd": "ls"}},
            {"name": "read_file", "arguments": ["a"]},
            {"name": "launch_missiles", "arguments": {}},
            {"name": "read_file", "arguments": {"path": "a", "offset": 0}}
        ]}),
        json!({"text": "giving up"}),
    ]);
    let mut host = LocalHost::new();
    let mut journal = Memory::default();
    let outcome = run(&spec(&host, 5), &mut provider, &mut host, &mut journal);

    assert_eq!(
        outcome,
        AgentOutcome::Finished {
            text: "giving up".to_owned()
        }
    );
    let results = journal.results();
    let want = [
        "error: the arguments for `bash` are not valid JSON (EOF while parsing a string at line 1 column 15); send an object like {\"command\": \"ls -la\", \"timeout\": 60}",
        "error: invalid arguments for `bash`: unknown field `cmd`, expected `command` or `timeout`; send an object like {\"command\": \"ls -la\", \"timeout\": 60}",
        "error: the arguments for `read_file` must be a JSON object like {\"path\": \"src/main.py\", \"offset\": 1, \"limit\": 200}",
        "error: there is no tool `launch_missiles`; the tools are `bash`, `read_file`, `write_file`, `edit_file`, `request_egress`",
        "error: `offset` and `limit` count lines from 1; pass positive numbers",
    ];
    let got: Vec<&str> = results.iter().map(|(_, o)| o.as_str()).collect();
    assert_eq!(got, want);
    assert!(results.iter().all(|(ok, _)| !ok));
    // Nothing ran for a malformed call.
    assert!(host.runs.is_empty());
    // The malformed text is kept in the event as a string.
    assert!(
        journal.events.contains(&Event::ToolCall {
            id: journal
                .events
                .iter()
                .find_map(|e| match e {
                    Event::ToolCall { id, .. } => Some(id.clone()),
                    _ => None,
                })
                .unwrap_or_default(),
            name: "bash".to_owned(),
            arguments: json!("{\"command\": \"ls"),
            server: None,
        })
    );
}

#[test]
fn max_iterations_ends_the_attempt_as_a_failure_with_that_reason() {
    let mut provider = replay(&[
        bash("true"),
        bash("true"),
        bash("true"),
        json!({"text": "late"}),
    ]);
    let mut host = LocalHost::new();
    let mut journal = Memory::default();
    let outcome = run(&spec(&host, 2), &mut provider, &mut host, &mut journal);
    assert_eq!(
        outcome,
        AgentOutcome::Failed {
            reason: "the agent used all 2 model calls of `max_iterations` without finishing; raise `max_iterations` or narrow the task".to_owned()
        }
    );
    assert_eq!(
        journal
            .kinds()
            .iter()
            .filter(|k| **k == "llm.request")
            .count(),
        2
    );
}

#[test]
fn every_tool_call_gets_exactly_one_result_with_its_id() {
    let mut provider = replay(&[
        json!({"tool_calls": [
            {"name": "bash", "arguments": {"command": "echo one"}},
            {"name": "bash", "arguments": {"command": "exit 3"}},
            {"name": "nope"}
        ]}),
        json!({"text": "done"}),
    ]);
    let mut host = LocalHost::new();
    let mut journal = Memory::default();
    run(&spec(&host, 5), &mut provider, &mut host, &mut journal);
    let mut calls = Vec::new();
    let mut results = Vec::new();
    for event in &journal.events {
        match event {
            Event::ToolCall { id, .. } => calls.push(id.clone()),
            Event::ToolResult {
                id, interrupted, ..
            } => {
                assert_eq!(*interrupted, None);
                results.push(id.clone());
            }
            _ => {}
        }
    }
    assert_eq!(calls.len(), 3);
    assert_eq!(calls, results);
    assert_eq!(journal.results()[1], (false, "[exit code 3]".to_owned()));
}

#[test]
fn replay_exhaustion_fails_the_attempt_with_the_contract_message() {
    let mut provider = replay(&[json!({"step": "dev", "attempt": 2, "text": "not for attempt 1"})]);
    let mut host = LocalHost::new();
    let mut journal = Memory::default();
    let outcome = run(&spec(&host, 5), &mut provider, &mut host, &mut journal);
    assert_eq!(
        outcome,
        AgentOutcome::Failed {
            reason: "replay transcript exhausted at dev attempt 1".to_owned()
        }
    );
}

#[test]
fn a_resumed_step_gets_its_turns_from_the_start_again() {
    let lines = [
        json!({"step": "dev", "attempt": 1, "tool_calls": [{"name": "bash", "arguments": {"command": "echo first >> log"}}]}),
        json!({"step": "dev", "attempt": 1, "text": "dev done"}),
        json!({"text": "review done"}),
    ];
    // The first process ran dev attempt 1 to its end, then died in review. The new process
    // replays nothing for review (interrupted) and is told about dev's two answered calls.
    let mut provider = replay(&lines);
    let dev = StepName::parse("dev").expect("step");
    cordon_agent::Provider::skip_answered(&mut provider, &dev, Attempt::FIRST);
    cordon_agent::Provider::skip_answered(&mut provider, &dev, Attempt::FIRST);
    let mut host = LocalHost::new();
    let mut journal = Memory::default();
    let mut review = spec(&host, 5);
    review.step = StepName::parse("review").expect("step");
    let outcome = run(&review, &mut provider, &mut host, &mut journal);
    assert_eq!(
        outcome,
        AgentOutcome::Finished {
            text: "review done".to_owned()
        }
    );

    // Without the skips (dev itself was interrupted), dev starts over from its first turn.
    let mut provider = replay(&lines);
    let outcome = run(&spec(&host, 5), &mut provider, &mut host, &mut journal);
    assert_eq!(
        outcome,
        AgentOutcome::Finished {
            text: "dev done".to_owned()
        }
    );
    assert_eq!(host.read("log"), "first\n");
}

#[test]
fn bash_starts_where_the_last_call_ended_but_the_environment_does_not_persist() {
    let mut provider = replay(&[
        bash("mkdir -p sub/dir && cd sub/dir && export FOO=bar && pwd"),
        bash("pwd; echo \"FOO=${FOO:-unset}\"; cd ..; exit 4"),
        bash("pwd"),
        bash("cd /nonexistent-dir-for-test; pwd"),
        json!({"text": "ok"}),
    ]);
    let mut host = LocalHost::new();
    let ws = host.workspace();
    let mut journal = Memory::default();
    run(&spec(&host, 10), &mut provider, &mut host, &mut journal);
    let got: Vec<String> = journal.results().into_iter().map(|(_, o)| o).collect();
    assert_eq!(
        got[..3],
        [
            format!("{ws}/sub/dir\n"),
            format!("{ws}/sub/dir\nFOO=unset\n[exit code 4]"),
            format!("{ws}/sub\n"),
        ]
    );
    // A failed `cd` leaves the directory as it was.
    assert!(got[3].starts_with(&format!("{ws}/sub\n")), "{}", got[3]);
    assert!(got[3].contains("No such file or directory"), "{}", got[3]);
}

#[test]
fn bash_timeouts_are_capped_by_the_step_timeout() {
    let mut provider = replay(&[
        json!({"tool_calls": [{"name": "bash", "arguments": {"command": "true", "timeout": 600}}]}),
        json!({"tool_calls": [{"name": "bash", "arguments": {"command": "true"}}]}),
        json!({"tool_calls": [{"name": "bash", "arguments": {"command": "true", "timeout": -1}}]}),
        json!({"text": "ok"}),
    ]);
    let mut host = LocalHost::new();
    let mut journal = Memory::default();
    let mut step = spec(&host, 10);
    step.timeout = Some(Duration::from_secs(300));
    run(&step, &mut provider, &mut host, &mut journal);
    let timeouts: Vec<u64> = host.runs.iter().map(|r| r.timeout.as_secs()).collect();
    // 600 s asked, at most 300 s left; the default 120 s; -1 is refused before anything runs.
    assert_eq!(timeouts.len(), 2);
    assert!(timeouts[0] <= 300 && timeouts[0] > 120, "{timeouts:?}");
    assert_eq!(timeouts[1], 120);
    assert_eq!(
        journal.results()[2].1,
        "error: `timeout` must be a positive number of seconds, not -1"
    );
}

#[test]
fn long_output_is_cut_for_the_model_and_kept_whole_as_a_blob() {
    let mut provider = replay(&[bash("seq 1 5000"), json!({"text": "ok"})]);
    let mut host = LocalHost::new();
    let mut journal = Memory::default();
    let mut step = spec(&host, 5);
    step.limits = TruncateLimits { model_bytes: 1000 };
    run(&step, &mut provider, &mut host, &mut journal);
    let whole: String = (1..=5000).map(|n| format!("{n}\n")).collect();
    assert_eq!(journal.blobs, [whole.clone().into_bytes()]);
    let (_, shown) = &journal.results()[0];
    assert!(shown.starts_with("1\n2\n3\n"), "{shown}");
    assert!(shown.ends_with("4999\n5000\n"), "{shown}");
    assert!(
        shown.contains(&format!(
            "[… output truncated: {} bytes omitted; the full output is kept as blob 1 …]",
            whole.len() - 1000
        )),
        "{shown}"
    );
}

#[test]
fn tool_output_is_scrubbed_of_secrets_before_the_model_and_the_log_see_it() {
    let mut provider = replay(&[bash("echo token=SECRET-VALUE-123"), json!({"text": "ok"})]);
    let mut host = LocalHost::new();
    let mut journal = Memory::default();
    run(&spec(&host, 5), &mut provider, &mut host, &mut journal);
    assert_eq!(journal.results()[0].1, "token=[secret:token]\n");
}

#[test]
fn request_egress_is_refused_without_grant_bounds_and_recorded() {
    let mut provider = replay(&[
        json!({"tool_calls": [
            {"name": "request_egress", "arguments": {"domain": "Registry.Example.com", "reason": "install deps"}},
            {"name": "request_egress", "arguments": {"domain": "10.0.0.1", "reason": "db"}}
        ]}),
        json!({"text": "ok"}),
    ]);
    let mut host = LocalHost::new();
    let mut journal = Memory::default();
    run(&spec(&host, 5), &mut provider, &mut host, &mut journal);
    let results = journal.results();
    assert!(
        results[0]
            .1
            .starts_with("refused registry.example.com: egress grants are not configured"),
        "{}",
        results[0].1
    );
    assert!(
        results[1].1.starts_with(
            "error: `domain` is not a destination pattern: `10.0.0.1` is an IP literal"
        ),
        "{}",
        results[1].1
    );
    let refusals: Vec<&Event> = journal
        .events
        .iter()
        .filter(|e| matches!(e, Event::PolicyRefuse { .. }))
        .collect();
    assert_eq!(refusals.len(), 1);
    assert!(
        matches!(refusals[0], Event::PolicyRefuse { domain, .. } if domain == "registry.example.com")
    );
}

#[test]
fn each_attempt_starts_a_fresh_conversation_with_only_the_task() {
    struct Spy(Vec<usize>);
    impl cordon_agent::Provider for Spy {
        fn complete(
            &mut self,
            request: &cordon_agent::Request,
        ) -> Result<cordon_agent::Response, cordon_agent::ProviderError> {
            self.0.push(request.messages.len());
            Ok(cordon_agent::Response {
                text: Some("done".to_owned()),
                ..Default::default()
            })
        }
    }
    let mut spy = Spy(Vec::new());
    let mut host = LocalHost::new();
    let mut journal = Memory::default();
    for attempt in 1..=2 {
        let mut step = spec(&host, 5);
        step.attempt = Attempt::new(attempt).expect("attempt");
        run(&step, &mut spy, &mut host, &mut journal);
    }
    assert_eq!(spy.0, [1, 1]);
}

#[test]
fn the_same_call_with_the_same_result_three_times_in_a_row_ends_the_attempt_as_stuck() {
    let mut provider = replay(&[
        bash("echo same"),
        bash("echo same"),
        bash("echo same"),
        bash("echo same"),
        json!({"text": "never reached"}),
    ]);
    let mut host = LocalHost::new();
    let mut journal = Memory::default();
    let outcome = run(&spec(&host, 10), &mut provider, &mut host, &mut journal);
    let AgentOutcome::Failed { reason } = outcome else {
        panic!("the attempt must fail: {outcome:?}");
    };
    assert!(
        reason.starts_with("stuck: the same bash call 3 times in a row\n"),
        "{reason}"
    );
    // The repeats reach the next attempt's feedback: the call and its result.
    assert!(
        reason.contains("echo same") && reason.contains("same\n"),
        "{reason}"
    );
    let requests = journal
        .kinds()
        .iter()
        .filter(|k| **k == "llm.request")
        .count();
    assert_eq!(requests, 3, "no model call after the third repeat");

    // The control: the same call whose result changes each time is not stuck.
    let mut provider = replay(&[
        bash("echo x >> count; wc -l < count"),
        bash("echo x >> count; wc -l < count"),
        bash("echo x >> count; wc -l < count"),
        json!({"text": "done"}),
    ]);
    let mut host = LocalHost::new();
    let mut journal = Memory::default();
    let outcome = run(&spec(&host, 10), &mut provider, &mut host, &mut journal);
    assert_eq!(
        outcome,
        AgentOutcome::Finished {
            text: "done".to_owned()
        }
    );
}
