//! Decoding `steps`: each step's kind and keys, then the routes between steps and the cycle rule.

use std::collections::{BTreeMap, HashMap};
use std::num::NonZeroU32;

use cordon_protocol::StepName;

use super::graph::{self, Edge};
use super::route::{self, RouteDraft, resolve};
use super::sandboxed::{command, sandboxed};
use super::{positive_u32, rel_path};
use crate::decode::{self, Fields, closest};
use crate::diagnostic::{FileSink, Position};
use crate::keys;
use crate::model::{
    Action, AgentStep, CommandStep, DEFAULT_MAX_ITERATIONS, Route, Step, StepKind, Verdicts,
};
use crate::yaml::Node;
use crate::{Agent, AgentName, Llm, Network, RelPath};

use super::AgentLoader;

/// What steps inherit or refer to from the pipeline level (`None` where that part was invalid).
pub(crate) struct Context<'a> {
    pub(crate) llm: Option<&'a Llm>,
    /// `llm` was written, even if it was invalid (then agent steps do not repeat its errors).
    pub(crate) llm_given: bool,
    pub(crate) network: Option<&'a Network>,
    /// Every declared secret name, even those whose declaration is invalid.
    pub(crate) secret_names: &'a [String],
    pub(crate) agents_dir: Option<&'a RelPath>,
    /// `isolation.image`, which sandboxed steps inherit.
    pub(crate) image: Option<&'a cordon_protocol::ImageRef>,
}

/// Keys only agent steps take.
const AGENT_ONLY: &[&str] = &[
    "prompt",
    "mcp",
    "model",
    "artifact",
    "verdicts",
    "max_iterations",
    "on_unverifiable",
];
/// Keys host actions do not take (they run on the host, outside any sandbox).
const NOT_FOR_ACTIONS: &[&str] = &[
    "network",
    "setup",
    "setup_network",
    "secrets",
    "model_lane",
    "env",
    "timeout",
    "produces",
    "image",
];

struct Draft {
    name: Option<StepName>,
    at: Position,
    kind: Option<StepKind>,
    on_pass: Option<Option<RouteDraft>>,
    on_fail: Option<Option<RouteDraft>>,
    on_unverifiable: Option<Option<RouteDraft>>,
}

pub(crate) fn steps(
    out: &mut FileSink<'_>,
    node: &Node,
    cx: &Context<'_>,
    agents: &mut AgentLoader<'_>,
) -> Option<(Vec<Step>, BTreeMap<AgentName, Agent>)> {
    let items = decode::list(out, node, "steps", "{name: test, command: make test}")?;
    if items.is_empty() {
        out.error(node.at, "`steps` is empty; add at least one step");
        return None;
    }
    let mut loaded: BTreeMap<AgentName, Option<Agent>> = BTreeMap::new();
    let drafts: Vec<Option<Draft>> = items
        .iter()
        .map(|item| step(out, item, cx, &mut loaded, agents))
        .collect();

    // Names: unique, and known before routes are resolved.
    let mut names: Vec<String> = Vec::with_capacity(drafts.len());
    let mut index: HashMap<&str, usize> = HashMap::with_capacity(drafts.len());
    let mut unique = true;
    for (i, draft) in drafts.iter().enumerate() {
        let Some((name, at)) = draft.as_ref().and_then(|d| Some((d.name.as_ref()?, d.at))) else {
            continue;
        };
        if index.contains_key(name.as_str()) {
            out.error(
                at,
                format!("step name `{name}` is used twice; step names must be unique"),
            );
            unique = false;
        } else {
            index.insert(name.as_str(), i);
        }
        names.push(name.as_str().to_owned());
    }
    let complete = drafts
        .iter()
        .all(|d| d.as_ref().is_some_and(|d| d.name.is_some()));
    let index_of = |name: &str| -> Option<usize> { index.get(name).copied() };

    let mut steps = Vec::with_capacity(drafts.len());
    let mut edges = Vec::new();
    let mut ok = complete;
    for (i, draft) in drafts.iter().enumerate() {
        let Some(draft) = draft else { continue };
        let implicit_pass = match drafts.get(i + 1) {
            Some(Some(Draft {
                name: Some(next), ..
            })) => Some(Route::Goto {
                step: next.clone(),
                retry: false,
            }),
            Some(_) => None,
            None => Some(Route::Success),
        };
        let on_pass = resolve(
            out,
            draft.on_pass.as_ref(),
            implicit_pass,
            &names,
            &index_of,
        );
        let on_fail = resolve(
            out,
            draft.on_fail.as_ref(),
            Some(Route::Failure),
            &names,
            &index_of,
        );
        let on_unverifiable = resolve(
            out,
            draft.on_unverifiable.as_ref(),
            on_fail.clone(),
            &names,
            &index_of,
        );
        // An omitted `on_unverifiable` is the `on_fail` edge itself: counted once.
        let written_unverifiable = if draft.on_unverifiable.is_some() {
            on_unverifiable.clone()
        } else {
            None
        };
        for (route, key, written) in [
            (&on_pass, "on_pass", &draft.on_pass),
            (&on_fail, "on_fail", &draft.on_fail),
            (
                &written_unverifiable,
                "on_unverifiable",
                &draft.on_unverifiable,
            ),
        ] {
            if let Some(Route::Goto { step, retry }) = route {
                let at = written
                    .as_ref()
                    .and_then(|r| r.as_ref())
                    .map_or(draft.at, |r| r.at);
                if let Some(to) = index_of(step.as_str()) {
                    edges.push(Edge {
                        from: i,
                        to,
                        retry: *retry,
                        key,
                        at,
                    });
                }
            }
        }
        match (
            draft.name.clone(),
            draft.kind.clone(),
            on_pass,
            on_fail,
            on_unverifiable,
        ) {
            (Some(name), Some(kind), Some(on_pass), Some(on_fail), Some(on_unverifiable)) => {
                steps.push(Step {
                    name,
                    kind,
                    on_pass,
                    on_fail,
                    on_unverifiable,
                });
            }
            _ => ok = false,
        }
    }
    // Steps without a valid name have no edges, so the rule still covers every other step. With
    // a duplicated name the routes are ambiguous; that error comes first.
    if unique {
        let graph_names: Vec<String> = drafts
            .iter()
            .map(|d| {
                d.as_ref()
                    .and_then(|d| d.name.as_ref())
                    .map(ToString::to_string)
                    .unwrap_or_default()
            })
            .collect();
        graph::check_cycles(out, &graph_names, &edges);
        if complete {
            let starts: Vec<Position> = drafts.iter().flatten().map(|d| d.at).collect();
            graph::check_reachable(out, &graph_names, &starts, &edges);
        }
    }
    let agents: BTreeMap<AgentName, Agent> = loaded
        .into_iter()
        .filter_map(|(name, agent)| Some((name, agent?)))
        .collect();
    ok.then_some((steps, agents))
}

fn step(
    out: &mut FileSink<'_>,
    node: &Node,
    cx: &Context<'_>,
    loaded: &mut BTreeMap<AgentName, Option<Agent>>,
    agents: &mut AgentLoader<'_>,
) -> Option<Draft> {
    let fields = decode::fields(out, node, &keys::STEP)?;
    let name = fields.get("name").and_then(|n| {
        let text = decode::string(out, n, "name")?;
        match StepName::parse_written(&text) {
            Ok(name) => Some(name),
            Err(err) => {
                out.error(n.at, err.to_string());
                None
            }
        }
    });
    let label = name
        .as_ref()
        .map_or_else(|| "this step".to_owned(), |n| format!("step `{n}`"));
    let on_pass = fields
        .get("on_pass")
        .map(|n| route::decode(out, n, "on_pass"));
    let on_fail = fields
        .get("on_fail")
        .map(|n| route::decode(out, n, "on_fail"));
    let on_unverifiable = fields
        .get("on_unverifiable")
        .map(|n| route::decode(out, n, "on_unverifiable"));

    let kinds: Vec<(&str, Position)> = ["agent", "command", "action"]
        .into_iter()
        .filter_map(|k| fields.key_at(k).map(|at| (k, at)))
        .collect();
    let kind = match kinds.as_slice() {
        [] => {
            out.error(
                node.at,
                format!("{label} needs exactly one of `agent`, `command` or `action`; add one"),
            );
            None
        }
        [(kind, _)] => match *kind {
            "agent" => agent_step(out, &fields, &label, cx, loaded, agents, false),
            "command" => command_step(out, &fields, &label, cx),
            _ => action_step(out, &fields, &label, cx),
        },
        [_, (second, at), ..] => {
            out.error(
                *at,
                format!(
                    "{label} has both `{}` and `{second}`; a step is exactly one of `agent`, `command` or `action`, so split it into two steps",
                    kinds[0].0
                ),
            );
            None
        }
    };
    // `on_unverifiable` routes a verdict only an agent step with a third keyword can give.
    if let (Some(at), Some(StepKind::Agent(agent))) = (fields.key_at("on_unverifiable"), &kind)
        && agent
            .verdicts
            .as_ref()
            .is_none_or(|v| v.unverifiable.is_none())
    {
        out.error(
            at,
            format!(
                "`on_unverifiable` in {label} routes the `unverifiable` verdict, which its \
                 `verdicts` does not name; add `unverifiable: KEYWORD` to `verdicts` or remove it"
            ),
        );
        return None;
    }
    Some(Draft {
        name,
        at: node.at,
        kind,
        on_pass,
        on_fail,
        on_unverifiable,
    })
}

/// Reports keys that do not apply to this kind of step.
fn refuse_keys(
    out: &mut FileSink<'_>,
    fields: &Fields<'_>,
    keys: &[&str],
    why: impl Fn(&str) -> String,
) -> bool {
    let mut ok = true;
    for (key, _) in fields.present().collect::<Vec<_>>() {
        if keys.contains(&key) {
            if let Some(at) = fields.key_at(key) {
                out.error(at, why(key));
            }
            ok = false;
        }
    }
    ok
}

/// An agent step's keys; `phase`: an outcome phase, whose task message cordon writes (so no
/// `prompt` is needed).
pub(crate) fn agent_step(
    out: &mut FileSink<'_>,
    fields: &Fields<'_>,
    label: &str,
    cx: &Context<'_>,
    loaded: &mut BTreeMap<AgentName, Option<Agent>>,
    agents: &mut AgentLoader<'_>,
    phase: bool,
) -> Option<StepKind> {
    let mut ok = refuse_keys(out, fields, &["params", "model_lane"], |key| {
        format!("`{key}` does not apply to agent {label}; remove it")
    });
    let sandbox = sandboxed(out, fields, label, cx);
    let agent_node = fields.get("agent")?;
    let agent_text = decode::string(out, agent_node, "agent")?;
    let Some(agent_name) = AgentName::parse(&agent_text) else {
        out.error(
            agent_node.at,
            format!("agent name {} must match `[a-z0-9][a-z0-9_-]*` (it names `<agents_dir>/<name>.agent.md`); rename it", decode::quoted(&agent_text)),
        );
        return None;
    };
    if cx.llm.is_none() && !cx.llm_given {
        out.error(
            agent_node.at,
            format!("agent {label} needs a model provider, but the pipeline has no `llm`; add `llm: {{provider: openai, model: gpt-4.1}}`"),
        );
        ok = false;
    }
    let agent = match (loaded.get(&agent_name), cx.agents_dir) {
        (Some(agent), _) => agent.clone(),
        (None, Some(dir)) => {
            let agent = agents(out, &agent_name, agent_node.at, dir);
            loaded.insert(agent_name.clone(), agent.clone());
            agent
        }
        (None, None) => None,
    };
    let model = fields.get("model").map(|n| decode::string(out, n, "model"));
    let max_iterations = fields
        .get("max_iterations")
        .map(|n| positive_u32(out, n, "max_iterations", 40));
    let prompt = fields
        .get("prompt")
        .map(|n| decode::string(out, n, "prompt"));
    if prompt.is_none() && !phase {
        out.warning(
            agent_node.at,
            format!(
                "this agent step (agent `{agent_text}`) has no `prompt`: the model gets its agent \
                 file and feedback but no task; add `prompt: <what to do>`"
            ),
        );
    }
    let artifact = fields.get("artifact").map(|n| rel_path(out, n, "artifact"));
    let verdicts = fields.get("verdicts").map(|n| verdicts(out, n));
    let own_mcp = fields.get("mcp").map(|n| crate::mcp::decode(out, n));
    let agent = agent?;
    let mcp = mcp_servers(
        out,
        &agent,
        own_mcp.unwrap_or(Some(Vec::new()))?,
        (label, agent_node.at),
        cx,
        sandbox.as_ref().map(|s| &s.network),
    );
    let model = match model {
        Some(m) => Some(m?),
        None => agent
            .model
            .clone()
            .or_else(|| cx.llm.and_then(Llm::model).map(str::to_owned)),
    };
    let max_iterations = match max_iterations {
        Some(m) => m?,
        None => agent
            .max_iterations
            .or(NonZeroU32::new(DEFAULT_MAX_ITERATIONS))?,
    };
    let prompt = prompt.map_or(Some(None), |p| p.map(Some))?;
    let artifact = artifact.map_or(Some(None), |p| p.map(Some))?;
    let verdicts = verdicts.map_or(Some(None), |v| v.map(Some))?;
    ok.then_some(())?;
    Some(StepKind::Agent(AgentStep {
        agent: agent_name,
        model,
        max_iterations,
        prompt,
        artifact,
        verdicts,
        mcp: mcp?,
        sandbox: sandbox?,
    }))
}

/// The agent file's MCP servers then the step's: names unique across both, every secret they
/// name declared, and a warning for an HTTP server the step's network does not let through.
fn mcp_servers(
    out: &mut FileSink<'_>,
    agent: &Agent,
    own: Vec<crate::McpServer>,
    (label, at): (&str, Position),
    cx: &Context<'_>,
    network: Option<&crate::Network>,
) -> Option<Vec<crate::McpServer>> {
    let mut ok = true;
    let mut servers = agent.mcp.clone();
    for server in own {
        if servers.iter().any(|s| s.name == server.name) {
            out.error(
                server.at,
                format!(
                    "MCP server `{}` of {label} is also declared by the agent file `{}`; give it \
                     another name or declare it once",
                    server.name,
                    agent.name.file_name()
                ),
            );
            ok = false;
        } else {
            servers.push(server);
        }
    }
    if servers.len() > crate::mcp::MAX_SERVERS {
        out.error(
            at,
            format!(
                "{label} has {} MCP servers with its agent file's; at most {} are taken",
                servers.len(),
                crate::mcp::MAX_SERVERS
            ),
        );
        ok = false;
    }
    for pattern in &agent.mcp_tools {
        let server = pattern
            .split_once("__")
            .map_or(pattern.as_str(), |(s, _)| s);
        if !servers.iter().any(|s| s.name == server) {
            out.warning(
                at,
                format!(
                    "the agent file `{}` lists `{pattern}` in `tools`, but {label} has no MCP \
                     server `{server}`; declare it under `mcp` or drop the entry",
                    agent.name.file_name()
                ),
            );
        }
    }
    for server in &servers {
        for secret in server.secrets() {
            if !cx.secret_names.iter().any(|s| s == secret.as_str()) {
                out.error(
                    server.at,
                    format!(
                        "MCP server `{}` of {label} names the secret `{secret}`, which is not \
                         declared; add it under `secrets:` (`{secret}: {{from: env, key: \
                         NAME}}`)",
                        server.name
                    ),
                );
                ok = false;
            }
        }
        if let (crate::McpTransport::Http { url, .. }, Some(network)) = (&server.transport, network)
            && let Some(why) = crate::mcp::unreachable(url, network)
        {
            out.warning(
                server.at,
                format!(
                    "MCP server `{}` of {label} is at {url}, but {why}",
                    server.name
                ),
            );
        }
    }
    ok.then_some(servers)
}

fn verdicts(out: &mut FileSink<'_>, node: &Node) -> Option<Verdicts> {
    let fields = decode::fields(out, node, &keys::VERDICTS)?;
    let mut keyword = |key: &str| {
        let n = fields.get(key)?;
        let text = decode::string(out, n, key)?;
        if text.trim() != text || text.contains(['\n', '\r']) {
            out.error(
                n.at,
                format!(
                    "verdict keyword {} must be one line without surrounding spaces",
                    decode::quoted(&text)
                ),
            );
            return None;
        }
        Some((n.at, text))
    };
    let pass = keyword("pass");
    let fail = keyword("fail");
    let unverifiable = match fields.get("unverifiable") {
        Some(_) => keyword("unverifiable").map(Some),
        None => Some(None),
    };
    let ((_, pass), (at, fail), unverifiable) = (pass?, fail?, unverifiable?);
    if pass == fail {
        out.error(
            at,
            format!("the pass and fail verdicts are both `{pass}`; give them different keywords"),
        );
        return None;
    }
    if let Some((at, third)) = &unverifiable
        && (*third == pass || *third == fail)
    {
        out.error(
            *at,
            format!(
                "the unverifiable verdict `{third}` is also the pass or fail keyword; give it a \
                 keyword of its own"
            ),
        );
        return None;
    }
    Some(Verdicts {
        pass,
        fail,
        unverifiable: unverifiable.map(|(_, k)| k),
    })
}

pub(crate) fn command_step(
    out: &mut FileSink<'_>,
    fields: &Fields<'_>,
    label: &str,
    cx: &Context<'_>,
) -> Option<StepKind> {
    let ok = refuse_keys(out, fields, &[AGENT_ONLY, &["params"]].concat(), |key| {
        let what = if key == "params" {
            "host actions"
        } else {
            "agent steps"
        };
        format!("`{key}` applies to {what} only; remove it from command {label}")
    });
    let sandbox = sandboxed(out, fields, label, cx);
    let command = fields
        .get("command")
        .and_then(|n| command(out, n, "command"));
    let model_lane = match fields.get("model_lane") {
        Some(n) => decode::boolean(out, n, "model_lane"),
        None => Some(false),
    };
    if model_lane == Some(true) && cx.llm.is_none() && !cx.llm_given {
        if let Some(at) = fields.key_at("model_lane") {
            out.error(at, format!("command {label} asks for the model lane, but the pipeline has no `llm` to forward to; add `llm`"));
        }
        return None;
    }
    ok.then_some(())?;
    Some(StepKind::Command(CommandStep {
        command: command?,
        model_lane: model_lane?,
        sandbox: sandbox?,
    }))
}

fn action_step(
    out: &mut FileSink<'_>,
    fields: &Fields<'_>,
    label: &str,
    cx: &Context<'_>,
) -> Option<StepKind> {
    let mut ok = refuse_keys(out, fields, NOT_FOR_ACTIONS, |key| {
        format!(
            "host action {label} takes no `{key}`: actions run in cordon on the host, outside any sandbox; remove it"
        )
    });
    ok &= refuse_keys(out, fields, AGENT_ONLY, |key| {
        format!("`{key}` applies to agent steps only; remove it from {label}")
    });
    let node = fields.get("action")?;
    let name = decode::string(out, node, "action")?;
    if name == "deliver" {
        let deliver =
            super::delivery::deliver(out, fields.get("params"), node.at, label, cx.secret_names);
        ok.then_some(())?;
        return Some(StepKind::Action(Action::Deliver(Box::new(deliver?))));
    }
    if name != "commit" {
        let hint = match closest(&name, Action::NAMES.iter().copied()) {
            Some(best) => format!("did you mean `{best}`?"),
            None => "the host actions are `commit` and `deliver`".to_owned(),
        };
        out.error(
            node.at,
            format!("unknown action {}; {hint}", decode::quoted(&name)),
        );
        return None;
    }
    let message = match fields.get("params") {
        None => Some(Action::DEFAULT_COMMIT_MESSAGE.to_owned()),
        Some(n) => {
            let params = decode::fields(out, n, &keys::ACTION_PARAMS)?;
            ok &= super::delivery::refuse_deliver_keys(out, &params);
            match params.get("message") {
                None => Some(Action::DEFAULT_COMMIT_MESSAGE.to_owned()),
                Some(m) => decode::string(out, m, "message")
                    .and_then(|text| commit_message(out, m.at, text)),
            }
        }
    };
    ok.then_some(())?;
    Some(StepKind::Action(Action::Commit { message: message? }))
}

/// A commit message may use `{name}` and `{run_id}`; any other `{…}` is a typo.
fn commit_message(out: &mut FileSink<'_>, at: Position, text: String) -> Option<String> {
    super::delivery::template(out, at, "commit message", &text, &["name", "run_id"])
}
