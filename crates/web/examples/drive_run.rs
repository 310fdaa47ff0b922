//! A test driver for the browser test (tests/browser): writes a run into a state directory
//! with the store API, holding its lock like `cordon run` would, one stage per line read from
//! stdin, so the test decides when the run moves on (no timing involved).
//!
//! `drive_run STATE_DIR live`: stage 0 (at start) starts `build` (running, with coloured
//! output); each stdin line advances: 1 finishes `build` and starts `test`, 2 fails `test`
//! and retries, 3 passes both and finishes the run. Prints `run <ID>` then `stage <n>` after each.
//! `drive_run STATE_DIR big N`: a finished run of N events, prints `run <ID>` and exits.
//! `drive_run STATE_DIR transcript`: a finished run whose `dev` attempt made 200 tool calls and
//! left a 5,000-line diff, prints `run <ID>` and exits.

use std::io::BufRead as _;
use std::path::PathBuf;

use cordon_protocol::event::{AuditRecord, LlmSource, Outcome, OutputStream, Timestamp, Verdict};
use cordon_protocol::{Attempt, Event, RunId, StepName};
use cordon_store::{RunRow, StateDir, Store, new_run_id};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let dir = StateDir::new(PathBuf::from(
        args.next().ok_or("usage: drive_run STATE_DIR live|big N")?,
    ));
    let mode = args.next().unwrap_or_else(|| "live".to_owned());
    let store = Store::open(&dir)?;
    let run = new_run_id()?;
    let _lock = store.lock_run(run)?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_millis();
    store.create_run(&RunRow {
        id: run,
        pipeline: "fix-failing-tests".into(),
        pipeline_file: "/work/example/pipeline.yaml".into(),
        workspace: "/work/example".into(),
        started: Timestamp(u64::try_from(now)?),
        snapshot: None,
    })?;
    let name = |s: &str| StepName::parse(s).ok();
    let append =
        |step: &str, event: Event| store.append(run, name(step).as_ref(), &event).map(|_| ());
    let two = Attempt::new(2).ok_or("attempt")?;
    append(
        "",
        Event::RunStarted {
            pipeline: "fix-failing-tests".into(),
            workspace: "/work/example".into(),
            attempt: Attempt::FIRST,
            max_attempts: 3,
            prompt: None,
            kind: cordon_protocol::event::RunKind::Steps,
            outcome: None,
            context: Vec::new(),
        },
    )?;
    println!("run {run}");
    if mode == "big" {
        let count: u64 = args.next().and_then(|n| n.parse().ok()).unwrap_or(5000);
        big(&store, run, count)?;
        return Ok(());
    }
    if mode == "transcript" {
        transcript(&store, run)?;
        return Ok(());
    }
    let out = |step: &str, text: &str| {
        append(
            step,
            Event::StepOutput {
                stream: OutputStream::Stdout,
                text: text.into(),
            },
        )
    };
    let finish = |step: &str, attempt, verdict, reason: Option<&str>| {
        append(
            step,
            Event::StepFinished {
                attempt,
                verdict,
                exit_code: Some(i32::from(verdict == Verdict::Fail)),
                reason: reason.map(str::to_owned),
                diff: None,
                output_omitted_bytes: None,
            },
        )
    };
    let route = |from: &str, to: &str, retry| {
        append(
            "",
            Event::Route {
                from: StepName::parse(from).expect("name"),
                to: to.into(),
                retry,
            },
        )
    };
    append(
        "build",
        Event::StepStarted {
            attempt: Attempt::FIRST,
        },
    )?;
    out("build", "\u{1b}[1mCompiling\u{1b}[0m calc v0.1.0\n")?;
    append(
        "build",
        egress("build", "allow", "files.example.test", None),
    )?;
    append(
        "build",
        egress("build", "deny", "tracker.example.test", Some("not_allowed")),
    )?;
    println!("stage 0");
    let mut stage = 0;
    for line in std::io::stdin().lock().lines() {
        line?;
        stage += 1;
        match stage {
            1 => {
                out(
                    "build",
                    "\u{1b}[32m    Finished\u{1b}[0m dev profile in 1.2s\n",
                )?;
                finish("build", Attempt::FIRST, Verdict::Pass, None)?;
                route("build", "test", false)?;
                append(
                    "test",
                    Event::StepStarted {
                        attempt: Attempt::FIRST,
                    },
                )?;
                out(
                    "test",
                    "running 3 tests\ntest adds ... \u{1b}[32mok\u{1b}[0m\ntest divides ... \u{1b}[31mFAILED\u{1b}[0m\n",
                )?;
            }
            2 => {
                finish("test", Attempt::FIRST, Verdict::Fail, Some("exit status 1"))?;
                route("test", "build", true)?;
                append(
                    "",
                    Event::AttemptRetry {
                        attempt: two,
                        feedback: "test divides failed".into(),
                    },
                )?;
                append("build", Event::StepStarted { attempt: two })?;
                out(
                    "build",
                    "\u{1b}[1mCompiling\u{1b}[0m calc v0.1.0 (attempt 2)\n",
                )?;
            }
            _ => {
                finish("build", two, Verdict::Pass, None)?;
                route("build", "test", false)?;
                append("test", Event::StepStarted { attempt: two })?;
                out(
                    "test",
                    "running 3 tests\ntest adds ... \u{1b}[32mok\u{1b}[0m\ntest divides ... \u{1b}[32mok\u{1b}[0m\ntest result: \u{1b}[32mok\u{1b}[0m. 3 passed\n",
                )?;
                // The test step asked the model once (150 tokens for the run), said a line and
                // called a tool: a conversation for the page's transcript.
                append(
                    "test",
                    Event::LlmRequest {
                        model: "m".into(),
                        source: LlmSource::Agent,
                        task: Some("Make the tests pass.".into()),
                    },
                )?;
                append(
                    "test",
                    Event::LlmResponse {
                        model: "m".into(),
                        input_tokens: 100,
                        output_tokens: 50,
                        latency_ms: 5,
                        source: LlmSource::Agent,
                        estimated: None,
                    },
                )?;
                out("test", "Running the tests once more.\n")?;
                append(
                    "test",
                    Event::ToolCall {
                        id: "c1".into(),
                        name: "bash".into(),
                        arguments: serde_json::json!({"command": "pytest -q"}),
                        server: None,
                    },
                )?;
                append(
                    "test",
                    Event::ToolResult {
                        id: "c1".into(),
                        ok: true,
                        interrupted: None,
                        output: "3 passed\n[exit code 0]".into(),
                    },
                )?;
                finish("test", two, Verdict::Pass, None)?;
                route("test", "success", false)?;
                append(
                    "",
                    Event::RunFinished {
                        outcome: Outcome::Success,
                        reason: "test passed".into(),
                    },
                )?;
            }
        }
        println!("stage {stage}");
        if stage >= 3 {
            break;
        }
    }
    Ok(())
}

fn egress(step: &str, decision: &str, host: &str, reason: Option<&str>) -> Event {
    let audit = AuditRecord {
        ts: "2026-01-31T12:00:00.000Z".into(),
        listener: "127.0.0.1:3128".into(),
        step: Some(step.into()),
        attempt: Some(1),
        proto: "connect".into(),
        raw_target: format!("{host}:443"),
        host: Some(host.into()),
        port: Some(443),
        resolved: vec![],
        dialed: None,
        decision: decision.into(),
        reason: reason.map(str::to_owned),
        bytes_up: 0,
        bytes_down: 0,
        duration_ms: 0,
        count: 1,
    };
    if decision == "allow" {
        Event::EgressAllow(audit)
    } else {
        Event::EgressDeny(audit)
    }
}

/// A finished run of `count` events: one step with long coloured output.
fn big(store: &Store, run: RunId, count: u64) -> Result<(), Box<dyn std::error::Error>> {
    let step = StepName::parse("test").ok();
    store.append(
        run,
        step.as_ref(),
        &Event::StepStarted {
            attempt: Attempt::FIRST,
        },
    )?;
    for i in 0..count.saturating_sub(4) {
        let text = format!(
            "line {i}: \u{1b}[3{}mcoloured\u{1b}[0m output of a chatty test\n",
            i % 8
        );
        store.append(
            run,
            step.as_ref(),
            &Event::StepOutput {
                stream: OutputStream::Stdout,
                text,
            },
        )?;
    }
    store.append(
        run,
        step.as_ref(),
        &Event::StepFinished {
            attempt: Attempt::FIRST,
            verdict: Verdict::Pass,
            exit_code: Some(0),
            reason: None,
            diff: None,
            output_omitted_bytes: None,
        },
    )?;
    store.append(
        run,
        None,
        &Event::RunFinished {
            outcome: Outcome::Success,
            reason: "test passed".into(),
        },
    )?;
    Ok(())
}

/// A `dev` attempt of 200 tool calls (a turn each) that left a 5,000-line diff, and the run's end.
fn transcript(store: &Store, run: RunId) -> Result<(), Box<dyn std::error::Error>> {
    let step = StepName::parse("dev").ok();
    let append = |event: Event| store.append(run, step.as_ref(), &event).map(|_| ());
    append(Event::StepStarted {
        attempt: Attempt::FIRST,
    })?;
    append(Event::LlmRequest {
        model: "m".into(),
        source: LlmSource::Agent,
        task: Some("Make every test pass.".into()),
    })?;
    for i in 0..200 {
        append(Event::LlmResponse {
            model: "m".into(),
            input_tokens: 1000 + i,
            output_tokens: 40,
            latency_ms: 5,
            source: LlmSource::Agent,
            estimated: None,
        })?;
        append(Event::StepOutput {
            stream: OutputStream::Stdout,
            text: format!("Checking test {i}.\n"),
        })?;
        append(Event::ToolCall {
            id: format!("call_{i}"),
            name: "bash".into(),
            arguments: serde_json::json!({"command": format!("pytest -q tests/test_{i}.py")}),
            server: None,
        })?;
        append(Event::ToolResult {
            id: format!("call_{i}"),
            ok: true,
            interrupted: None,
            output: format!(
                "{}\n1 passed\n[exit code 0]",
                "collected 1 item ".repeat(20)
            ),
        })?;
    }
    let mut patch = String::from(
        "diff --git a/big.txt b/big.txt\n--- a/big.txt\n+++ b/big.txt\n@@ -1,2500 +1,2500 @@\n",
    );
    for i in 0..2500 {
        patch.push_str(&format!("-old line {i}\n+new line {i}\n"));
    }
    let diff = store.put_blob(run, patch.as_bytes())?;
    append(Event::StepFinished {
        attempt: Attempt::FIRST,
        verdict: Verdict::Pass,
        exit_code: None,
        reason: None,
        diff: Some(diff),
        output_omitted_bytes: None,
    })?;
    // The commit action: its SHA and files on the page.
    let commit = StepName::parse("commit").ok();
    let on_commit = |event: Event| store.append(run, commit.as_ref(), &event).map(|_| ());
    on_commit(Event::StepStarted {
        attempt: Attempt::FIRST,
    })?;
    on_commit(Event::CommitCreated {
        sha: "0123456789abcdef0123456789abcdef01234567".into(),
        files: vec!["big.txt".into()],
        files_omitted: None,
    })?;
    on_commit(Event::StepFinished {
        attempt: Attempt::FIRST,
        verdict: Verdict::Pass,
        exit_code: None,
        reason: None,
        diff: None,
        output_omitted_bytes: None,
    })?;
    store.append(
        run,
        None,
        &Event::RunFinished {
            outcome: Outcome::Success,
            reason: "dev passed".into(),
        },
    )?;
    Ok(())
}
