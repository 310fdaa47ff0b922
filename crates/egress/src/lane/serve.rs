//! One lane call per connection: read the request head and body (bounded in size and time),
//! decide with [`super::route`], forward with the real credential, and write the answer back
//! piece by piece as the upstream sends it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use super::usage::UsageScanner;
use super::{LaneAuth, LaneCall, LaneConfig, LaneSink, Route, Usage};

/// Largest request head.
const MAX_HEAD: usize = 64 << 10;
/// Most request headers.
const MAX_HEADERS: usize = 100;

/// What every listener of one lane shares: the settings, the upstream client, the call slots.
pub(crate) struct Shared {
    config: LaneConfig,
    client: reqwest::Client,
    slots: Arc<Semaphore>,
}

impl Shared {
    pub(crate) fn new(config: LaneConfig, client: reqwest::Client) -> Shared {
        let slots = Arc::new(Semaphore::new(config.max_connections.max(1)));
        Shared {
            config,
            client,
            slots,
        }
    }
}

/// Accepts until aborted; aborting drops the `JoinSet`, which aborts every call in flight.
/// Calls are reported to `sink` (the listener's own: one session).
pub(crate) async fn accept_loop(
    shared: Arc<Shared>,
    sink: Arc<dyn LaneSink>,
    listener: TcpListener,
) {
    let mut calls = JoinSet::new();
    loop {
        while calls.try_join_next().is_some() {}
        let Ok(permit) = Arc::clone(&shared.slots).acquire_owned().await else {
            return;
        };
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(_) => {
                // Out of descriptors or a connection reset before accept: back off briefly
                // rather than spin.
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let shared = Arc::clone(&shared);
        let sink = Arc::clone(&sink);
        calls.spawn(async move {
            let _permit = permit;
            let _ = serve(&shared, sink.as_ref(), stream).await;
        });
    }
}

/// A parsed request: what the lane needs of it.
struct Request {
    method: String,
    target: String,
    headers: Vec<(String, Vec<u8>)>,
    body: Vec<u8>,
}

/// Why a request is answered by the lane itself.
struct Refusal {
    status: u16,
    reason: &'static str,
    message: String,
}

async fn serve(shared: &Shared, sink: &dyn LaneSink, mut stream: TcpStream) -> std::io::Result<()> {
    let request = match tokio::time::timeout(
        shared.config.request_timeout,
        read_request(&mut stream, shared.config.max_body_bytes),
    )
    .await
    {
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
    sink.request(&model);
    let started = Instant::now();
    let mut call = LaneCall {
        model,
        status: 502,
        usage: Usage::default(),
        latency: Duration::ZERO,
    };
    let sent = shared
        .client
        .post(&url)
        .headers(headers)
        .body(request.body)
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
    call.status = response.status().as_u16();
    let content_type = response
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let mut scanner = UsageScanner::new(&content_type);
    let result = async {
        stream
            .write_all(&response_head(call.status, response.headers()))
            .await?;
        stream.flush().await?;
        // Each piece is written and flushed as it arrives: streamed answers pass through
        // unbuffered.
        while let Some(piece) = response.chunk().await.map_err(std::io::Error::other)? {
            scanner.feed(&piece);
            stream.write_all(&piece).await?;
            stream.flush().await?;
        }
        stream.shutdown().await
    }
    .await;
    call.usage = scanner.finish();
    call.latency = started.elapsed();
    sink.response(&call);
    result
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
];

/// The client's headers minus [`DROPPED`] and whatever its `Connection` header names, plus the
/// real credential.
fn upstream_headers(headers: &[(String, Vec<u8>)], auth: &LaneAuth) -> HeaderMap {
    let named_by_connection: Vec<String> = headers
        .iter()
        .filter(|(name, _)| name.eq_ignore_ascii_case("connection"))
        .flat_map(|(_, value)| {
            String::from_utf8_lossy(value)
                .split(',')
                .map(|t| t.trim().to_ascii_lowercase())
                .collect::<Vec<_>>()
        })
        .collect();
    let mut out = HeaderMap::new();
    for (name, value) in headers {
        let lower = name.to_ascii_lowercase();
        if DROPPED.contains(&lower.as_str()) || named_by_connection.contains(&lower) {
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

/// The answer's head for the client: the upstream's status and end-to-end headers, and
/// `Connection: close` — the body is either `Content-Length` framed as the upstream framed it,
/// or delimited by the close (a streamed answer).
fn response_head(status: u16, headers: &HeaderMap) -> Vec<u8> {
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
        head.extend_from_slice(value.as_bytes());
        head.extend_from_slice(b"\r\n");
    }
    head.extend_from_slice(b"Connection: close\r\n\r\n");
    head
}

/// Reads one request: its head (at most [`MAX_HEAD`]) and a `Content-Length` body (at most
/// `max_body`). A chunked body is refused (every provider client sends a length).
async fn read_request(stream: &mut TcpStream, max_body: usize) -> Result<Request, Refusal> {
    let bad = |message: &str| Refusal {
        status: 400,
        reason: "bad_target",
        message: message.to_owned(),
    };
    let mut buf = Vec::with_capacity(8 << 10);
    let mut chunk = [0u8; 8 << 10];
    let (head_len, method, target, headers) = loop {
        let n = stream
            .read(&mut chunk)
            .await
            .map_err(|_| bad("the connection failed"))?;
        if n == 0 {
            return Err(bad("the connection closed before a complete request head"));
        }
        buf.extend_from_slice(&chunk[..n]);
        let mut slots = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut parsed = httparse::Request::new(&mut slots);
        match parsed.parse(&buf) {
            Ok(httparse::Status::Complete(len)) => {
                let method = parsed.method.unwrap_or("").to_owned();
                let target = parsed.path.unwrap_or("").to_owned();
                let headers = parsed
                    .headers
                    .iter()
                    .map(|h| (h.name.to_owned(), h.value.to_vec()))
                    .collect::<Vec<_>>();
                break (len, method, target, headers);
            }
            Ok(httparse::Status::Partial) if buf.len() < MAX_HEAD => {}
            Ok(httparse::Status::Partial) => return Err(bad("the request head is too large")),
            Err(_) => return Err(bad("the request head is not HTTP/1.1")),
        }
    };
    let header = |name: &str| {
        headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| String::from_utf8_lossy(v).trim().to_owned())
    };
    if header("transfer-encoding").is_some() {
        return Err(Refusal {
            status: 411,
            reason: "bad_target",
            message: "the model lane needs a Content-Length body, not a chunked one".to_owned(),
        });
    }
    let length = match header("content-length") {
        None => 0,
        Some(text) => text
            .parse::<usize>()
            .map_err(|_| bad("the Content-Length is not a number"))?,
    };
    if length > max_body {
        return Err(Refusal {
            status: 413,
            reason: "bad_target",
            message: format!("the request body is larger than the lane's {max_body} bytes"),
        });
    }
    let mut body = buf.split_off(head_len);
    if body.len() > length {
        return Err(bad(
            "bytes follow the request body; send one request per connection",
        ));
    }
    while body.len() < length {
        let n = stream
            .read(&mut chunk)
            .await
            .map_err(|_| bad("the connection failed"))?;
        if n == 0 {
            return Err(bad("the connection closed inside the request body"));
        }
        body.extend_from_slice(&chunk[..n]);
        if body.len() > length {
            return Err(bad(
                "bytes follow the request body; send one request per connection",
            ));
        }
    }
    Ok(Request {
        method,
        target,
        headers,
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
        let headers = vec![
            (
                "Authorization".to_owned(),
                b"Bearer cordon-lane-dummy".to_vec(),
            ),
            ("X-Api-Key".to_owned(), b"cordon-lane-dummy".to_vec()),
            (
                "Connection".to_owned(),
                b"keep-alive, X-Secret-Hop".to_vec(),
            ),
            ("X-Secret-Hop".to_owned(), b"1".to_vec()),
            ("anthropic-version".to_owned(), b"2023-06-01".to_vec()),
            ("Accept-Encoding".to_owned(), b"gzip".to_vec()),
            ("Host".to_owned(), b"127.0.0.1:3129".to_vec()),
        ];
        let bearer = upstream_headers(&headers, &LaneAuth::Bearer("real-key".to_owned()));
        assert_eq!(bearer["authorization"], "Bearer real-key");
        assert!(bearer.get("x-api-key").is_none());
        assert!(bearer.get("x-secret-hop").is_none());
        assert!(bearer.get("connection").is_none());
        assert!(bearer.get("host").is_none());
        assert_eq!(bearer["accept-encoding"], "identity");
        assert_eq!(bearer["anthropic-version"], "2023-06-01");

        let anthropic = upstream_headers(&headers, &LaneAuth::XApiKey("real-key".to_owned()));
        assert_eq!(anthropic["x-api-key"], "real-key");
        assert!(anthropic.get("authorization").is_none());

        let none = upstream_headers(&headers, &LaneAuth::None);
        assert!(none.get("authorization").is_none() && none.get("x-api-key").is_none());
    }
}
