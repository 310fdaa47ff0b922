//! Decoding the top-level `secrets`: reference names and where each value comes from.

use std::collections::BTreeMap;

use super::env_name;
use crate::decode;
use crate::diagnostic::FileSink;
use crate::keys;
use crate::yaml::Node;
use crate::{Secret, SecretName};

pub(crate) fn secrets(out: &mut FileSink<'_>, node: &Node) -> Option<BTreeMap<SecretName, Secret>> {
    let entries = decode::entries(out, node, "secrets")?;
    let mut ok = true;
    let mut result = BTreeMap::new();
    for (name, key_node, value) in entries {
        let secret_name = SecretName::parse(&name);
        if secret_name.is_none() {
            out.error(
                key_node.at,
                format!("secret name {} must match `[a-z0-9][a-z0-9_-]*` (at most 63 characters); rename it", decode::quoted(&name)),
            );
        }
        let secret = secret(out, value);
        match (secret_name, secret) {
            (Some(n), Some(s)) => {
                result.insert(n, s);
            }
            _ => ok = false,
        }
    }
    ok.then_some(result)
}

fn secret(out: &mut FileSink<'_>, node: &Node) -> Option<Secret> {
    let fields = decode::fields(out, node, &keys::SECRET)?;
    let from = fields.get("from").and_then(|n| {
        let text = decode::string(out, n, "from")?;
        if text == "env" {
            Some(())
        } else {
            out.error(
                n.at,
                format!(
                    "secret source {} is not supported; write `from: env`",
                    decode::quoted(&text)
                ),
            );
            None
        }
    });
    let key = fields
        .get("key")
        .and_then(|n| env_name(out, n, "key", "GH_TOKEN"));
    from?;
    Some(Secret::Env { key: key? })
}
