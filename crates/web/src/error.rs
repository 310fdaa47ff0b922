//! `WebError`: every way a request fails, turned into an HTTP response in one place
//! ([`IntoResponse`]), as JSON `{"error": "<message>"}` with the matching status.

use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use cordon_store::StoreError;

#[derive(Debug, thiserror::Error)]
pub enum WebError {
    #[error(
        "the Host header `{0}` is not this server's address; open the address `cordon ui` \
         printed (127.0.0.1 or localhost with its port)"
    )]
    ForeignHost(String),
    #[error(
        "missing or wrong token; open the address `cordon ui` (or `cordon run`) printed, which \
         ends in ?token=…"
    )]
    Unauthorized,
    #[error("no page at `{0}`; the runs are listed at /")]
    NotFound(String),
    #[error("bad query parameter `{name}`: {detail}")]
    BadQuery { name: String, detail: String },
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("cannot read random bytes for the UI token from /dev/urandom")]
    Random {
        #[source]
        source: std::io::Error,
    },
    #[error("`{0}` is not a loopback address; the UI serves only 127.0.0.1, localhost or ::1")]
    NotLoopback(String),
    #[error("cannot listen on {addr}; pass another --addr")]
    Bind {
        addr: String,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot start the UI server's runtime")]
    Runtime {
        #[source]
        source: std::io::Error,
    },
    #[error("{0} live streams are open already; close some of this UI's tabs and reload")]
    TooManyStreams(usize),
    #[error("a store read was cancelled")]
    Cancelled,
}

impl WebError {
    pub fn status(&self) -> StatusCode {
        match self {
            WebError::ForeignHost(_) => StatusCode::FORBIDDEN,
            WebError::Unauthorized => StatusCode::UNAUTHORIZED,
            WebError::NotFound(_) | WebError::Store(StoreError::UnknownRun(_)) => {
                StatusCode::NOT_FOUND
            }
            WebError::BadQuery { .. } | WebError::Store(StoreError::AmbiguousRun { .. }) => {
                StatusCode::BAD_REQUEST
            }
            WebError::TooManyStreams(_) => StatusCode::SERVICE_UNAVAILABLE,
            WebError::Store(_)
            | WebError::Random { .. }
            | WebError::NotLoopback(_)
            | WebError::Bind { .. }
            | WebError::Runtime { .. }
            | WebError::Cancelled => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

impl IntoResponse for WebError {
    fn into_response(self) -> Response {
        // The full chain, so a store failure says which file and why.
        let mut message = self.to_string();
        let mut source = std::error::Error::source(&self);
        while let Some(cause) = source {
            message.push_str(": ");
            message.push_str(&cause.to_string());
            source = cause.source();
        }
        let body = serde_json::json!({ "error": message }).to_string();
        let mut response = (
            self.status(),
            [(header::CONTENT_TYPE, "application/json")],
            body,
        )
            .into_response();
        if matches!(self, WebError::Unauthorized) {
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                header::HeaderValue::from_static("Cookie"),
            );
        }
        response
    }
}
