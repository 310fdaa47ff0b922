//! Event wire shapes: the `--json` line, timestamps, and the closed set of types.

use super::*;
use crate::RunId;

fn step(name: &str) -> StepName {
    StepName::parse(name).expect("step name")
}

fn check_timestamp(millis: u64, text: &str) {
    assert_eq!(Timestamp(millis).to_string(), text);
    assert_eq!(Timestamp::parse(text), Some(Timestamp(millis)), "{text}");
}

#[test]
fn timestamps_are_rfc3339_with_milliseconds() {
    check_timestamp(0, "1970-01-01T00:00:00.000Z");
    check_timestamp(1_769_860_800_123, "2026-01-31T12:00:00.123Z");
    check_timestamp(951_782_400_000, "2000-02-29T00:00:00.000Z");
    check_timestamp(4_107_542_399_999, "2100-02-28T23:59:59.999Z");
    for bad in [
        "2026-01-31T12:00:00Z",
        "2026-13-01T00:00:00.000Z",
        "2026-01-31 12:00:00.000Z",
        "",
    ] {
        assert_eq!(Timestamp::parse(bad), None, "{bad}");
    }
}

#[test]
fn json_line_has_the_contract_keys_in_order() {
    let record = Record {
        run: RunId::from_parts(1_769_860_800_123, 7),
        seq: 3,
        ts: Timestamp(1_769_860_800_123),
        step: Some(step("test")),
        event: Event::StepFinished {
            attempt: Attempt::FIRST,
            verdict: Verdict::Fail,
            exit_code: Some(1),
            reason: None,
            diff: None,
            output_omitted_bytes: None,
        },
    };
    assert_eq!(
        record.to_json_line(),
        r#"{"run":"01kg9ys7kv0000000000000007","seq":3,"ts":"2026-01-31T12:00:00.123Z","type":"step.finished","step":"test","data":{"attempt":1,"verdict":"fail","exit_code":1}}"#
    );
    assert_eq!(
        Record::from_json_line(&record.to_json_line()).expect("parse"),
        record
    );
}

fn every_kind() -> Vec<Event> {
    let audit = AuditRecord {
        ts: "2026-01-31T12:00:00.123Z".to_owned(),
        listener: "l1".to_owned(),
        step: Some("test".to_owned()),
        attempt: Some(1),
        proto: "connect".to_owned(),
        raw_target: "example.com:443".to_owned(),
        host: Some("example.com".to_owned()),
        port: Some(443),
        resolved: vec!["192.0.2.1".to_owned()],
        dialed: Some("192.0.2.1:443".to_owned()),
        decision: "allow".to_owned(),
        reason: None,
        bytes_up: 1,
        bytes_down: 2,
        duration_ms: 3,
        count: 2,
    };
    vec![
        Event::RunStarted {
            pipeline: "p".into(),
            workspace: "/w".into(),
            attempt: Attempt::FIRST,
            max_attempts: 3,
            prompt: None,
            kind: RunKind::Outcome,
            outcome: Some("Add a --json flag.".into()),
            context: Vec::new(),
        },
        Event::RunResumed {
            attempt: Attempt::FIRST,
            max_attempts: 3,
        },
        Event::RunFinished {
            outcome: Outcome::Success,
            reason: "r".into(),
        },
        Event::StepStarted {
            attempt: Attempt::FIRST,
        },
        Event::StepOutput {
            stream: OutputStream::Stderr,
            text: "x\n".into(),
        },
        Event::StepFinished {
            attempt: Attempt::FIRST,
            verdict: Verdict::Pass,
            exit_code: None,
            reason: Some("ok".into()),
            diff: Some(BlobId(4)),
            output_omitted_bytes: Some(9),
        },
        Event::Route {
            from: step("a"),
            to: "success".into(),
            retry: false,
        },
        Event::AttemptRetry {
            attempt: Attempt::FIRST,
            feedback: "f".into(),
        },
        Event::SandboxSession {
            step: step("a"),
            attempt: Attempt::FIRST,
            network: "none".into(),
            image: None,
        },
        Event::SandboxSession {
            step: step("a"),
            attempt: Attempt::FIRST,
            network: "none".into(),
            image: Some(format!("sha256:{}", "a".repeat(64))),
        },
        Event::SandboxExec {
            argv_digest: "d".into(),
            exit_code: 0,
            duration_ms: 1,
            timed_out: false,
        },
        Event::SetupRan {
            stamp: "s".into(),
            exit_code: 0,
            duration_ms: 1,
        },
        Event::SetupCached { stamp: "s".into() },
        Event::EgressAllow(audit.clone()),
        Event::EgressDeny(audit.clone()),
        Event::EgressClose(audit),
        Event::PolicyGrant {
            domain: "d".into(),
            reason: "r".into(),
            task: None,
        },
        Event::PolicyRefuse {
            domain: "d".into(),
            reason: "r".into(),
            task: Some("t1".into()),
        },
        Event::LlmRequest {
            model: "m".into(),
            source: LlmSource::Lane,
            task: None,
        },
        Event::LlmRequest {
            model: "m".into(),
            source: LlmSource::Agent,
            task: Some("Fix the bug.".into()),
        },
        Event::BudgetExhausted {
            kind: "tokens".into(),
            used: 24.into(),
            limit: 20.into(),
        },
        Event::LlmResponse {
            model: "m".into(),
            input_tokens: 1,
            output_tokens: 2,
            latency_ms: 3,
            source: LlmSource::Agent,
            estimated: None,
        },
        Event::ToolCall {
            id: "1".into(),
            name: "bash".into(),
            arguments: serde_json::json!({"command": "ls"}),
            server: None,
        },
        Event::ToolResult {
            id: "1".into(),
            ok: true,
            interrupted: Some(true),
            output: "o".into(),
        },
        Event::ArtifactWritten {
            path: "review.md".into(),
        },
        Event::CommitCreated {
            sha: "abc".into(),
            files: vec!["a.rs".into()],
            files_omitted: Some(3),
        },
        Event::EgressDropped { count: 5 },
        Event::DeliveryPushed {
            remote: "https://forge.example.com/o/r.git".into(),
            branch: "cordon/run".into(),
            sha: "abc".into(),
        },
        Event::DeliveryPullRequest {
            url: "https://forge.example.com/o/r/pull/7".into(),
            number: 7,
        },
        Event::ReportComment {
            url: "https://forge.example.com/o/r/issues/3#issuecomment-1".into(),
        },
        Event::TasksPlanned {
            tasks: vec![PlannedTask {
                id: "t1".into(),
                title: "Parse".into(),
                depends_on: vec!["t0".into()],
                description: "d".into(),
                acceptance: vec!["a".into()],
                verify: vec!["make test".into()],
            }],
        },
        Event::TaskState {
            task: "t1".into(),
            state: TaskPhase::Executing,
            revision: 1,
            replan: 0,
            reason: Some("verify failed".into()),
        },
        Event::ResourcesSample {
            memory_bytes: Some(1),
            disk_percent: None,
        },
        Event::ResourcesWarning {
            message: "m".into(),
        },
        Event::Error {
            message: "m".into(),
        },
    ]
}

#[test]
fn every_event_type_survives_its_stored_form() {
    let events = every_kind();
    let mut kinds: Vec<&str> = events.iter().map(Event::kind).collect();
    kinds.sort_unstable();
    kinds.dedup();
    assert_eq!(
        kinds.len(),
        33,
        "Appendix A lists 26 event types; Appendix B adds egress.dropped, budget.exhausted, \
         tasks.planned, task.state, delivery.pushed, delivery.pull_request and report.comment \
         (and run.interrupted, left out here)"
    );
    for event in events {
        let back = Event::from_parts(event.kind(), &event.data_json())
            .unwrap_or_else(|e| panic!("{}: {e}", event.kind()));
        assert_eq!(back, event);
    }
}

#[test]
fn the_events_of_a_phase_step_carry_their_task() {
    let record = |step_name: &str, event: Event| Record {
        run: RunId::from_parts(1_769_860_800_123, 7),
        seq: 3,
        ts: Timestamp(1_769_860_800_123),
        step: Some(step(step_name)),
        event,
    };
    let started = record(
        "t1.execute",
        Event::StepStarted {
            attempt: Attempt::FIRST,
        },
    );
    let line = started.to_json_line();
    assert!(
        line.ends_with(r#""step":"t1.execute","data":{"task":"t1","attempt":1}}"#),
        "{line}"
    );
    assert_eq!(Record::from_json_line(&line).expect("parse"), started);
    let empty = record("t1.verify", Event::EgressDropped { count: 1 });
    assert_eq!(
        Record::from_json_line(&empty.to_json_line()).expect("parse"),
        empty
    );
    // An event with a task of its own keeps it, and gets no second one.
    let grant = record(
        "t1.plan",
        Event::PolicyGrant {
            domain: "example.com".into(),
            reason: "r".into(),
            task: Some("t1".into()),
        },
    );
    let line = grant.to_json_line();
    assert_eq!(line.matches("\"task\"").count(), 1, "{line}");
    assert_eq!(Record::from_json_line(&line).expect("parse"), grant);
    // A step of a steps run gets none.
    let plain = record(
        "dev",
        Event::StepStarted {
            attempt: Attempt::FIRST,
        },
    );
    assert!(!plain.to_json_line().contains("task"));
}

#[test]
fn unknown_types_and_fields_are_refused() {
    assert!(Event::from_parts("run.exploded", "{}").is_err());
    assert!(Event::from_parts("step.started", r#"{"attempt":0}"#).is_err());
    assert!(Event::from_parts("step.started", r#"{"attempt":1,"extra":true}"#).is_err());
}

#[test]
fn a_session_on_the_hosts_directories_records_no_image_field() {
    let on_host = Event::SandboxSession {
        step: step("a"),
        attempt: Attempt::FIRST,
        network: "none".into(),
        image: None,
    };
    assert_eq!(
        on_host.data_json(),
        r#"{"step":"a","attempt":1,"network":"none"}"#
    );
    let old = Event::from_parts(
        "sandbox.session",
        r#"{"step":"a","attempt":1,"network":"none"}"#,
    )
    .expect("an event written before images parses");
    assert_eq!(old, on_host);
}
