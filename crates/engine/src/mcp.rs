//! MCP tool servers of an agent attempt (DESIGN §17, §18): each stdio server is started inside
//! the attempt's sandbox session when the attempt begins, before the first model call, and
//! spoken to over its pipes with the protocol's SDK (`rmcp`); its tools are offered to the model
//! as `<server>__<tool>` beside the built-ins, answered by [`McpTools`] as custom tools (logged as
//! `tool.call{server}` / `tool.result`).
//!
//! A server is workload: whatever it sends is hostile input. Its JSON-RPC lines are bounded
//! ([`MAX_LINE`]), its handshake and listing have a deadline ([`HANDSHAKE`]), each call the
//! step's remaining time (at most [`MAX_CALL`]), its tools are counted ([`MAX_TOOLS`]), their
//! schemas bounded ([`MAX_SCHEMA`]) and their names reduced to what providers take; its stderr
//! is kept as a bounded tail for the message when it fails. Results are cut by the agent loop
//! like every tool's output.

use std::collections::BTreeSet;
use std::io::Read;
use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cordon_agent::{CustomContext, CustomResult, CustomTools, JournalError, ToolSpec};
use cordon_pipeline::{McpServer, McpTransport, McpValue};
use rmcp::model::{CallToolRequestParams, ContentBlock};
use rmcp::service::{RoleClient, RunningService, ServiceExt};
use rmcp::transport::async_rw::AsyncRwTransport;

use crate::executor::StepSession;
use crate::secrets::Secrets;

/// The longest JSON-RPC line a server may send.
pub const MAX_LINE: usize = 4 << 20;
/// How long a server has to start, answer `initialize` and list its tools.
pub const HANDSHAKE: Duration = Duration::from_secs(30);
/// The longest one call may take (less when the step's `timeout` ends sooner).
pub const MAX_CALL: Duration = Duration::from_secs(600);
/// The most tools one server may offer.
pub const MAX_TOOLS: usize = 128;
/// The largest input schema of one tool, as JSON.
pub const MAX_SCHEMA: usize = 64 << 10;
/// The most pages of `tools/list` read from one server.
pub const MAX_PAGES: usize = 8;
/// The most requests of its own (pings, sampling, roots…) a server may send the client in one
/// attempt: each is answered, and answers a server does not read would pile up in memory.
pub const MAX_PEER_REQUESTS: usize = 1024;
/// The most bytes of a description offered to the model.
const MAX_DESCRIPTION: usize = 4 << 10;
/// How much of a server's stderr is kept for the message when it fails.
const STDERR_TAIL: usize = 4 << 10;
/// The longest tool name providers take.
const MAX_NAME: usize = 64;

/// A transport that ends the connection once the server has sent more than
/// [`MAX_PEER_REQUESTS`] requests of its own (setting `flooded`): `rmcp` answers each in a task of
/// its own, so a server that sends requests and never reads the answers would otherwise grow the
/// host process without bound.
struct Bounded<T> {
    inner: T,
    requests: usize,
    flooded: Arc<std::sync::atomic::AtomicBool>,
}

impl<T: rmcp::transport::Transport<RoleClient>> rmcp::transport::Transport<RoleClient>
    for Bounded<T>
{
    type Error = T::Error;

    fn send(
        &mut self,
        item: rmcp::service::TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.inner.send(item)
    }

    async fn receive(&mut self) -> Option<rmcp::service::RxJsonRpcMessage<RoleClient>> {
        let message = self.inner.receive().await?;
        if matches!(message, rmcp::model::JsonRpcMessage::Request(_)) {
            self.requests += 1;
            if self.requests > MAX_PEER_REQUESTS {
                self.flooded
                    .store(true, std::sync::atomic::Ordering::SeqCst);
                return None;
            }
        }
        Some(message)
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.inner.close()
    }
}

fn bounded<T>(inner: T) -> (Bounded<T>, Arc<std::sync::atomic::AtomicBool>) {
    let flooded = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let transport = Bounded {
        inner,
        requests: 0,
        flooded: Arc::clone(&flooded),
    };
    (transport, flooded)
}

/// Why the servers could not be started: the attempt fails with this.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct StartError(pub String);

/// The attempt's servers and the tools they offer, in front of the engine's other custom tools.
pub struct McpTools<'a> {
    inner: &'a mut dyn CustomTools,
    /// The client's runtime, made only when there are servers.
    runtime: Option<tokio::runtime::Runtime>,
    servers: Vec<Connected>,
    offered: Vec<Offered>,
    deadline: Option<Instant>,
}

struct Connected {
    name: String,
    client: RunningService<RoleClient, ()>,
    /// The server sent more requests of its own than [`MAX_PEER_REQUESTS`].
    flooded: Arc<std::sync::atomic::AtomicBool>,
    /// A stdio server's stderr (an HTTP server has none here).
    stderr: Option<Tail>,
}

struct Offered {
    /// The name the model calls.
    name: String,
    server: usize,
    /// The server's own name of the tool.
    tool: String,
    spec: ToolSpec,
}

/// The last [`STDERR_TAIL`] bytes a server wrote to stderr, filled by a thread of its own
/// (which sets the flag at end of file).
#[derive(Clone, Default)]
struct Tail(Arc<(Mutex<Vec<u8>>, std::sync::atomic::AtomicBool)>);

impl Tail {
    fn follow(fd: OwnedFd) -> Tail {
        let tail = Tail::default();
        let kept = tail.clone();
        std::thread::spawn(move || {
            let mut file = std::fs::File::from(fd);
            let mut buf = [0u8; 4096];
            while let Ok(n) = file.read(&mut buf) {
                if n == 0 {
                    break;
                }
                if let Ok(mut bytes) = kept.0.0.lock() {
                    bytes.extend_from_slice(&buf[..n]);
                    let over = bytes.len().saturating_sub(STDERR_TAIL);
                    bytes.drain(..over);
                }
            }
            kept.0.1.store(true, std::sync::atomic::Ordering::SeqCst);
        });
        tail
    }

    /// What it holds, on one line, escaped for the terminal and the log — after waiting a
    /// moment for the end of a server that is going away.
    fn text(&self) -> String {
        let until = Instant::now() + Duration::from_secs(1);
        while !self.0.1.load(std::sync::atomic::Ordering::SeqCst) && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(10));
        }
        let bytes = self.0.0.lock().map(|b| b.clone()).unwrap_or_default();
        let text = String::from_utf8_lossy(&bytes);
        cordon_protocol::text::escape_line(text.trim_end()).into_owned()
    }
}

impl<'a> McpTools<'a> {
    /// Starts every server of `servers` in `session` and lists their tools, keeping those
    /// `patterns` (the agent's `tools:` MCP entries; empty: all) match. `deadline`: the step's.
    pub fn start(
        servers: &[McpServer],
        patterns: &[String],
        session: &mut dyn StepSession,
        secrets: &Secrets,
        deadline: Option<Instant>,
        inner: &'a mut dyn CustomTools,
    ) -> Result<McpTools<'a>, StartError> {
        let runtime = if servers.is_empty() {
            None
        } else {
            Some(
                tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(|e| {
                        StartError(format!("cannot start the MCP client's runtime: {e}"))
                    })?,
            )
        };
        let mut tools = McpTools {
            inner,
            runtime,
            servers: Vec::new(),
            offered: Vec::new(),
            deadline,
        };
        let mut taken: BTreeSet<String> = tools.inner.specs().into_iter().map(|s| s.name).collect();
        taken.extend(
            cordon_pipeline::Tool::ALL
                .iter()
                .map(|t| t.as_str().to_owned()),
        );
        for server in servers {
            let connected = match &server.transport {
                McpTransport::Stdio { command, env } => {
                    tools.stdio(server, command, env, session, secrets)?
                }
                McpTransport::Http { url, headers } => {
                    tools.http(server, url, headers, session, secrets)?
                }
            };
            let index = tools.servers.len();
            let listed = tools.list(&connected)?;
            for tool in listed {
                let original = format!("{}__{}", server.name, tool.name);
                if !patterns.is_empty() && !patterns.iter().any(|p| matches(p, &original)) {
                    continue;
                }
                let name = reduced(&original);
                if !taken.insert(name.clone()) {
                    return Err(StartError(format!(
                        "MCP server `{}` offers `{}`, which becomes the tool name `{name}` that \
                         another tool already has; rename the server or filter its tools with \
                         `tools:`",
                        server.name,
                        cordon_protocol::text::escape_line(&tool.name)
                    )));
                }
                tools.offered.push(Offered {
                    spec: ToolSpec {
                        name: name.clone(),
                        description: tool.description,
                        parameters: tool.schema,
                    },
                    name,
                    server: index,
                    tool: tool.name,
                });
            }
            tools.servers.push(connected);
        }
        Ok(tools)
    }

    fn runtime(&self) -> Result<&tokio::runtime::Runtime, StartError> {
        self.runtime
            .as_ref()
            .ok_or_else(|| StartError("the MCP client's runtime is not running".to_owned()))
    }

    fn stdio(
        &self,
        server: &McpServer,
        command: &[String],
        env: &[(cordon_pipeline::EnvName, McpValue)],
        session: &mut dyn StepSession,
        secrets: &Secrets,
    ) -> Result<Connected, StartError> {
        let name = &server.name;
        let env: Vec<(String, String)> = env
            .iter()
            .map(|(key, value)| Ok((key.to_string(), resolve(name, value, secrets)?)))
            .collect::<Result<_, StartError>>()?;
        let started = session
            .spawn_background(command, &env)
            .map_err(|e| StartError(format!("MCP server `{name}` could not be started: {e}")))?;
        let stderr = Tail::follow(started.stderr);
        let runtime = self.runtime()?;
        let _guard = runtime.enter();
        let read = tokio::net::unix::pipe::Receiver::from_owned_fd(started.stdout)
            .map_err(|e| StartError(format!("MCP server `{name}`: its stdout: {e}")))?;
        let write = tokio::net::unix::pipe::Sender::from_owned_fd(started.stdin)
            .map_err(|e| StartError(format!("MCP server `{name}`: its stdin: {e}")))?;
        let (transport, flooded) =
            bounded(AsyncRwTransport::new_client(read, write).with_max_line_length(MAX_LINE));
        self.handshake(name, transport, flooded, Some(stderr))
    }

    /// A streamable-HTTP server, dialled here on the host through the session's host-side proxy
    /// listener: the step's network policy decides, and the connection is recorded, as for any
    /// destination of the step.
    fn http(
        &self,
        server: &McpServer,
        url: &cordon_pipeline::McpUrl,
        headers: &[(String, McpValue)],
        session: &mut dyn StepSession,
        secrets: &Secrets,
    ) -> Result<Connected, StartError> {
        use rmcp::transport::StreamableHttpClientTransport;
        use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
        let name = &server.name;
        let Some(proxy) = session.host_proxy() else {
            return Err(StartError(format!(
                "MCP server `{name}` is at {url}, but the step's network is `none`, so nothing \
                 reaches it; allow {}:{} under the step's `network: {{allow: [...]}}`",
                url.host, url.port
            )));
        };
        let fail = |what: String| StartError(format!("MCP server `{name}` at {url}: {what}"));
        let mut custom = std::collections::HashMap::new();
        for (header, value) in headers {
            let text = resolve(name, value, secrets)?;
            let header_name = http::HeaderName::from_bytes(header.as_bytes())
                .map_err(|e| fail(format!("the header `{header}`: {e}")))?;
            let mut header_value = http::HeaderValue::from_str(&text)
                .map_err(|_| fail(format!("the value of the header `{header}` is not valid")))?;
            header_value.set_sensitive(matches!(value, McpValue::Secret(_)));
            custom.insert(header_name, header_value);
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let roots = rustls::RootCertStore {
            roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
        };
        let tls = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| fail(format!("TLS: {e}")))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        let mut credential = http::HeaderValue::from_str(&proxy.credential)
            .map_err(|_| fail("its proxy's credential is not a header value".to_owned()))?;
        credential.set_sensitive(true);
        let proxy = reqwest_mcp::Proxy::all(format!("http://{}", proxy.addr))
            .map_err(|e| fail(format!("its proxy: {e}")))?
            .custom_http_auth(credential);
        // Only the session's proxy (adding one turns the environment's off), no redirects.
        let client = reqwest_mcp::Client::builder()
            .proxy(proxy)
            .redirect(reqwest_mcp::redirect::Policy::none())
            .tls_backend_preconfigured(tls)
            .connect_timeout(HANDSHAKE)
            .build()
            .map_err(|e| fail(format!("its HTTP client: {e}")))?;
        let config = StreamableHttpClientTransportConfig::with_uri(url.text.clone())
            .custom_headers(custom)
            .max_sse_event_size(MAX_LINE)
            .max_json_response_size(MAX_LINE)
            .max_error_response_size(64 << 10);
        let runtime = self.runtime()?;
        // The transport's worker is spawned on the attempt's runtime.
        let _guard = runtime.enter();
        let (transport, flooded) =
            bounded(StreamableHttpClientTransport::with_client(client, config));
        self.handshake(name, transport, flooded, None)
    }

    /// The MCP handshake over `transport`, within [`HANDSHAKE`]; a failure names the server
    /// and ends with its stderr (a stdio server's).
    fn handshake<T>(
        &self,
        name: &str,
        transport: Bounded<T>,
        flooded: Arc<std::sync::atomic::AtomicBool>,
        stderr: Option<Tail>,
    ) -> Result<Connected, StartError>
    where
        T: rmcp::transport::Transport<RoleClient> + 'static,
    {
        let client = self
            .runtime()?
            .block_on(async { tokio::time::timeout(HANDSHAKE, ().serve(transport)).await })
            .map_err(|_| {
                failed(
                    name,
                    &format!(
                        "did not answer `initialize` within {} s",
                        HANDSHAKE.as_secs()
                    ),
                    stderr.as_ref(),
                )
            })?
            .map_err(|e| failed(name, &format!("failed its handshake: {e}"), stderr.as_ref()))?;
        Ok(Connected {
            name: name.to_owned(),
            client,
            flooded,
            stderr,
        })
    }

    /// The server's tools, checked and bounded.
    fn list(&self, server: &Connected) -> Result<Vec<Listed>, StartError> {
        let name = &server.name;
        // Page by page, each bounded by the line cap, counted as it comes: a server that pages
        // forever, or offers too many tools, is stopped at once rather than collected.
        let runtime = self.runtime()?;
        let deadline = tokio::time::Instant::now() + HANDSHAKE;
        let mut tools = Vec::new();
        let mut cursor = None;
        for page in 1.. {
            let params = rmcp::model::PaginatedRequestParams::default().with_cursor(cursor);
            let listed = runtime
                .block_on(async {
                    tokio::time::timeout_at(deadline, server.client.list_tools(Some(params))).await
                })
                .map_err(|_| {
                    failed(
                        name,
                        &format!("did not list its tools within {} s", HANDSHAKE.as_secs()),
                        server.stderr.as_ref(),
                    )
                })?
                .map_err(|e| {
                    failed(
                        name,
                        &format!("could not list its tools: {e}"),
                        server.stderr.as_ref(),
                    )
                })?;
            tools.extend(listed.tools);
            let more = listed.next_cursor.is_some();
            if tools.len() > MAX_TOOLS {
                return Err(StartError(format!(
                    "MCP server `{name}` offers {}{} tools, more than the {MAX_TOOLS} cordon \
                     takes from one server",
                    if more { "more than " } else { "" },
                    tools.len()
                )));
            }
            if !more {
                break;
            }
            if page >= MAX_PAGES {
                return Err(StartError(format!(
                    "MCP server `{name}` lists its tools in more than {MAX_PAGES} pages, more \
                     than cordon reads"
                )));
            }
            cursor = listed.next_cursor.map(|c| c.to_string());
        }
        tools
            .into_iter()
            .map(|tool| {
                let schema = serde_json::Value::Object((*tool.input_schema).clone());
                let size = schema.to_string().len();
                if size > MAX_SCHEMA {
                    return Err(StartError(format!(
                        "MCP server `{name}`'s tool `{}` has an input schema of {size} bytes, \
                         more than the {} KiB cordon takes",
                        cordon_protocol::text::escape_line(&tool.name),
                        MAX_SCHEMA >> 10
                    )));
                }
                let description = tool
                    .description
                    .as_deref()
                    .map(|d| cut(d, MAX_DESCRIPTION))
                    .unwrap_or_default();
                Ok(Listed {
                    name: tool.name.to_string(),
                    description,
                    schema,
                })
            })
            .collect()
    }

    /// The time one call may take now.
    fn call_limit(&self) -> Duration {
        match self.deadline {
            Some(deadline) => deadline
                .saturating_duration_since(Instant::now())
                .min(MAX_CALL),
            None => MAX_CALL,
        }
    }

    fn call_mcp(&self, offered: &Offered, arguments: &str) -> CustomResult {
        let server = &self.servers[offered.server];
        // No arguments at all (an empty text, `null`) is a call without them.
        let arguments = match serde_json::from_str::<serde_json::Value>(arguments) {
            Ok(serde_json::Value::Object(map)) => Some(map),
            Ok(serde_json::Value::Null) => None,
            Err(_) if arguments.trim().is_empty() => None,
            Ok(other) => {
                return refusal(format!(
                    "error: the arguments of `{}` must be a JSON object, not {}",
                    offered.name,
                    kind(&other)
                ));
            }
            Err(e) => {
                return refusal(format!(
                    "error: the arguments of `{}` are not JSON: {e}",
                    offered.name
                ));
            }
        };
        let mut params = CallToolRequestParams::new(offered.tool.clone());
        params.arguments = arguments;
        let limit = self.call_limit();
        let Some(runtime) = &self.runtime else {
            return refusal("error: no MCP server is running".to_owned());
        };
        let answer = runtime
            .block_on(async { tokio::time::timeout(limit, server.client.call_tool(params)).await });
        match answer {
            Err(_) => CustomResult {
                ok: false,
                output: format!(
                    "MCP server `{}` did not answer `{}` within {} s (the step's `timeout` \
                     bounds every call, at most {} s; raise it, or make the tool answer sooner)",
                    server.name,
                    offered.tool,
                    limit.as_secs(),
                    MAX_CALL.as_secs()
                ),
                fatal: true,
            },
            // A tool error the server reports is the tool's answer; a broken transport is the
            // server's end.
            Ok(Err(rmcp::service::ServiceError::McpError(e))) => {
                refusal(format!("error: {}", cut(&e.message, MAX_DESCRIPTION)))
            }
            Ok(Err(e)) => CustomResult {
                ok: false,
                output: failed(
                    &server.name,
                    &if server.flooded.load(std::sync::atomic::Ordering::SeqCst) {
                        format!(
                            "was cut off during `{}`: it sent more than {MAX_PEER_REQUESTS} \
                             requests of its own",
                            offered.tool
                        )
                    } else {
                        format!("failed during `{}`: {e}", offered.tool)
                    },
                    server.stderr.as_ref(),
                )
                .0,
                fatal: true,
            },
            Ok(Ok(result)) => {
                let mut parts = Vec::new();
                for block in &result.content {
                    match block {
                        ContentBlock::Text(text) => parts.push(text.text.clone()),
                        ContentBlock::Image(image) => {
                            parts.push(format!("[an image, {}]", image.mime_type));
                        }
                        ContentBlock::Audio(audio) => {
                            parts.push(format!("[audio, {}]", audio.mime_type));
                        }
                        ContentBlock::Resource(resource) => {
                            parts.push(
                                serde_json::to_string(&resource.resource).unwrap_or_default(),
                            );
                        }
                        ContentBlock::ResourceLink(link) => {
                            parts.push(format!("[a resource: {}]", link.uri));
                        }
                        // A kind of content newer than this client: named, not shown.
                        _ => parts.push("[content of a kind cordon does not show]".to_owned()),
                    }
                }
                if parts.is_empty()
                    && let Some(structured) = &result.structured_content
                {
                    parts.push(structured.to_string());
                }
                CustomResult {
                    ok: result.is_error != Some(true),
                    output: parts.join("\n"),
                    fatal: false,
                }
            }
        }
    }

    /// Stops every server's client (the session's close kills the processes).
    pub fn close(self) {
        let McpTools {
            runtime, servers, ..
        } = self;
        let Some(runtime) = runtime else {
            return;
        };
        for server in servers {
            let _ = runtime.block_on(async {
                tokio::time::timeout(Duration::from_secs(2), server.client.cancel()).await
            });
        }
    }
}

impl CustomTools for McpTools<'_> {
    fn specs(&self) -> Vec<ToolSpec> {
        let mut specs = self.inner.specs();
        specs.extend(self.offered.iter().map(|o| o.spec.clone()));
        specs
    }

    fn call(
        &mut self,
        name: &str,
        arguments: &str,
        cx: CustomContext<'_>,
    ) -> Result<CustomResult, JournalError> {
        match self.offered.iter().find(|o| o.name == name) {
            Some(offered) => Ok(self.call_mcp(offered, arguments)),
            None => self.inner.call(name, arguments, cx),
        }
    }

    fn server(&self, name: &str) -> Option<String> {
        self.offered
            .iter()
            .find(|o| o.name == name)
            .map(|o| self.servers[o.server].name.clone())
            .or_else(|| self.inner.server(name))
    }
}

/// A tool as a server listed it, checked.
struct Listed {
    name: String,
    description: String,
    schema: serde_json::Value,
}

fn refusal(output: String) -> CustomResult {
    CustomResult {
        ok: false,
        output,
        fatal: false,
    }
}

fn kind(value: &serde_json::Value) -> &'static str {
    match value {
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Null => "null",
        serde_json::Value::Object(_) => "an object",
    }
}

/// The failure of server `name`, with what its stderr (a stdio server's) ended with.
fn failed(name: &str, what: &str, stderr: Option<&Tail>) -> StartError {
    let what = cut(&cordon_protocol::text::escape_line(what), 1024);
    let Some(stderr) = stderr else {
        return StartError(format!("MCP server `{name}` {what}"));
    };
    let tail = stderr.text();
    if tail.is_empty() {
        StartError(format!("MCP server `{name}` {what} (its stderr is empty)"))
    } else {
        StartError(format!(
            "MCP server `{name}` {what}; its stderr ended with: {tail}"
        ))
    }
}

/// `text` cut to `max` bytes at a character boundary.
fn cut(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    format!("{}…", &text[..text.floor_char_boundary(max)])
}

/// The value of an `env` entry or header: its text, or the secret's value.
fn resolve(server: &str, value: &McpValue, secrets: &Secrets) -> Result<String, StartError> {
    match value {
        McpValue::Text(text) => Ok(text.clone()),
        McpValue::Secret(secret) => secrets.value(secret).map(str::to_owned).ok_or_else(|| {
            StartError(format!(
                "MCP server `{server}` names the secret `{secret}`, which the run did not \
                 resolve; declare it under `secrets:`"
            ))
        }),
    }
}

/// `<server>__<tool>` as providers take it: characters outside `[A-Za-z0-9_-]` become `_`, at
/// most 64 of them.
pub fn reduced(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .take(MAX_NAME)
        .collect()
}

/// Whether an agent's `tools:` entry (`<server>__<tool>` or `<server>__*`) matches the tool
/// `<server>__<tool>`.
pub fn matches(pattern: &str, tool: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => tool.starts_with(prefix),
        None => pattern == tool || pattern == reduced(tool),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_names_are_reduced_to_what_providers_take() {
        for (name, want) in [
            ("search__find", "search__find".to_owned()),
            ("search__find.files", "search__find_files".to_owned()),
            ("s__ünï cödé", "s___n__c_d_".to_owned()),
            (
                &format!("s__{}", "x".repeat(100)),
                format!("s__{}", "x".repeat(61)),
            ),
        ] {
            assert_eq!(reduced(name), want, "{name}");
        }
    }

    #[test]
    fn tools_patterns_match_a_server_or_one_tool() {
        for (pattern, tool, want) in [
            ("search__*", "search__find", true),
            ("search__*", "searchx__find", false),
            ("search__find", "search__find", true),
            ("search__find", "search__findall", false),
            ("search__find_files", "search__find.files", true),
            ("other__*", "search__find", false),
        ] {
            assert_eq!(matches(pattern, tool), want, "{pattern} {tool}");
        }
    }
}
