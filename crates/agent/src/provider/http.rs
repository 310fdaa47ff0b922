//! The HTTP side shared by the provider adapters: one blocking reqwest client (rustls with the
//! ring provider, web PKI roots plus `SSL_CERT_FILE`), no redirects, and bounded retries with
//! backoff on 429, 408, 5xx, timeouts and dropped connections.

use std::path::PathBuf;
use std::time::Duration;

use cordon_egress::roots::{RootsError, extra_roots};
use reqwest::blocking::{Client, Response};
use reqwest::header::{HeaderMap, RETRY_AFTER};

use super::{ProviderError, SetupError};
use crate::key::ApiKey;
use crate::message::Response as Answer;

/// How often and how patiently a failing call is retried.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Retries after the first try.
    pub retries: u32,
    /// The wait before the first retry; it doubles with each further retry.
    pub first_delay: Duration,
    /// No wait is longer than this, whatever a `Retry-After` header asks for.
    pub max_delay: Duration,
}

impl Default for RetryPolicy {
    fn default() -> RetryPolicy {
        RetryPolicy {
            retries: 4,
            first_delay: Duration::from_secs(1),
            max_delay: Duration::from_secs(30),
        }
    }
}

impl RetryPolicy {
    /// The wait before retry number `retry` (1-based).
    fn delay(&self, retry: u32, retry_after: Option<Duration>) -> Duration {
        let backoff = self
            .first_delay
            .saturating_mul(1u32 << retry.saturating_sub(1).min(16));
        retry_after.unwrap_or(backoff).min(self.max_delay)
    }
}

/// Whether the request asks the server to stream its answer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Transport {
    /// One JSON body (a server that streams anyway is still understood).
    #[default]
    Whole,
    /// Server-sent events.
    Stream,
}

/// Connection settings of a provider.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HttpOptions {
    /// The whole call, from connecting to the last byte of the answer.
    pub timeout: Duration,
    pub connect_timeout: Duration,
    pub retry: RetryPolicy,
    pub transport: Transport,
    /// A PEM file of extra trusted CAs (`SSL_CERT_FILE` when not set here).
    pub extra_roots: Option<PathBuf>,
}

impl Default for HttpOptions {
    fn default() -> HttpOptions {
        HttpOptions {
            timeout: Duration::from_secs(600),
            connect_timeout: Duration::from_secs(30),
            retry: RetryPolicy::default(),
            transport: Transport::Whole,
            extra_roots: None,
        }
    }
}

/// How reading a successful answer went wrong.
pub(crate) enum ReadFailure {
    /// The connection broke or timed out mid-answer: retried like a 5xx.
    Transient(String),
    Fatal(ProviderError),
}

/// How a provider reads an answer for the requested model: as one JSON body, or as
/// server-sent events.
pub(crate) struct Readers {
    pub(crate) whole: fn(Response, &str) -> Result<Answer, ReadFailure>,
    pub(crate) stream: fn(Response, &str) -> Result<Answer, ReadFailure>,
}

/// A client bound to one provider.
pub(crate) struct Http {
    client: Client,
    retry: RetryPolicy,
    pub(crate) transport: Transport,
    provider: &'static str,
    key: Option<ApiKey>,
}

impl Http {
    pub(crate) fn new(
        provider: &'static str,
        options: HttpOptions,
        key: Option<ApiKey>,
    ) -> Result<Http, SetupError> {
        let mut builder = Client::builder()
            .use_rustls_tls()
            // A redirect would carry the key's header to wherever it points.
            .redirect(reqwest::redirect::Policy::none())
            .timeout(options.timeout)
            .connect_timeout(options.connect_timeout)
            .user_agent(concat!("cordon/", env!("CARGO_PKG_VERSION")));
        if let Some(path) = &options.extra_roots {
            let certs = extra_roots(path).map_err(|e| match e {
                RootsError::Read { path, source } => SetupError::CertFile { path, source },
                RootsError::Pem { path, reason } => SetupError::CertPem { path, reason },
            })?;
            for cert in certs {
                builder = builder.add_root_certificate(cert);
            }
        }
        let client = builder
            .build()
            .map_err(|e| SetupError::Client(e.to_string()))?;
        Ok(Http {
            client,
            retry: options.retry,
            transport: options.transport,
            provider,
            key,
        })
    }

    /// The key, for the adapter's auth header.
    pub(crate) fn key(&self) -> Option<&ApiKey> {
        self.key.as_ref()
    }

    /// `text` with the key removed, for anything a server echoed back.
    fn scrub(&self, text: &str) -> String {
        match &self.key {
            Some(key) => key.scrub(text),
            None => text.to_owned(),
        }
    }

    /// POSTs `body` to `url` and reads the answer with `read`, retrying transient failures.
    pub(crate) fn post<T>(
        &self,
        url: &reqwest::Url,
        headers: &HeaderMap,
        body: &[u8],
        read: impl Fn(Response) -> Result<T, ReadFailure>,
        auth_fix: &str,
    ) -> Result<T, ProviderError> {
        let mut tries = 0;
        loop {
            tries += 1;
            let sent = self
                .client
                .post(url.clone())
                .headers(headers.clone())
                .body(body.to_vec())
                .send();
            let (why, retry_after) = match sent {
                Err(err) if is_certificate_error(&err) => {
                    return Err(ProviderError::Tls {
                        provider: self.provider,
                        url: url.to_string(),
                        message: self.scrub(&describe(&err)),
                    });
                }
                Err(err) => (self.scrub(&describe(&err)), None),
                Ok(response) => {
                    let status = response.status();
                    if status.is_success() {
                        match read(response) {
                            Ok(value) => return Ok(value),
                            Err(ReadFailure::Fatal(err)) => return Err(err),
                            Err(ReadFailure::Transient(why)) => (self.scrub(&why), None),
                        }
                    } else {
                        let code = status.as_u16();
                        let retry_after = retry_after(response.headers());
                        let message = self.scrub(&error_message(response));
                        match code {
                            401 | 403 => {
                                return Err(ProviderError::Auth {
                                    provider: self.provider,
                                    status: code,
                                    message,
                                    fix: auth_fix.to_owned(),
                                });
                            }
                            408 | 429 | 500..=599 => {
                                (format!("HTTP {code}: {message}"), retry_after)
                            }
                            _ => {
                                return Err(ProviderError::Rejected {
                                    provider: self.provider,
                                    status: code,
                                    message,
                                });
                            }
                        }
                    }
                }
            };
            if tries > self.retry.retries {
                return Err(ProviderError::Unavailable {
                    provider: self.provider,
                    url: url.to_string(),
                    tries,
                    last: why,
                });
            }
            std::thread::sleep(self.retry.delay(tries, retry_after));
        }
    }

    /// Posts `wire` as JSON to `url` and reads the answer for `model` with the reader that
    /// matches what the server sent (server-sent events or one body), retrying as [`Http::post`].
    pub(crate) fn ask(
        &self,
        url: &reqwest::Url,
        headers: &HeaderMap,
        wire: &impl serde::Serialize,
        model: &str,
        readers: &Readers,
        auth_fix: &str,
    ) -> Result<Answer, ProviderError> {
        let body = serde_json::to_vec(wire).map_err(|e| self.protocol(e.to_string()))?;
        let read = |response: Response| {
            if is_event_stream(&response) {
                (readers.stream)(response, model)
            } else {
                (readers.whole)(response, model)
            }
        };
        self.post(url, headers, &body, read, auth_fix)
    }

    pub(crate) fn protocol(&self, message: impl Into<String>) -> ProviderError {
        ProviderError::Protocol {
            provider: self.provider,
            message: self.scrub(&message.into()),
        }
    }
}

/// `base` (an `http` or `https` URL, trailing `/` optional) joined with `path`.
pub(crate) fn endpoint(base: &str, path: &str) -> Result<reqwest::Url, SetupError> {
    let bad = |reason: &str| SetupError::BaseUrl {
        url: base.to_owned(),
        reason: reason.to_owned(),
    };
    let joined = format!("{}/{path}", base.trim_end_matches('/'));
    let url = reqwest::Url::parse(&joined).map_err(|e| bad(&e.to_string()))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(bad("the scheme must be `http` or `https`"));
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(bad("it cannot carry a query or a fragment"));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(bad("credentials belong in `api_key_env`, not in the URL"));
    }
    Ok(url)
}

/// Whether a successful answer is a stream of server-sent events.
fn is_event_stream(response: &Response) -> bool {
    response
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim_start().starts_with("text/event-stream"))
}

/// A transport error in a few words (reqwest's Display hides the cause).
fn describe(err: &reqwest::Error) -> String {
    let what = if err.is_timeout() {
        "timed out"
    } else if err.is_connect() {
        "could not connect"
    } else {
        "connection failed"
    };
    let mut cause = String::new();
    let mut source = std::error::Error::source(err);
    while let Some(s) = source {
        cause = s.to_string();
        source = s.source();
    }
    if cause.is_empty() {
        what.to_owned()
    } else {
        format!("{what}: {cause}")
    }
}

/// Whether the TLS handshake failed on the server's certificate (retrying cannot help).
fn is_certificate_error(err: &reqwest::Error) -> bool {
    let mut source = std::error::Error::source(err);
    while let Some(s) = source {
        if s.to_string().contains("certificate") {
            return true;
        }
        source = s.source();
    }
    false
}

/// `Retry-After` in seconds (the HTTP-date form is ignored).
fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let value = headers.get(RETRY_AFTER)?.to_str().ok()?;
    value.trim().parse::<u64>().ok().map(Duration::from_secs)
}

/// The provider's own error message (`{"error":{"message":…}}` and its variants), else the
/// start of the body.
fn error_message(response: Response) -> String {
    const LIMIT: usize = 500;
    let text = response.text().unwrap_or_default();
    let parsed: Option<serde_json::Value> = serde_json::from_str(&text).ok();
    let from_json = parsed.as_ref().and_then(|v| {
        v.pointer("/error/message")
            .or_else(|| v.get("error").filter(|e| e.is_string()))
            .or_else(|| v.get("message"))
            .and_then(|m| m.as_str())
            .map(str::to_owned)
    });
    let mut message = from_json.unwrap_or_else(|| text.trim().to_owned());
    if message.is_empty() {
        message = "no message".to_owned();
    }
    if message.len() > LIMIT {
        let mut end = LIMIT;
        while !message.is_char_boundary(end) {
            end -= 1;
        }
        message.truncate(end);
        message.push('…');
    }
    message
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check_endpoint(base: &str, expected: Result<&str, &str>) {
        match (endpoint(base, "chat/completions"), expected) {
            (Ok(url), Ok(want)) => assert_eq!(url.as_str(), want),
            (Err(err), Err(want)) => assert!(err.to_string().contains(want), "{err}"),
            (got, want) => panic!("{base}: got {got:?}, want {want:?}"),
        }
    }

    #[test]
    fn base_urls_are_joined_and_checked() {
        check_endpoint(
            "https://api.example.com/v1",
            Ok("https://api.example.com/v1/chat/completions"),
        );
        check_endpoint(
            "http://127.0.0.1:8080/v1/",
            Ok("http://127.0.0.1:8080/v1/chat/completions"),
        );
        check_endpoint(
            "ftp://example.com",
            Err("the scheme must be `http` or `https`"),
        );
        check_endpoint(
            "example.com/v1",
            Err("`llm.base_url` `example.com/v1` is not a URL"),
        );
        check_endpoint(
            "https://u:p@example.com/v1",
            Err("credentials belong in `api_key_env`"),
        );
    }

    fn check(retry: u32, retry_after: Option<u64>, expected_ms: u64) {
        let policy = RetryPolicy {
            retries: 10,
            first_delay: Duration::from_millis(100),
            max_delay: Duration::from_secs(1),
        };
        let got = policy.delay(retry, retry_after.map(Duration::from_secs));
        assert_eq!(got, Duration::from_millis(expected_ms), "retry {retry}");
    }

    #[test]
    fn backoff_doubles_and_is_capped_and_retry_after_wins_below_the_cap() {
        check(1, None, 100);
        check(2, None, 200);
        check(3, None, 400);
        check(5, None, 1000);
        check(40, None, 1000);
        check(1, Some(0), 0);
        check(1, Some(60), 1000);
    }
}
