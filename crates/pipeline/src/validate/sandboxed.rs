//! What every sandboxed step carries: network, setup, secrets, env, timeout, produces; and the
//! `command` / `setup` form shared by command steps and setup hooks.

use std::collections::BTreeMap;

use super::step::Context;
use super::{network as decode_network, rel_paths};
use crate::decode::{self, Fields, closest};
use crate::diagnostic::FileSink;
use crate::model::{CommandSpec, Sandboxed, Setup, Timeout};
use crate::yaml::{Kind, Node};
use crate::{EnvName, Network, SecretName};

/// A `command` or `setup`: a non-empty string, or a non-empty list of strings.
pub(crate) fn command(out: &mut FileSink<'_>, node: &Node, key: &str) -> Option<CommandSpec> {
    if let Kind::Seq(items) = &node.kind {
        if items.is_empty() {
            out.error(node.at, format!("`{key}` is an empty list; give the program and its arguments, like `{key}: [make, test]`"));
            return None;
        }
        // Arguments may be empty strings (`[printf, ""]`); the program may not.
        let argv: Vec<Option<String>> = items
            .iter()
            .enumerate()
            .map(|(i, item)| match item.scalar() {
                Some(s) if i > 0 && !item.is_null() => Some(s.text.clone()),
                _ => decode::string(out, item, key),
            })
            .collect();
        return argv
            .into_iter()
            .collect::<Option<Vec<_>>>()
            .map(CommandSpec::Argv);
    }
    match node.scalar().filter(|_| !node.is_null()) {
        Some(s) if s.text.trim().is_empty() => {
            out.error(
                node.at,
                format!("`{key}` is empty; give a shell command like `{key}: make test`"),
            );
            None
        }
        Some(s) => Some(CommandSpec::Shell(s.text.clone())),
        None => {
            out.error(
                node.at,
                format!("`{key}` must be a shell command string or a list like `[make, test]`; found {}", node.describe()),
            );
            None
        }
    }
}

/// The settings every sandboxed step has.
pub(crate) fn sandboxed(
    out: &mut FileSink<'_>,
    fields: &Fields<'_>,
    label: &str,
    cx: &Context<'_>,
) -> Option<Sandboxed> {
    let network = match fields.get("network") {
        Some(n) => decode_network(out, n, "network"),
        None => cx.network.cloned(),
    };
    let setup_command = fields.get("setup").map(|n| command(out, n, "setup"));
    let setup_network = match fields.get("setup_network") {
        Some(n) => decode_network(out, n, "setup_network"),
        None => Some(Network::None),
    };
    if setup_command.is_none()
        && let Some(at) = fields.key_at("setup_network")
    {
        out.error(
            at,
            format!(
                "`setup_network` has no effect without `setup` in {label}; remove it or add `setup`"
            ),
        );
    }
    let setup = match setup_command {
        None => Some(None),
        Some(command) => match (command, setup_network) {
            (Some(command), Some(network)) => Some(Some(Setup { command, network })),
            _ => None,
        },
    };
    let secrets = match fields.get("secrets") {
        Some(n) => step_secrets(out, n, label, cx),
        None => Some(Vec::new()),
    };
    let env = match fields.get("env") {
        Some(n) => env(out, n),
        None => Some(BTreeMap::new()),
    };
    let timeout = match fields.get("timeout") {
        Some(n) => decode::positive(out, n, "timeout", 600).map(|t| Some(Timeout(t))),
        None => Some(None),
    };
    let produces = match fields.get("produces") {
        Some(n) => rel_paths(out, n, "produces", "summary.md"),
        None => Some(Vec::new()),
    };
    let image = match fields.get("image") {
        Some(n) => super::isolation::image(out, n).map(Some),
        None => Some(cx.image.cloned()),
    };
    if fields.key_at("setup_network").is_some() && fields.get("setup").is_none() {
        return None;
    }
    Some(Sandboxed {
        image: image?,
        network: network?,
        setup: setup?,
        secrets: secrets?,
        env: env?,
        timeout: timeout?,
        produces: produces?,
    })
}

fn step_secrets(
    out: &mut FileSink<'_>,
    node: &Node,
    label: &str,
    cx: &Context<'_>,
) -> Option<Vec<SecretName>> {
    let items = decode::strings(out, node, "secrets", "gh")?;
    let mut ok = true;
    let mut result = Vec::with_capacity(items.len());
    for (at, text) in items {
        let declared = cx.secret_names.contains(&text);
        match SecretName::parse(&text).filter(|_| declared) {
            Some(name) if result.contains(&name) => {
                out.error(at, format!("{label} lists secret `{text}` twice; keep one"));
                ok = false;
            }
            Some(name) => result.push(name),
            // Declared with an invalid name: reported at the declaration.
            None if declared => ok = false,
            None => {
                let hint = match closest(&text, cx.secret_names.iter().map(String::as_str)) {
                    Some(best) => format!("did you mean `{best}`?"),
                    None => format!(
                        "declare it under the top-level `secrets`, like `secrets: {{{}: {{from: env, key: TOKEN}}}}`",
                        crate::yaml::shorten(&text)
                    ),
                };
                out.error(
                    at,
                    format!(
                        "{label} uses secret {}, which is not declared; {hint}",
                        decode::quoted(&text)
                    ),
                );
                ok = false;
            }
        }
    }
    ok.then_some(result)
}

fn env(out: &mut FileSink<'_>, node: &Node) -> Option<BTreeMap<EnvName, String>> {
    let entries = decode::entries(out, node, "env")?;
    let mut ok = true;
    let mut result = BTreeMap::new();
    for (name, key_node, value) in entries {
        let name = EnvName::parse(&name);
        if name.is_none() {
            out.error(key_node.at, "`env` names must be environment variable names (letters, digits and `_`, not starting with a digit); rename it");
        }
        let value = match value.scalar() {
            Some(s) if !value.is_null() => Some(s.text.clone()),
            _ => {
                out.error(
                    value.at,
                    format!("`env` values must be strings; found {}", value.describe()),
                );
                None
            }
        };
        match (name, value) {
            (Some(n), Some(v)) => {
                result.insert(n, v);
            }
            _ => ok = false,
        }
    }
    ok.then_some(result)
}
