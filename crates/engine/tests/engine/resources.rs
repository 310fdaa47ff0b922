//! The disk guardrail: samples at each sandboxed step's start and end become
//! `resources.sample` events, crossing `disk_warn` a single `resources.warning`, and a step that
//! ends past `disk_abort` fails with the contract's reason — judged on fresh samples only.

use cordon_engine::resources::DiskLimits;
use cordon_protocol::Event;
use cordon_protocol::event::Outcome;

use crate::fake::Behaviour;
use crate::harness::Harness;

const LIMITS: DiskLimits = DiskLimits {
    warn: 85,
    abort: 95,
};

/// `step: type detail` for every resource event and step end.
fn resources(h: &Harness) -> Vec<String> {
    h.records()
        .iter()
        .filter_map(|r| {
            let step = r.step.as_ref().map_or("-", |s| s.as_str());
            match &r.event {
                Event::ResourcesSample { disk_percent, .. } => {
                    Some(format!("{step}: sample {}", disk_percent.unwrap_or(0)))
                }
                Event::ResourcesWarning { message } => Some(format!("{step}: warning {message}")),
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

#[test]
fn a_step_that_ends_past_disk_abort_fails_and_the_next_step_is_judged_afresh() {
    let yaml = "name: p\nsteps:\n  - {name: fill, command: fill, on_fail: {goto: clean, retry: true}}\n  - {name: clean, command: clean, on_pass: success}\n";
    let mut h = Harness::new(yaml);
    h.fake.on("fill", 0, Behaviour::default());
    h.fake.on("clean", 0, Behaviour::default());
    h.disk = Some(LIMITS);
    // fill: 80% at the start, 97% at the end; clean: 97% at the start (the stale state), 40%
    // after it freed space.
    h.disk_samples.borrow_mut().extend([80, 97, 97, 40]);
    assert_eq!(h.run_to_end(3), Outcome::Success);
    let warning = "the workspace filesystem is 97% full (warning at 85%, the step fails at 95%); \
                   free space or raise `[limits]` in the operator policy";
    assert_eq!(
        resources(&h),
        [
            "fill: sample 80".to_owned(),
            "fill: sample 97".to_owned(),
            format!("fill: warning {warning}"),
            "fill: finished Fail disk exhausted: 97% used (limit 95%)".to_owned(),
            "clean: sample 97".to_owned(),
            format!("clean: warning {warning}"),
            "clean: sample 40".to_owned(),
            "clean: finished Pass ".to_owned(),
        ]
    );
}

#[test]
fn crossing_disk_warn_warns_once_per_attempt_and_passes() {
    let mut h = Harness::new("name: p\nsteps:\n  - {name: a, command: a}\n");
    h.fake.on("a", 0, Behaviour::default());
    h.disk = Some(LIMITS);
    h.disk_samples.borrow_mut().extend([86, 90]);
    assert_eq!(h.run_to_end(3), Outcome::Success);
    let found = resources(&h);
    assert_eq!(found.len(), 4, "{found:?}");
    assert_eq!(
        found.iter().filter(|l| l.contains("warning")).count(),
        1,
        "{found:?}"
    );
}

#[test]
fn without_limits_or_samples_nothing_is_recorded_or_judged() {
    for (limits, samples) in [(None, vec![99, 99]), (Some(LIMITS), vec![])] {
        let mut h = Harness::new("name: p\nsteps:\n  - {name: a, command: a}\n");
        h.fake.on("a", 0, Behaviour::default());
        h.disk = limits;
        h.disk_samples.borrow_mut().extend(samples);
        assert_eq!(h.run_to_end(3), Outcome::Success);
        assert_eq!(resources(&h), ["a: finished Pass "]);
    }
}
