//! Property: a valid pipeline written back as YAML parses to the same model.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::num::{NonZeroU32, NonZeroU64};

use cordon_egress::{Pattern, PatternList};
use cordon_pipeline::{
    Action, Agent, AgentName, AgentStep, Allowlist, ByteSize, CommandSpec, CommandStep, Cpus,
    EnvName, HostPath, Isolation, Llm, Network, Pipeline, RelPath, Route, Sandboxed, Secret,
    SecretName, Setup, Step, StepKind, StepName, Timeout, Tool, Verdicts,
};
use proptest::prelude::*;

use crate::fixture::load;

/// A YAML double-quoted scalar (JSON string syntax is a subset of it).
fn q(text: &str) -> String {
    serde_json::to_string(text).unwrap_or_default()
}

fn list<T: ToString>(items: &[T]) -> String {
    format!(
        "[{}]",
        items
            .iter()
            .map(|i| q(&i.to_string()))
            .collect::<Vec<_>>()
            .join(", ")
    )
}

fn network(n: &Network) -> String {
    match n {
        Network::None => "none".to_owned(),
        Network::Open => "open".to_owned(),
        Network::Allowlist(Allowlist {
            allow,
            deny,
            grants,
        }) => {
            format!(
                "{{allow: {}, deny: {}, grants: {grants}}}",
                list(allow),
                list(deny)
            )
        }
    }
}

fn command(c: &CommandSpec) -> String {
    match c {
        CommandSpec::Shell(s) => q(s),
        CommandSpec::Argv(argv) => list(argv),
    }
}

fn route(r: &Route) -> String {
    match r {
        Route::Success => "success".to_owned(),
        Route::Failure => "failure".to_owned(),
        Route::Goto { step, retry } => format!("{{goto: {step}, retry: {retry}}}"),
    }
}

/// Writes every value explicitly, so the parsed model must equal the generated one.
fn emit(p: &Pipeline) -> String {
    let mut y = String::new();
    let _ = writeln!(y, "name: {}", q(&p.name));
    match &p.llm {
        None => {}
        Some(Llm::OpenAi {
            model,
            base_url,
            api_key_env,
        }) => {
            let _ = writeln!(y, "llm:\n  provider: openai\n  model: {}", q(model));
            if let Some(u) = base_url {
                let _ = writeln!(y, "  base_url: {}", q(u));
            }
            if let Some(k) = api_key_env {
                let _ = writeln!(y, "  api_key_env: {k}");
            }
        }
        Some(Llm::Anthropic {
            model,
            base_url,
            api_key_env,
        }) => {
            let _ = writeln!(
                y,
                "llm:\n  provider: anthropic\n  model: {}\n  api_key_env: {api_key_env}",
                q(model)
            );
            if let Some(u) = base_url {
                let _ = writeln!(y, "  base_url: {}", q(u));
            }
        }
        Some(Llm::Replay { transcript, model }) => {
            let _ = writeln!(
                y,
                "llm:\n  provider: replay\n  transcript: {}",
                q(transcript.as_str())
            );
            if let Some(m) = model {
                let _ = writeln!(y, "  model: {}", q(m));
            }
        }
    }
    if let Some(pricing) = &p.pricing {
        let _ = writeln!(
            y,
            "  pricing: {{input: {}, output: {}}}",
            pricing.input, pricing.output
        );
    }
    let b = &p.budget;
    if b.tokens.is_some() || b.cost_usd.is_some() || b.wall_clock.is_some() {
        let _ = writeln!(y, "budget:");
        if let Some(t) = b.tokens {
            let _ = writeln!(y, "  tokens: {t}");
        }
        if let Some(c) = b.cost_usd {
            let _ = writeln!(y, "  cost_usd: {c}");
        }
        if let Some(w) = b.wall_clock {
            let _ = writeln!(
                y,
                "  wall_clock: {}",
                if w.get() % 60 == 0 {
                    format!("{}m", w.get() / 60)
                } else {
                    format!("{w}s")
                }
            );
        }
    }
    let _ = writeln!(y, "agents_dir: {}", q(p.agents_dir.as_str()));
    let _ = writeln!(y, "context_files: {}", list(&p.context_files));
    let _ = writeln!(y, "max_attempts: {}", p.max_attempts);
    let i = &p.isolation;
    let _ = writeln!(y, "isolation:");
    if let Some(m) = i.memory {
        let _ = writeln!(y, "  memory: {m}");
    }
    if let Some(n) = i.pids {
        let _ = writeln!(y, "  pids: {n}");
    }
    if let Some(c) = i.cpus {
        let _ = writeln!(y, "  cpus: {c}");
    }
    if let Some(t) = i.output_limit {
        let _ = writeln!(y, "  output_limit: {t}");
    }
    if let Some(t) = i.tmp_size {
        let _ = writeln!(y, "  tmp_size: {t}");
    }
    if let Some(t) = i.cache_limit {
        let _ = writeln!(y, "  cache_limit: {t}");
    }
    let _ = writeln!(
        y,
        "  read_only: {}\n  hide: {}\n  allow_git_mutations: {}\n  toolchains: {}\n  caches: {}",
        list(&i.read_only),
        list(&i.hide),
        i.allow_git_mutations,
        list(&i.toolchains),
        list(&i.caches)
    );
    let _ = writeln!(y, "network: {}", network(&p.network));
    let _ = writeln!(y, "secrets:");
    for (name, secret) in &p.secrets {
        match secret {
            Secret::Env { key } => {
                let _ = writeln!(y, "  {name}: {{from: env, key: {key}}}");
            }
        }
    }
    if let Some(r) = &p.report {
        let issue = match r.issue {
            cordon_pipeline::ReportIssue::Number(n) => format!("issue: {n}"),
            cordon_pipeline::ReportIssue::Create => "create: true".to_owned(),
        };
        let on: Vec<&str> = [
            (r.on.start, "start"),
            (r.on.step, "step"),
            (r.on.end, "end"),
        ]
        .into_iter()
        .filter_map(|(on, name)| on.then_some(name))
        .collect();
        let _ = writeln!(
            y,
            "report: {{forge: {}, api_url: {}, repo: {}, {issue}, token: {}, on: [{}]}}",
            r.forge,
            q(&r.api_url.text),
            q(&r.repo),
            r.token,
            on.join(", ")
        );
    }
    let _ = writeln!(y, "steps:");
    for step in &p.steps {
        let _ = writeln!(y, "  - name: {}", step.name);
        let sandbox = match &step.kind {
            StepKind::Agent(a) => {
                let _ = writeln!(y, "    agent: {}", a.agent);
                if let Some(m) = &a.model {
                    let _ = writeln!(y, "    model: {}", q(m));
                }
                let _ = writeln!(y, "    max_iterations: {}", a.max_iterations);
                if let Some(prompt) = &a.prompt {
                    let _ = writeln!(y, "    prompt: {}", q(prompt));
                }
                if let Some(artifact) = &a.artifact {
                    let _ = writeln!(y, "    artifact: {}", q(artifact.as_str()));
                }
                if let Some(Verdicts { pass, fail, .. }) = &a.verdicts {
                    let _ = writeln!(y, "    verdicts: {{pass: {}, fail: {}}}", q(pass), q(fail));
                }
                Some(&a.sandbox)
            }
            StepKind::Command(c) => {
                let _ = writeln!(
                    y,
                    "    command: {}\n    model_lane: {}",
                    command(&c.command),
                    c.model_lane
                );
                Some(&c.sandbox)
            }
            StepKind::Action(Action::Commit { message }) => {
                let _ = writeln!(
                    y,
                    "    action: commit\n    params: {{message: {}}}",
                    q(message)
                );
                None
            }
            StepKind::Action(Action::Deliver(d)) => {
                let _ = writeln!(
                    y,
                    "    action: deliver\n    params: {{remote: {}, branch: {}, base: {}, token: {}}}",
                    q(&d.remote.to_string()),
                    q(&d.branch),
                    q(&d.base),
                    d.token
                );
                None
            }
        };
        if let Some(s) = sandbox {
            let _ = writeln!(y, "    network: {}", network(&s.network));
            if let Some(Setup {
                command: c,
                network: n,
            }) = &s.setup
            {
                let _ = writeln!(
                    y,
                    "    setup: {}\n    setup_network: {}",
                    command(c),
                    network(n)
                );
            }
            let _ = writeln!(y, "    secrets: {}", list(&s.secrets));
            let env: Vec<String> = s
                .env
                .iter()
                .map(|(k, v)| format!("{k}: {}", q(v)))
                .collect();
            let _ = writeln!(y, "    env: {{{}}}", env.join(", "));
            if let Some(t) = s.timeout {
                let _ = writeln!(y, "    timeout: {}", t.seconds());
            }
            let _ = writeln!(y, "    produces: {}", list(&s.produces));
            if let Some(image) = &s.image {
                let _ = writeln!(y, "    image: {}", q(&image.to_string()));
            }
        }
        let _ = writeln!(
            y,
            "    on_pass: {}\n    on_fail: {}",
            route(&step.on_pass),
            route(&step.on_fail)
        );
    }
    y
}

fn pattern(list: PatternList) -> impl Strategy<Value = Pattern> {
    prop::sample::select(vec![
        "example.com",
        "*.example.test",
        "api.example.com:8443",
        "files.example.test:*",
        "ip:10.0.0.0/8:443",
        "ip:[2001:db8::1]:443",
    ])
    .prop_map(move |t| Pattern::parse(t, list).expect("sample patterns are valid"))
}

fn network_strategy() -> impl Strategy<Value = Network> {
    prop_oneof![
        Just(Network::None),
        Just(Network::Open),
        (
            prop::collection::vec(pattern(PatternList::Allow), 1..3),
            prop::collection::vec(pattern(PatternList::Deny), 0..2),
            any::<bool>()
        )
            .prop_map(|(allow, deny, grants)| Network::Allowlist(Allowlist {
                allow,
                deny,
                grants
            })),
    ]
}

fn text() -> impl Strategy<Value = String> {
    "[a-zA-Z0-9][ -~]{0,20}".prop_map(|s| s.trim_end().to_owned())
}

fn command_strategy() -> impl Strategy<Value = CommandSpec> {
    prop_oneof![
        text().prop_map(CommandSpec::Shell),
        ("[a-z][ -~]{0,8}", prop::collection::vec("[ -~]{0,8}", 0..3)).prop_map(
            |(program, args)| { CommandSpec::Argv(std::iter::once(program).chain(args).collect()) }
        ),
    ]
}

fn rel(text: &str) -> RelPath {
    RelPath::parse(text).expect("sample paths are relative")
}

fn sandbox_strategy() -> impl Strategy<Value = Sandboxed> {
    (
        network_strategy(),
        prop::option::of((command_strategy(), network_strategy())),
        prop::sample::subsequence(vec!["gh", "npm"], 0..=2),
        prop::collection::btree_map("[A-Z_][A-Z0-9_]{0,6}", "[ -~]{0,12}", 0..3),
        prop::option::of(1u64..100_000),
        prop::sample::subsequence(vec!["summary.md", "out/report.txt"], 0..=2),
        prop::option::of(prop::sample::select(vec![
            "busybox:1",
            "team/tools:2",
            "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
        ])),
    )
        .prop_map(
            |(network, setup, secrets, env, timeout, produces, image)| Sandboxed {
                image: image.map(|i| cordon_protocol::ImageRef::parse(i).expect("a sample image")),
                network,
                setup: setup.map(|(command, network)| Setup { command, network }),
                secrets: secrets.into_iter().filter_map(SecretName::parse).collect(),
                env: env
                    .into_iter()
                    .filter_map(|(k, v)| Some((EnvName::parse(&k)?, v)))
                    .collect(),
                timeout: timeout.and_then(NonZeroU64::new).map(Timeout),
                produces: produces.into_iter().map(rel).collect(),
            },
        )
}

#[derive(Clone, Debug)]
enum KindChoice {
    Agent {
        model: String,
        iterations: u32,
        prompt: Option<String>,
        artifact: bool,
        verdicts: Option<(String, String)>,
    },
    Command {
        command: CommandSpec,
        model_lane: bool,
    },
    Commit {
        message: String,
    },
}

fn kind_strategy() -> impl Strategy<Value = (KindChoice, Sandboxed)> {
    let agent = (
        "[a-z][a-z0-9.-]{0,10}",
        1u32..100,
        prop::option::of(text()),
        any::<bool>(),
        prop::option::of(("[A-Z]{1,6}", "[A-Z]{1,6}")),
    )
        .prop_filter("verdict keywords differ", |(_, _, _, _, v)| {
            v.as_ref().is_none_or(|(p, f)| p != f)
        })
        .prop_map(
            |(model, iterations, prompt, artifact, verdicts)| KindChoice::Agent {
                model,
                iterations,
                prompt,
                artifact,
                verdicts,
            },
        );
    let command =
        (command_strategy(), any::<bool>()).prop_map(|(command, model_lane)| KindChoice::Command {
            command,
            model_lane,
        });
    let commit = "[a-z][ -z|~]{0,20}".prop_map(|message| KindChoice::Commit { message });
    (prop_oneof![agent, command, commit], sandbox_strategy())
}

/// A route from step `from` of `n`: non-retry routes only go forward, so every cycle has a
/// retry edge.
fn route_for(choice: (u8, usize, bool), from: usize, names: &[StepName]) -> Route {
    let (kind, target, retry) = choice;
    match kind % 3 {
        0 => Route::Success,
        1 => Route::Failure,
        _ if retry => Route::Goto {
            step: names[target % names.len()].clone(),
            retry: true,
        },
        _ if from + 1 < names.len() => {
            let forward = from + 1 + target % (names.len() - from - 1);
            Route::Goto {
                step: names[forward].clone(),
                retry: false,
            }
        }
        _ => Route::Success,
    }
}

fn pipeline_strategy() -> impl Strategy<Value = Pipeline> {
    let isolation = (
        prop::option::of(1u64..(1 << 40)),
        prop::option::of(1u64..100_000),
        prop::option::of(1u64..64_000),
        prop::option::of(1u64..(1 << 34)),
        prop::option::of(1u64..(1 << 34)),
        prop::sample::subsequence(vec!["/opt/tools", "~/.rustup"], 0..=2),
        prop::sample::subsequence(vec!["secrets/", "private/key.pem"], 0..=2),
        any::<bool>(),
        (
            prop::sample::subsequence(vec!["rust", "node"], 0..=2),
            prop::sample::subsequence(vec!["cargo", "uv"], 0..=2),
            prop::option::of(1u64..(1 << 34)),
        ),
    )
        .prop_map(
            |(memory, pids, cpus, tmp, output, ro, hide, git, (toolchains, caches, limit))| {
                Isolation {
                    memory: memory.and_then(ByteSize::from_bytes),
                    pids: pids.and_then(NonZeroU64::new),
                    cpus: cpus.and_then(NonZeroU64::new).map(Cpus::from_millis),
                    tmp_size: tmp.and_then(ByteSize::from_bytes),
                    output_limit: output.and_then(ByteSize::from_bytes),
                    read_only: ro.into_iter().filter_map(HostPath::parse).collect(),
                    hide: hide.into_iter().map(rel).collect(),
                    allow_git_mutations: git,
                    toolchains: toolchains.into_iter().map(str::to_owned).collect(),
                    caches: caches.into_iter().map(str::to_owned).collect(),
                    cache_limit: limit.and_then(ByteSize::from_bytes),
                    image: None,
                    image_writable: false,
                }
            },
        );
    (
        "[a-z][a-z0-9 -]{0,20}",
        "[a-z][a-z0-9.-]{0,10}",
        1u32..10,
        isolation,
        network_strategy(),
        prop::collection::vec(
            (
                kind_strategy(),
                (any::<u8>(), any::<usize>(), any::<bool>()),
                (any::<u8>(), any::<usize>(), any::<bool>()),
            ),
            1..6,
        ),
    )
        .prop_map(|(name, llm_model, attempts, isolation, network, steps)| {
            let names: Vec<StepName> = (0..steps.len())
                .map(|i| StepName::parse(&format!("s{i}")).expect("name"))
                .collect();
            let mut agents = BTreeMap::new();
            let steps = steps
                .into_iter()
                .enumerate()
                .map(|(i, ((kind, sandbox), pass, fail))| {
                    let kind = match kind {
                        KindChoice::Agent {
                            model,
                            iterations,
                            prompt,
                            artifact,
                            verdicts,
                        } => {
                            let agent = AgentName::parse(&format!("agent{i}")).expect("agent name");
                            agents.insert(
                                agent.clone(),
                                Agent {
                                    name: agent.clone(),
                                    model: None,
                                    tools: Tool::ALL.to_vec(),
                                    mcp_tools: Vec::new(),
                                    mcp: Vec::new(),
                                    max_iterations: None,
                                    temperature: None,
                                    system_prompt: format!("You are {agent}.\n"),
                                },
                            );
                            StepKind::Agent(AgentStep {
                                agent,
                                model: Some(model),
                                max_iterations: NonZeroU32::new(iterations).expect("positive"),
                                prompt,
                                artifact: artifact.then(|| rel("review.md")),
                                verdicts: verdicts.map(|(pass, fail)| Verdicts {
                                    pass,
                                    fail,
                                    unverifiable: None,
                                }),
                                mcp: Vec::new(),
                                sandbox,
                            })
                        }
                        KindChoice::Command {
                            command,
                            model_lane,
                        } => StepKind::Command(CommandStep {
                            command,
                            model_lane,
                            sandbox,
                        }),
                        KindChoice::Commit { message } => {
                            StepKind::Action(Action::Commit { message })
                        }
                    };
                    let on_fail = route_for(fail, i, &names);
                    Step {
                        name: names[i].clone(),
                        kind,
                        on_pass: route_for(pass, i, &names),
                        on_unverifiable: on_fail.clone(),
                        on_fail,
                    }
                })
                .collect();
            let secrets = [("gh", "GH_TOKEN"), ("npm", "NPM_TOKEN")]
                .into_iter()
                .filter_map(|(n, k)| {
                    Some((
                        SecretName::parse(n)?,
                        Secret::Env {
                            key: EnvName::parse(k)?,
                        },
                    ))
                })
                .collect();
            Pipeline {
                name,
                llm: Some(Llm::OpenAi {
                    model: llm_model,
                    base_url: Some("https://llm.example.test/v1".to_owned()),
                    api_key_env: EnvName::parse("OPENAI_API_KEY"),
                }),
                agents_dir: rel("agents"),
                context_files: vec![rel("README.md")],
                max_attempts: NonZeroU32::new(attempts).expect("positive"),
                // From the attempts, so every shape is met: none, some and all limits, with and
                // without pricing (a cost limit always has it).
                budget: cordon_pipeline::Budget {
                    tokens: NonZeroU64::new(u64::from(attempts % 3) * 1000),
                    cost_usd: (attempts % 2 == 0).then_some(f64::from(attempts) * 0.25),
                    wall_clock: NonZeroU64::new(u64::from(attempts % 4) * 90),
                },
                pricing: (attempts % 4 != 1).then_some(cordon_pipeline::Pricing {
                    input: f64::from(attempts) * 1.5,
                    output: 15.0,
                }),
                outcome: None,
                // From the attempts, so a report is there or not, on an issue or a new one.
                report: (attempts % 3 != 0).then(|| cordon_pipeline::Report {
                    forge: cordon_pipeline::Forge::Gitea,
                    api_url: cordon_pipeline::HttpUrl::parse("https://forge.example.test/api/v1")
                        .expect("a URL"),
                    repo: "octo/widgets".to_owned(),
                    issue: if attempts % 2 == 0 {
                        cordon_pipeline::ReportIssue::Create
                    } else {
                        cordon_pipeline::ReportIssue::Number(u64::from(attempts))
                    },
                    token: SecretName::parse("gh").expect("a name"),
                    on: cordon_pipeline::ReportOn {
                        start: attempts % 2 == 1,
                        step: true,
                        end: attempts % 5 != 0,
                    },
                }),
                isolation,
                network,
                secrets,
                steps,
                agents,
            }
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn valid_pipelines_round_trip_through_yaml(pipeline in pipeline_strategy()) {
        let yaml = emit(&pipeline);
        let files: Vec<(String, String)> = pipeline
            .agents
            .keys()
            .map(|name| (format!("agents/{name}.agent.md"), format!("---\nname: {name}\n---\nYou are {name}.\n")))
            .collect();
        match load(&yaml, &files) {
            Ok(loaded) => prop_assert_eq!(loaded.pipeline, pipeline, "yaml:\n{}", yaml),
            Err(d) => prop_assert!(false, "generated pipeline rejected:\n{}\nyaml:\n{}", d, yaml),
        }
    }
}
