//! Decoding `deliver`'s `params` and the top-level `report` (DESIGN §15).

use crate::decode::{self, Fields, closest};
use crate::delivery::{Deliver, Forge, PullRequest, Remote, Report, ReportIssue, ReportOn};
use crate::diagnostic::{FileSink, Position};
use crate::keys;
use crate::yaml::Node;
use crate::{HttpUrl, SecretName};

/// Keys of `params` that only `commit` takes.
const COMMIT_ONLY: &[&str] = &["message"];
/// Keys of `params` that only `deliver` takes.
pub(crate) const DELIVER_ONLY: &[&str] = &["remote", "branch", "base", "token", "pull_request"];

/// `params` of `action: deliver` (`label` names the step).
pub(crate) fn deliver(
    out: &mut FileSink<'_>,
    params: Option<&Node>,
    at: Position,
    label: &str,
    secret_names: &[String],
) -> Option<Deliver> {
    let Some(node) = params else {
        out.error(
            at,
            format!(
                "{label} delivers, but has no `params`; add `params: {{remote: origin, token: \
                 gh}}` (a remote, and a secret declared under `secrets`)"
            ),
        );
        return None;
    };
    let fields = decode::fields(out, node, &keys::ACTION_PARAMS)?;
    let mut ok = true;
    for key in COMMIT_ONLY {
        if let Some(at) = fields.key_at(key) {
            out.error(
                at,
                format!("`{key}` is a `commit` parameter; `deliver` pushes the run's own commits, so remove it"),
            );
            ok = false;
        }
    }
    let remote = match fields.get("remote") {
        Some(n) => remote(out, n),
        None => {
            out.error(
                node.at,
                format!("{label} needs `remote`: a remote's name (`origin`) or an `https://` URL"),
            );
            None
        }
    };
    let branch = match fields.get("branch") {
        Some(n) => decode::string(out, n, "branch").and_then(|b| branch_name(out, n.at, b)),
        None => Some(Deliver::DEFAULT_BRANCH.to_owned()),
    };
    let base = match fields.get("base") {
        Some(n) => decode::string(out, n, "base").and_then(|b| {
            if b.contains(['{', '}']) {
                out.error(n.at, "`base` is a branch name and takes no placeholders");
                return None;
            }
            branch_name(out, n.at, b)
        }),
        None => Some(Deliver::DEFAULT_BASE.to_owned()),
    };
    let token = match fields.get("token") {
        Some(n) => token(out, n, secret_names),
        None => {
            out.error(
                node.at,
                format!(
                    "{label} needs `token`: a secret declared under `secrets` (`secrets: {{gh: \
                     {{from: env, key: GH_TOKEN}}}}`, then `token: gh`)"
                ),
            );
            None
        }
    };
    let pull_request = match fields.get("pull_request") {
        Some(n) => pull_request(out, n).map(Some),
        None => Some(None),
    };
    ok.then_some(())?;
    Some(Deliver {
        remote: remote?,
        branch: branch?,
        base: base?,
        token: token?,
        pull_request: pull_request?,
    })
}

/// Refuses `deliver`'s keys under a `commit` action's `params`.
pub(crate) fn refuse_deliver_keys(out: &mut FileSink<'_>, fields: &Fields<'_>) -> bool {
    let mut ok = true;
    for key in DELIVER_ONLY {
        if let Some(at) = fields.key_at(key) {
            out.error(
                at,
                format!("`{key}` is a `deliver` parameter; `commit` takes only `message`"),
            );
            ok = false;
        }
    }
    ok
}

/// A remote's name (`[A-Za-z0-9._-]`, as git allows them without surprises) or an HTTP URL.
fn remote(out: &mut FileSink<'_>, node: &Node) -> Option<Remote> {
    let text = decode::string(out, node, "remote")?;
    if text.contains("://") {
        return url(out, node.at, "remote", &text).map(Remote::Url);
    }
    let plain = text.len() <= 64
        && !text.starts_with(['-', '.'])
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if !plain {
        out.error(
            node.at,
            format!(
                "`remote` {} is neither a remote's name nor an `https://` URL; cordon pushes \
                 over HTTPS only (no SSH, no local paths)",
                decode::quoted(&text)
            ),
        );
        return None;
    }
    Some(Remote::Name(text))
}

/// An `https://` (or `http://`) URL without credentials.
fn url(out: &mut FileSink<'_>, at: Position, key: &str, text: &str) -> Option<HttpUrl> {
    match crate::url::parse(text) {
        Ok(url) => Some(url),
        Err(why) => {
            out.error(
                at,
                format!("`{key}` {} is not usable: {why}", decode::quoted(text)),
            );
            None
        }
    }
}

/// A branch name git accepts, with `{name}` and `{run_id}` allowed.
fn branch_name(out: &mut FileSink<'_>, at: Position, text: String) -> Option<String> {
    let template = template(out, at, "branch", &text, &["name", "run_id"])?;
    // The placeholders are checked; what they are replaced by is a run id (a ULID) and the
    // pipeline name, which the engine makes ref-safe.
    let plain = template.replace("{name}", "n").replace("{run_id}", "r");
    let bad = plain.is_empty()
        || plain.starts_with(['/', '-', '.'])
        || plain.ends_with(['/', '.'])
        || plain.ends_with(".lock")
        || plain.contains("..")
        || plain.contains("//")
        || plain.contains("@{")
        || plain
            .bytes()
            .any(|b| !(b.is_ascii_alphanumeric() || matches!(b, b'/' | b'.' | b'_' | b'-')));
    if bad {
        out.error(
            at,
            format!(
                "{} is not a branch name cordon pushes to; use letters, digits, `/`, `.`, `_` \
                 and `-`, like `cordon/{{run_id}}`",
                decode::quoted(&text)
            ),
        );
        return None;
    }
    Some(template)
}

/// `text` when every `{…}` in it is one of `allowed`.
pub(crate) fn template(
    out: &mut FileSink<'_>,
    at: Position,
    key: &str,
    text: &str,
    allowed: &[&str],
) -> Option<String> {
    let mut rest = text;
    while let Some(open) = rest.find('{') {
        let after = &rest[open + 1..];
        let Some(close) = after.find('}') else { break };
        let placeholder = &after[..close];
        if !allowed.contains(&placeholder) {
            let names: Vec<String> = allowed.iter().map(|p| format!("`{{{p}}}`")).collect();
            let list = match names.split_last() {
                Some((last, [])) => last.clone(),
                Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
                None => "no placeholder".to_owned(),
            };
            out.error(
                at,
                format!("{key} placeholder `{{{placeholder}}}` is unknown; use {list}"),
            );
            return None;
        }
        rest = &after[close + 1..];
    }
    Some(text.to_owned())
}

fn token(out: &mut FileSink<'_>, node: &Node, secret_names: &[String]) -> Option<SecretName> {
    let text = decode::string(out, node, "token")?;
    if !secret_names.contains(&text) {
        let hint = match closest(&text, secret_names.iter().map(String::as_str)) {
            Some(best) => format!("did you mean `{best}`?"),
            None => format!(
                "declare it under the top-level `secrets`, like `secrets: {{{}: {{from: env, key: \
                 GH_TOKEN}}}}`",
                crate::yaml::shorten(&text)
            ),
        };
        out.error(
            node.at,
            format!(
                "`token` names the secret {}, which is not declared; {hint}",
                decode::quoted(&text)
            ),
        );
        return None;
    }
    // Declared with an invalid name: reported at the declaration.
    SecretName::parse(&text)
}

fn forge(out: &mut FileSink<'_>, node: &Node) -> Option<Forge> {
    let text = decode::string(out, node, "forge")?;
    let forge = Forge::parse(&text);
    if forge.is_none() {
        let hint = match closest(&text, Forge::NAMES.iter().copied()) {
            Some(best) => format!("did you mean `{best}`?"),
            None => "use `github`, `gitea` or `gitlab`".to_owned(),
        };
        out.error(
            node.at,
            format!("unknown forge {}; {hint}", decode::quoted(&text)),
        );
    }
    forge
}

/// `OWNER/NAME` (a GitLab project may have groups: `group/sub/name`).
fn repo(out: &mut FileSink<'_>, node: &Node, forge: Option<Forge>) -> Option<String> {
    let text = decode::string(out, node, "repo")?;
    let parts: Vec<&str> = text.split('/').collect();
    let deep_ok = forge == Some(Forge::Gitlab) || parts.len() == 2;
    let ok = parts.len() >= 2
        && deep_ok
        && text.len() <= 255
        && parts.iter().all(|p| {
            !p.is_empty()
                && !p.starts_with('.')
                && p.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
        });
    if !ok {
        out.error(
            node.at,
            format!(
                "`repo` {} is not `OWNER/NAME`; write it as the forge shows it, like \
                 `octo/widgets`",
                decode::quoted(&text)
            ),
        );
        return None;
    }
    Some(text)
}

fn pull_request(out: &mut FileSink<'_>, node: &Node) -> Option<PullRequest> {
    let fields = decode::fields(out, node, &keys::PULL_REQUEST)?;
    let forge = fields.get("forge").and_then(|n| forge(out, n));
    let api_url = fields.get("api_url").and_then(|n| {
        decode::string(out, n, "api_url").and_then(|t| url(out, n.at, "api_url", &t))
    });
    let repo = fields.get("repo").and_then(|n| repo(out, n, forge));
    let text = |out: &mut FileSink<'_>, key: &str, default: &str| match fields.get(key) {
        Some(n) => decode::string(out, n, key)
            .and_then(|t| template(out, n.at, key, &t, PullRequest::PLACEHOLDERS)),
        None => Some(default.to_owned()),
    };
    let title = text(out, "title", PullRequest::DEFAULT_TITLE);
    let body = text(out, "body", PullRequest::DEFAULT_BODY);
    let draft = match fields.get("draft") {
        Some(n) => decode::boolean(out, n, "draft"),
        None => Some(false),
    };
    if title.as_deref().is_some_and(|t| t.contains(['\n', '\r'])) {
        if let Some(at) = fields.key_at("title") {
            out.error(at, "`title` must be one line of text");
        }
        return None;
    }
    Some(PullRequest {
        forge: forge?,
        api_url: api_url?,
        repo: repo?,
        title: title?,
        body: body?,
        draft: draft?,
    })
}

/// The top-level `report`.
pub(crate) fn report(
    out: &mut FileSink<'_>,
    node: &Node,
    secret_names: &[String],
) -> Option<Report> {
    let fields = decode::fields(out, node, &keys::REPORT)?;
    let forge = fields.get("forge").and_then(|n| forge(out, n));
    let api_url = fields.get("api_url").and_then(|n| {
        decode::string(out, n, "api_url").and_then(|t| url(out, n.at, "api_url", &t))
    });
    let repo = fields.get("repo").and_then(|n| repo(out, n, forge));
    let token = fields
        .get("token")
        .and_then(|n| token(out, n, secret_names));
    let number = match fields.get("issue") {
        Some(n) => decode::positive(out, n, "issue", 12).map(|n| Some(n.get())),
        None => Some(None),
    };
    let create = match fields.get("create") {
        Some(n) => decode::boolean(out, n, "create"),
        None => Some(false),
    };
    let issue = match (number, create) {
        (Some(Some(_)), Some(true)) => {
            out.error(
                node.at,
                "`report` has both `issue` and `create: true`; keep `issue: N` to comment on an \
                 existing issue, or `create: true` to open one",
            );
            None
        }
        (Some(Some(n)), Some(false)) => Some(ReportIssue::Number(n)),
        (Some(None), Some(true)) => Some(ReportIssue::Create),
        (Some(None), Some(false)) => {
            out.error(
                node.at,
                "`report` needs the issue: `issue: N` (an existing one) or `create: true`",
            );
            None
        }
        _ => None,
    };
    let on = match fields.get("on") {
        None => Some(ReportOn::default()),
        Some(n) => {
            let items = decode::strings(out, n, "on", "start")?;
            let mut on = ReportOn {
                start: false,
                step: false,
                end: false,
            };
            let mut ok = true;
            for (at, item) in items {
                match item.as_str() {
                    "start" => on.start = true,
                    "step" => on.step = true,
                    "end" => on.end = true,
                    other => {
                        let hint = match closest(other, ReportOn::NAMES.iter().copied()) {
                            Some(best) => format!("did you mean `{best}`?"),
                            None => "use `start`, `step` and `end`".to_owned(),
                        };
                        out.error(
                            at,
                            format!("`on` does not take {}; {hint}", decode::quoted(other)),
                        );
                        ok = false;
                    }
                }
            }
            if ok && !(on.start || on.step || on.end) {
                out.error(n.at, "`on` is empty, so the report would never comment; list `start`, `step` or `end`, or remove `report`");
                ok = false;
            }
            ok.then_some(on)
        }
    };
    Some(Report {
        forge: forge?,
        api_url: api_url?,
        repo: repo?,
        issue: issue?,
        token: token?,
        on: on?,
    })
}
