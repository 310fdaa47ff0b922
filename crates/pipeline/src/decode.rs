//! Decoding helpers over the spanned YAML tree: mappings with known keys, typed scalars, lists.
//! Each helper reports its own problem and returns `None`, so decoding goes on and every problem
//! is reported in one pass.

use std::num::NonZeroU64;

use crate::diagnostic::{FileSink, Position};
use crate::keys::Table;
use crate::yaml::{Kind, Node, Scalar, shorten};

/// The entries of a mapping whose keys were checked against a table.
pub(crate) struct Fields<'n> {
    pub(crate) at: Position,
    entries: Vec<(&'n str, &'n Node, &'n Node)>,
}

impl<'n> Fields<'n> {
    pub(crate) fn get(&self, name: &str) -> Option<&'n Node> {
        self.entries
            .iter()
            .find(|(k, _, _)| *k == name)
            .map(|(_, _, v)| *v)
    }

    /// The key node of `name`, for pointing at the key rather than its value.
    pub(crate) fn key_at(&self, name: &str) -> Option<Position> {
        self.entries
            .iter()
            .find(|(k, _, _)| *k == name)
            .map(|(_, k, _)| k.at)
    }

    /// Present keys, in file order.
    pub(crate) fn present(&self) -> impl Iterator<Item = (&'n str, Position)> + '_ {
        self.entries.iter().map(|(k, n, _)| (*k, n.at))
    }
}

/// Checks that `node` is a mapping with only `table`'s keys (each once, required ones present).
pub(crate) fn fields<'n>(
    out: &mut FileSink<'_>,
    node: &'n Node,
    table: &Table,
) -> Option<Fields<'n>> {
    let Kind::Map(pairs) = &node.kind else {
        out.error(
            node.at,
            format!(
                "{} must be a mapping of keys to values; found {}",
                capital(table.what),
                node.describe()
            ),
        );
        return None;
    };
    let mut entries: Vec<(&'n str, &'n Node, &'n Node)> = Vec::with_capacity(pairs.len());
    for (key, value) in pairs {
        let Some(Scalar { text, .. }) = key.scalar() else {
            out.error(
                key.at,
                format!(
                    "keys of {} must be plain names; found {}",
                    table.what,
                    key.describe()
                ),
            );
            continue;
        };
        if entries.iter().any(|(k, _, _)| k == text) {
            out.error(
                key.at,
                format!("`{text}` appears twice in {}; keep one", table.what),
            );
            continue;
        }
        if !table.names().any(|n| n == text) {
            out.error(key.at, unknown_key(text, table));
            continue;
        }
        entries.push((text.as_str(), key, value));
    }
    for required in table.required {
        if !entries.iter().any(|(k, _, _)| k == required) {
            out.error(
                node.at,
                format!("{} needs `{required}`; add it", table.what),
            );
        }
    }
    Some(Fields {
        at: node.at,
        entries,
    })
}

fn unknown_key(key: &str, table: &Table) -> String {
    match closest(key, table.names()) {
        Some(best) => format!(
            "unknown key `{key}` in {}; did you mean `{best}`?",
            table.what
        ),
        None => format!(
            "unknown key `{key}` in {}; the keys are {}",
            table.what,
            table
                .names()
                .map(|n| format!("`{n}`"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// The candidate closest to `word`, if it is close enough to be a likely typo.
pub(crate) fn closest<'c>(
    word: &str,
    candidates: impl Iterator<Item = &'c str>,
) -> Option<&'c str> {
    candidates
        .map(|c| (strsim::jaro_winkler(word, c), c))
        .filter(|(score, _)| *score >= 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, c)| c)
}

pub(crate) fn capital(text: &str) -> String {
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

/// A non-empty string scalar (plain numbers and booleans are taken as their text).
pub(crate) fn string(out: &mut FileSink<'_>, node: &Node, key: &str) -> Option<String> {
    if node.is_null() {
        out.error(node.at, format!("`{key}` has no value; give it one"));
        return None;
    }
    match node.scalar() {
        Some(s) if s.text.is_empty() => {
            out.error(node.at, format!("`{key}` is empty; give it a value"));
            None
        }
        Some(s) => Some(s.text.clone()),
        None => {
            out.error(
                node.at,
                format!("`{key}` must be a string; found {}", node.describe()),
            );
            None
        }
    }
}

/// A whole number greater than 0, written unquoted.
pub(crate) fn positive(
    out: &mut FileSink<'_>,
    node: &Node,
    key: &str,
    example: u64,
) -> Option<NonZeroU64> {
    let parsed = node
        .scalar()
        .filter(|s| s.plain && !s.text.is_empty() && s.text.bytes().all(|b| b.is_ascii_digit()))
        .map(|s| s.text.parse::<u64>().ok().and_then(NonZeroU64::new));
    match parsed {
        Some(Some(n)) => Some(n),
        _ => {
            out.error(
                node.at,
                format!("`{key}` must be a whole number greater than 0, like `{key}: {example}`; found {}", node.describe()),
            );
            None
        }
    }
}

/// `true` or `false`, unquoted.
pub(crate) fn boolean(out: &mut FileSink<'_>, node: &Node, key: &str) -> Option<bool> {
    match node.scalar() {
        Some(s) if s.plain && matches!(s.text.as_str(), "true" | "True" | "TRUE") => Some(true),
        Some(s) if s.plain && matches!(s.text.as_str(), "false" | "False" | "FALSE") => Some(false),
        _ => {
            out.error(
                node.at,
                format!(
                    "`{key}` must be `true` or `false`; found {}",
                    node.describe()
                ),
            );
            None
        }
    }
}

/// A list (null counts as an empty list).
pub(crate) fn list<'n>(
    out: &mut FileSink<'_>,
    node: &'n Node,
    key: &str,
    example: &str,
) -> Option<&'n [Node]> {
    if node.is_null() {
        return Some(&[]);
    }
    match &node.kind {
        Kind::Seq(items) => Some(items),
        Kind::Scalar(_) | Kind::Map(_) => {
            out.error(
                node.at,
                format!(
                    "`{key}` must be a list, like `{key}: [{example}]`; found {}",
                    node.describe()
                ),
            );
            None
        }
    }
}

/// A list of non-empty strings, each with its position.
pub(crate) fn strings(
    out: &mut FileSink<'_>,
    node: &Node,
    key: &str,
    example: &str,
) -> Option<Vec<(Position, String)>> {
    let items = list(out, node, key, example)?;
    let mut ok = true;
    let mut result = Vec::with_capacity(items.len());
    for item in items {
        match string(out, item, key) {
            Some(s) => result.push((item.at, s)),
            None => ok = false,
        }
    }
    ok.then_some(result)
}

/// The mapping's entries as (key text, key node, value node), keys being strings.
pub(crate) fn entries<'n>(
    out: &mut FileSink<'_>,
    node: &'n Node,
    key: &str,
) -> Option<Vec<(String, &'n Node, &'n Node)>> {
    if node.is_null() {
        return Some(Vec::new());
    }
    let Kind::Map(pairs) = &node.kind else {
        out.error(
            node.at,
            format!("`{key}` must be a mapping; found {}", node.describe()),
        );
        return None;
    };
    let mut seen: Vec<String> = Vec::new();
    let mut result = Vec::with_capacity(pairs.len());
    for (k, v) in pairs {
        let Some(name) = k.scalar().filter(|_| !k.is_null()).map(|s| s.text.clone()) else {
            out.error(
                k.at,
                format!("keys of `{key}` must be names; found {}", k.describe()),
            );
            continue;
        };
        if seen.contains(&name) {
            out.error(k.at, format!("`{name}` appears twice in `{key}`; keep one"));
            continue;
        }
        seen.push(name.clone());
        result.push((name, k, v));
    }
    Some(result)
}

/// Quotes a value for a message.
pub(crate) fn quoted(text: &str) -> String {
    format!("`{}`", shorten(text))
}
