//! The terminal view's lines and summary, as data.

use cordon_protocol::event::{Outcome, OutputStream, Timestamp, Verdict};
use cordon_protocol::{Attempt, Event, Record, RunId, StepName};
use cordon_web::{Edge, Graph, GraphStep, ResourceSample, RunView};

use super::{duration, gauges, live_lines, notice, plain_line, summary};

const T0: u64 = 1_769_860_800_000;

fn name(text: &str) -> StepName {
    StepName::parse(text).expect("step name")
}

fn graph() -> Graph {
    let step = |n: &str, pass: &str, fail: &str, retry: bool| GraphStep {
        name: name(n),
        kind: Some("command".to_owned()),
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

/// Records at T0 + `ms`.
fn record(seq: u64, ms: u64, step: Option<&str>, event: Event) -> Record {
    Record {
        run: RunId::from_u128(1 << 90),
        seq,
        ts: Timestamp(T0 + ms),
        step: step.map(name),
        event,
    }
}

fn history() -> Vec<Record> {
    let two = Attempt::new(2).expect("attempt");
    let finished = |attempt, verdict, reason: Option<&str>| Event::StepFinished {
        attempt,
        verdict,
        exit_code: Some(i32::from(verdict == Verdict::Fail)),
        reason: reason.map(str::to_owned),
        diff: None,
        output_omitted_bytes: None,
    };
    vec![
        record(
            1,
            0,
            None,
            Event::RunStarted {
                pipeline: "fix".into(),
                workspace: "/w".into(),
                attempt: Attempt::FIRST,
                max_attempts: 3,
                prompt: None,
                kind: cordon_protocol::event::RunKind::Steps,
                outcome: None,
                context: Vec::new(),
            },
        ),
        record(
            2,
            10,
            Some("dev"),
            Event::StepStarted {
                attempt: Attempt::FIRST,
            },
        ),
        record(
            3,
            500,
            Some("dev"),
            Event::StepOutput {
                stream: OutputStream::Stdout,
                text: "edit\n".into(),
            },
        ),
        record(
            4,
            1_210,
            Some("dev"),
            finished(Attempt::FIRST, Verdict::Pass, None),
        ),
        record(
            5,
            1_300,
            Some("test"),
            Event::StepStarted {
                attempt: Attempt::FIRST,
            },
        ),
        record(
            6,
            4_400,
            Some("test"),
            finished(Attempt::FIRST, Verdict::Fail, Some("exit status 1\nmore")),
        ),
        record(
            7,
            4_410,
            None,
            Event::AttemptRetry {
                attempt: two,
                feedback: "x".into(),
            },
        ),
        record(8, 4_420, Some("dev"), Event::StepStarted { attempt: two }),
    ]
}

fn view(records: &[Record], held: bool) -> RunView {
    let mut view = RunView::new(RunId::from_u128(1 << 90), "fix", Some(graph()));
    view.set_held(held);
    for r in records {
        view.apply(r);
    }
    view
}

#[test]
fn plain_lines_follow_starts_finishes_and_retries() {
    let records = history();
    let mut lines = Vec::new();
    let mut v = view(&[], true);
    for r in &records {
        v.apply(r);
        lines.extend(plain_line(&v, r));
    }
    insta::assert_snapshot!(lines.join("\n"), @r"
    dev   running  attempt 1
    dev   passed   attempt 1  1.2s
    test  running  attempt 1
    test  failed   attempt 1  3.1s  exit status 1
    retry: attempt 2
    dev   running  attempt 2
    ");
}

#[test]
fn live_lines_show_a_spinner_attempt_and_elapsed_time_for_running_steps() {
    let v = view(&history(), true);
    let lines = live_lines(&v, T0 + 70_420, 3, None)
        .join("\n")
        .replace('\x1b', "^");
    insta::assert_snapshot!(lines, @r"
    ^[34m⠸^[0m dev   ^[34mrunning^[0m  attempt 2  1m06s
    ^[31m✗^[0m test  ^[31mfailed ^[0m  attempt 1  3.1s  ^[2mexit status 1^[0m
    ");
}

#[test]
fn the_summary_lists_every_step_and_the_ending() {
    let mut records = history();
    records.push(record(
        9,
        5_000,
        Some("dev"),
        Event::StepFinished {
            attempt: Attempt::new(2).expect("2"),
            verdict: Verdict::Pass,
            exit_code: Some(0),
            reason: None,
            diff: None,
            output_omitted_bytes: None,
        },
    ));
    records.push(record(
        10,
        5_100,
        Some("test"),
        Event::StepStarted {
            attempt: Attempt::new(2).expect("2"),
        },
    ));
    records.push(record(
        11,
        6_100,
        Some("test"),
        Event::StepFinished {
            attempt: Attempt::new(2).expect("2"),
            verdict: Verdict::Pass,
            exit_code: Some(0),
            reason: None,
            diff: None,
            output_omitted_bytes: None,
        },
    ));
    records.push(record(
        12,
        6_200,
        None,
        Event::RunFinished {
            outcome: Outcome::Success,
            reason: "test passed".into(),
        },
    ));
    insta::assert_snapshot!(summary(&view(&records, true), T0 + 9_000), @r"
    step  status   starts  attempt     time
    dev   passed        2        2     0.5s
    test  passed        2        2     1.0s
    run 00000001000000000000000000 success: test passed (attempt 2 in 6.2s)
    ");
}

#[test]
fn the_summary_counts_model_tokens_per_step_and_for_the_run_when_there_are_any() {
    let mut records = history();
    for (seq, step, input, output) in [
        (20, "dev", 1200, 300),
        (21, "dev", 10_000, 34),
        (22, "test", 5, 5),
    ] {
        records.push(record(
            seq,
            4_000,
            Some(step),
            Event::LlmResponse {
                model: "m".into(),
                input_tokens: input,
                output_tokens: output,
                latency_ms: 10,
                source: cordon_protocol::event::LlmSource::Agent,
                estimated: None,
            },
        ));
    }
    insta::assert_snapshot!(summary(&view(&records, false), T0 + 9_000), @r"
    step  status       starts  attempt     time    tokens
    dev   interrupted       2        2        -    11,534
    test  failed            1        1     3.1s        10
    run 00000001000000000000000000 stopped; continue with `cordon run --resume 00000001000000000000000000` (attempt 2, 11,544 tokens: 11,205 in, 339 out)
    ");
    // Priced, and stopped by a spent budget: cost per step and for the run, and the reason.
    records.push(record(
        23,
        4_500,
        None,
        Event::BudgetExhausted {
            kind: "tokens".into(),
            used: 11_544.into(),
            limit: 10_000.into(),
        },
    ));
    let mut priced = view(&records, false);
    priced.graph.pricing = Some(cordon_web::Pricing {
        input: 3.0,
        output: 15.0,
    });
    insta::assert_snapshot!(summary(&priced, T0 + 9_000), @r"
    step  status       starts  attempt     time    tokens       cost
    dev   interrupted       2        2        -    11,534    $0.0386
    test  failed            1        1     3.1s        10    $0.0001
    run 00000001000000000000000000 stopped: budget exhausted: tokens 11544 of 10000; continue with `cordon run --resume 00000001000000000000000000` and a higher limit (attempt 2, 11,544 tokens: 11,205 in, 339 out, $0.0387)
    ");
}

#[test]
fn an_interrupted_run_summary_shows_the_unfinished_step_interrupted_and_how_to_resume() {
    insta::assert_snapshot!(summary(&view(&history(), false), T0 + 9_000), @r"
    step  status       starts  attempt     time
    dev   interrupted       2        2        -
    test  failed            1        1     3.1s
    run 00000001000000000000000000 stopped; continue with `cordon run --resume 00000001000000000000000000` (attempt 2)
    ");
}

#[test]
fn durations_read_naturally() {
    for (ms, text) in [
        (0, "0.0s"),
        (1_250, "1.2s"),
        (59_999, "59.9s"),
        (60_000, "1m00s"),
        (187_000, "3m07s"),
        (3_720_000, "1h02m"),
    ] {
        assert_eq!(duration(ms), text, "{ms}");
    }
}

#[test]
fn a_failure_without_a_reason_shows_its_exit_status() {
    let mut records = history()[..5].to_vec();
    records.push(record(
        6,
        1_500,
        Some("test"),
        Event::StepFinished {
            attempt: Attempt::FIRST,
            verdict: Verdict::Fail,
            exit_code: Some(3),
            reason: None,
            diff: None,
            output_omitted_bytes: None,
        },
    ));
    let v = view(&records, true);
    assert_eq!(
        plain_line(&v, &records[5]).as_deref(),
        Some("test  failed   attempt 1  0.2s  exit 3")
    );
}

#[test]
fn an_unverifiable_verdict_shows_as_its_own_status_with_its_reason() {
    let mut records = history()[..5].to_vec();
    records.push(record(
        6,
        1_500,
        Some("test"),
        Event::StepFinished {
            attempt: Attempt::FIRST,
            verdict: Verdict::Unverifiable,
            exit_code: None,
            reason: Some("the final message says `VERDICT: UNVERIFIABLE`".into()),
            diff: None,
            output_omitted_bytes: None,
        },
    ));
    let v = view(&records, true);
    assert_eq!(
        plain_line(&v, &records[5]).as_deref(),
        Some("test  unverifiable  attempt 1  0.2s  the final message says `VERDICT: UNVERIFIABLE`")
    );
}

#[test]
fn setup_hooks_commits_resource_warnings_and_errors_are_notices() {
    let v = view(&history(), true);
    let notices: Vec<String> = [
        Event::SetupRan {
            stamp: "s".into(),
            exit_code: 0,
            duration_ms: 5,
        },
        Event::SetupCached { stamp: "s".into() },
        Event::CommitCreated {
            sha: "abc123".into(),
            files: vec!["src/lib.rs".into()],
            files_omitted: None,
        },
        Event::CommitCreated {
            sha: "def456".into(),
            files: (1..=6).map(|n| format!("f{n}.py")).collect(),
            files_omitted: Some(994),
        },
        Event::ResourcesWarning {
            message: "the workspace filesystem is 90% full".into(),
        },
        Event::Error {
            message: "the diff could not be taken\ndetail".into(),
        },
        Event::StepStarted {
            attempt: Attempt::FIRST,
        },
    ]
    .into_iter()
    .enumerate()
    .filter_map(|(i, event)| notice(&v, &record(20 + i as u64, 0, Some("test"), event)))
    .collect();
    insta::assert_snapshot!(notices.join("\n"), @r"
    test  setup ran (exit 0)
    test  setup up to date
    test  committed abc123 (1 file: src/lib.rs)
    test  committed def456 (1000 files: f1.py, f2.py, f3.py, f4.py, f5.py, and 995 more)
    test  warning: the workspace filesystem is 90% full
    cordon: the diff could not be taken
    ");
}

#[test]
fn the_running_step_shows_the_gauges_of_its_latest_sample() {
    let mut records = history();
    records.push(record(
        9,
        5_000,
        Some("dev"),
        Event::ResourcesSample {
            memory_bytes: Some(120 << 20),
            disk_percent: Some(42),
        },
    ));
    let v = view(&records, true);
    let lines = live_lines(&v, T0 + 6_000, 0, Some(512 << 20))
        .join("\n")
        .replace('\x1b', "^");
    insta::assert_snapshot!(lines, @r"
    ^[34m⠋^[0m dev   ^[34mrunning^[0m  attempt 2  1.5s  ^[2mmem 120 MiB/512 MiB · disk 42%^[0m
    ^[31m✗^[0m test  ^[31mfailed ^[0m  attempt 1  3.1s  ^[2mexit status 1^[0m
    ");
}

#[test]
fn gauges_show_what_the_sample_holds() {
    let sample = |memory_bytes, disk_percent| ResourceSample {
        memory_bytes,
        disk_percent,
    };
    for (s, cap, expected) in [
        (
            sample(Some(120 << 20), Some(42)),
            Some(512 << 20),
            Some("mem 120 MiB/512 MiB · disk 42%"),
        ),
        (sample(Some(120 << 20), None), None, Some("mem 120 MiB")),
        (sample(None, Some(97)), Some(1 << 30), Some("disk 97%")),
        (
            sample(Some(3 << 30), Some(5)),
            Some(16 << 30),
            Some("mem 3072 MiB/16.0 GiB · disk 5%"),
        ),
        (sample(None, None), None, None),
    ] {
        assert_eq!(gauges(&s, cap).as_deref(), expected, "{s:?}");
    }
}

#[test]
fn a_resumed_runs_time_counts_only_while_a_process_held_it() {
    // Held 4.42 s, then nobody for an hour, then 2 s to the end: 6.4 s, not an hour.
    let mut records = history();
    records.push(record(
        9,
        3_604_420,
        None,
        Event::RunResumed {
            attempt: Attempt::new(2).expect("2"),
            max_attempts: 3,
        },
    ));
    records.push(record(
        10,
        3_606_420,
        None,
        Event::RunFinished {
            outcome: Outcome::Failure,
            reason: "gave up".into(),
        },
    ));
    let summary = summary(&view(&records, false), T0 + 3_606_420);
    assert!(
        summary.ends_with("failure: gave up (attempt 2 in 6.4s)\n"),
        "{summary}"
    );
}

#[test]
fn an_outcome_run_shows_a_task_table_live_and_at_the_end() {
    use cordon_protocol::event::{PlannedTask, RunKind, TaskPhase};
    let mut view = RunView::new(RunId::from_u128(1 << 90), "p", None);
    view.set_held(true);
    let task = |id: &str, title: &str| PlannedTask {
        id: id.to_owned(),
        title: title.to_owned(),
        depends_on: Vec::new(),
        description: String::new(),
        acceptance: Vec::new(),
        verify: Vec::new(),
    };
    let records = [
        record(
            1,
            0,
            None,
            Event::RunStarted {
                pipeline: "p".into(),
                workspace: "/w".into(),
                attempt: Attempt::FIRST,
                max_attempts: 3,
                prompt: None,
                kind: RunKind::Outcome,
                outcome: Some("o".into()),
                context: Vec::new(),
            },
        ),
        record(
            2,
            10,
            Some("decompose"),
            Event::TasksPlanned {
                tasks: vec![
                    task("t1", "Parse the flag"),
                    task(
                        "t2",
                        "a \u{1b}[31mred\u{1b}[0m title that is much longer than the column",
                    ),
                ],
            },
        ),
        record(
            3,
            20,
            None,
            Event::TaskState {
                task: "t1".into(),
                state: TaskPhase::Executing,
                revision: 1,
                replan: 0,
                reason: Some("verify failed: `make` exited with status 2\nmore".into()),
            },
        ),
        record(
            4,
            30,
            Some("t1.execute"),
            Event::StepStarted {
                attempt: Attempt::new(2).expect("attempt"),
            },
        ),
    ];
    for r in &records {
        view.apply(r);
    }
    assert_eq!(
        notice(&view, &records[2]).as_deref(),
        Some(
            "task t1  executing  revision 1, replans 0: verify failed: `make` exited with status 2"
        )
    );
    assert_eq!(
        notice(&view, &records[1]).as_deref(),
        Some("planned 2 tasks: t1, t2")
    );
    let live: Vec<String> = live_lines(&view, T0 + 40, 0, None)
        .into_iter()
        .map(|l| strip(&l))
        .collect();
    assert_eq!(
        live[..3],
        [
            "task  title                             state         phase       revision  replans",
            "t1    Parse the flag                    executing     execute            1        0",
            "t2    a \\e[31mred\\e[0m title that is m…  pending       -                  0        0",
        ]
    );
    assert!(
        live[3].contains("t1.execute") && live[3].contains("running"),
        "{live:?}"
    );
    assert_eq!(
        live.len(),
        4,
        "only the running phase step is listed under the table"
    );
    view.set_held(false);
    let end = summary(&view, T0 + 50);
    assert!(end.starts_with("task  title"), "{end}");
    assert!(end.contains("\nrun "), "{end}");
}

/// A live line without its colour codes.
fn strip(line: &str) -> String {
    let mut out = String::new();
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for d in chars.by_ref() {
                if d == 'm' {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}
