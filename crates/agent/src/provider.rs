//! `Provider`: one model call, whatever is behind it — an OpenAI-compatible chat completions
//! server, Anthropic messages, or a replayed transcript. [`from_llm`] builds the one a
//! pipeline's `llm` block names; [`Recorder`] wraps any of them to write a replay transcript.

mod anthropic;
mod http;
mod openai;
mod record;
mod replay;
mod sse;

use std::ffi::OsString;
use std::path::PathBuf;

use cordon_pipeline::Llm;
use cordon_protocol::{Attempt, StepName};

use crate::key::{ApiKey, KeyError};
use crate::message::{Request, Response};

pub use anthropic::Anthropic;
pub use http::{HttpOptions, RetryPolicy, Transport};
pub use openai::OpenAi;
pub use record::Recorder;
pub use replay::{Replay, TranscriptError};

/// Answers model calls.
pub trait Provider: Send {
    /// One model call: the whole conversation so far in, the next turn out. Transient failures
    /// (429, 5xx, timeouts, dropped connections) are retried inside, before any tool runs.
    fn complete(&mut self, request: &Request) -> Result<Response, ProviderError>;

    /// Tells the provider that a model call of `(step, attempt)` was answered by an earlier
    /// process of this run (resume). Only replay keeps such state: the turns served then are not
    /// served again.
    fn skip_answered(&mut self, step: &StepName, attempt: Attempt) {
        let _ = (step, attempt);
    }
}

impl<P: Provider + ?Sized> Provider for Box<P> {
    fn complete(&mut self, request: &Request) -> Result<Response, ProviderError> {
        (**self).complete(request)
    }

    fn skip_answered(&mut self, step: &StepName, attempt: Attempt) {
        (**self).skip_answered(step, attempt);
    }
}

/// Why a model call failed. The engine maps [`ProviderError::Auth`] to exit 2,
/// [`ProviderError::ReplayExhausted`] to a failed attempt, everything else to a stopped,
/// resumable run (exit 1) that does not use up an attempt.
#[derive(Debug, thiserror::Error)]
pub enum ProviderError {
    /// HTTP 401 or 403: the key is wrong, missing or lacks access.
    #[error("{provider} refused the request with HTTP {status}: {message}; {fix}")]
    Auth {
        provider: &'static str,
        status: u16,
        message: String,
        fix: String,
    },
    /// Still failing after every retry.
    #[error(
        "{provider} at {url} still failed after {tries} tries ({last}); check the server, then \
         continue with `cordon run --resume-last`"
    )]
    Unavailable {
        provider: &'static str,
        url: String,
        tries: u32,
        last: String,
    },
    /// A client error other than 401, 403, 408 and 429 (or a redirect, which cordon never
    /// follows so the key cannot be forwarded elsewhere).
    #[error("{provider} rejected the request with HTTP {status}: {message}")]
    Rejected {
        provider: &'static str,
        status: u16,
        message: String,
    },
    /// The server's certificate is not trusted (never retried).
    #[error(
        "{provider} at {url} presented a certificate cordon does not trust ({message}); if the \
         server uses a private CA, point `SSL_CERT_FILE` at its PEM file"
    )]
    Tls {
        provider: &'static str,
        url: String,
        message: String,
    },
    /// The answer could not be understood.
    #[error("{provider} sent an answer cordon cannot read: {message}")]
    Protocol {
        provider: &'static str,
        message: String,
    },
    /// The replay transcript has no turn left for this step attempt.
    #[error("replay transcript exhausted at {step} attempt {attempt}")]
    ReplayExhausted { step: StepName, attempt: Attempt },
}

/// Why no provider could be built from the pipeline's `llm` block (exit 2 in `cordon run`,
/// before any sandbox starts).
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error(transparent)]
    Key(#[from] KeyError),
    #[error(transparent)]
    Transcript(#[from] TranscriptError),
    #[error(
        "`llm.base_url` `{url}` is not a URL cordon can use ({reason}); write it like \
         `https://api.example.com/v1`"
    )]
    BaseUrl { url: String, reason: String },
    #[error(
        "cannot read the CA file `{}` named by `SSL_CERT_FILE`: {source}; point the variable at \
         a PEM file or unset it", path.display()
    )]
    CertFile {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "the CA file `{}` named by `SSL_CERT_FILE` holds no PEM certificate ({reason}); point \
         the variable at a PEM file or unset it", path.display()
    )]
    CertPem { path: PathBuf, reason: String },
    #[error("could not set up the HTTPS client: {0}")]
    Client(String),
}

/// What [`from_llm`] needs besides the `llm` block.
pub struct Inputs<'a> {
    /// The replay transcript's text (read by the engine from the run's tooling snapshot) and
    /// the name to use in messages about it.
    pub transcript: Option<(&'a str, &'a str)>,
    /// The host environment (`api_key_env`, `SSL_CERT_FILE`).
    pub env: &'a dyn Fn(&str) -> Option<OsString>,
    pub http: HttpOptions,
}

/// The default endpoint of each hosted provider when `base_url` is not given.
pub const OPENAI_BASE_URL: &str = "https://api.openai.com/v1";
pub const ANTHROPIC_BASE_URL: &str = "https://api.anthropic.com";

/// Builds the provider the `llm` block describes. Reads the key (host-side, from `api_key_env`)
/// and `SSL_CERT_FILE`; a missing key is an error naming the variable.
pub fn from_llm(llm: &Llm, inputs: Inputs<'_>) -> Result<Box<dyn Provider>, SetupError> {
    let mut http = inputs.http;
    if http.extra_roots.is_none() {
        http.extra_roots = (inputs.env)("SSL_CERT_FILE")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from);
    }
    let key = |var: &str| ApiKey::lookup(var, |name| (inputs.env)(name));
    match llm {
        Llm::OpenAi {
            base_url,
            api_key_env,
            ..
        } => {
            let key = api_key_env.as_ref().map(|v| key(v.as_str())).transpose()?;
            let url = base_url.as_deref().unwrap_or(OPENAI_BASE_URL);
            Ok(Box::new(OpenAi::new(url, key, http)?))
        }
        Llm::Anthropic {
            base_url,
            api_key_env,
            ..
        } => {
            let key = key(api_key_env.as_str())?;
            let url = base_url.as_deref().unwrap_or(ANTHROPIC_BASE_URL);
            Ok(Box::new(Anthropic::new(url, key, http)?))
        }
        Llm::Replay { transcript, .. } => {
            let (name, text) = inputs.transcript.ok_or_else(|| TranscriptError::NotRead {
                file: transcript.to_string(),
            })?;
            Ok(Box::new(Replay::parse(name, text)?))
        }
    }
}
