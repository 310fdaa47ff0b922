//! Replay of a 10,000-event run: read every event from the store and fold it into `RunState`,
//! against the peer of reading the same rows without decoding them. Prints milliseconds.

use std::time::{Duration, Instant};

use cordon_engine::RunState;
use cordon_protocol::event::{OutputStream, Timestamp, Verdict};
use cordon_protocol::{Attempt, Event, RunId, StepName};
use cordon_store::{RunRow, StateDir, Store};

const EVENTS: u64 = 10_000;
const ROUNDS: u32 = 10;

fn main() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open(&StateDir::new(dir.path().join("state"))).expect("store");
    let run = RunId::from_parts(1_769_860_800_000, 1);
    store
        .create_run(&RunRow {
            id: run,
            pipeline: "bench".into(),
            pipeline_file: "/w/pipeline.yaml".into(),
            workspace: "/w".into(),
            started: Timestamp(0),
            snapshot: None,
        })
        .expect("run");
    let step = StepName::parse("test").expect("name");
    store
        .append(
            run,
            None,
            &Event::RunStarted {
                pipeline: "bench".into(),
                workspace: "/w".into(),
                attempt: Attempt::FIRST,
                max_attempts: 3,
                prompt: None,
                kind: cordon_protocol::event::RunKind::Steps,
                outcome: None,
                context: Vec::new(),
            },
        )
        .expect("append");
    let mut count = 1;
    while count < EVENTS {
        let events = [
            Event::StepStarted {
                attempt: Attempt::FIRST,
            },
            Event::StepOutput {
                stream: OutputStream::Stdout,
                text: "running 120 tests ... ok\n".repeat(3),
            },
            Event::StepOutput {
                stream: OutputStream::Stderr,
                text: "warning: unused variable `x`\n".into(),
            },
            Event::StepFinished {
                attempt: Attempt::FIRST,
                verdict: Verdict::Pass,
                exit_code: Some(0),
                reason: None,
                diff: None,
                output_omitted_bytes: None,
            },
        ];
        for event in events {
            if count < EVENTS {
                store.append(run, Some(&step), &event).expect("append");
                count += 1;
            }
        }
    }
    let mut replay = Duration::MAX;
    let mut state = RunState::default();
    for _ in 0..ROUNDS {
        let start = Instant::now();
        let records = store.events(run).expect("events");
        state = RunState::replay(&records);
        replay = replay.min(start.elapsed());
    }
    assert_eq!(state.last_seq, EVENTS);
    println!(
        "replay of {EVENTS} events (read + decode + fold), best of {ROUNDS}: {:.1} ms",
        replay.as_secs_f64() * 1e3
    );
}
