//! Request and response heads: tokenised by `httparse`, owned, and the HTTP/1.1 framing and
//! hop-by-hop rules (RFC 9112 §6, RFC 9110 §7.6.1) the proxy applies to them.

use thiserror::Error;

/// Headers beyond this count make the head malformed.
const MAX_HEADERS: usize = 128;

/// One header field as received: the name (a token, as `httparse` checked) and the raw value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Header {
    pub(crate) name: String,
    pub(crate) value: Vec<u8>,
}

impl Header {
    pub(crate) fn is(&self, name: &str) -> bool {
        self.name.eq_ignore_ascii_case(name)
    }
}

/// A request head. `target` is the request target exactly as sent.
#[derive(Clone, Debug)]
pub(crate) struct RequestHead {
    pub(crate) method: String,
    pub(crate) target: String,
    /// The minor HTTP version: 0 or 1.
    pub(crate) minor: u8,
    pub(crate) headers: Vec<Header>,
}

/// A response head.
#[derive(Clone, Debug)]
pub(crate) struct ResponseHead {
    pub(crate) code: u16,
    pub(crate) reason: String,
    pub(crate) headers: Vec<Header>,
}

/// Why a head or its framing cannot be used.
#[derive(Debug, Error, PartialEq, Eq)]
pub(crate) enum HeadError {
    #[error("the message head is malformed ({0}); send HTTP/1.1")]
    Malformed(&'static str),
    #[error(
        "`Transfer-Encoding: {0}` is not supported; send the body with `chunked` or `Content-Length`"
    )]
    TransferEncoding(String),
    #[error("the message has both `Transfer-Encoding` and `Content-Length`; send only one")]
    BothLengths,
    #[error("`Content-Length` is missing a single decimal value; send exactly one")]
    BadLength,
}

/// The outcome of parsing buffered bytes: a head and its length, or a need for more bytes.
pub(crate) enum Parsed<T> {
    Complete(T, usize),
    Partial,
}

fn owned_headers(headers: &[httparse::Header<'_>]) -> Vec<Header> {
    headers
        .iter()
        .map(|h| Header {
            name: h.name.to_owned(),
            value: h.value.to_vec(),
        })
        .collect()
}

fn describe(error: httparse::Error) -> &'static str {
    match error {
        httparse::Error::HeaderName => "invalid header name",
        httparse::Error::HeaderValue => "invalid header value",
        httparse::Error::NewLine => "invalid line ending",
        httparse::Error::Status => "invalid status",
        httparse::Error::Token => "invalid method",
        httparse::Error::TooManyHeaders => "too many headers",
        httparse::Error::Version => "invalid HTTP version",
    }
}

/// Parses a request head from the start of `buf`.
pub(crate) fn parse_request(buf: &[u8]) -> Result<Parsed<RequestHead>, HeadError> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut request = httparse::Request::new(&mut headers);
    match request.parse(buf) {
        Ok(httparse::Status::Complete(len)) => {
            let (Some(method), Some(target), Some(minor)) =
                (request.method, request.path, request.version)
            else {
                return Err(HeadError::Malformed("incomplete request line"));
            };
            Ok(Parsed::Complete(
                RequestHead {
                    method: method.to_owned(),
                    target: target.to_owned(),
                    minor,
                    headers: owned_headers(request.headers),
                },
                len,
            ))
        }
        Ok(httparse::Status::Partial) => Ok(Parsed::Partial),
        Err(e) => Err(HeadError::Malformed(describe(e))),
    }
}

/// Parses a response head from the start of `buf`.
pub(crate) fn parse_response(buf: &[u8]) -> Result<Parsed<ResponseHead>, HeadError> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut response = httparse::Response::new(&mut headers);
    match response.parse(buf) {
        Ok(httparse::Status::Complete(len)) => {
            let Some(code) = response.code else {
                return Err(HeadError::Malformed("incomplete status line"));
            };
            Ok(Parsed::Complete(
                ResponseHead {
                    code,
                    reason: response.reason.unwrap_or("").to_owned(),
                    headers: owned_headers(response.headers),
                },
                len,
            ))
        }
        Ok(httparse::Status::Partial) => Ok(Parsed::Partial),
        Err(e) => Err(HeadError::Malformed(describe(e))),
    }
}

/// How a message body is delimited.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Framing {
    /// No body.
    Empty,
    /// Exactly this many bytes.
    Length(u64),
    /// `Transfer-Encoding: chunked`.
    Chunked,
    /// Until the sender closes (responses only).
    UntilClose,
}

/// The comma-separated tokens of every field named `name`, lowercased.
fn tokens<'h>(headers: &'h [Header], name: &'h str) -> impl Iterator<Item = String> + 'h {
    headers
        .iter()
        .filter(move |h| h.is(name))
        .flat_map(|h| h.value.split(|&b| b == b','))
        .map(|t| String::from_utf8_lossy(t).trim().to_ascii_lowercase())
        .filter(|t| !t.is_empty())
}

/// One `Content-Length`, strictly: a single field with a single decimal value. Lists and repeated
/// fields (even equal ones) are refused, so no two readers of the message can disagree on it.
fn content_length(headers: &[Header]) -> Result<Option<u64>, HeadError> {
    let mut fields = headers.iter().filter(|h| h.is("content-length"));
    let Some(field) = fields.next() else {
        return Ok(None);
    };
    if fields.next().is_some() {
        return Err(HeadError::BadLength);
    }
    let text = std::str::from_utf8(&field.value).map_err(|_| HeadError::BadLength)?;
    if text.is_empty() || text.len() > 19 || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(HeadError::BadLength);
    }
    text.parse().map(Some).map_err(|_| HeadError::BadLength)
}

/// The transfer codings, or `None` without `Transfer-Encoding`.
fn transfer_codings(headers: &[Header]) -> Option<Vec<String>> {
    headers
        .iter()
        .any(|h| h.is("transfer-encoding"))
        .then(|| tokens(headers, "transfer-encoding").collect())
}

/// A request body's framing. Request smuggling lives in the disagreement between two parsers on
/// where a body ends, so anything ambiguous is refused rather than interpreted: both
/// `Transfer-Encoding` and `Content-Length`, codings other than exactly `chunked`, and any
/// `Content-Length` that is not one plain number.
pub(crate) fn request_framing(head: &RequestHead) -> Result<Framing, HeadError> {
    let length = content_length(&head.headers)?;
    match (transfer_codings(&head.headers), length) {
        (Some(_), Some(_)) => Err(HeadError::BothLengths),
        (Some(codings), None) if codings == ["chunked"] => Ok(Framing::Chunked),
        (Some(codings), None) => Err(HeadError::TransferEncoding(codings.join(", "))),
        (None, Some(0) | None) => Ok(Framing::Empty),
        (None, Some(n)) => Ok(Framing::Length(n)),
    }
}

/// A response body's framing (RFC 9112 §6.3): none after `HEAD`, for 1xx, 204 and 304; chunked
/// when the final coding is chunked (which overrides `Content-Length`); otherwise the length, or
/// until the upstream closes.
pub(crate) fn response_framing(method: &str, head: &ResponseHead) -> Result<Framing, HeadError> {
    if method.eq_ignore_ascii_case("HEAD")
        || (100..200).contains(&head.code)
        || head.code == 204
        || head.code == 304
    {
        return Ok(Framing::Empty);
    }
    if let Some(codings) = transfer_codings(&head.headers) {
        return Ok(if codings.last().is_some_and(|c| c == "chunked") {
            Framing::Chunked
        } else {
            Framing::UntilClose
        });
    }
    Ok(match content_length(&head.headers)? {
        Some(n) => Framing::Length(n),
        None => Framing::UntilClose,
    })
}

/// Fields that describe one hop, not the message: never forwarded in either direction. Framing
/// fields are rewritten by the proxy from the framing it actually uses.
const HOP_BY_HOP: [&str; 7] = [
    "connection",
    "keep-alive",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "content-length",
];

/// Whether `header` must not be forwarded: the fixed hop-by-hop set, every `Proxy-*` field (they
/// are addressed to this proxy, and `Proxy-Authorization` is a credential), and every field the
/// `Connection` header names.
pub(crate) fn is_hop_by_hop(header: &Header, connection: &[String]) -> bool {
    let name = header.name.to_ascii_lowercase();
    HOP_BY_HOP.contains(&name.as_str()) || name.starts_with("proxy-") || connection.contains(&name)
}

/// The tokens of the `Connection` header fields.
pub(crate) fn connection_tokens(headers: &[Header]) -> Vec<String> {
    tokens(headers, "connection").collect()
}

/// Whether the client keeps the connection open after this request: HTTP/1.1 unless it says
/// `close`. HTTP/1.0 clients get one request per connection (their keep-alive extension is not
/// worth the ambiguity).
pub(crate) fn client_keeps_alive(head: &RequestHead) -> bool {
    head.minor == 1
        && !connection_tokens(&head.headers)
            .iter()
            .any(|t| t == "close")
}
