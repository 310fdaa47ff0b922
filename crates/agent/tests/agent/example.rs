//! The offline example's transcript, played through the loop step by step on a copy of
//! `examples/fix-calculator` (the engine's routing done by hand): the first fix is wrong, the
//! tests fail, the second attempt fixes it and the review approves.

use std::path::Path;
use std::process::Command;

use cordon_agent::provider::Replay;
use cordon_agent::verdict::{Judgement, judge};
use cordon_agent::{AgentOutcome, Task};
use cordon_pipeline::{Tool, Verdicts};
use cordon_protocol::{Attempt, StepName};

use crate::support::{LocalHost, Memory, run, spec};

fn example() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/fix-calculator")
}

fn sh(dir: &Path, script: &str) -> (bool, String) {
    let out = Command::new("/bin/sh")
        .args(["-c", script])
        .current_dir(dir)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .output()
        .expect("sh runs");
    let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text)
}

fn attempt(
    provider: &mut Replay,
    host: &mut LocalHost,
    step: &str,
    attempt: u32,
    tools: &[Tool],
    feedback: &[String],
) -> (AgentOutcome, Memory) {
    let mut spec = spec(host, 10);
    spec.step = StepName::parse(step).expect("step");
    spec.attempt = Attempt::new(attempt).expect("attempt");
    spec.tools = tools.to_vec();
    spec.task = Task {
        pipeline: "fix-calculator".to_owned(),
        step: step.to_owned(),
        attempt,
        workspace: host.workspace(),
        feedback: feedback.to_vec(),
        ..Task::default()
    }
    .render();
    let mut journal = Memory::default();
    let outcome = run(&spec, provider, host, &mut journal);
    (outcome, journal)
}

#[test]
fn the_example_transcript_fails_once_then_fixes_the_bug_and_is_approved() {
    let source = example();
    let transcript =
        std::fs::read_to_string(source.join("replay/fix.jsonl")).expect("the transcript");
    let mut provider = Replay::parse("replay/fix.jsonl", &transcript).expect("a valid transcript");
    let mut host = LocalHost::new();
    let ws = host.dir.path().to_path_buf();
    for file in ["calc.py", "test_calc.py", "README.md"] {
        std::fs::copy(source.join(file), ws.join(file)).expect("copy");
    }
    let (ok, _) = sh(
        &ws,
        "git init -q && git add -A && git -c user.name=t -c user.email=t@example.com commit -qm base",
    );
    assert!(ok, "git is needed by the review step");
    let (ok, before) = sh(&ws, "python3 -m unittest -q");
    assert!(!ok, "the example starts with failing tests: {before}");

    let dev_tools = [Tool::Bash, Tool::ReadFile, Tool::WriteFile, Tool::EditFile];
    let (outcome, journal) = attempt(&mut provider, &mut host, "dev", 1, &dev_tools, &[]);
    assert!(
        matches!(outcome, AgentOutcome::Finished { .. }),
        "{outcome:?}"
    );
    assert!(
        journal.results().iter().skip(1).all(|(ok, _)| *ok),
        "{:?}",
        journal.results()
    );
    let (ok, first) = sh(&ws, "python3 -m unittest -q");
    assert!(!ok, "the first fix is wrong: {first}");
    assert!(first.contains("ZeroDivisionError"), "{first}");

    let feedback = [format!(
        "step `test` failed in attempt 1: exit status 1\n{first}"
    )];
    let (outcome, journal) = attempt(&mut provider, &mut host, "dev", 2, &dev_tools, &feedback);
    assert!(
        matches!(outcome, AgentOutcome::Finished { .. }),
        "{outcome:?}"
    );
    assert!(
        journal.results().iter().all(|(ok, _)| *ok),
        "{:?}",
        journal.results()
    );
    let (ok, second) = sh(&ws, "python3 -m unittest -q");
    assert!(ok, "the second fix passes: {second}");

    let review_tools = [Tool::Bash, Tool::ReadFile, Tool::WriteFile];
    let (outcome, journal) = attempt(
        &mut provider,
        &mut host,
        "review",
        2,
        &review_tools,
        &feedback,
    );
    assert!(
        matches!(outcome, AgentOutcome::Finished { .. }),
        "{outcome:?}"
    );
    let (diff_ok, diff) = &journal.results()[0];
    assert!(
        *diff_ok && diff.contains("+        raise ValueError"),
        "{diff}"
    );
    let verdicts = Verdicts {
        pass: "APPROVED".to_owned(),
        fail: "NEEDS CHANGES".to_owned(),
        unverifiable: None,
    };
    assert_eq!(
        judge(&verdicts, &host.read("review.md"), "`review.md`"),
        Judgement::Pass
    );

    // Nothing is left for another model call.
    let (outcome, _) = attempt(&mut provider, &mut host, "review", 2, &review_tools, &[]);
    assert_eq!(
        outcome,
        AgentOutcome::Failed {
            reason: "replay transcript exhausted at review attempt 2".to_owned()
        }
    );
}
