//! One broken pipeline per rule of DESIGN §3 and §5, each with its exact diagnostics.

use crate::fixture::{agent, report};

/// The LLM block most agent cases share.
const LLM: &str = "llm: {provider: openai, model: gpt-4.1}\n";

/// Snapshots the diagnostics of `yaml` (with a `dev` agent file) under `name`, with the input
/// above them so the snapshot reads on its own.
fn check(name: &str, yaml: &str) {
    check_with(name, yaml, &[agent("dev")]);
}

fn check_with(name: &str, yaml: &str, files: &[(String, String)]) {
    let output = report(yaml, files);
    insta::assert_snapshot!(name, format!("{yaml}---\n{output}"));
}

#[test]
fn unknown_keys_are_errors_with_the_closest_known_key() {
    check(
        "unknown_keys",
        "name: x\nnetwrok: none\nfrobnicate: 1\nsteps:\n  - name: a\n    command: make\n    tiemout: 5\n    on_pass: {goto: success, retri: true}\n",
    );
}

#[test]
fn duplicate_keys_are_errors() {
    check(
        "duplicate_keys",
        "name: x\nname: y\nsteps:\n  - {name: a, command: make, command: test}\n",
    );
}

#[test]
fn pipeline_needs_a_name_and_steps() {
    check("missing_name_and_steps", "max_attempts: 2\n");
    check("empty_steps", "name: x\nsteps: []\n");
    check(
        "multi_line_name",
        "name: |\n  two\n  lines\nmax_attempts: 99999999999\nsteps:\n  - {name: a, command: make}\n",
    );
    check("steps_not_a_list", "name: x\nsteps: {name: a}\n");
    check("step_not_a_mapping", "name: x\nsteps:\n  - make test\n");
    check("document_not_a_mapping", "- name: x\n");
}

#[test]
fn a_step_is_exactly_one_of_agent_command_or_action() {
    check(
        "step_without_kind",
        "name: x\nsteps:\n  - name: a\n    timeout: 5\n",
    );
    check(
        "step_with_two_kinds",
        &format!(
            "name: x\n{LLM}steps:\n  - name: a\n    agent: dev\n    command: make\n    action: commit\n"
        ),
    );
}

#[test]
fn step_names_are_unique_valid_and_not_route_targets() {
    check(
        "step_names",
        "name: x\nsteps:\n  - {name: a, command: make}\n  - {name: a, command: make}\n  - {name: success, command: make}\n  - {name: Run Tests, command: make}\n  - {name: '', command: make}\n",
    );
}

#[test]
fn routes_name_a_step_success_failure_or_a_goto() {
    check(
        "routes",
        "name: x\nsteps:\n  - name: build\n    command: make\n    on_pass: tset\n    on_fail: {goto: success, retry: true}\n  - name: test\n    command: make test\n    on_pass: [a]\n    on_fail: {goto: build, retry: maybe}\n  - name: other\n    command: make\n    on_fail: nowhere\n",
    );
}

#[test]
fn every_cycle_needs_a_retry_edge() {
    check(
        "cycle_explicit",
        "name: x\nsteps:\n  - {name: a, command: make}\n  - {name: b, command: make, on_fail: a}\n",
    );
    check(
        "cycle_self_loop",
        "name: x\nsteps:\n  - {name: a, command: make, on_fail: a}\n",
    );
    check(
        "cycle_through_implicit_edges",
        "name: x\nsteps:\n  - {name: a, command: make}\n  - {name: b, command: make}\n  - {name: c, command: make, on_pass: a}\n",
    );
    check(
        "cycles_two_separate",
        "name: x\nsteps:\n  - {name: a, command: make, on_pass: b}\n  - {name: b, command: make, on_pass: a}\n  - {name: c, command: make, on_fail: d}\n  - {name: d, command: make, on_pass: c, on_fail: {goto: a, retry: true}}\n",
    );
}

#[test]
fn host_actions_take_no_sandbox_keys() {
    check(
        "action_with_sandbox_keys",
        "name: x\nsecrets: {gh: {from: env, key: GH_TOKEN}}\nsteps:\n  - name: commit\n    action: commit\n    network: open\n    setup: make deps\n    secrets: [gh]\n    model_lane: true\n    prompt: hi\n",
    );
    check(
        "unknown_action",
        "name: x\nsteps:\n  - {name: c, action: comit}\n  - {name: d, action: deploy}\n",
    );
    check(
        "commit_params",
        "name: x\nsteps:\n  - {name: c, action: commit, params: {message: 'fix {nmae}', author: me}}\n",
    );
}

#[test]
fn deliver_and_report_say_what_is_wrong_with_each_parameter() {
    let secrets = "secrets: {gh: {from: env, key: GH_TOKEN}}\n";
    check(
        "deliver_params",
        &format!(
            "name: x\n{secrets}steps:\n  - {{name: c, action: commit}}\n  - name: d\n    action: deliver\n    params:\n      remote: 'git@example.com:o/r.git'\n      token: gj\n      branch: 'cordon/{{run}}'\n      message: m\n      pull_request: {{forge: githib, api_url: 'ftp://example.com', repo: octo, title: '{{sha}} {{who}}'}}\n"
        ),
    );
    check(
        "deliver_url_remote",
        &format!(
            "name: x\n{secrets}steps:\n  - {{name: c, action: commit}}\n  - {{name: d, action: deliver, params: {{remote: 'https://me:pw@example.com/o/r.git', token: gh, base: 'a..b'}}}}\n  - {{name: e, action: deliver}}\n"
        ),
    );
    check(
        "deliver_before_commit",
        &format!(
            "name: x\n{secrets}steps:\n  - {{name: d, action: deliver, params: {{remote: origin, token: gh}}}}\n  - {{name: c, action: commit}}\n"
        ),
    );
    check_with(
        "outcome_deliver_without_commits",
        &format!(
            "name: x\n{LLM}{secrets}outcome:\n  decompose: dev\n  plan: dev\n  execute: dev\n  scrutinize: dev\n  validate: dev\n  commit: none\n  deliver: {{remote: origin, token: gh}}\n"
        ),
        &[agent("dev")],
    );
    check(
        "commit_with_deliver_params",
        "name: x\nsteps:\n  - {name: c, action: commit, params: {message: m, remote: origin}}\n",
    );
    check(
        "report",
        &format!(
            "name: x\n{secrets}report: {{forge: gitlab, api_url: 'https://example.com/api/v4', repo: 'g/sub/p', issue: 3, create: true, token: gh, on: [start, stpe]}}\nsteps:\n  - {{name: a, command: make}}\n"
        ),
    );
    check(
        "report_needs_an_issue",
        &format!(
            "name: x\n{secrets}report: {{forge: github, api_url: 'https://api.example.com', repo: 'g/sub/p', token: nope, on: []}}\nsteps:\n  - {{name: a, command: make}}\n"
        ),
    );
}

#[test]
fn keys_apply_only_to_their_kind_of_step() {
    check(
        "agent_keys_on_command",
        "name: x\nsteps:\n  - name: test\n    command: make\n    verdicts: {pass: OK, fail: NO}\n    prompt: hi\n    params: {message: m}\n",
    );
    check(
        "command_keys_on_agent",
        &format!("name: x\n{LLM}steps:\n  - name: dev\n    agent: dev\n    model_lane: true\n"),
    );
    check(
        "model_lane_without_llm",
        "name: x\nsteps:\n  - {name: a, command: claude -p fix, model_lane: true}\n",
    );
    check(
        "setup_network_without_setup",
        "name: x\nsteps:\n  - {name: a, command: make, setup_network: open}\n",
    );
}

#[test]
fn agent_files_exist_and_name_themselves() {
    check_with(
        "agent_file_missing",
        &format!(
            "name: x\n{LLM}steps:\n  - {{name: dev, agent: dev}}\n  - {{name: review, agent: reviewer}}\n"
        ),
        &[agent("dev")],
    );
    check_with(
        "agent_file_problems",
        &format!("name: x\n{LLM}steps:\n  - {{name: a, agent: one}}\n  - {{name: b, agent: two}}\n  - {{name: c, agent: three}}\n  - {{name: d, agent: 'Bad/Name'}}\n"),
        &[
            ("agents/one.agent.md".to_owned(), "---\nname: uno\n---\nprompt\n".to_owned()),
            ("agents/two.agent.md".to_owned(), "You are two.\n".to_owned()),
            (
                "agents/three.agent.md".to_owned(),
                "---\nname: three\ntools: [bash, bash, grep, edit_fil]\ntemperature: 3\nmax_iterations: 0\ncolour: red\n---\n\n".to_owned(),
            ),
        ],
    );
    check_with(
        "agent_front_matter_syntax",
        &format!("name: x\n{LLM}steps:\n  - {{name: a, agent: one}}\n"),
        &[(
            "agents/one.agent.md".to_owned(),
            "---\nname: one\ntools: [bash\n---\nprompt\n".to_owned(),
        )],
    );
}

#[test]
fn agent_steps_need_an_llm_block_with_the_provider_keys() {
    check(
        "llm_missing",
        "name: x\nsteps:\n  - {name: dev, agent: dev}\n",
    );
    check(
        "llm_openai_without_model",
        "name: x\nllm: {provider: openai}\nsteps:\n  - {name: dev, agent: dev}\n",
    );
    check(
        "llm_anthropic_without_model_and_key",
        "name: x\nllm: {provider: anthropic}\nsteps:\n  - {name: dev, agent: dev}\n",
    );
    check(
        "llm_replay_without_transcript",
        "name: x\nllm: {provider: replay}\nsteps:\n  - {name: dev, agent: dev}\n",
    );
    check(
        "llm_key_values_and_urls",
        "name: x\nllm:\n  provider: openai\n  model: m\n  api_key_env: sk-live-abcdef0123456789\n  base_url: api.example.com/v1\n  transcript: t.jsonl\nsteps:\n  - {name: dev, agent: dev}\n",
    );
    check(
        "llm_unknown_provider",
        "name: x\nllm: {provider: opnai, model: m}\nsteps:\n  - {name: dev, agent: dev}\n",
    );
    check(
        "llm_replay_ignores_endpoint_keys",
        "name: x\nllm: {provider: replay, transcript: replay/fix.jsonl, api_key_env: KEY}\nsteps:\n  - {name: dev, agent: dev}\n",
    );
}

#[test]
fn counts_and_timeouts_are_positive() {
    check(
        "non_positive_numbers",
        &format!(
            "name: x\nmax_attempts: -1\n{LLM}steps:\n  - {{name: dev, agent: dev, max_iterations: ten}}\n  - {{name: t, command: make, timeout: 0}}\n  - {{name: u, command: make, timeout: '600'}}\n"
        ),
    );
}

#[test]
fn step_secrets_are_declared() {
    check(
        "secrets",
        "name: x\nsecrets:\n  gh: {from: env, key: GH_TOKEN}\n  vault: {from: vault, key: X}\n  Bad: {from: env, key: 1X}\nsteps:\n  - {name: a, command: make, secrets: [gh, gj, npm]}\n",
    );
}

#[test]
fn network_patterns_follow_the_egress_grammar() {
    check(
        "network_patterns",
        "name: x\nsteps:\n  - name: a\n    command: make\n    network:\n      allow:\n        - 10.0.0.1\n        - 127.1\n        - 0x7f000001\n        - '2130706433'\n        - '*.com'\n        - bücher.example\n        - example.com:+443\n        - ip:10.0.0.0/8\n        - example.com\n      deny: ['*', evil.example.test]\n",
    );
    check(
        "network_shapes",
        "name: x\nnetwork: closed\nsteps:\n  - {name: a, command: make, network: [example.com]}\n  - {name: b, command: make, network: {allow: example.com, grants: yes}}\n",
    );
}

#[test]
fn open_and_empty_networks_are_warnings() {
    check(
        "network_warnings",
        "name: x\nnetwork: open\nsteps:\n  - {name: a, command: make, setup: make deps, setup_network: open}\n  - {name: b, command: make, network: {deny: [example.com]}}\n",
    );
}

#[test]
fn steps_no_route_reaches_are_warnings() {
    check(
        "unreachable_step",
        "name: x\nsteps:\n  - {name: a, command: make, on_pass: success}\n  - {name: b, command: make}\n  - {name: c, command: make, on_fail: {goto: b, retry: true}}\n",
    );
}

#[test]
fn malformed_yaml_reports_the_parsers_location() {
    check(
        "malformed_flow",
        "name: x\nsteps: [\n  {name: a, command: make\n",
    );
    check(
        "malformed_indentation",
        "name: x\nsteps:\n  - name: a\n   command: make\n",
    );
    check("two_documents", "name: x\n---\nname: y\n");
}

#[test]
fn isolation_values_are_checked() {
    check(
        "isolation",
        "name: x\nisolation:\n  memory: 2X\n  pids: 0\n  cpus: -1\n  tmp_size: 0\n  output_limit: lots\n  read_only: [relative/path, ~/ok]\n  hide: [/etc, ../up]\n  allow_git_mutations: sometimes\n  toolchains: [rust, pyhton, rust, ruby]\n  caches: [pip, pipp, pip]\n  cache_limit: 0\n  swap: 1G\nsteps:\n  - {name: a, command: make}\n",
    );
}

#[test]
fn paths_stay_inside_their_directory() {
    check(
        "paths",
        &format!(
            "name: x\n{LLM}agents_dir: /abs\ncontext_files: [README.md, ../secret, README.md]\nsteps:\n  - {{name: a, agent: dev, artifact: /tmp/review.md, produces: [out/../../x]}}\n  - {{name: b, command: make, produces: [./out//a/, out/a, .git/hooks/pre-commit, a/.GIT/x]}}\n  - {{name: c, agent: dev, artifact: .git/review.md}}\n"
        ),
    );
}

#[test]
fn commands_env_and_verdicts_are_checked() {
    check(
        "commands_env_verdicts",
        &format!(
            "name: x\n{LLM}steps:\n  - {{name: a, command: []}}\n  - {{name: b, command: '  '}}\n  - {{name: c, command: {{sh: make}}, env: {{1BAD: x, GOOD: [1]}}}}\n  - {{name: d, agent: dev, verdicts: {{pass: OK, fail: OK}}}}\n  - {{name: e, agent: dev, verdicts: {{pass: ' OK'}}}}\n"
        ),
    );
}

#[test]
fn diagnostics_are_deterministic() {
    let yaml = "name: x\nfoo: 1\nsteps:\n  - {name: a, command: make, on_fail: a}\n  - {name: a, command: make, bar: 2}\n";
    let first = report(yaml, &[]);
    for _ in 0..5 {
        assert_eq!(report(yaml, &[]), first);
    }
    let lines: Vec<&str> = first.lines().collect();
    let mut sorted = lines.clone();
    sorted.sort_by_key(|l| {
        let mut parts = l.splitn(4, ':');
        let _file = parts.next();
        let line: usize = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
        let col: usize = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
        (line, col)
    });
    assert_eq!(lines, sorted, "diagnostics are ordered by line and column");
}

#[test]
fn an_outcome_pipeline_reports_every_problem_at_once() {
    check(
        "outcome_problems",
        &format!(
            "name: x\n{LLM}outcome:\n  decompose: dev\n  plan: nobody\n  execute: {{agent: dev, network: {{allow: [], grants: true}}, artifact: a.md}}\n  scrutinize: {{prompt: p}}\n  verify: [\"\", {{command: make test, timeout: 0}}, {{setup: x}}]\n  max_tasks: 0\n  max_revisions: -1\n  parallel: 0\n  commit: always\n"
        ),
    );
    check(
        "outcome_and_steps",
        &format!(
            "name: x\n{LLM}steps:\n  - {{name: a, command: make}}\noutcome:\n  decompose: dev\n  plan: dev\n  execute: dev\n  scrutinize: dev\n  validate: dev\n"
        ),
    );
}

#[test]
fn outcome_phases_are_agent_names_or_agent_step_mappings() {
    let yaml = format!(
        "name: x\n{LLM}outcome:\n  decompose: dev\n  plan: {{agent: dev, max_iterations: 5}}\n  execute: {{agent: dev, network: {{allow: [], grants: true}}, timeout: 60}}\n  scrutinize: dev\n  validate: {{agent: dev, prompt: Be strict.}}\n  verify: [make test, [cargo, test], {{command: make lint, timeout: 30}}]\n  max_revisions: 0\n  commit: end\n"
    );
    let loaded = cordon_pipeline::load_str(
        "pipeline.yaml",
        &yaml,
        std::path::Path::new(""),
        &[agent("dev")]
            .into_iter()
            .map(|(p, t)| (std::path::PathBuf::from(p), t))
            .collect::<std::collections::BTreeMap<_, _>>(),
    )
    .expect("valid");
    let outcome = loaded.pipeline.outcome.expect("an outcome");
    assert!(loaded.pipeline.steps.is_empty());
    assert_eq!(outcome.plan.max_iterations.get(), 5);
    assert_eq!(outcome.validate.prompt.as_deref(), Some("Be strict."));
    assert_eq!(outcome.verify.len(), 3);
    assert_eq!(outcome.max_revisions, 0);
    assert_eq!(outcome.max_replans, 1);
    assert_eq!(outcome.max_tasks, 20);
    assert_eq!(outcome.parallel.get(), 1);
    assert_eq!(outcome.commit, cordon_pipeline::OutcomeCommit::End);
    assert!(
        loaded.warnings.is_empty(),
        "a phase needs no prompt: {:?}",
        loaded.warnings
    );
}

#[test]
fn an_outcome_pipeline_refuses_git_mutations() {
    check(
        "outcome_git_mutations",
        &format!(
            "name: x\n{LLM}isolation: {{allow_git_mutations: true}}\noutcome:\n  decompose: dev\n  plan: dev\n  execute: dev\n  scrutinize: dev\n  validate: dev\n"
        ),
    );
}

#[test]
fn image_references_are_checked_and_directories_and_a_lone_image_writable_warn() {
    check(
        "images",
        "name: x\nisolation: {image: \"sha256:abc\", image_writable: true}\nsteps:\n  - {name: a, command: make, image: \"-bad name\"}\n  - {name: b, command: make, image: /srv/rootfs}\n  - {name: c, action: commit, image: busybox}\n",
    );
    check(
        "image_writable_alone",
        "name: x\nisolation: {image_writable: true}\nsteps:\n  - {name: a, command: make}\n",
    );
}

#[test]
fn a_step_inherits_the_pipelines_image_unless_it_names_its_own() {
    let loaded = crate::fixture::load(
        "name: x\nisolation: {image: base}\nsteps:\n  - {name: a, command: make}\n  - {name: b, command: make, image: \"team/tools:2\"}\n",
        &[],
    )
    .expect("a valid pipeline");
    let images: Vec<String> = loaded
        .pipeline
        .steps
        .iter()
        .map(|s| {
            s.kind
                .sandbox()
                .unwrap()
                .image
                .as_ref()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(images, ["base", "team/tools:2"]);
}

#[test]
fn a_third_verdict_needs_its_own_keyword_and_its_route_needs_the_verdict() {
    check(
        "unverifiable",
        &format!(
            "name: x\n{LLM}steps:\n  - {{name: a, agent: dev, prompt: p, verdicts: {{pass: OK, fail: BAD, unverifiable: OK}}}}\n  - {{name: b, agent: dev, prompt: p, verdicts: {{pass: OK, fail: BAD}}, on_unverifiable: failure}}\n  - {{name: c, command: make, on_unverifiable: failure}}\n  - {{name: d, agent: dev, prompt: p, verdicts: {{pass: OK, fail: BAD, unverifiable: \" UNSURE\"}}}}\n"
        ),
    );
    // A cycle through the new edge needs a retry edge like any other.
    check(
        "unverifiable_cycle",
        &format!(
            "name: x\n{LLM}steps:\n  - {{name: a, agent: dev, prompt: p, verdicts: {{pass: OK, fail: BAD, unverifiable: UNSURE}}, on_unverifiable: b}}\n  - {{name: b, command: make, on_pass: a}}\n"
        ),
    );
}

#[test]
fn mcp_servers_need_a_valid_unique_name_and_one_command_or_url() {
    check_with(
        "mcp",
        &format!(
            "name: x\n{LLM}secrets:\n  gh: {{from: env, key: GH_TOKEN}}\nnetwork: {{allow: [api.example.com]}}\nsteps:\n  - name: a\n    agent: mcpdev\n    prompt: p\n    mcp:\n      - {{name: search, command: [search-mcp]}}\n      - {{name: tickets, url: 'https://tickets.example.com/mcp', headers: {{Authorization: {{secret: gh}}}}}}\n      - {{name: two__parts, command: [x]}}\n      - {{name: both, command: [x], url: 'https://api.example.com/mcp'}}\n      - {{name: neither}}\n      - {{name: shell, command: 'python3 server.py'}}\n      - {{name: bad-url, url: 'ftp://example.com'}}\n      - {{name: undeclared, command: [x], env: {{TOKEN: {{secret: nope}}}}}}\n      - {{name: tickets, command: [x]}}\n      - {{name: wrong-key, command: [x], headers: {{A: b}}}}\n"
        ),
        &[(
            "agents/mcpdev.agent.md".to_owned(),
            "---\nname: mcpdev\ntools: [bash, search__*, search__find]\nmcp:\n  - {name: search, command: [other]}\n---\nWork.\n".to_owned(),
        )],
    );
    // Well-formed entries, checked against the agent file's and the declared secrets.
    check_with(
        "mcp_merge",
        &format!(
            "name: x\n{LLM}secrets:\n  gh: {{from: env, key: GH_TOKEN}}\nsteps:\n  - name: a\n    agent: mcpdev\n    prompt: p\n    mcp:\n      - {{name: search, command: [search-mcp]}}\n      - {{name: tickets, command: [t], env: {{TOKEN: {{secret: gh}}, OTHER: {{secret: nope}}}}}}\n"
        ),
        &[(
            "agents/mcpdev.agent.md".to_owned(),
            "---\nname: mcpdev\ntools: [bash, search__*, tickets__find, wiki__*]\nmcp:\n  - {name: search, command: [other]}\n---\nWork.\n"
                .to_owned(),
        )],
    );
    check_with(
        "mcp_agent_file",
        &format!("name: x\n{LLM}steps:\n  - {{name: a, agent: mcpdev, prompt: p}}\n"),
        &[(
            "agents/mcpdev.agent.md".to_owned(),
            "---\nname: mcpdev\ntools: [bash, nope__, a__b__c, search__*, search__*]\nmcp:\n  - {name: search}\n---\nWork.\n".to_owned(),
        )],
    );
}

#[test]
fn an_mcp_server_the_steps_network_does_not_reach_is_a_warning() {
    check(
        "mcp_network",
        &format!(
            "name: x\n{LLM}steps:\n  - {{name: a, agent: dev, prompt: p, mcp: [{{name: docs, url: 'https://docs.example.com/mcp'}}]}}\n  - {{name: b, agent: dev, prompt: p, network: {{allow: ['*.example.com']}}, mcp: [{{name: docs, url: 'https://docs.example.com/mcp'}}]}}\n  - {{name: c, agent: dev, prompt: p, network: {{allow: ['ip:127.0.0.1:8931']}}, mcp: [{{name: local, url: 'http://127.0.0.1:8931/mcp'}}, {{name: other, url: 'http://127.0.0.1:9/mcp'}}]}}\n  - {{name: d, agent: dev, prompt: p, network: {{allow: ['docs.example.com:8443']}}, mcp: [{{name: docs, url: 'https://docs.example.com/mcp'}}]}}\n  - {{name: e, agent: dev, prompt: p, network: {{allow: ['*.example.com'], deny: ['docs.example.com']}}, mcp: [{{name: docs, url: 'https://docs.example.com/mcp'}}]}}\n"
        ),
    );
}
