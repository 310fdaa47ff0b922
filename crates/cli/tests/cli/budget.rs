//! Budgets and cost (DESIGN §12, §18): `budget.tokens`, `budget.cost_usd` (at `llm.pricing`) and
//! `budget.wall_clock` stop the run before the next model call (or stop the running command),
//! with `budget.exhausted` and exit 1; the attempt takes no route, and a resume with a higher
//! `--budget-*` limit runs it again. Judged by what the scripted provider received, the events
//! and the exit codes.

use crate::agent_run::{agent_fixture, chat, events, openai_server};
use crate::run::{Fixture, stderr};

/// Two tool calls and a final answer, 12 tokens each (10 in, 2 out).
fn three_turns() -> Vec<serde_json::Value> {
    vec![
        chat(
            None,
            &[("c1", "bash", serde_json::json!({"command": "echo one"}))],
        ),
        chat(
            None,
            &[("c2", "bash", serde_json::json!({"command": "echo two"}))],
        ),
        chat(Some("done"), &[]),
    ]
}

fn llm(url: &str, extra: &str) -> String {
    format!("{{provider: openai, model: m, base_url: '{url}', api_key_env: CORDON_E2E_KEY{extra}}}")
}

fn budget_events(f: &Fixture) -> Vec<serde_json::Value> {
    events(f)
        .into_iter()
        .filter(|e| e["type"] == "budget.exhausted")
        .map(|e| e["data"].clone())
        .collect()
}

#[test]
fn a_token_budget_stops_the_run_before_the_next_model_call_and_a_higher_limit_resumes_it() {
    let (url, seen) = openai_server(three_turns());
    let f = agent_fixture(&format!("{}\nbudget: {{tokens: 20}}", llm(&url, "")), &[]);
    let run = |extra: &[&str]| {
        let mut args = vec!["run", "--no-ui"];
        args.extend_from_slice(extra);
        f.cordon(&args)
            .env("CORDON_E2E_KEY", "sk-test")
            .output()
            .expect("cordon run")
    };
    let out = run(&[]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    // 12 tokens, then 24: the third call is never made.
    assert_eq!(seen.lock().expect("lock").len(), 2, "{err}");
    assert!(
        err.contains("budget exhausted: tokens 24 of 20") && err.contains("--budget-tokens"),
        "{err}"
    );
    assert!(err.contains("dev   interrupted"), "{err}");
    assert_eq!(
        budget_events(&f),
        [serde_json::json!({"kind": "tokens", "used": 24, "limit": 20})]
    );
    let runs = f.cordon(&["runs", "--json"]).output().expect("runs");
    let line: serde_json::Value =
        serde_json::from_slice(&runs.stdout).expect("one run, one JSON line");
    assert_eq!(line["status"], "interrupted");
    assert_eq!(line["tokens_in"], 20);
    assert_eq!(line["tokens_out"], 4);

    // The control: resumed under the same limit, nothing is asked of the provider.
    let out = run(&["--resume-last"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert_eq!(seen.lock().expect("lock").len(), 2);
    // A higher limit: the attempt runs again, its first call answered "done".
    let out = run(&["--resume-last", "--budget-tokens", "100"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(seen.lock().expect("lock").len(), 3);
}

#[test]
fn a_cost_budget_counts_at_the_pipelines_pricing_and_cost_is_shown() {
    let (url, seen) = openai_server(three_turns());
    // 1,000 dollars per million tokens: 12 tokens cost $0.012 a call.
    let f = agent_fixture(
        &format!(
            "{}\nbudget: {{cost_usd: 0.02}}",
            llm(&url, ", pricing: {input: 1000, output: 1000}")
        ),
        &[],
    );
    let plan = f
        .cordon(&["run", "--dry-run", "--budget-wall-clock", "30m"])
        .output()
        .expect("dry run");
    let plan = String::from_utf8_lossy(&plan.stdout);
    assert!(
        plan.contains("pricing      $1000 in, $1000 out per million tokens")
            && plan.contains("budget       $0.02, 1800 s wall clock"),
        "{plan}"
    );
    let out = f
        .cordon(&["run", "--no-ui"])
        .env("CORDON_E2E_KEY", "sk-test")
        .output()
        .expect("cordon run");
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(seen.lock().expect("lock").len(), 2, "{err}");
    assert!(
        err.contains("budget exhausted: cost_usd 0.024 of 0.02"),
        "{err}"
    );
    assert!(err.contains("$0.0240"), "the summary shows the cost: {err}");
    let runs = f.cordon(&["runs", "--json"]).output().expect("runs");
    let line: serde_json::Value = serde_json::from_slice(&runs.stdout).expect("json");
    assert_eq!(line["cost_usd"], 0.024);
}

#[test]
fn budget_flags_and_keys_are_refused_with_the_fix() {
    let (url, _seen) = openai_server(Vec::new());
    let f = agent_fixture(&llm(&url, ""), &[]);
    for (args, expected) in [
        (
            &["--budget-cost", "2"][..],
            "`--budget-cost` needs `llm.pricing`",
        ),
        (
            &["--budget-cost", "0"],
            "expected US dollars greater than 0",
        ),
        (&["--budget-wall-clock", "3d"], "like `90s`, `30m` or `2h`"),
        (&["--budget-tokens", "0"], "--budget-tokens"),
    ] {
        let mut all = vec!["run", "--no-ui"];
        all.extend_from_slice(args);
        let out = f
            .cordon(&all)
            .env("CORDON_E2E_KEY", "sk-test")
            .output()
            .expect("cordon run");
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        assert!(
            stderr(&out).contains(expected),
            "{args:?}: {}",
            stderr(&out)
        );
    }
    let runs = f.cordon(&["runs", "--json"]).output().expect("runs");
    assert!(runs.stdout.is_empty(), "no run was created");
    let f = Fixture::new(
        "name: p\nbudget:\n  cost_usd: 1\n  wall_clock: 1.5h\nsteps:\n  - name: a\n    command: 'true'\n",
    );
    let out = crate::support::cordon()
        .args(["validate", "pipeline.yaml"])
        .current_dir(&f.ws)
        .output()
        .expect("validate");
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("`budget.cost_usd` needs `llm.pricing`"),
        "{err}"
    );
    assert!(err.contains("`wall_clock` must be a duration"), "{err}");
}

#[test]
fn the_wall_clock_stops_a_running_command_and_is_not_restarted_by_a_resume() {
    // The first attempt sleeps past the limit; the second (after the resume) finds the mark.
    let f = Fixture::new(
        "name: p\nbudget:\n  wall_clock: 2s\nsteps:\n  - name: slow\n    command: \
         test -e .mark || { touch .mark; sleep 60; }\n",
    );
    let started = std::time::Instant::now();
    let out = f.run(&["--no-ui"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(30),
        "the command was stopped"
    );
    assert!(err.contains("budget exhausted: wall_clock 2 of 2"), "{err}");
    // The control: the time held before counts, so the same limit stops it at once.
    let out = f
        .cordon(&["run", "--no-ui", "--resume-last"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let starts = events(&f)
        .iter()
        .filter(|e| e["type"] == "step.started")
        .count();
    assert_eq!(starts, 1, "no step started under the spent limit");
    let out = f
        .cordon(&[
            "run",
            "--no-ui",
            "--resume-last",
            "--budget-wall-clock",
            "1h",
        ])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}
