//! Valid pipelines: the DESIGN §3 example and the values the model resolves for the engine.

use std::num::NonZeroU32;

use cordon_pipeline::{Action, CommandSpec, Llm, Network, Route, StepKind};

use crate::fixture::{agent, load};

pub const DESIGN_EXAMPLE: &str = r#"name: fix-failing-tests
llm:
  provider: openai
  model: gpt-4.1
  base_url: https://api.example.com/v1
  api_key_env: OPENAI_API_KEY
agents_dir: agents
context_files: [README.md]
max_attempts: 3
isolation:
  memory: 2G
  pids: 512
  tmp_size: 512M
  read_only: [~/.rustup]
  hide: [secrets/]
  allow_git_mutations: false
network: none
secrets: {gh: {from: env, key: GH_TOKEN}}
steps:
  - name: dev
    agent: dev
    produces: [summary.md]
    max_iterations: 40
    on_pass: test
  - name: test
    setup: python3 -m venv .venv && .venv/bin/pip install -r requirements.txt
    setup_network: {allow: [packages.example.com, files.example.com]}
    command: .venv/bin/python -m unittest -q
    timeout: 600
    on_pass: review
    on_fail: {goto: dev, retry: true}
  - name: review
    agent: review
    artifact: review.md
    verdicts: {pass: APPROVED, fail: NEEDS CHANGES}
    on_pass: commit
    on_fail: {goto: dev, retry: true}
  - name: commit
    action: commit
    params: {message: "fix: {name}"}
"#;

#[test]
fn design_example_is_valid_and_fully_resolved() {
    let review = (
        "agents/review.agent.md".to_owned(),
        "---\nname: review\nmodel: o3\nmax_iterations: 12\ntools: [read_file, bash]\ntemperature: 0.2\n---\nReview.\n".to_owned(),
    );
    let loaded = load(DESIGN_EXAMPLE, &[agent("dev"), review]).expect("valid");
    // DESIGN §12: its agent steps have no `prompt`, which is a warning and nothing else.
    let warnings = loaded.warnings.to_string();
    assert_eq!(warnings.matches("has no `prompt`").count(), 2, "{warnings}");
    assert_eq!(warnings.lines().count(), 2, "{warnings}");
    let p = loaded.pipeline;
    assert_eq!(p.name, "fix-failing-tests");
    assert!(matches!(&p.llm, Some(Llm::OpenAi { model, .. }) if model == "gpt-4.1"));
    assert_eq!(p.isolation.memory.map(|m| m.bytes()), Some(2 << 30));
    assert_eq!(p.isolation.tmp_size.map(|m| m.bytes()), Some(512 << 20));
    let names: Vec<&str> = p.steps.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["dev", "test", "review", "commit"]);

    let StepKind::Agent(dev) = &p.steps[0].kind else {
        panic!("dev is an agent")
    };
    assert_eq!(
        dev.model.as_deref(),
        Some("gpt-4.1"),
        "llm.model when the agent file has none"
    );
    assert_eq!(dev.sandbox.network, Network::None);
    assert_eq!(
        p.steps[0].on_fail,
        Route::Failure,
        "omitted on_fail is failure"
    );

    let StepKind::Command(test) = &p.steps[1].kind else {
        panic!("test is a command")
    };
    assert_eq!(
        test.command,
        CommandSpec::Shell(".venv/bin/python -m unittest -q".to_owned())
    );
    let setup = test.sandbox.setup.as_ref().expect("setup");
    let Network::Allowlist(list) = &setup.network else {
        panic!("setup has an allowlist")
    };
    assert_eq!(
        list.allow
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>(),
        ["packages.example.com", "files.example.com"]
    );
    assert_eq!(
        p.steps[1].on_fail,
        Route::Goto {
            step: p.steps[0].name.clone(),
            retry: true
        }
    );

    let StepKind::Agent(review) = &p.steps[2].kind else {
        panic!("review is an agent")
    };
    assert_eq!(
        review.model.as_deref(),
        Some("o3"),
        "the agent file wins over llm"
    );
    assert_eq!(review.max_iterations, NonZeroU32::new(12).expect("12"));
    assert_eq!(
        review.verdicts.as_ref().map(|v| v.fail.as_str()),
        Some("NEEDS CHANGES")
    );

    assert_eq!(
        p.steps[3].kind,
        StepKind::Action(Action::Commit {
            message: "fix: {name}".to_owned()
        })
    );
    assert_eq!(
        p.steps[3].on_pass,
        Route::Success,
        "omitted on_pass after the last step is success"
    );
}

#[test]
fn step_settings_win_over_agent_file_and_pipeline() {
    let yaml = "name: x\nllm: {provider: openai, model: base}\nnetwork: {allow: [example.com]}\nsteps:\n  - {name: a, agent: dev, model: step-model, max_iterations: 7, network: none}\n  - {name: b, command: [make, test]}\n";
    let files = [(
        "agents/dev.agent.md".to_owned(),
        "---\nname: dev\nmodel: agent-model\nmax_iterations: 20\n---\nx\n".to_owned(),
    )];
    let p = load(yaml, &files).expect("valid").pipeline;
    let StepKind::Agent(a) = &p.steps[0].kind else {
        panic!("agent")
    };
    assert_eq!(a.model.as_deref(), Some("step-model"));
    assert_eq!(a.max_iterations.get(), 7);
    assert_eq!(a.sandbox.network, Network::None);
    assert_eq!(
        p.steps[0].on_pass,
        Route::Goto {
            step: p.steps[1].name.clone(),
            retry: false
        }
    );
    let StepKind::Command(b) = &p.steps[1].kind else {
        panic!("command")
    };
    assert_eq!(
        b.command,
        CommandSpec::Argv(vec!["make".to_owned(), "test".to_owned()])
    );
    assert!(
        matches!(b.sandbox.network, Network::Allowlist(_)),
        "inherits the pipeline network"
    );
}

#[test]
fn a_cycle_with_a_retry_edge_is_valid() {
    let yaml = "name: x\nsteps:\n  - {name: a, command: make}\n  - {name: b, command: make, on_fail: {goto: a, retry: true}, on_pass: c}\n  - {name: c, command: make, on_pass: success, on_fail: {goto: b, retry: true}}\n";
    assert!(load(yaml, &[]).is_ok());
}

#[test]
fn anchors_and_aliases_are_expanded() {
    let yaml = "name: x\nnet: &net {allow: [example.com]}\n";
    // `net` is not a key: aliases do not open a back door for unknown keys.
    assert!(load(yaml, &[]).is_err());
    let yaml = "name: x\nsteps:\n  - {name: a, command: make, network: &n {allow: [example.com]}}\n  - {name: b, command: make, network: *n}\n";
    let p = load(yaml, &[]).expect("valid").pipeline;
    assert_eq!(
        p.steps[0].kind.sandbox().map(|s| &s.network),
        p.steps[1].kind.sandbox().map(|s| &s.network)
    );
}

#[test]
fn unreadable_pipeline_file_is_reported_without_position() {
    let missing = cordon_pipeline::load(
        std::path::Path::new("missing.yaml"),
        &std::collections::BTreeMap::new(),
    );
    let text = missing.expect_err("missing").to_string();
    assert_eq!(
        text,
        "missing.yaml: the pipeline file does not exist; check the path"
    );
}
