//! Routes: decoding `on_pass` / `on_fail` and resolving them once every step name is known.

use cordon_protocol::StepName;

use crate::decode::{self, closest};
use crate::diagnostic::{FileSink, Position};
use crate::keys;
use crate::model::Route;
use crate::yaml::{Kind, Node};

/// A route as written, resolved once every step name is known.
pub(crate) struct RouteDraft {
    pub(crate) target: String,
    pub(crate) retry: bool,
    pub(crate) at: Position,
}

/// The route a step takes: written (`Some(Some(..))`), invalid (`Some(None)`) or implicit (`None`).
pub(crate) fn resolve(
    out: &mut FileSink<'_>,
    written: Option<&Option<RouteDraft>>,
    implicit: Option<Route>,
    names: &[String],
    index_of: &dyn Fn(&str) -> Option<usize>,
) -> Option<Route> {
    let draft = match written {
        None => return implicit,
        Some(None) => return None,
        Some(Some(draft)) => draft,
    };
    match (draft.target.as_str(), draft.retry) {
        ("success" | "failure", true) => {
            out.error(
                draft.at,
                format!("`retry: true` needs a step to go back to, but `{}` ends the run; remove `retry` or go to a step", draft.target),
            );
            None
        }
        ("success", false) => Some(Route::Success),
        ("failure", false) => Some(Route::Failure),
        (target, retry) => {
            if index_of(target).is_none() {
                let hint = match closest(target, names.iter().map(String::as_str)) {
                    Some(best) => format!("did you mean `{best}`?"),
                    None => format!(
                        "routes go to a step name, `success` or `failure`; the steps are {}",
                        listing(names)
                    ),
                };
                out.error(
                    draft.at,
                    format!(
                        "route goes to {}, which is not a step; {hint}",
                        decode::quoted(target)
                    ),
                );
                return None;
            }
            StepName::parse_written(target)
                .ok()
                .map(|step| Route::Goto { step, retry })
        }
    }
}

fn listing(names: &[String]) -> String {
    names
        .iter()
        .map(|n| format!("`{n}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

pub(crate) fn decode(out: &mut FileSink<'_>, node: &Node, key: &str) -> Option<RouteDraft> {
    if let Kind::Map(_) = node.kind {
        let fields = decode::fields(out, node, &keys::GOTO)?;
        let target = fields
            .get("goto")
            .and_then(|n| decode::string(out, n, "goto"));
        let retry = match fields.get("retry") {
            Some(n) => decode::boolean(out, n, "retry"),
            None => Some(false),
        };
        let at = fields.get("goto").map_or(node.at, |n| n.at);
        return Some(RouteDraft {
            target: target?,
            retry: retry?,
            at,
        });
    }
    match node.scalar().filter(|_| !node.is_null()) {
        Some(s) => Some(RouteDraft {
            target: s.text.clone(),
            retry: false,
            at: node.at,
        }),
        None => {
            out.error(
                node.at,
                format!("`{key}` must be a step name, `success`, `failure` or `{{goto: NAME, retry: true}}`; found {}", node.describe()),
            );
            None
        }
    }
}
