//! The model lane (DESIGN §5): a plain-HTTP endpoint a session reaches on `127.0.0.1:3129`
//! inside its own network namespace, for an external agent CLI (`claude -p`, `codex exec`) that
//! must talk to a model without ever holding the key. It forwards only `POST`s to the inference
//! paths under the configured provider root, swaps whatever credential the client sent for the
//! real one on the host side, and streams the answer back as it arrives.
//!
//! Why a separate listener and not the proxy: the proxy never sees plaintext of HTTPS and never
//! adds credentials; the lane must do both, for exactly one upstream. Keeping it apart keeps the
//! proxy's invariants simple (identity from the listener, no header rewriting beyond hop-by-hop).
//!
//! Entry points: [`route`] (the pure decision: which requests are forwarded), [`Lane::new`] with
//! a [`LaneConfig`], [`Lane::spawn`] for a listener handed over from a session.

mod scrub;
mod serve;
mod usage;

use std::io;
use std::net::TcpListener;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::roots::RootsError;

pub use usage::Usage;

/// The inference paths the lane forwards (DESIGN §5); anything else is refused.
pub const INFERENCE_PATHS: &[&str] = &["/v1/chat/completions", "/v1/responses", "/v1/messages"];

/// How the real key is sent upstream.
#[derive(Clone)]
pub enum LaneAuth {
    /// No credential (a local OpenAI-compatible server without a key).
    None,
    /// `Authorization: Bearer KEY` (OpenAI and compatible servers).
    Bearer(String),
    /// `x-api-key: KEY` (Anthropic).
    XApiKey(String),
}

impl std::fmt::Debug for LaneAuth {
    // Never the key itself.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            LaneAuth::None => "LaneAuth::None",
            LaneAuth::Bearer(_) => "LaneAuth::Bearer(..)",
            LaneAuth::XApiKey(_) => "LaneAuth::XApiKey(..)",
        })
    }
}

/// One forwarded call, reported when its answer has been passed on completely.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LaneCall {
    /// The request body's `model`, else the configured model.
    pub model: String,
    /// The upstream's status code.
    pub status: u16,
    /// Token counts the answer reported; estimated (4 bytes a token of the request and answer
    /// bodies, `estimated` set) for a successful answer that reported none.
    pub usage: Usage,
    pub estimated: bool,
    pub latency: Duration,
}

/// Where the lane reports its calls (the engine turns them into `llm.request` / `llm.response`
/// events of the step). Refused requests are not calls and are not reported.
pub trait LaneSink: Send + Sync {
    /// A request is about to be forwarded.
    fn request(&self, model: &str);
    /// Its answer was passed on (or failed upstream).
    fn response(&self, call: &LaneCall);
    /// Whether a call may be forwarded now: `Err(reason)` (a run's budget is exhausted) makes
    /// the lane answer 429 with the reason instead, reporting nothing.
    fn admit(&self) -> Result<(), String> {
        Ok(())
    }
}

/// A lane's settings.
#[derive(Clone, Debug)]
pub struct LaneConfig {
    /// The provider's root URL: `llm.base_url` with a trailing `/v1` removed, so that a client's
    /// `/v1/messages` lands on `ROOT/v1/messages` (`https://api.example.com`).
    pub root: String,
    pub auth: LaneAuth,
    /// The model reported when a request body names none.
    pub model: String,
    /// A PEM file of extra trusted CAs for the upstream (`SSL_CERT_FILE`).
    pub extra_roots: Option<PathBuf>,
    /// Largest request body accepted (a larger one is refused with 413).
    pub max_body_bytes: usize,
    /// Time a client has to send its request head and body.
    pub request_timeout: Duration,
    /// Time to connect to the upstream.
    pub connect_timeout: Duration,
    /// Longest silence between two pieces of an upstream answer.
    pub read_timeout: Duration,
    /// Calls served at once; further clients wait in the listen backlog.
    pub max_connections: usize,
}

impl LaneConfig {
    /// Defaults for everything but the upstream: 32 MiB bodies, 60 s to send a request, 30 s to
    /// connect, 600 s of upstream silence (a model may think long before its first token), 16 calls.
    pub fn new(base_url: &str, auth: LaneAuth, model: &str) -> LaneConfig {
        LaneConfig {
            root: root_of(base_url),
            auth,
            model: model.to_owned(),
            extra_roots: None,
            max_body_bytes: 32 << 20,
            request_timeout: Duration::from_secs(60),
            connect_timeout: Duration::from_secs(30),
            read_timeout: Duration::from_secs(600),
            max_connections: 16,
        }
    }
}

/// `base_url` without trailing slashes and without a final `/v1` segment.
fn root_of(base_url: &str) -> String {
    let trimmed = base_url.trim_end_matches('/');
    trimmed.strip_suffix("/v1").unwrap_or(trimmed).to_owned()
}

/// Why a lane could not be built.
#[derive(Debug, thiserror::Error)]
pub enum LaneError {
    #[error(
        "cannot read the CA file `{path}` named by `SSL_CERT_FILE` for the model lane: {source}; \
         point the variable at a readable PEM file"
    )]
    CertFile {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error(
        "the CA file `{path}` named by `SSL_CERT_FILE` holds no PEM certificate ({reason}); point \
         the variable at a PEM file of CA certificates"
    )]
    CertPem { path: PathBuf, reason: String },
    #[error("the model lane's HTTP client cannot be built: {0}")]
    Client(String),
    #[error(
        "the model lane's upstream `{root}` is not an http(s) URL; set `llm.base_url` to the \
         provider's API root, such as https://api.example.com/v1"
    )]
    Root { root: String },
}

/// Where a request goes, or why it does not.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Route {
    /// Forward to `ROOT` + this path and query.
    Forward(String),
    /// Refuse with 403 (method or path outside the inference paths).
    Refuse(&'static str),
}

/// The lane's whole decision: `POST` to an inference path (a query string is kept — Anthropic
/// clients add `?beta=true`) is forwarded; everything else is refused. The path is compared
/// byte for byte after the query is split off: no percent-decoding, no dot segments, no
/// absolute-form targets, so no spelling reaches another upstream path.
pub fn route(method: &str, target: &str) -> Route {
    if method != "POST" {
        return Route::Refuse("the model lane forwards only POST requests");
    }
    let path = target.split_once('?').map_or(target, |(path, _)| path);
    if INFERENCE_PATHS.contains(&path) {
        Route::Forward(target.to_owned())
    } else {
        Route::Refuse(
            "the model lane forwards only /v1/chat/completions, /v1/responses and /v1/messages",
        )
    }
}

/// A configured lane: its upstream client, shared by every listener of a run.
#[derive(Clone)]
pub struct Lane {
    inner: Arc<serve::Shared>,
}

impl Lane {
    /// Builds the upstream client: rustls (ring) with the web PKI roots plus `extra_roots`, no
    /// redirects (a redirect would carry the key wherever it points), no compression (answers
    /// pass through byte for byte).
    pub fn new(config: LaneConfig) -> Result<Lane, LaneError> {
        if !(config.root.starts_with("https://") || config.root.starts_with("http://")) {
            return Err(LaneError::Root { root: config.root });
        }
        let mut builder = reqwest::Client::builder()
            .use_rustls_tls()
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(config.connect_timeout)
            .read_timeout(config.read_timeout);
        if let Some(path) = &config.extra_roots {
            let certs = crate::roots::extra_roots(path).map_err(|e| match e {
                RootsError::Read { path, source } => LaneError::CertFile { path, source },
                RootsError::Pem { path, reason } => LaneError::CertPem { path, reason },
            })?;
            for cert in certs {
                builder = builder.add_root_certificate(cert);
            }
        }
        let client = builder
            .build()
            .map_err(|e| LaneError::Client(e.to_string()))?;
        Ok(Lane {
            inner: Arc::new(serve::Shared::new(config, client)),
        })
    }

    /// Serves `listener` (created inside a session and handed over) on `runtime` until the
    /// handle is stopped, reporting its calls to `sink`: the listener is the identity, as with
    /// the proxy.
    pub fn spawn(
        &self,
        runtime: &tokio::runtime::Handle,
        listener: TcpListener,
        sink: Arc<dyn LaneSink>,
    ) -> io::Result<LaneHandle> {
        listener.set_nonblocking(true)?;
        let listener = {
            let _entered = runtime.enter();
            tokio::net::TcpListener::from_std(listener)?
        };
        let stop = Arc::new(tokio::sync::Notify::new());
        let task = runtime.spawn(serve::accept_loop(
            Arc::clone(&self.inner),
            sink,
            listener,
            Arc::clone(&stop),
        ));
        Ok(LaneHandle { task, stop })
    }
}

/// A lane listener being served; [`LaneHandle::stop`] ends it and every call in flight.
pub struct LaneHandle {
    task: tokio::task::JoinHandle<()>,
    stop: Arc<tokio::sync::Notify>,
}

impl LaneHandle {
    /// Stops accepting and drops every open call (call after the session's processes are gone).
    pub async fn stop(self) {
        self.stop.notify_one();
        let _ = self.task.await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(method: &str, target: &str, forwarded: bool) {
        let got = route(method, target);
        assert_eq!(
            matches!(got, Route::Forward(_)),
            forwarded,
            "{method} {target}: {got:?}"
        );
    }

    #[test]
    fn only_posts_to_the_inference_paths_are_forwarded() {
        for (method, target, forwarded) in [
            ("POST", "/v1/chat/completions", true),
            ("POST", "/v1/responses", true),
            ("POST", "/v1/messages", true),
            ("POST", "/v1/messages?beta=true", true),
            ("GET", "/v1/messages", false),
            ("GET", "/v1/models", false),
            ("POST", "/v1/models", false),
            ("POST", "/v1/messages/count_tokens", false),
            ("POST", "/v1/chat/completions/", false),
            ("POST", "/v1/../v1/messages", false),
            ("POST", "/v1/%6dessages", false),
            ("POST", "//v1/messages", false),
            ("POST", "http://example.test/v1/messages", false),
            ("PUT", "/v1/responses", false),
            ("post", "/v1/responses", false),
            ("POST", "*", false),
        ] {
            check(method, target, forwarded);
        }
    }

    #[test]
    fn the_root_drops_a_trailing_v1_and_slashes() {
        for (base, root) in [
            ("https://api.example.com/v1", "https://api.example.com"),
            ("https://api.example.com/v1/", "https://api.example.com"),
            ("https://api.example.com", "https://api.example.com"),
            ("https://example.com/proxy/v1", "https://example.com/proxy"),
            ("https://example.com/v10", "https://example.com/v10"),
        ] {
            assert_eq!(root_of(base), root, "{base}");
        }
    }
}
