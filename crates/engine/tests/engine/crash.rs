//! Crash safety by construction: stop the engine after event k, for every k of a reference run,
//! resume, and check that the run converges to the same route and outcome.

use std::collections::BTreeSet;

use cordon_engine::Ending;
use cordon_protocol::Event;

use crate::fake::{Behaviour, fails, writes};
use crate::harness::{Harness, trace};

pub const REFERENCE: &str = "name: reference
steps:
  - name: dev
    command: dev
    produces: [summary.md]
  - name: test
    command: test
    setup: install
    on_fail: {goto: dev, retry: true}
  - name: lint
    command: lint
";

pub fn scripted(h: &mut Harness) {
    h.fake
        .on("dev", 0, writes("summary.md", "did things\n"))
        .on(
            "test",
            1,
            Behaviour {
                stdout: "1 test failed\n".into(),
                ..fails(1, "assertion failed\n")
            },
        )
        .on(
            "lint",
            0,
            Behaviour {
                stdout: "clean\n".into(),
                ..Behaviour::default()
            },
        );
}

/// Checks the log invariants: contiguous sequence from 1, every (step, attempt) finished at most
/// once and never started again after finishing.
fn check_invariants(h: &Harness, k: u64) {
    let records = h.records();
    let seqs: Vec<u64> = records.iter().map(|r| r.seq).collect();
    assert_eq!(
        seqs,
        (1..=records.len() as u64).collect::<Vec<_>>(),
        "contiguous (k = {k})"
    );
    let mut finished = BTreeSet::new();
    for record in &records {
        let step = record
            .step
            .as_ref()
            .map(|s| s.to_string())
            .unwrap_or_default();
        match &record.event {
            Event::StepStarted { attempt } => {
                assert!(
                    !finished.contains(&(step.clone(), *attempt)),
                    "{step}@{attempt} started after finishing (k = {k})"
                );
            }
            Event::StepFinished { attempt, .. } => {
                assert!(
                    finished.insert((step.clone(), *attempt)),
                    "{step}@{attempt} finished twice (k = {k})"
                );
            }
            _ => {}
        }
    }
}

#[test]
fn resume_after_any_event_converges_to_the_same_route() {
    let mut reference = Harness::new(REFERENCE);
    scripted(&mut reference);
    reference.run_to_end(3);
    let expected = reference.trace();
    let expected_state = reference.state();
    let total = reference.records().len() as u64;
    assert!(
        total > 20,
        "the reference run is long enough to be interesting ({total} events)"
    );
    for k in 1..=total {
        let mut h = Harness::new(REFERENCE);
        scripted(&mut h);
        let first = h.drive(3, Some(k));
        assert_eq!(first, Ending::Stopped, "k = {k}");
        // A second crash right after resuming, for half of the cases.
        if k % 2 == 0 && k < total {
            let _ = h.drive(3, Some(k + 2));
        }
        h.run_to_end(3);
        let records = h.records();
        assert_eq!(
            trace(&records),
            expected,
            "route after a crash at event {k}"
        );
        let state = h.state();
        assert_eq!(
            (
                state.outcome,
                state.attempt,
                &state.finished,
                &state.feedback
            ),
            (
                expected_state.outcome,
                expected_state.attempt,
                &expected_state.finished,
                &expected_state.feedback
            ),
            "final state after a crash at event {k}"
        );
        check_invariants(&h, k);
    }
}

#[test]
fn an_interrupted_step_reruns_from_its_start_with_its_produces_deleted() {
    let mut h = Harness::new(REFERENCE);
    scripted(&mut h);
    // Stop right after dev's first output... dev writes summary.md and logs nothing, so stop
    // after its `sandbox.session` (event 3: run.started, step.started, sandbox.session).
    h.drive(3, Some(3));
    assert!(
        !h.workspace.join("summary.md").exists(),
        "stopped before the command ran"
    );
    std::fs::write(h.workspace.join("summary.md"), "half-written").expect("plant");
    h.fake.on("dev", 0, Behaviour::default());
    h.run_to_end(3);
    let finished = h.records().iter().find_map(|r| match &r.event {
        Event::StepFinished { reason, .. } => Some(reason.clone()),
        _ => None,
    });
    assert_eq!(
        finished.flatten().as_deref(),
        Some("expected output missing: summary.md"),
        "the half-written produce was deleted before the re-run, which then did not write it"
    );
}
