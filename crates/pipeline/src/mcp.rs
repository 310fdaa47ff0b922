//! `mcp:` — MCP tool servers of an agent (DESIGN §17, §18): stdio servers started inside the
//! step's sandbox session, streamable-HTTP servers dialled through the step's egress proxy. The
//! model sees their tools as `<server>__<tool>`.

use crate::EnvName;
use crate::decode;
use crate::diagnostic::{FileSink, Position};
use crate::keys;
use crate::network::Network;
use crate::secret::SecretName;
use crate::yaml::{Kind, Node};

/// The most servers one agent step declares (its own and its agent file's together).
pub const MAX_SERVERS: usize = 16;

/// One declared server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct McpServer {
    /// `[A-Za-z0-9_-]{1,32}` without `__`: the prefix of its tools' names.
    pub name: String,
    pub transport: McpTransport,
    /// Where it was declared, for messages (`agents/dev.agent.md` or the pipeline).
    pub at: Position,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum McpTransport {
    /// `command: [PROG, ARGS...]`, run inside the step's sandbox with `env` added.
    Stdio {
        command: Vec<String>,
        env: Vec<(EnvName, McpValue)>,
    },
    /// `url: https://…`, with `headers` sent on every request.
    Http {
        url: McpUrl,
        headers: Vec<(String, McpValue)>,
    },
}

/// A value of `env` or `headers`: literal text, or a declared secret's value (resolved on the
/// host, scrubbed like every secret).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum McpValue {
    Text(String),
    Secret(SecretName),
}

/// An MCP server's URL (the one HTTP URL grammar of the pipeline).
pub type McpUrl = crate::HttpUrl;

impl McpServer {
    /// The secrets the server's `env` or `headers` name.
    pub fn secrets(&self) -> impl Iterator<Item = &SecretName> {
        let values: Vec<&McpValue> = match &self.transport {
            McpTransport::Stdio { env, .. } => env.iter().map(|(_, v)| v).collect(),
            McpTransport::Http { headers, .. } => headers.iter().map(|(_, v)| v).collect(),
        };
        values.into_iter().filter_map(|v| match v {
            McpValue::Secret(name) => Some(name),
            McpValue::Text(_) => None,
        })
    }
}

/// Whether `name` is a server name: `[A-Za-z0-9_-]{1,32}`, no `__` (the tool-name separator).
pub fn valid_name(name: &str) -> bool {
    (1..=32).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        && !name.contains("__")
}

/// Decodes an `mcp:` list.
pub(crate) fn decode(out: &mut FileSink<'_>, node: &Node) -> Option<Vec<McpServer>> {
    let items = decode::list(
        out,
        node,
        "mcp",
        "[{name: search, command: [search-mcp, --stdio]}]",
    )?;
    let mut ok = true;
    let mut servers: Vec<McpServer> = Vec::new();
    for item in items {
        match server(out, item) {
            Some(server) if servers.iter().any(|s| s.name == server.name) => {
                out.error(
                    item.at,
                    format!(
                        "MCP server `{}` is declared twice; give each server its own name",
                        server.name
                    ),
                );
                ok = false;
            }
            Some(server) => servers.push(server),
            None => ok = false,
        }
    }
    if servers.len() > MAX_SERVERS {
        out.error(
            node.at,
            format!(
                "an agent takes at most {MAX_SERVERS} MCP servers, {} are declared; drop some",
                servers.len()
            ),
        );
        ok = false;
    }
    ok.then_some(servers)
}

fn server(out: &mut FileSink<'_>, node: &Node) -> Option<McpServer> {
    let fields = decode::fields(out, node, &keys::MCP)?;
    let name = decode::string(out, fields.get("name")?, "name")?;
    let mut ok = true;
    if !valid_name(&name) {
        out.error(
            fields.get("name")?.at,
            format!(
                "MCP server name {} must match `[A-Za-z0-9_-]{{1,32}}` without `__` (its tools \
                 are offered as `<name>__<tool>`); rename it",
                decode::quoted(&name)
            ),
        );
        ok = false;
    }
    let transport = match (fields.get("command"), fields.get("url")) {
        (Some(_), Some(url)) => {
            out.error(
                url.at,
                format!(
                    "MCP server `{name}` has both `command` and `url`; a server is either started \
                     in the sandbox (`command`) or reached over HTTP (`url`), keep one"
                ),
            );
            None
        }
        (Some(command), None) => {
            if let Some(headers) = fields.get("headers") {
                out.error(
                    headers.at,
                    format!(
                        "`headers` applies to an HTTP server (`url`); MCP server `{name}` runs a \
                         `command`, give it `env` instead"
                    ),
                );
                ok = false;
            }
            let command = argv(out, command, &name);
            let env = match fields.get("env") {
                Some(env) => values(out, env, "env", true),
                None => Some(Vec::new()),
            };
            Some(McpTransport::Stdio {
                command: command?,
                env: env?
                    .into_iter()
                    .filter_map(|(k, v)| EnvName::parse(&k).map(|k| (k, v)))
                    .collect(),
            })
        }
        (None, Some(url_node)) => {
            if let Some(env) = fields.get("env") {
                out.error(
                    env.at,
                    format!(
                        "`env` applies to a server cordon starts (`command`); MCP server `{name}` \
                         is reached at a `url`, give it `headers` instead"
                    ),
                );
                ok = false;
            }
            let text = decode::string(out, url_node, "url")?;
            let url = match crate::url::parse(&text) {
                Ok(url) => Some(url),
                Err(why) => {
                    out.error(
                        url_node.at,
                        format!(
                            "the URL of MCP server `{name}` {}: {why}; write it like \
                             `https://mcp.example.com/mcp`",
                            decode::quoted(&text)
                        ),
                    );
                    None
                }
            };
            let headers = match fields.get("headers") {
                Some(headers) => values(out, headers, "headers", false),
                None => Some(Vec::new()),
            };
            Some(McpTransport::Http {
                url: url?,
                headers: headers?,
            })
        }
        (None, None) => {
            out.error(
                node.at,
                format!(
                    "MCP server `{name}` needs a `command` (a server started in the step's \
                     sandbox, like `command: [search-mcp, --stdio]`) or a `url` (a streamable-HTTP \
                     server, like `url: https://mcp.example.com/mcp`)"
                ),
            );
            None
        }
    };
    ok.then_some(())?;
    Some(McpServer {
        name,
        transport: transport?,
        at: node.at,
    })
}

fn argv(out: &mut FileSink<'_>, node: &Node, name: &str) -> Option<Vec<String>> {
    if node.scalar().is_some() && !node.is_null() {
        out.error(
            node.at,
            format!(
                "the `command` of MCP server `{name}` is a list, the program then its arguments \
                 (`command: [python3, server.py]`); no shell runs it"
            ),
        );
        return None;
    }
    let argv: Vec<String> = decode::strings(out, node, "command", "[python3, server.py]")?
        .into_iter()
        .map(|(_, s)| s)
        .collect();
    if argv.is_empty() {
        out.error(
            node.at,
            format!("the `command` of MCP server `{name}` is empty; name the program to run"),
        );
        return None;
    }
    Some(argv)
}

/// `env` (`env_names`: keys are variable names) or `headers`: names to a string or `{secret:
/// REF}`.
fn values(
    out: &mut FileSink<'_>,
    node: &Node,
    key: &str,
    env_names: bool,
) -> Option<Vec<(String, McpValue)>> {
    let mut ok = true;
    let mut result = Vec::new();
    for (name, key_node, value) in decode::entries(out, node, key)? {
        if env_names && EnvName::parse(&name).is_none() {
            out.error(
                key_node.at,
                "`env` names must be environment variable names (letters, digits and `_`, not \
                 starting with a digit); rename it",
            );
            ok = false;
        }
        if !env_names && !header_name(&name) {
            out.error(
                key_node.at,
                format!(
                    "{} is not an HTTP header name (letters, digits and `-`); rename it",
                    decode::quoted(&name)
                ),
            );
            ok = false;
        }
        let parsed = match (&value.kind, value.scalar()) {
            (Kind::Map(_), _) => secret_ref(out, value, key),
            (_, Some(s)) if !value.is_null() => {
                if s.text.contains(['\r', '\n']) && !env_names {
                    out.error(value.at, "a header value must be one line");
                    None
                } else {
                    Some(McpValue::Text(s.text.clone()))
                }
            }
            _ => {
                out.error(
                    value.at,
                    format!(
                        "`{key}` values are strings or `{{secret: REF}}`; found {}",
                        value.describe()
                    ),
                );
                None
            }
        };
        match parsed {
            Some(v) => result.push((name, v)),
            None => ok = false,
        }
    }
    ok.then_some(result)
}

fn secret_ref(out: &mut FileSink<'_>, node: &Node, key: &str) -> Option<McpValue> {
    let fields = decode::fields(out, node, &keys::MCP_SECRET)?;
    let text = decode::string(out, fields.get("secret")?, "secret")?;
    match SecretName::parse(&text) {
        Some(name) => Some(McpValue::Secret(name)),
        None => {
            out.error(
                node.at,
                format!(
                    "{} in `{key}` is not a secret reference (`[a-z0-9][a-z0-9_-]*`, declared \
                     under `secrets:`)",
                    decode::quoted(&text)
                ),
            );
            None
        }
    }
}

fn header_name(name: &str) -> bool {
    !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
}

/// Why `network` does not let the step reach `url`, when it does not (a warning at validate:
/// the proxy refuses it at run time, and the server then fails the attempt). Decided by the
/// proxy's own policy; an address only the operator's `allow_private` can open is not warned
/// about (the operator policy is not the pipeline's).
pub fn unreachable(url: &McpUrl, network: &Network) -> Option<String> {
    use cordon_egress::{Decision, Policy, PolicySpec, Reason, Target};
    let (host, port) = (&url.host, url.port);
    let spec = match network {
        Network::Open => return None,
        Network::None => {
            return Some(format!(
                "the step's network is `none`, so {host}:{port} is refused; allow it under \
                 `network: {{allow: [...]}}`"
            ));
        }
        Network::Allowlist(list) => PolicySpec {
            mode: cordon_egress::Mode::Allowlist,
            allow: list.allow.clone(),
            deny: list.deny.clone(),
            ..PolicySpec::default()
        },
    };
    let authority = if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    };
    let target = Target::parse(&authority).ok()?;
    match Policy::new(spec).decide(&target) {
        Decision::Deny(Reason::PortNotAllowed) => Some(format!(
            "the step's network allows {host} but not port {port}; add `{authority}` to `allow`"
        )),
        Decision::Deny(Reason::DeniedPipeline) => Some(format!(
            "the step's network denies {authority} in its `deny`"
        )),
        Decision::Deny(Reason::NotAllowed | Reason::IpLiteral) => Some(format!(
            "the step's network does not allow {authority}; add it to `allow`"
        )),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_names_are_a_short_alphabet_without_the_separator() {
        for (name, ok) in [
            ("search", true),
            ("Code-Search_2", true),
            ("a", true),
            ("", false),
            ("two__parts", false),
            ("dot.ted", false),
            ("sp ace", false),
            (&"x".repeat(33), false),
            (&"x".repeat(32), true),
        ] {
            assert_eq!(valid_name(name), ok, "{name:?}");
        }
    }

    #[test]
    fn urls_are_http_or_https_with_a_host_and_a_port() {
        type Want = Result<(&'static str, u16), &'static str>;
        let cases: &[(&str, Want)] = &[
            ("https://mcp.example.com/mcp", Ok(("mcp.example.com", 443))),
            ("http://127.0.0.1:8931/mcp", Ok(("127.0.0.1", 8931))),
            ("http://[::1]:9000/", Ok(("::1", 9000))),
            ("https://MCP.Example.com", Ok(("mcp.example.com", 443))),
            ("ftp://example.com", Err("must start with")),
            ("https://user:pw@example.com/", Err("carries credentials")),
            ("https://:443/", Err("names no host")),
            ("https://example.com:0/", Err("is not 1-65535")),
            ("https://example.com/a b", Err("spaces")),
            ("https://example.com/#x", Err("fragment")),
        ];
        for (text, want) in cases {
            match (crate::url::parse(text), want) {
                (Ok(url), Ok((host, port))) => {
                    assert_eq!((url.host.as_str(), url.port), (*host, *port), "{text}");
                }
                (Err(why), Err(part)) => assert!(why.contains(part), "{text}: {why}"),
                (got, _) => panic!("{text}: {got:?}"),
            }
        }
    }
}
