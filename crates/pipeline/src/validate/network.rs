//! Decoding `network` and `setup_network`: `none`, `open` or `{allow, deny, grants}`.

use cordon_egress::{Pattern, PatternList};

use crate::decode;
use crate::diagnostic::FileSink;
use crate::keys;
use crate::network::{Allowlist, Network};
use crate::yaml::Node;

/// Decodes a network value written under `key` (`network`, `setup_network`).
pub(crate) fn decode(out: &mut FileSink<'_>, node: &Node, key: &str) -> Option<Network> {
    if let Some(s) = node.scalar().filter(|_| !node.is_null()) {
        return match s.text.as_str() {
            "none" => Some(Network::None),
            "open" => {
                out.warning(
                    node.at,
                    format!(
                        "`{key}: open` lets the step reach every public name and port; list what it \
                         needs with `{key}: {{allow: [example.com]}}` instead"
                    ),
                );
                Some(Network::Open)
            }
            other => {
                out.error(
                    node.at,
                    expected(key, &format!("`{}`", crate::yaml::shorten(other))),
                );
                None
            }
        };
    }
    if node.is_null() || node.scalar().is_none() && !matches!(node.kind, crate::yaml::Kind::Map(_))
    {
        out.error(node.at, expected(key, &node.describe()));
        return None;
    }
    let fields = decode::fields(out, node, &keys::NETWORK)?;
    let allow = fields
        .get("allow")
        .map(|n| patterns(out, n, key, "allow", PatternList::Allow));
    let deny = fields
        .get("deny")
        .map(|n| patterns(out, n, key, "deny", PatternList::Deny));
    let grants = fields
        .get("grants")
        .map(|n| decode::boolean(out, n, "grants"));
    let (Some(allow), Some(deny), Some(grants)) = (
        allow.unwrap_or(Some(Vec::new())),
        deny.unwrap_or(Some(Vec::new())),
        grants.unwrap_or(Some(false)),
    ) else {
        return None;
    };
    if allow.is_empty() && !grants {
        out.warning(
            node.at,
            format!(
                "`{key}` allows nothing and takes no grants, which is `{key}: none`; write that, \
                 or add `allow` patterns or `grants: true`"
            ),
        );
    }
    Some(Network::Allowlist(Allowlist {
        allow,
        deny,
        grants,
    }))
}

fn expected(key: &str, found: &str) -> String {
    format!(
        "`{key}` must be `none`, `open` or a mapping like `{{allow: [example.com], deny: [], grants: false}}`; found {found}"
    )
}

fn patterns(
    out: &mut FileSink<'_>,
    node: &Node,
    key: &str,
    list_key: &str,
    list: PatternList,
) -> Option<Vec<Pattern>> {
    let texts = decode::strings(out, node, list_key, "example.com, \"*.example.com:443\"")?;
    let mut ok = true;
    let mut result = Vec::with_capacity(texts.len());
    for (at, text) in texts {
        match Pattern::parse(&text, list) {
            Ok(p) => result.push(p),
            Err(err) => {
                out.error(at, format!("`{key}.{list_key}`: {err}"));
                ok = false;
            }
        }
    }
    ok.then_some(result)
}
