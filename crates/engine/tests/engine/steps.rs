//! What happens inside and around a step: produces checks, hygiene and feedback on retry,
//! secrets injected and scrubbed, refusals before anything runs.

use cordon_protocol::Event;
use cordon_protocol::event::Outcome;

use crate::fake::{Behaviour, fails, writes};
use crate::harness::{Harness, pipeline};

#[test]
fn a_step_that_passes_without_its_produces_fails_naming_them() {
    let mut h = Harness::new(
        "name: p\nsteps:\n  - {name: a, command: a, produces: [out.txt, report.md]}\n",
    );
    h.fake.on("a", 0, writes("out.txt", "x"));
    assert_eq!(h.run_to_end(3), Outcome::Failure);
    let reason = h.records().iter().find_map(|r| match &r.event {
        Event::StepFinished { reason, .. } => reason.clone(),
        _ => None,
    });
    assert_eq!(
        reason.as_deref(),
        Some("expected output missing: report.md")
    );
}

#[test]
fn a_retry_reads_outputs_and_the_failing_tail_into_feedback_then_deletes_them() {
    let yaml = "name: p\nsteps:\n  - {name: dev, command: dev, produces: [summary.md]}\n  - {name: test, command: test, on_fail: {goto: dev, retry: true}}\n";
    let mut h = Harness::new(yaml);
    h.fake
        .on("dev", 1, writes("summary.md", "changed parser\n"))
        .on("dev", 2, writes("summary.md", "second try\n"))
        .on(
            "test",
            1,
            Behaviour {
                stdout: "running 3 tests\n".into(),
                ..fails(1, "test_parse FAILED\n")
            },
        );
    // Attempt 2's dev sees no summary.md from attempt 1 (it was deleted), so it writes it anew.
    assert_eq!(h.run_to_end(3), Outcome::Success);
    let feedback: Vec<String> = h
        .records()
        .iter()
        .filter_map(|r| match &r.event {
            Event::AttemptRetry { feedback, .. } => Some(feedback.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(
        feedback,
        [
            "step `test` failed in attempt 1: exited with status 1\n--- output tail of `test` ---\nrunning 3 tests\ntest_parse FAILED\n--- summary.md ---\nchanged parser\n"
        ]
    );
    assert_eq!(
        h.state().feedback.len(),
        1,
        "feedback accumulates in the state"
    );
    assert_eq!(
        std::fs::read_to_string(h.workspace.join("summary.md"))
            .ok()
            .as_deref(),
        Some("second try\n")
    );
}

#[test]
fn hygiene_deletes_produces_before_the_retried_step_starts() {
    let yaml = "name: p\nsteps:\n  - {name: dev, command: dev, produces: [summary.md]}\n  - {name: test, command: test, on_fail: {goto: dev, retry: true}}\n";
    let mut h = Harness::new(yaml);
    // dev writes summary.md only in attempt 1, so attempt 2 fails its produces check: proof
    // that the file was deleted between the attempts.
    h.fake
        .on("dev", 1, writes("summary.md", "x"))
        .on("test", 1, fails(1, ""));
    assert_eq!(h.run_to_end(3), Outcome::Failure);
    assert_eq!(
        h.trace(),
        [
            "dev@1:pass",
            "->test",
            "test@1:fail",
            "->dev (retry)",
            "retry 2",
            "dev@2:fail",
            "->failure",
            "=failure"
        ]
    );
}

#[test]
fn secrets_reach_only_their_steps_and_are_scrubbed_from_events() {
    let yaml = "name: p\nsecrets: {gh: {from: env, key: GH_TOKEN}}\nsteps:\n  - {name: a, command: a, secrets: [gh]}\n  - {name: b, command: b}\n";
    let mut h = Harness::new(yaml);
    let lookup = |key: &str| (key == "GH_TOKEN").then(|| "ghp_secretvalue123".to_owned());
    h.secrets = cordon_engine::Secrets::resolve(&h.pipeline, &lookup).expect("resolve");
    h.fake.on(
        "a",
        0,
        Behaviour {
            stdout: "token is ghp_secretvalue123 ok\n".into(),
            ..fails(1, "\"ghp_secretvalue123\"\n")
        },
    );
    h.run_to_end(3);
    let opened: Vec<(String, Vec<(String, String)>)> = h
        .fake
        .opened
        .iter()
        .map(|o| (o.step.clone(), o.env.clone()))
        .collect();
    assert_eq!(
        opened,
        [(
            "a".to_owned(),
            vec![("GH_TOKEN".to_owned(), "ghp_secretvalue123".to_owned())]
        )]
    );
    let log: String = h
        .records()
        .iter()
        .map(|r| r.to_json_line() + "\n")
        .collect();
    assert!(!log.contains("ghp_secretvalue123"), "{log}");
    assert!(log.contains("token is [secret:gh] ok"), "{log}");
    assert!(log.contains("\\\"[secret:gh]\\\""), "{log}");
}

#[test]
fn missing_and_short_secrets_are_refused_naming_ref_and_variable() {
    let p = pipeline(
        "name: p\nsecrets: {gh: {from: env, key: GH_TOKEN}}\nsteps:\n  - {name: a, command: a, secrets: [gh]}\n",
    );
    let none = |_: &str| None;
    let short = |_: &str| Some("1234567".to_owned());
    let err = |lookup: &dyn Fn(&str) -> Option<String>| {
        cordon_engine::Secrets::resolve(&p, lookup)
            .err()
            .map(|e| e.to_string())
    };
    assert_eq!(
        err(&none).as_deref(),
        Some(
            "secret `gh` reads the variable `GH_TOKEN`, which is not set; export GH_TOKEN before `cordon run`"
        )
    );
    assert!(err(&short).is_some_and(|m| m.starts_with("secret `gh` (from `GH_TOKEN`) is shorter than 8 bytes")));
    let eight = |_: &str| Some("12345678".to_owned());
    assert_eq!(err(&eight), None, "eight bytes are enough (control)");
}

#[test]
fn networked_sessions_get_their_network_and_their_egress_events_join_the_step() {
    let mut h = Harness::new(
        "name: p\nsteps:\n  - {name: fetch, command: get, setup: prepare, setup_network: open, network: {allow: [example.com]}}\n",
    );
    let audit = |decision: &str| cordon_protocol::event::AuditRecord {
        ts: "2026-01-31T12:00:00.000Z".into(),
        listener: "l".into(),
        step: Some("fetch".into()),
        attempt: Some(1),
        proto: "connect".into(),
        raw_target: "example.com:443".into(),
        host: Some("example.com".into()),
        port: Some(443),
        resolved: Vec::new(),
        dialed: None,
        decision: decision.into(),
        reason: None,
        bytes_up: 0,
        bytes_down: 0,
        duration_ms: 0,
        count: 1,
    };
    h.fake.on(
        "get",
        0,
        Behaviour {
            stdout: "fetched\n".into(),
            side: vec![
                Event::EgressAllow(audit("allow")),
                Event::EgressDeny(audit("deny")),
            ],
            ..Default::default()
        },
    );
    assert_eq!(h.run_to_end(3), Outcome::Success);
    let networks: Vec<String> = h
        .fake
        .opened
        .iter()
        .map(|o| format!("{:?} {}", o.purpose, o.network))
        .collect();
    assert_eq!(
        networks,
        [
            "Setup OPEN (every name and port)",
            "Step allow [example.com]"
        ]
    );
    let kinds: Vec<(String, Option<String>)> = h
        .records()
        .iter()
        .filter(|r| r.event.kind().starts_with("egress.") || r.event.kind() == "step.output")
        .map(|r| {
            (
                r.event.kind().to_owned(),
                r.step.as_ref().map(ToString::to_string),
            )
        })
        .collect();
    let fetch = Some("fetch".to_owned());
    assert_eq!(
        kinds,
        [
            ("egress.allow".to_owned(), fetch.clone()),
            ("egress.deny".to_owned(), fetch.clone()),
            ("step.output".to_owned(), fetch),
        ],
        "the decisions come before the output that followed them"
    );
}

#[test]
fn a_model_lane_step_without_a_real_provider_is_refused_before_anything_runs() {
    let message = cordon_engine::preflight(&pipeline(
        "name: p\nllm: {provider: replay, transcript: t.jsonl}\nsteps:\n  - {name: a, command: a, model_lane: true}\n",
    ))
    .err()
    .map(|e| e.to_string())
    .unwrap_or_default();
    assert!(
        message.starts_with("step `a` has `model_lane: true`"),
        "{message}"
    );
    assert!(
        message.contains("set `llm.provider` to openai or anthropic"),
        "{message}"
    );
    assert!(
        cordon_engine::preflight(&pipeline(
            "name: p\nllm: {provider: openai, model: m}\nsteps:\n  - {name: a, command: a, model_lane: true}\n",
        ))
        .is_ok(),
        "control: with a real provider the lane step runs"
    );
}

#[test]
fn a_missing_sandbox_layer_stops_the_run_with_a_layer_error() {
    let mut h = Harness::new("name: p\nsteps:\n  - {name: a, command: a}\n");
    h.fake.refuse = Some("refusing to run: the sandbox layer `landlock` is not available".into());
    let cx = h.context(None);
    let mut observer = |_: &cordon_protocol::Record| cordon_engine::Control::Continue;
    let mut engine = cordon_engine::Engine::new(cx, &mut observer).expect("engine");
    engine.start(3, None).expect("start");
    let err = engine.drive().expect_err("refused");
    assert_eq!(err.class(), cordon_engine::ErrorClass::Layer);
    let state = h.state();
    assert!(
        matches!(state.position, cordon_engine::Position::Running { .. }),
        "the run stays resumable"
    );
}

#[test]
fn each_step_opens_on_its_own_image_or_the_pipelines_and_the_session_records_its_digest() {
    use cordon_engine::images::{RunImages, SessionImage};
    use cordon_protocol::ImageRef;
    let yaml = "name: p\nisolation: {image: base}\nsteps:\n  - {name: a, command: a}\n  - {name: b, command: b, image: \"sha256:2222222222222222222222222222222222222222222222222222222222222222\"}\n";
    let mut h = Harness::new(yaml);
    let image = |recorded: &str| SessionImage {
        recorded: recorded.to_owned(),
        rootfs: "/nonexistent".into(),
        path: None,
        writable: false,
    };
    let b = ImageRef::parse(&format!("sha256:{}", "2".repeat(64))).unwrap();
    h.images = RunImages::from_resolved(
        [
            (ImageRef::parse("base").unwrap(), image("sha256:base")),
            (b, image("sha256:b")),
        ]
        .into(),
    );
    assert_eq!(h.run_to_end(3), Outcome::Success);
    let opened: Vec<_> = h
        .fake
        .opened
        .iter()
        .map(|o| (o.step.clone(), o.image.clone()))
        .collect();
    assert_eq!(
        opened,
        [
            ("a".to_owned(), Some(Ok("sha256:base".to_owned()))),
            ("b".to_owned(), Some(Ok("sha256:b".to_owned()))),
        ]
    );
    let recorded: Vec<Option<String>> = h
        .records()
        .iter()
        .filter_map(|r| match &r.event {
            Event::SandboxSession { image, .. } => Some(image.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(
        recorded,
        [Some("sha256:base".into()), Some("sha256:b".into())]
    );
}

#[test]
fn a_step_whose_image_the_run_did_not_resolve_fails_rather_than_run_on_the_host() {
    let mut h = Harness::new("name: p\nsteps:\n  - {name: a, command: a, image: base}\n");
    assert_eq!(h.run_to_end(3), Outcome::Failure);
    let opened = &h.fake.opened[0];
    assert!(matches!(&opened.image, Some(Err(m)) if m.contains("`base` was not resolved")));
}

#[test]
fn a_resume_whose_recorded_image_was_removed_is_refused_and_an_unimported_name_names_the_fix() {
    use cordon_engine::images::{RunImageError, RunImages};
    use cordon_protocol::{Attempt, Record, RunId, StepName};
    let pipeline = cordon_pipeline::load_str(
        "pipeline.yaml",
        "name: p\nsteps:\n  - {name: a, command: a, image: base}\n",
        std::path::Path::new(""),
        &std::collections::BTreeMap::new(),
    )
    .expect("valid")
    .pipeline;
    let state = tempfile::tempdir().expect("tempdir");
    let images = cordon_image::Images::at(state.path());
    let recorded = format!("sha256:{}", "a".repeat(64));
    let log = [Record {
        run: RunId::from_parts(1_769_860_800_000, 7),
        seq: 1,
        ts: cordon_protocol::event::Timestamp(0),
        step: Some(StepName::parse("a").expect("a name")),
        event: Event::SandboxSession {
            step: StepName::parse("a").expect("a name"),
            attempt: Attempt::FIRST,
            network: "none".into(),
            image: Some(recorded.clone()),
        },
    }];
    let err = RunImages::resolve(&pipeline, &images, &[], &log).unwrap_err();
    assert!(matches!(err, RunImageError::RecordedGone { .. }), "{err}");
    assert_eq!(
        err.to_string(),
        format!(
            "this run started on the image {recorded}, which is no longer in the image store; \
             import it again (`cordon image import FILE`) to resume, or start a new run"
        )
    );
    // Without the record, the name is looked up now: not imported, the fix is named.
    let err = RunImages::resolve(&pipeline, &images, &[], &[]).unwrap_err();
    assert!(
        err.to_string()
            .contains("cordon image import FILE --name base"),
        "{err}"
    );
}
