//! Decoding `outcome:` (DESIGN §13): the five phases (an agent name or an agent-step mapping),
//! the `verify` commands and the bounds — every problem reported in one pass, like `steps`.

use std::collections::BTreeMap;
use std::num::NonZeroU32;

use super::AgentLoader;
use super::positive_u32;
use super::step::{Context, agent_step, command_step};
use crate::decode;
use crate::diagnostic::FileSink;
use crate::keys;
use crate::model::{
    AgentStep, CommandStep, DEFAULT_MAX_REPLANS, DEFAULT_MAX_REVISIONS, DEFAULT_MAX_TASKS,
    OutcomeCommit, OutcomeSpec, StepKind,
};
use crate::yaml::{Kind, Node, Scalar};
use crate::{Agent, AgentName};

/// The most commands `verify` may list (the task's and the plan's come on top).
const MAX_VERIFY: usize = 64;

pub(crate) fn outcome(
    out: &mut FileSink<'_>,
    node: &Node,
    cx: &Context<'_>,
    agents: &mut AgentLoader<'_>,
) -> Option<(OutcomeSpec, BTreeMap<AgentName, Agent>)> {
    let fields = decode::fields(out, node, &keys::OUTCOME)?;
    let mut loaded: BTreeMap<AgentName, Option<Agent>> = BTreeMap::new();
    let mut phase = |out: &mut FileSink<'_>, key: &str| -> Option<AgentStep> {
        let node = fields.get(key)?;
        let label = format!("phase `{key}`");
        let wrapped = wrap(node, "agent");
        let node = wrapped.as_ref().unwrap_or(node);
        let phase_fields = decode::fields(out, node, &keys::PHASE)?;
        match agent_step(out, &phase_fields, &label, cx, &mut loaded, agents, true)? {
            StepKind::Agent(step) => Some(step),
            StepKind::Command(_) | StepKind::Action(_) => None,
        }
    };
    let decompose = phase(out, "decompose");
    let plan = phase(out, "plan");
    let execute = phase(out, "execute");
    let scrutinize = phase(out, "scrutinize");
    let validate = phase(out, "validate");
    let verify = match fields.get("verify") {
        Some(n) => verify(out, n, cx),
        None => Some(Vec::new()),
    };
    let count = |out: &mut FileSink<'_>, key: &str, default: u32| match fields.get(key) {
        Some(n) => whole(out, n, key),
        None => Some(default),
    };
    let max_tasks = match fields.get("max_tasks") {
        Some(n) => positive_u32(out, n, "max_tasks", 20).map(NonZeroU32::get),
        None => Some(DEFAULT_MAX_TASKS),
    };
    let max_revisions = count(out, "max_revisions", DEFAULT_MAX_REVISIONS);
    let max_replans = count(out, "max_replans", DEFAULT_MAX_REPLANS);
    let parallel = match fields.get("parallel") {
        Some(n) => positive_u32(out, n, "parallel", 1),
        None => Some(NonZeroU32::MIN),
    };
    let commit = match fields.get("commit") {
        None => Some(OutcomeCommit::PerTask),
        Some(n) => {
            let text = decode::string(out, n, "commit")?;
            let found = OutcomeCommit::NAMES
                .iter()
                .zip([
                    OutcomeCommit::PerTask,
                    OutcomeCommit::End,
                    OutcomeCommit::None,
                ])
                .find_map(|(name, value)| (*name == text).then_some(value));
            if found.is_none() {
                out.error(
                    n.at,
                    format!(
                        "`commit` must be `per_task`, `end` or `none`; found {}",
                        decode::quoted(&text)
                    ),
                );
            }
            found
        }
    };
    let deliver = match fields.get("deliver") {
        None => Some(None),
        Some(n) => {
            let deliver =
                super::delivery::deliver(out, Some(n), n.at, "`outcome.deliver`", cx.secret_names);
            if commit == Some(OutcomeCommit::None) {
                out.error(
                    n.at,
                    "`outcome.deliver` pushes the run's commits, and `commit: none` makes none; \
                     set `commit: per_task` or `end`, or remove `deliver`",
                );
                None
            } else {
                deliver.map(|d| Some(Box::new(d)))
            }
        }
    };
    let agents: BTreeMap<AgentName, Agent> = loaded
        .into_iter()
        .filter_map(|(name, agent)| Some((name, agent?)))
        .collect();
    Some((
        OutcomeSpec {
            decompose: decompose?,
            plan: plan?,
            execute: execute?,
            scrutinize: scrutinize?,
            validate: validate?,
            verify: verify?,
            max_tasks: max_tasks?,
            max_revisions: max_revisions?,
            max_replans: max_replans?,
            parallel: parallel?,
            commit: commit?,
            deliver: deliver?,
        },
        agents,
    ))
}

/// `verify`: a list of commands (strings or argv lists) or mappings with `command`.
fn verify(out: &mut FileSink<'_>, node: &Node, cx: &Context<'_>) -> Option<Vec<CommandStep>> {
    let items = decode::list(out, node, "verify", "[make test]")?;
    if items.len() > MAX_VERIFY {
        out.error(
            node.at,
            format!(
                "`verify` lists {} commands; at most {MAX_VERIFY} are accepted, so join some into a script",
                items.len()
            ),
        );
        return None;
    }
    let mut ok = true;
    let mut commands = Vec::with_capacity(items.len());
    for (index, item) in items.iter().enumerate() {
        let label = format!("verify command {}", index + 1);
        let wrapped = (!matches!(item.kind, Kind::Map(_))).then(|| wrap_always(item, "command"));
        let item = wrapped.as_ref().unwrap_or(item);
        let decoded = decode::fields(out, item, &keys::VERIFY)
            .and_then(|fields| command_step(out, &fields, &label, cx));
        match decoded {
            Some(StepKind::Command(command)) => commands.push(command),
            _ => ok = false,
        }
    }
    ok.then_some(commands)
}

/// A whole number, 0 or more, written unquoted.
fn whole(out: &mut FileSink<'_>, node: &Node, key: &str) -> Option<u32> {
    let parsed = node
        .scalar()
        .filter(|s| s.plain && !s.text.is_empty() && s.text.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|s| s.text.parse::<u32>().ok());
    if parsed.is_none() {
        out.error(
            node.at,
            format!(
                "`{key}` must be a whole number, 0 or more, like `{key}: 2`; found {}",
                node.describe()
            ),
        );
    }
    parsed
}

/// A scalar `node` as the mapping `{key: node}`; `None` when it is not a scalar.
fn wrap(node: &Node, key: &str) -> Option<Node> {
    node.scalar().is_some().then(|| wrap_always(node, key))
}

fn wrap_always(node: &Node, key: &str) -> Node {
    Node {
        at: node.at,
        kind: Kind::Map(vec![(
            Node {
                at: node.at,
                kind: Kind::Scalar(Scalar {
                    text: key.to_owned(),
                    plain: true,
                }),
            },
            node.clone(),
        )]),
    }
}
