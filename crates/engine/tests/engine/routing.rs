//! Every routing rule as data: a pipeline, what its commands do, and the trace the log records.

use crate::fake::{Behaviour, fails};
use crate::harness::Harness;

fn check(yaml: &str, script: &[(&str, u32, Behaviour)], max_attempts: u32, expected: &[&str]) {
    let mut h = Harness::new(yaml);
    for (command, attempt, behaviour) in script {
        h.fake.on(command, *attempt, behaviour.clone());
    }
    h.run_to_end(max_attempts);
    assert_eq!(h.trace(), expected, "pipeline:\n{yaml}");
    let state = h.state();
    assert!(
        state.attempt.get() <= max_attempts,
        "attempts stay within the budget"
    );
}

const LINEAR: &str = "name: p\nsteps:\n  - {name: a, command: a}\n  - {name: b, command: b}\n";

#[test]
fn omitted_on_pass_goes_to_the_next_step_then_success() {
    check(
        LINEAR,
        &[],
        3,
        &["a@1:pass", "->b", "b@1:pass", "->success", "=success"],
    );
}

#[test]
fn omitted_on_fail_goes_to_failure() {
    check(
        LINEAR,
        &[("a", 0, fails(1, "boom\n"))],
        3,
        &["a@1:fail", "->failure", "=failure"],
    );
}

#[test]
fn explicit_routes_skip_steps_and_can_accept_a_failure() {
    let yaml = "name: p\nsteps:\n  - {name: a, command: a, on_pass: c}\n  - {name: b, command: b}\n  - {name: c, command: c, on_fail: success}\n";
    check(
        yaml,
        &[("c", 0, fails(2, ""))],
        3,
        &["a@1:pass", "->c", "c@1:fail", "->success", "=success"],
    );
}

#[test]
fn a_forward_goto_without_retry_keeps_the_attempt() {
    let yaml = "name: p\nsteps:\n  - {name: a, command: a, on_fail: {goto: cleanup}}\n  - {name: b, command: b}\n  - {name: cleanup, command: cleanup, on_pass: failure}\n";
    check(
        yaml,
        &[("a", 0, fails(1, ""))],
        3,
        &[
            "a@1:fail",
            "->cleanup",
            "cleanup@1:pass",
            "->failure",
            "=failure",
        ],
    );
}

const LOOP: &str = "name: p\nsteps:\n  - {name: dev, command: dev}\n  - {name: test, command: test, on_fail: {goto: dev, retry: true}}\n";

#[test]
fn a_retry_edge_grows_the_attempt_and_reruns_the_cycle() {
    check(
        LOOP,
        &[("test", 1, fails(1, "1 failed\n"))],
        3,
        &[
            "dev@1:pass",
            "->test",
            "test@1:fail",
            "->dev (retry)",
            "retry 2",
            "dev@2:pass",
            "->test",
            "test@2:pass",
            "->success",
            "=success",
        ],
    );
}

#[test]
fn attempts_are_bounded_by_the_budget() {
    check(
        LOOP,
        &[("test", 0, fails(1, ""))],
        2,
        &[
            "dev@1:pass",
            "->test",
            "test@1:fail",
            "->dev (retry)",
            "retry 2",
            "dev@2:pass",
            "->test",
            "test@2:fail",
            "->dev (retry)",
            "=failure",
        ],
    );
}

#[test]
fn a_self_retry_counts_attempts_too() {
    let yaml =
        "name: p\nsteps:\n  - {name: flaky, command: flaky, on_fail: {goto: flaky, retry: true}}\n";
    check(
        yaml,
        &[("flaky", 1, fails(1, "")), ("flaky", 2, fails(1, ""))],
        3,
        &[
            "flaky@1:fail",
            "->flaky (retry)",
            "retry 2",
            "flaky@2:fail",
            "->flaky (retry)",
            "retry 3",
            "flaky@3:pass",
            "->success",
            "=success",
        ],
    );
}

#[test]
fn an_exhausted_run_continues_with_a_higher_budget() {
    let mut h = Harness::new(LOOP);
    h.fake
        .on("test", 1, fails(1, ""))
        .on("test", 2, fails(1, ""));
    h.run_to_end(2);
    assert_eq!(
        h.state().exhausted.as_ref().map(|s| s.as_str()),
        Some("dev")
    );
    let outcome = h.run_to_end(3);
    assert_eq!(outcome, cordon_protocol::event::Outcome::Success);
    assert_eq!(
        h.trace()[9..],
        [
            "=failure",
            "retry 3",
            "dev@3:pass",
            "->test",
            "test@3:pass",
            "->success",
            "=success"
        ]
    );
}
