//! Setup hooks: their own session before the step's first one, cached by stamp, `--refresh`.

use cordon_engine::executor::Purpose;
use cordon_protocol::Event;
use cordon_protocol::event::Outcome;

use crate::fake::fails;
use crate::harness::Harness;

const YAML: &str = "name: p\nsteps:\n  - {name: test, command: test, setup: install}\n";

fn kinds(h: &Harness) -> Vec<&'static str> {
    h.records()
        .iter()
        .map(|r| r.event.kind())
        .filter(|k| k.starts_with("setup."))
        .collect()
}

#[test]
fn setup_runs_once_then_is_cached_by_its_stamp() {
    let mut h = Harness::new(YAML);
    h.run_to_end(3);
    assert_eq!(kinds(&h), ["setup.ran"]);
    let purposes: Vec<Purpose> = h.fake.opened.iter().map(|o| o.purpose).collect();
    assert_eq!(
        purposes,
        [Purpose::Setup, Purpose::Step],
        "setup has its own session, first"
    );
    // A second run of the same pipeline in the same workspace reuses the stamp.
    let mut second = Harness::new(YAML);
    second.store =
        cordon_store::Store::open(&cordon_store::StateDir::new(h.dir.path().join("state")))
            .expect("store");
    second.workspace.clone_from(&h.workspace);
    second.host = cordon_engine::workspace::HostWorkspace::new(
        cordon_workspace::View::open(&h.workspace).expect("view"),
        None,
    );
    second.run = cordon_protocol::RunId::from_parts(1_769_860_900_000, 1);
    second
        .store
        .create_run(&cordon_store::RunRow {
            id: second.run,
            pipeline: "p".into(),
            pipeline_file: "/x".into(),
            workspace: h.workspace.clone(),
            started: cordon_protocol::event::Timestamp(1),
            snapshot: None,
        })
        .expect("run");
    second.run_to_end(3);
    assert_eq!(kinds(&second), ["setup.cached"]);
}

#[test]
fn a_lockfile_change_invalidates_the_stamp() {
    let h = Harness::new(YAML);
    let setup = match &h.pipeline.steps[0].kind {
        cordon_pipeline::StepKind::Command(c) => c.sandbox.setup.clone().expect("setup"),
        _ => unreachable!("a command step"),
    };
    let before = cordon_engine::stamp(&setup, &h.host, None);
    std::fs::write(h.workspace.join("README.md"), "x").expect("write");
    assert_eq!(
        cordon_engine::stamp(&setup, &h.host, None),
        before,
        "other files do not count"
    );
    std::fs::write(h.workspace.join("Cargo.lock"), "x").expect("write");
    assert_ne!(cordon_engine::stamp(&setup, &h.host, None), before);
}

#[test]
fn a_setup_stamp_belongs_to_the_image_it_ran_on() {
    let h = Harness::new(YAML);
    let setup = match &h.pipeline.steps[0].kind {
        cordon_pipeline::StepKind::Command(c) => c.sandbox.setup.clone().expect("setup"),
        _ => unreachable!("a command step"),
    };
    let host = cordon_engine::stamp(&setup, &h.host, None);
    let one = cordon_engine::stamp(&setup, &h.host, Some("sha256:1111"));
    let two = cordon_engine::stamp(&setup, &h.host, Some("sha256:2222"));
    assert_ne!(host, one);
    assert_ne!(one, two);
    assert_eq!(
        one,
        cordon_engine::stamp(&setup, &h.host, Some("sha256:1111"))
    );
}

#[test]
fn failing_setup_fails_the_run_with_its_output() {
    let mut h = Harness::new(YAML);
    h.fake.on("install", 0, fails(1, "no network\n"));
    assert_eq!(h.run_to_end(3), Outcome::Failure);
    let records = h.records();
    assert!(
        records
            .iter()
            .any(|r| matches!(&r.event, Event::StepOutput { text, .. } if text == "no network\n"))
    );
    let reason = records.iter().find_map(|r| match &r.event {
        Event::RunFinished { reason, .. } => Some(reason.clone()),
        _ => None,
    });
    assert_eq!(
        reason.as_deref(),
        Some("the setup of `test` failed with status 1; its output is in the log")
    );
    assert!(
        !records
            .iter()
            .any(|r| matches!(r.event, Event::StepStarted { .. })),
        "the step never started"
    );
}
