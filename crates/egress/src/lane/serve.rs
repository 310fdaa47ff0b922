//! One lane call per connection: read the request head and body (bounded in size and time, with
//! the proxy's own head parser and framing rules), decide with [`super::route`], forward with the
//! real credential, and write the answer back piece by piece as the upstream sends it, the real
//! key masked wherever the upstream echoed it (`scrub.rs`).
//!
//! Slots are per listener — one session — and only a call being forwarded holds one: a client
//! still sending its request holds a reading place instead, and when a listener's reading places
//! are full the oldest is closed (idle connections are reclaimed first), so idle clients cannot
//! keep real calls out.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, Semaphore};
use tokio::task::JoinSet;

use super::scrub::Scrub;
use super::usage::UsageScanner;
use super::{LaneAuth, LaneCall, LaneConfig, LaneSink, Route, Usage};
use crate::proxy::head::{self, Framing, Parsed};

/// Largest request head.
const MAX_HEAD: usize = 64 << 10;
/// Clients of one listener still sending their request; past it the oldest is closed.
pub(crate) const MAX_READING: usize = 32;

/// What every listener of one lane shares: the settings and the upstream client.
pub(crate) struct Shared {
    config: LaneConfig,
    client: reqwest::Client,
}

impl Shared {
    pub(crate) fn new(config: LaneConfig, client: reqwest::Client) -> Shared {
        Shared { config, client }
    }

    /// The real key, to mask in what comes back.
    fn secret(&self) -> &[u8] {
        match &self.config.auth {
            LaneAuth::None => b"",
            LaneAuth::Bearer(key) | LaneAuth::XApiKey(key) => key.as_bytes(),
        }
    }
}

/// The clients of one listener still sending their request, oldest first: each can be told to
/// give up its place.
type Reading = Arc<Mutex<VecDeque<(u64, Arc<Notify>)>>>;

/// Accepts until `stop` is notified, then drops every call in flight (each reporting itself) and
/// returns.
/// Calls are reported to `sink` (the listener's own: one session), which has its own call slots
/// and reading places.
pub(crate) async fn accept_loop(
    shared: Arc<Shared>,
    sink: Arc<dyn LaneSink>,
    listener: TcpListener,
    stop: Arc<Notify>,
) {
    let slots = Arc::new(Semaphore::new(shared.config.max_connections.max(1)));
    let reading: Reading = Arc::default();
    let mut calls = JoinSet::new();
    let mut next = 0u64;
    loop {
        while calls.try_join_next().is_some() {}
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = stop.notified() => break,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(_) => {
                // Out of descriptors or a connection reset before accept: back off briefly
                // rather than spin.
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let id = next;
        next += 1;
        let give_up = Arc::new(Notify::new());
        {
            let mut places = reading.lock().unwrap_or_else(PoisonError::into_inner);
            // Idle connections are reclaimed first: the oldest still-reading client leaves.
            while places.len() >= MAX_READING {
                if let Some((_, oldest)) = places.pop_front() {
                    oldest.notify_one();
                }
            }
            places.push_back((id, Arc::clone(&give_up)));
        }
        let shared = Arc::clone(&shared);
        let sink = Arc::clone(&sink);
        let slots = Arc::clone(&slots);
        let reading = Arc::clone(&reading);
        calls.spawn(async move {
            let _ = serve(
                &shared,
                sink.as_ref(),
                stream,
                &slots,
                (id, &reading, &give_up),
            )
            .await;
            reading
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .retain(|(other, _)| *other != id);
        });
    }
    // Every call in flight is dropped — and has reported itself — before the stop returns.
    calls.abort_all();
    while calls.join_next().await.is_some() {}
}

/// A parsed request: what the lane needs of it.
struct Request {
    method: String,
    target: String,
    headers: Vec<head::Header>,
    body: Vec<u8>,
}

/// Why a request is answered by the lane itself.
struct Refusal {
    status: u16,
    reason: &'static str,
    message: String,
}

async fn serve(
    shared: &Shared,
    sink: &dyn LaneSink,
    mut stream: TcpStream,
    slots: &Arc<Semaphore>,
    (id, reading, give_up): (u64, &Reading, &Notify),
) -> std::io::Result<()> {
    let read = tokio::select! {
        read = tokio::time::timeout(
            shared.config.request_timeout,
            read_request(&mut stream, shared.config.max_body_bytes),
        ) => read,
        // Reclaimed for a newer client: close without an answer.
        () = give_up.notified() => return Ok(()),
    };
    reading
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .retain(|(other, _)| *other != id);
    let request = match read {
        Ok(Ok(request)) => request,
        Ok(Err(refusal)) => return reply(&mut stream, &refusal).await,
        Err(_) => {
            let refusal = Refusal {
                status: 408,
                reason: "bad_target",
                message: "the request did not arrive in time".to_owned(),
            };
            return reply(&mut stream, &refusal).await;
        }
    };
    let target = match super::route(&request.method, &request.target) {
        Route::Forward(target) => target,
        Route::Refuse(why) => {
            let refusal = Refusal {
                status: 403,
                reason: "not_allowed",
                message: why.to_owned(),
            };
            return reply(&mut stream, &refusal).await;
        }
    };
    if let Err(refusal) = admitted(sink) {
        return reply(&mut stream, &refusal).await;
    }
    // Only a call being forwarded holds one of the listener's slots.
    let Ok(_slot) = slots.acquire().await else {
        return Ok(());
    };
    // Asked again once the slot is held: calls queued behind the slots while the budget was
    // spent are refused too, not forwarded later (review 2, finding B1).
    if let Err(refusal) = admitted(sink) {
        return reply(&mut stream, &refusal).await;
    }
    forward(shared, sink, &mut stream, request, &target).await
}

async fn forward(
    shared: &Shared,
    sink: &dyn LaneSink,
    stream: &mut TcpStream,
    request: Request,
    target: &str,
) -> std::io::Result<()> {
    let model = serde_json::from_slice::<serde_json::Value>(&request.body)
        .ok()
        .and_then(|v| v.get("model")?.as_str().map(str::to_owned))
        .unwrap_or_else(|| shared.config.model.clone());
    let url = format!("{}{target}", shared.config.root);
    let headers = upstream_headers(&request.headers, &shared.config.auth);
    let body = with_streamed_usage(target, request.body);
    let sent_bytes = body.len() as u64;
    sink.request(&model);
    // Reported however the call ends: dropped with the session's lane (its processes gone
    // while the answer was still coming), it is counted by estimate (finding B2).
    let mut open = Open {
        sink,
        model: model.clone(),
        sent: sent_bytes,
        answered: 0,
        settled: false,
    };
    let started = Instant::now();
    let mut call = LaneCall {
        model,
        status: 502,
        usage: Usage::default(),
        estimated: false,
        latency: Duration::ZERO,
    };
    let sent = shared
        .client
        .post(&url)
        .headers(headers)
        .body(body)
        .send()
        .await;
    let mut response = match sent {
        Ok(response) => response,
        Err(err) => {
            let (status, reason) = if err.is_timeout() {
                (504, "upstream_timeout")
            } else {
                (502, "connect_failed")
            };
            call.status = status;
            call.latency = started.elapsed();
            open.settle();
            sink.response(&call);
            // The error text names the URL, never a header: the key cannot be in it.
            let refusal = Refusal {
                status,
                reason,
                message: format!("the model lane's upstream failed: {err}"),
            };
            return reply(stream, &refusal).await;
        }
    };
    // The lane asks for `identity`: a compressed answer could carry the key where masking
    // cannot see it, so it is refused rather than passed on.
    let encoding = response
        .headers()
        .get(reqwest::header::CONTENT_ENCODING)
        .map(|v| {
            String::from_utf8_lossy(v.as_bytes())
                .trim()
                .to_ascii_lowercase()
        });
    if let Some(encoding) = encoding.filter(|e| !e.is_empty() && e != "identity") {
        call.status = 502;
        call.latency = started.elapsed();
        open.settle();
        sink.response(&call);
        let refusal = Refusal {
            status: 502,
            reason: "connect_failed",
            message: format!(
                "the model lane's upstream answered with `Content-Encoding: {}`, which the lane \
                 cannot check for the key (it asks for identity)",
                encoding
                    .chars()
                    .filter(|c| c.is_ascii_alphanumeric() || ", -_".contains(*c))
                    .take(40)
                    .collect::<String>()
            ),
        };
        return reply(stream, &refusal).await;
    }
    call.status = response.status().as_u16();
    let content_type = response
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let mut scanner = UsageScanner::new(&content_type);
    let mut scrub = Scrub::new(shared.secret());
    let mut answered_bytes = 0u64;
    // The upstream's answer was read to its end (whatever the client did with it).
    let mut drained = false;
    let result = async {
        stream
            .write_all(&response_head(call.status, response.headers(), &scrub))
            .await?;
        stream.flush().await?;
        // Each piece is written and flushed as it arrives: streamed answers pass through
        // unbuffered, but for what could be the start of an echoed key.
        while let Some(piece) = response.chunk().await.map_err(std::io::Error::other)? {
            scanner.feed(&piece);
            answered_bytes += piece.len() as u64;
            open.answered = answered_bytes;
            stream.write_all(&scrub.piece(&piece)).await?;
            stream.flush().await?;
        }
        drained = true;
        stream.write_all(&scrub.finish()).await?;
        stream.shutdown().await
    }
    .await;
    let (reported, complete) = scanner.finish();
    (call.usage, call.estimated) = counted(
        reported,
        call.status,
        sent_bytes,
        answered_bytes,
        drained || complete,
    );
    call.latency = started.elapsed();
    open.settle();
    sink.response(&call);
    result
}

/// Whether `sink` lets a call be forwarded now: a spent budget is answered 429.
fn admitted(sink: &dyn LaneSink) -> Result<(), Refusal> {
    sink.admit().map_err(|message| Refusal {
        status: 429,
        reason: "budget_exhausted",
        message,
    })
}

/// The bytes a token stands for when the upstream reports no usage (DESIGN §18).
const BYTES_PER_TOKEN: u64 = 4;

/// A forwarded call not yet reported: reported by estimate when it is dropped unfinished.
struct Open<'a> {
    sink: &'a dyn LaneSink,
    model: String,
    sent: u64,
    answered: u64,
    settled: bool,
}

impl Open<'_> {
    /// The call is reported by its own path.
    fn settle(&mut self) {
        self.settled = true;
    }
}

impl Drop for Open<'_> {
    fn drop(&mut self) {
        if self.settled {
            return;
        }
        let (usage, estimated) = counted(Usage::default(), 200, self.sent, self.answered, false);
        self.sink.response(&LaneCall {
            model: std::mem::take(&mut self.model),
            // Closed before an answer was complete (nginx's "client closed request").
            status: 499,
            usage,
            estimated,
            latency: Duration::ZERO,
        });
    }
}

/// A call's tokens: what the answer reported; for a successful answer that reported none, an
/// estimate from the request's and the answer's bytes (marked `true`), so budgets still bound it.
///
/// An answer cut short (the client went away, the upstream broke off) is counted at least at
/// that estimate: a stream reports its final output count only at its end, and what was
/// generated until the cut is billed all the same (review 2, finding B3).
fn counted(
    reported: Usage,
    status: u16,
    sent: u64,
    answered: u64,
    finished: bool,
) -> (Usage, bool) {
    if !(200..300).contains(&status) {
        return (reported, false);
    }
    let estimate = Usage {
        input_tokens: sent.div_ceil(BYTES_PER_TOKEN),
        output_tokens: answered.div_ceil(BYTES_PER_TOKEN),
    };
    if reported == Usage::default() {
        return (estimate, true);
    }
    if finished {
        return (reported, false);
    }
    let usage = Usage {
        input_tokens: reported.input_tokens.max(estimate.input_tokens),
        output_tokens: reported.output_tokens.max(estimate.output_tokens),
    };
    (usage, usage != reported)
}

/// A streamed OpenAI chat completion (`"stream": true`) asks for its usage
/// (`stream_options.include_usage`), which such answers otherwise leave out; any other body is
/// sent as it came.
fn with_streamed_usage(target: &str, body: Vec<u8>) -> Vec<u8> {
    if !target.starts_with("/v1/chat/completions") {
        return body;
    }
    let Ok(serde_json::Value::Object(mut object)) = serde_json::from_slice(&body) else {
        return body;
    };
    if object.get("stream") != Some(&serde_json::Value::Bool(true)) {
        return body;
    }
    let options = object
        .entry("stream_options")
        .or_insert_with(|| serde_json::json!({}));
    // Anything but an object (`null`, a number) is replaced: it would carry no usage (review 3).
    if !options.is_object() {
        *options = serde_json::json!({});
    }
    let Some(options) = options.as_object_mut() else {
        return body;
    };
    // Set even over the client's own `false`: an answer without its usage is counted only by
    // estimate, and an estimate from the bytes cannot see reasoning tokens (finding B4).
    if options.get("include_usage") == Some(&serde_json::Value::Bool(true)) {
        return body;
    }
    options.insert("include_usage".to_owned(), serde_json::Value::Bool(true));
    serde_json::to_vec(&object).unwrap_or(body)
}

/// Headers that belong to one connection, never forwarded (RFC 9110 §7.6.1), and the ones the
/// lane sets itself: `host` and `content-length` (the client sets them for the new request),
/// the credentials (replaced), `accept-encoding` (answers pass through uncompressed so their
/// usage can be read; the upstream may still choose identity either way).
const DROPPED: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authorization",
    "proxy-authenticate",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "host",
    "content-length",
    "authorization",
    "x-api-key",
    "accept-encoding",
    // Method and URL overrides: a gateway that honours them would take the call to another
    // method or path than the one the lane checked, with the real key.
    "x-http-method-override",
    "x-http-method",
    "x-method-override",
    "x-original-method",
    "x-original-url",
    "x-original-uri",
    "x-rewrite-url",
    "x-forwarded-uri",
    "x-forwarded-path",
    "x-envoy-original-path",
];

/// The client's headers minus [`DROPPED`] and whatever its `Connection` header names, plus the
/// real credential.
fn upstream_headers(headers: &[head::Header], auth: &LaneAuth) -> HeaderMap {
    let named_by_connection = head::connection_tokens(headers);
    let mut out = HeaderMap::new();
    for header in headers {
        let (name, value) = (&header.name, &header.value);
        let lower = name.to_ascii_lowercase();
        // CGI-style gateways read `x_original_url` as `X-Original-URL`: compared with `_` as `-`.
        let spelled = lower.replace('_', "-");
        if DROPPED.contains(&spelled.as_str()) || head::is_hop_by_hop(header, &named_by_connection)
        {
            continue;
        }
        if let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(lower.as_bytes()),
            HeaderValue::from_bytes(value),
        ) {
            out.append(name, value);
        }
    }
    out.insert(
        reqwest::header::ACCEPT_ENCODING,
        HeaderValue::from_static("identity"),
    );
    let credential = match auth {
        LaneAuth::None => None,
        LaneAuth::Bearer(key) => Some((
            reqwest::header::AUTHORIZATION,
            HeaderValue::from_str(&format!("Bearer {key}")),
        )),
        LaneAuth::XApiKey(key) => Some((
            HeaderName::from_static("x-api-key"),
            HeaderValue::from_str(key),
        )),
    };
    if let Some((name, Ok(mut value))) = credential {
        value.set_sensitive(true);
        out.insert(name, value);
    }
    out
}

/// The answer's head for the client: the upstream's status and end-to-end headers (the real key
/// masked in every value), and `Connection: close` — the body is either `Content-Length` framed
/// as the upstream framed it, or delimited by the close (a streamed answer).
fn response_head(status: u16, headers: &HeaderMap, scrub: &Scrub) -> Vec<u8> {
    let reason = reqwest::StatusCode::from_u16(status)
        .ok()
        .and_then(|s| s.canonical_reason())
        .unwrap_or("");
    let mut head = format!("HTTP/1.1 {status} {reason}\r\n").into_bytes();
    for (name, value) in headers {
        let name = name.as_str();
        if matches!(
            name,
            "connection" | "keep-alive" | "transfer-encoding" | "trailer" | "upgrade" | "te"
        ) {
            continue;
        }
        head.extend_from_slice(name.as_bytes());
        head.extend_from_slice(b": ");
        head.extend_from_slice(&scrub.whole(value.as_bytes()));
        head.extend_from_slice(b"\r\n");
    }
    head.extend_from_slice(b"Connection: close\r\n\r\n");
    head
}

/// Reads one request: its head (at most [`MAX_HEAD`]), parsed and framed by the proxy's own
/// rules (one parser for both: `Content-Length: +2`, repeated lengths and chunked bodies are
/// refused), and a `Content-Length` body (at most `max_body`).
async fn read_request(stream: &mut TcpStream, max_body: usize) -> Result<Request, Refusal> {
    let bad = |message: String| Refusal {
        status: 400,
        reason: "bad_target",
        message,
    };
    let mut buf = Vec::with_capacity(8 << 10);
    let mut chunk = [0u8; 8 << 10];
    let (head_len, request) = loop {
        let n = stream
            .read(&mut chunk)
            .await
            .map_err(|_| bad("the connection failed".to_owned()))?;
        if n == 0 {
            return Err(bad(
                "the connection closed before a complete request head".to_owned()
            ));
        }
        buf.extend_from_slice(&chunk[..n]);
        match head::parse_request(&buf) {
            Ok(Parsed::Complete(request, len)) if len <= MAX_HEAD => break (len, request),
            Ok(Parsed::Complete(..)) => {
                return Err(bad("the request head is too large".to_owned()));
            }
            Ok(Parsed::Partial) if buf.len() < MAX_HEAD => {}
            Ok(Parsed::Partial) => return Err(bad("the request head is too large".to_owned())),
            Err(err) => return Err(bad(err.to_string())),
        }
    };
    let length = match head::request_framing(&request) {
        Ok(Framing::Empty) => 0,
        Ok(Framing::Length(n)) => usize::try_from(n).unwrap_or(usize::MAX),
        Ok(Framing::Chunked | Framing::UntilClose) => {
            return Err(Refusal {
                status: 411,
                reason: "bad_target",
                message: "the model lane needs a Content-Length body, not a chunked one".to_owned(),
            });
        }
        Err(err) => return Err(bad(err.to_string())),
    };
    if length > max_body {
        return Err(Refusal {
            status: 413,
            reason: "bad_target",
            message: format!("the request body is larger than the lane's {max_body} bytes"),
        });
    }
    let mut body = buf.split_off(head_len);
    let extra = || bad("bytes follow the request body; send one request per connection".to_owned());
    if body.len() > length {
        return Err(extra());
    }
    while body.len() < length {
        let n = stream
            .read(&mut chunk)
            .await
            .map_err(|_| bad("the connection failed".to_owned()))?;
        if n == 0 {
            return Err(bad(
                "the connection closed inside the request body".to_owned()
            ));
        }
        body.extend_from_slice(&chunk[..n]);
        if body.len() > length {
            return Err(extra());
        }
    }
    Ok(Request {
        method: request.method,
        target: request.target,
        headers: request.headers,
        body,
    })
}

/// The lane's own answer, with the reason code in `X-Cordon-Reason`.
async fn reply(stream: &mut TcpStream, refusal: &Refusal) -> std::io::Result<()> {
    let reason = reqwest::StatusCode::from_u16(refusal.status)
        .ok()
        .and_then(|s| s.canonical_reason())
        .unwrap_or("");
    let body = format!("cordon: {}\n", refusal.message);
    let head = format!(
        "HTTP/1.1 {} {reason}\r\nX-Cordon-Reason: {}\r\nContent-Type: text/plain; charset=utf-8\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        refusal.status,
        refusal.reason,
        body.len()
    );
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(body.as_bytes()).await?;
    stream.shutdown().await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_clients_credentials_and_hop_by_hop_headers_are_replaced_by_the_real_key() {
        let headers: Vec<head::Header> = [
            ("Authorization", &b"Bearer cordon-lane-dummy"[..]),
            ("X-Api-Key", b"cordon-lane-dummy"),
            ("Connection", b"keep-alive, X-Secret-Hop"),
            ("X-Secret-Hop", b"1"),
            ("anthropic-version", b"2023-06-01"),
            ("Accept-Encoding", b"gzip"),
            ("Host", b"127.0.0.1:3129"),
            ("X-HTTP-Method-Override", b"DELETE"),
            ("X-Original-URL", b"/v1/files"),
            ("X-Rewrite-URL", b"/v1/files"),
            ("x_http_method_override", b"DELETE"),
            ("X_Original_URL", b"/v1/files"),
            ("X-Envoy-Original-Path", b"/v1/files"),
            ("Proxy-Authorization", b"Basic eA=="),
        ]
        .into_iter()
        .map(|(name, value)| head::Header {
            name: name.to_owned(),
            value: value.to_vec(),
        })
        .collect();
        let bearer = upstream_headers(&headers, &LaneAuth::Bearer("real-key".to_owned()));
        assert_eq!(bearer["authorization"], "Bearer real-key");
        assert!(bearer.get("x-api-key").is_none());
        assert!(bearer.get("x-secret-hop").is_none());
        assert!(bearer.get("connection").is_none());
        assert!(bearer.get("host").is_none());
        assert_eq!(bearer["accept-encoding"], "identity");
        assert_eq!(bearer["anthropic-version"], "2023-06-01");
        for overriding in [
            "x-http-method-override",
            "x-original-url",
            "x-rewrite-url",
            "x_http_method_override",
            "x_original_url",
            "x-envoy-original-path",
            "proxy-authorization",
        ] {
            assert!(bearer.get(overriding).is_none(), "{overriding}");
        }

        let anthropic = upstream_headers(&headers, &LaneAuth::XApiKey("real-key".to_owned()));
        assert_eq!(anthropic["x-api-key"], "real-key");
        assert!(anthropic.get("authorization").is_none());

        let none = upstream_headers(&headers, &LaneAuth::None);
        assert!(none.get("authorization").is_none() && none.get("x-api-key").is_none());
    }

    #[test]
    fn unreported_usage_of_a_successful_answer_is_estimated_at_four_bytes_a_token() {
        let reported = Usage {
            input_tokens: 7,
            output_tokens: 2,
        };
        assert_eq!(counted(reported, 200, 4000, 400, true), (reported, false));
        let estimated = Usage {
            input_tokens: 1000,
            output_tokens: 101,
        };
        assert_eq!(
            counted(Usage::default(), 200, 4000, 401, true),
            (estimated, true)
        );
        // A failed call is not counted.
        assert_eq!(
            counted(Usage::default(), 500, 4000, 400, true),
            (Usage::default(), false)
        );
        // A stream cut short after its start reported 1 output token: what it sent counts.
        let started = Usage {
            input_tokens: 10,
            output_tokens: 1,
        };
        assert_eq!(
            counted(started, 200, 40, 233_000, false),
            (
                Usage {
                    input_tokens: 10,
                    output_tokens: 58_250,
                },
                true
            )
        );
    }

    #[test]
    fn a_streamed_chat_completion_asks_for_its_usage_and_nothing_else_changes() {
        let asked = with_streamed_usage(
            "/v1/chat/completions",
            br#"{"model":"m","stream":true}"#.to_vec(),
        );
        let asked: serde_json::Value = serde_json::from_slice(&asked).expect("json");
        assert_eq!(asked["stream_options"]["include_usage"], true);
        assert_eq!(asked["model"], "m");
        for (target, body) in [
            ("/v1/chat/completions", &br#"{"model":"m"}"#[..]),
            ("/v1/chat/completions", b"not json"),
            ("/v1/messages", br#"{"stream":true}"#),
        ] {
            assert_eq!(with_streamed_usage(target, body.to_vec()), body, "{target}");
        }
        // The client's own `false`, `null` or a number is overridden.
        for options in [r#"{"include_usage":false}"#, "null", "3"] {
            let body = format!(r#"{{"stream":true,"stream_options":{options}}}"#);
            let forced = with_streamed_usage("/v1/chat/completions", body.into_bytes());
            let forced: serde_json::Value = serde_json::from_slice(&forced).expect("json");
            assert_eq!(forced["stream_options"]["include_usage"], true, "{options}");
        }
    }
}
