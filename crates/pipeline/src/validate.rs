//! From the spanned YAML tree to the typed `Pipeline`, checking every rule of DESIGN §3 and
//! reporting every problem in one pass.

mod budget;
mod delivery;
mod graph;
mod isolation;
mod llm;
mod network;
mod outcome;
mod route;
mod sandboxed;
mod secrets;
mod step;

use std::collections::BTreeMap;
use std::num::{NonZeroU32, NonZeroU64};

use crate::decode::{self};
use crate::diagnostic::{FileSink, Position};
use crate::keys;
use crate::model::{DEFAULT_AGENTS_DIR, DEFAULT_MAX_ATTEMPTS, Pipeline};
use crate::yaml::Node;
use crate::{Agent, AgentName, EnvName, Isolation, Network, RelPath, RelPathError};

pub use budget::{parse_amount, parse_duration};
pub(crate) use network::decode as network;

/// Reads an agent file for a step: `(name, where the step names it)`. Reports its own problems
/// and returns `None` when the agent is unusable.
pub(crate) type AgentLoader<'a> =
    dyn FnMut(&mut FileSink<'_>, &AgentName, Position, &RelPath) -> Option<Agent> + 'a;

/// Decodes and validates a whole pipeline. `None` when any error was reported.
pub(crate) fn pipeline(
    out: &mut FileSink<'_>,
    root: &Node,
    agents: &mut AgentLoader<'_>,
) -> Option<Pipeline> {
    let fields = decode::fields(out, root, &keys::PIPELINE)?;
    let name = fields.get("name").and_then(|n| pipeline_name(out, n));
    let llm = fields.get("llm").map(|n| llm::llm(out, n));
    let pricing = match fields.get("llm") {
        Some(n) => budget::pricing(out, n),
        None => Some(None),
    };
    let budget = match fields.get("budget") {
        Some(n) => budget::budget(out, n),
        None => Some(crate::Budget::default()),
    };
    // Said even when another budget key is wrong: every problem in one pass.
    let cost_limited = fields.get("budget").is_some_and(|n| match &n.kind {
        crate::yaml::Kind::Map(pairs) => pairs
            .iter()
            .any(|(k, _)| k.scalar().is_some_and(|s| s.text == "cost_usd")),
        _ => false,
    });
    if cost_limited
        && matches!(pricing, Some(None))
        && let Some(at) = fields.get("budget").map(|n| n.at)
    {
        out.error(
            at,
            "`budget.cost_usd` needs `llm.pricing` to count cost; add `pricing: {input: 3, \
             output: 15}` (US dollars per million tokens) under `llm`",
        );
    }
    let agents_dir = match fields.get("agents_dir") {
        Some(n) => rel_path(out, n, "agents_dir"),
        None => RelPath::parse(DEFAULT_AGENTS_DIR).ok(),
    };
    let context_files = match fields.get("context_files") {
        Some(n) => rel_paths(out, n, "context_files", "README.md"),
        None => Some(Vec::new()),
    };
    let max_attempts = match fields.get("max_attempts") {
        Some(n) => positive_u32(out, n, "max_attempts", 3),
        None => NonZeroU32::new(DEFAULT_MAX_ATTEMPTS),
    };
    let isolation = match fields.get("isolation") {
        Some(n) => isolation::isolation(out, n),
        None => Some(Isolation::default()),
    };
    let network = match fields.get("network") {
        Some(n) => network(out, n, "network"),
        None => Some(Network::None),
    };
    let secrets = match fields.get("secrets") {
        Some(n) => secrets::secrets(out, n),
        None => Some(BTreeMap::new()),
    };
    // Steps may only use declared secrets; a declaration with an invalid value still declares
    // its name, so steps using it are not reported a second time.
    let secret_names: Vec<String> = match fields.get("secrets").map(|n| &n.kind) {
        Some(crate::yaml::Kind::Map(pairs)) => pairs
            .iter()
            .filter_map(|(k, _)| k.scalar().map(|s| s.text.clone()))
            .collect(),
        _ => Vec::new(),
    };
    let context = step::Context {
        llm: llm.as_ref().and_then(Option::as_ref),
        llm_given: llm.is_some(),
        network: network.as_ref(),
        secret_names: &secret_names,
        agents_dir: agents_dir.as_ref(),
        image: isolation.as_ref().and_then(|i| i.image.as_ref()),
    };
    let (steps, outcome, agents) = match (fields.get("steps"), fields.get("outcome")) {
        (Some(_), Some(o)) => {
            out.error(
                o.at,
                "a pipeline has `steps` or `outcome`, not both: `steps` is a loop you write, \
                 `outcome` a task graph cordon plans (`cordon do`); keep one",
            );
            (None, None, None)
        }
        (None, None) => {
            out.error(
                root.at,
                "the pipeline needs `steps` (a loop: `cordon run`) or `outcome` (a task graph: \
                 `cordon do \"OUTCOME\"`); add one",
            );
            (None, None, None)
        }
        (Some(n), None) => match step::steps(out, n, &context, agents) {
            Some((steps, agents)) => (Some(steps), Some(None), Some(agents)),
            None => (None, None, None),
        },
        (None, Some(n)) => match outcome::outcome(out, n, &context, agents) {
            Some((outcome, agents)) => (Some(Vec::new()), Some(Some(outcome)), Some(agents)),
            None => (None, None, None),
        },
    };
    // An outcome commits each task itself; a phase that could move `HEAD` would hide what it
    // committed from the critic, whose diff is taken against `HEAD`.
    if let (Some(Some(_)), Some(isolation)) = (&outcome, &isolation)
        && isolation.allow_git_mutations
        && let Some(at) = fields.get("isolation").map(|n| n.at)
    {
        out.error(
            at,
            "`isolation.allow_git_mutations` does not apply to an outcome pipeline: cordon \
             commits each accepted task itself, and a phase that moved `HEAD` would hide its \
             change from the critic; remove it",
        );
        return None;
    }
    // A writable layer over no image does nothing: said once, at the key.
    let any_image = |steps: &[crate::Step], outcome: Option<&crate::OutcomeSpec>| {
        steps
            .iter()
            .filter_map(|s| s.kind.sandbox())
            .chain(outcome.into_iter().flat_map(|o| {
                o.phases()
                    .into_iter()
                    .map(|(_, a)| &a.sandbox)
                    .chain(o.verify.iter().map(|c| &c.sandbox))
                    .collect::<Vec<_>>()
            }))
            .any(|s| s.image.is_some())
    };
    if let (Some(isolation), Some(steps), Some(outcome)) = (&isolation, &steps, &outcome)
        && isolation.image_writable
        && !any_image(steps, outcome.as_ref())
        && let Some(crate::yaml::Kind::Map(pairs)) = fields.get("isolation").map(|n| &n.kind)
        && let Some((key, _)) = pairs
            .iter()
            .find(|(k, _)| k.scalar().is_some_and(|s| s.text == "image_writable"))
    {
        out.warning(
            key.at,
            "`image_writable` applies to steps with an `image`, and no step has one; set \
             `isolation.image` or a step's `image`, or remove it",
        );
    }
    // `deliver` pushes what the run committed: without a commit before it, nothing.
    if let Some(steps) = &steps {
        let mut committed = false;
        for step in steps {
            match &step.kind {
                crate::StepKind::Action(crate::Action::Commit { .. }) => committed = true,
                crate::StepKind::Action(crate::Action::Deliver(_)) if !committed => {
                    if let Some(at) = fields.get("steps").map(|n| n.at) {
                        out.error(
                            at,
                            format!(
                                "step `{}` delivers the run's commits, but no step before it \
                                 commits; add an `action: commit` step before it",
                                step.name
                            ),
                        );
                    }
                    return None;
                }
                _ => {}
            }
        }
    }
    let report = match fields.get("report") {
        Some(n) => delivery::report(out, n, &secret_names).map(Some),
        None => Some(None),
    };
    Some(Pipeline {
        report: report?,
        name: name?,
        llm: match llm {
            Some(llm) => Some(llm?),
            None => None,
        },
        agents_dir: agents_dir?,
        context_files: context_files?,
        max_attempts: max_attempts?,
        isolation: isolation?,
        network: network?,
        secrets: secrets?,
        steps: steps?,
        agents: agents?,
        budget: budget?,
        pricing: pricing?,
        outcome: outcome?,
    })
}

fn pipeline_name(out: &mut FileSink<'_>, node: &Node) -> Option<String> {
    let name = decode::string(out, node, "name")?;
    if name.contains(['\n', '\r']) || name.trim().is_empty() {
        out.error(node.at, "`name` must be one line of text; shorten it");
        return None;
    }
    Some(name)
}

/// A relative path under `key`, with a message naming the fix.
pub(crate) fn rel_path(out: &mut FileSink<'_>, node: &Node, key: &str) -> Option<RelPath> {
    let text = decode::string(out, node, key)?;
    rel_path_text(out, node.at, key, &text)
}

fn rel_path_text(out: &mut FileSink<'_>, at: Position, key: &str, text: &str) -> Option<RelPath> {
    match RelPath::parse(text) {
        // A step's outputs are read by the host, which never reads inside a git directory.
        Ok(p)
            if matches!(key, "produces" | "artifact")
                && p.as_str()
                    .split('/')
                    .any(|name| name.eq_ignore_ascii_case(".git")) =>
        {
            out.error(
                at,
                format!(
                    "`{key}` path {} is inside a `.git` directory, which the host never reads as \
                     output; name a file of the work tree",
                    decode::quoted(text)
                ),
            );
            None
        }
        Ok(p) => Some(p),
        Err(err) => {
            let why = match err {
                RelPathError::Empty => "is empty; name a file or directory",
                RelPathError::Absolute => "must be a relative path; drop the leading `/` or `~`",
                RelPathError::Parent => "must not leave its directory; remove the `..`",
                RelPathError::Nul => "must not contain a NUL byte",
                RelPathError::TooLong => {
                    "is too long (at most 4095 bytes, 255 per component); shorten it"
                }
            };
            out.error(at, format!("`{key}` path {} {why}", decode::quoted(text)));
            None
        }
    }
}

pub(crate) fn rel_paths(
    out: &mut FileSink<'_>,
    node: &Node,
    key: &str,
    example: &str,
) -> Option<Vec<RelPath>> {
    let items = decode::strings(out, node, key, example)?;
    let mut ok = true;
    let mut result = Vec::with_capacity(items.len());
    for (at, text) in items {
        match rel_path_text(out, at, key, &text) {
            Some(p) if result.contains(&p) => {
                out.error(at, format!("`{key}` lists `{p}` twice; keep one"));
                ok = false;
            }
            Some(p) => result.push(p),
            None => ok = false,
        }
    }
    ok.then_some(result)
}

/// An environment variable name under `key`. The text is not quoted back: a pasted secret value
/// must not end up in a terminal or a log.
pub(crate) fn env_name(
    out: &mut FileSink<'_>,
    node: &Node,
    key: &str,
    example: &str,
) -> Option<EnvName> {
    let text = decode::string(out, node, key)?;
    let name = EnvName::parse(&text);
    if name.is_none() {
        out.error(
            node.at,
            format!(
                "`{key}` must be the NAME of an environment variable (letters, digits and `_`), \
                 like `{key}: {example}`; values never go in the pipeline"
            ),
        );
    }
    name
}

/// A positive number that must fit in 32 bits.
pub(crate) fn positive_u32(
    out: &mut FileSink<'_>,
    node: &Node,
    key: &str,
    example: u64,
) -> Option<NonZeroU32> {
    let v: NonZeroU64 = decode::positive(out, node, key, example)?;
    let v = NonZeroU32::try_from(v).ok();
    if v.is_none() {
        out.error(
            node.at,
            format!("`{key}` is too large; give at most 4294967295"),
        );
    }
    v
}
