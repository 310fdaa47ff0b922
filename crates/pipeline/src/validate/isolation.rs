//! Decoding `isolation`: caps, sizes, read-only host paths and hidden workspace paths.

use super::rel_paths;
use crate::decode::{self, Fields};
use crate::diagnostic::FileSink;
use crate::keys;
use crate::yaml::Node;
use crate::{ByteSize, CACHES, Cpus, HostPath, Isolation, TOOLCHAINS};

pub(crate) fn isolation(out: &mut FileSink<'_>, node: &Node) -> Option<Isolation> {
    let fields = decode::fields(out, node, &keys::ISOLATION)?;
    let memory = optional(&fields, "memory", |n| size(out, n, "memory", "2G"));
    let pids = optional(&fields, "pids", |n| decode::positive(out, n, "pids", 512));
    let cpus = optional(&fields, "cpus", |n| cpus(out, n));
    let tmp_size = optional(&fields, "tmp_size", |n| size(out, n, "tmp_size", "512M"));
    let output_limit = optional(&fields, "output_limit", |n| {
        size(out, n, "output_limit", "16M")
    });
    let read_only = match fields.get("read_only") {
        Some(n) => host_paths(out, n),
        None => Some(Vec::new()),
    };
    let hide = match fields.get("hide") {
        Some(n) => rel_paths(out, n, "hide", "secrets/"),
        None => Some(Vec::new()),
    };
    let allow_git_mutations = match fields.get("allow_git_mutations") {
        Some(n) => decode::boolean(out, n, "allow_git_mutations"),
        None => Some(false),
    };
    let toolchains = match fields.get("toolchains") {
        Some(n) => names(out, n, "toolchains", &TOOLCHAINS),
        None => Some(Vec::new()),
    };
    let caches = match fields.get("caches") {
        Some(n) => names(out, n, "caches", &CACHES),
        None => Some(Vec::new()),
    };
    let cache_limit = optional(&fields, "cache_limit", |n| {
        size(out, n, "cache_limit", "4G")
    });
    let image = optional(&fields, "image", |n| image(out, n));
    let image_writable = match fields.get("image_writable") {
        Some(n) => decode::boolean(out, n, "image_writable"),
        None => Some(false),
    };
    Some(Isolation {
        image: image?,
        image_writable: image_writable?,
        memory: memory?,
        pids: pids?,
        cpus: cpus?,
        tmp_size: tmp_size?,
        output_limit: output_limit?,
        read_only: read_only?,
        hide: hide?,
        allow_git_mutations: allow_git_mutations?,
        toolchains: toolchains?,
        caches: caches?,
        cache_limit: cache_limit?,
    })
}

/// An `image` reference: a store name, `sha256:<digest>`, or an absolute directory (which runs
/// accept only when the operator policy lists it under `[images] paths`).
pub(crate) fn image(out: &mut FileSink<'_>, node: &Node) -> Option<cordon_protocol::ImageRef> {
    let text = decode::string(out, node, "image")?;
    match cordon_protocol::ImageRef::parse(&text) {
        Ok(parsed) => {
            if let cordon_protocol::ImageRef::Path(path) = &parsed {
                out.warning(
                    node.at,
                    format!(
                        "`image: {path}` is a directory, not a store image: runs refuse it unless \
                         the operator policy lists it under `[images] paths`; import the image \
                         (`cordon image import FILE --name NAME`) and name it instead"
                    ),
                );
            }
            Some(parsed)
        }
        Err(err) => {
            out.error(
                node.at,
                format!(
                    "`image`: {err} (like `image: python:3.12` or `image: sha256:<digest>`, a \
                     name or digest from `cordon image ls`)"
                ),
            );
            None
        }
    }
}

/// `Some(None)` when the key is absent, `Some(Some(v))` when it decodes, `None` on error.
fn optional<'n, T>(
    fields: &Fields<'n>,
    key: &str,
    decode: impl FnOnce(&'n Node) -> Option<T>,
) -> Option<Option<T>> {
    match fields.get(key) {
        Some(n) => decode(n).map(Some),
        None => Some(None),
    }
}

fn size(out: &mut FileSink<'_>, node: &Node, key: &str, example: &str) -> Option<ByteSize> {
    let text = decode::string(out, node, key)?;
    match ByteSize::parse(&text) {
        Ok(s) => Some(s),
        Err(err) => {
            out.error(node.at, format!("`{key}`: {err} (like `{key}: {example}`)"));
            None
        }
    }
}

fn cpus(out: &mut FileSink<'_>, node: &Node) -> Option<Cpus> {
    let c = node
        .scalar()
        .filter(|s| s.plain)
        .and_then(|s| Cpus::parse(&s.text));
    if c.is_none() {
        out.error(
            node.at,
            format!("`cpus` must be a number greater than 0 with at most three decimals, like `cpus: 2` or `cpus: 0.5`; found {}", node.describe()),
        );
    }
    c
}

/// A list of names from `known` (`toolchains`, `caches`), each once, in the order written.
fn names(
    out: &mut FileSink<'_>,
    node: &Node,
    key: &str,
    known: &[&'static str],
) -> Option<Vec<String>> {
    let items = decode::strings(out, node, key, known[0])?;
    let mut ok = true;
    let mut result: Vec<String> = Vec::with_capacity(items.len());
    for (at, text) in items {
        if !known.contains(&text.as_str()) {
            let hint = strsim_closest(&text, known)
                .map_or_else(String::new, |near| format!("did you mean `{near}`? "));
            out.error(
                at,
                format!(
                    "`{key}` names {}, which cordon does not know; {hint}use one of {}",
                    decode::quoted(&text),
                    known.join(", ")
                ),
            );
            ok = false;
        } else if result.contains(&text) {
            out.error(at, format!("`{key}` lists `{text}` twice; keep one"));
            ok = false;
        } else {
            result.push(text);
        }
    }
    ok.then_some(result)
}

/// The name in `known` closest to `text`, when it is close.
fn strsim_closest(text: &str, known: &[&'static str]) -> Option<&'static str> {
    known
        .iter()
        .copied()
        .map(|name| (strsim::levenshtein(name, &text.to_ascii_lowercase()), name))
        .filter(|(distance, _)| *distance <= 2)
        .min()
        .map(|(_, name)| name)
}

fn host_paths(out: &mut FileSink<'_>, node: &Node) -> Option<Vec<HostPath>> {
    let items = decode::strings(out, node, "read_only", "~/.rustup")?;
    let mut ok = true;
    let mut result = Vec::with_capacity(items.len());
    for (at, text) in items {
        match HostPath::parse(&text) {
            Some(p) => result.push(p),
            None => {
                out.error(
                    at,
                    format!("`read_only` path {} must be absolute or start with `~/`, without `..`; write it like `/opt/tools` or `~/.rustup`", decode::quoted(&text)),
                );
                ok = false;
            }
        }
    }
    ok.then_some(result)
}
