//! Absolute-form plain HTTP (`GET http://host/path`): every request on a client connection is
//! decided on its own and gets its own upstream connection, so no upstream connection is ever
//! reused for another destination (or another decision). The request line is rewritten to origin
//! form, `Host` to the checked authority, and hop-by-hop fields are dropped both ways.

use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};

use super::audit::{AuditKind, Draft, Proto};
use super::body::{self, Encode};
use super::dial::dial;
use super::head::{
    self, Framing, HeadError, Header, Parsed, RequestHead, ResponseHead, client_keeps_alive,
    connection_tokens, is_hop_by_hop, request_framing, response_framing,
};
use super::listener::Shared;
use super::reader::Reader;
use super::reply::{self, After};
use super::{Identity, Limits};
use crate::{AbsoluteForm, Port, Reason, Target};

/// What the connection does after a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Next {
    KeepAlive,
    Close,
}

impl From<After> for Next {
    fn from(after: After) -> Next {
        match after {
            After::KeepAlive => Next::KeepAlive,
            After::Close => Next::Close,
        }
    }
}

/// Handles one non-CONNECT request.
pub(super) async fn handle(
    shared: &Shared,
    identity: &Identity,
    client: std::net::IpAddr,
    head: &RequestHead,
    reader: &mut Reader<OwnedReadHalf>,
    write: &mut OwnedWriteHalf,
    started: Instant,
) -> Next {
    let config = &shared.config;
    let framing = request_framing(head);
    // After a refusal the connection stays usable only when no request body is left unread.
    let after = if client_keeps_alive(head) && framing == Ok(Framing::Empty) {
        After::KeepAlive
    } else {
        After::Close
    };
    let mut draft = Draft {
        identity,
        proto: Proto::Http,
        raw_target: &head.target,
        target: None,
        resolved: &[],
        dialed: None,
        started,
    };
    let form = if head.target.starts_with('/') || head.target == "*" {
        Err(format!(
            "`{}` is an origin-form request, which this proxy does not serve; send the absolute URI (`http://host/path`), as clients configured with an HTTP proxy do",
            head.target
        ))
    } else {
        Target::parse_absolute(&head.target).map_err(|e| e.to_string())
    };
    let form = match form {
        Ok(form) => form,
        Err(detail) => {
            draft.refused(config.audit.as_ref(), Reason::BadTarget);
            let detail = format!("request target refused (bad_target): {detail}");
            return refuse(write, Reason::BadTarget, &detail, after).await;
        }
    };
    draft.target = Some(form.target());
    let framing = match framing {
        Ok(framing) => framing,
        Err(error) => {
            draft.refused(config.audit.as_ref(), Reason::BadTarget);
            return refuse(write, Reason::BadTarget, &error.to_string(), After::Close).await;
        }
    };
    let dialled = dial(shared, client, form.target()).await;
    draft.resolved = &dialled.resolved;
    let (upstream, address) = match dialled.result {
        Ok(pair) => pair,
        Err(refused) => {
            draft.refused(config.audit.as_ref(), refused.reason);
            return refuse(write, refused.reason, &refused.detail, after).await;
        }
    };
    draft.dialed = Some(address);
    if config
        .audit
        .record(AuditKind::Decision, &draft.record(None, 0, 0))
        .is_err()
    {
        return Next::Close;
    }
    let exchange = Exchange {
        limits: &config.limits,
        head,
        form: &form,
        framing,
    };
    let outcome = exchange.run(reader, write, upstream).await;
    let _ = config.audit.record(
        AuditKind::Close,
        &draft.record(outcome.failure, outcome.up, outcome.down),
    );
    outcome.next
}

async fn refuse(write: &mut OwnedWriteHalf, reason: Reason, detail: &str, after: After) -> Next {
    match write
        .write_all(&reply::refusal(reason, detail, after))
        .await
    {
        Ok(()) => after.into(),
        Err(_) => Next::Close,
    }
}

/// One allowed request and its response.
struct Exchange<'a> {
    limits: &'a Limits,
    head: &'a RequestHead,
    form: &'a AbsoluteForm,
    framing: Framing,
}

/// How an exchange ended.
struct Outcome {
    next: Next,
    up: u64,
    down: u64,
    /// Set when the proxy answered with its own 502/504 instead of a response.
    failure: Option<Reason>,
}

/// Why relaying a response stopped early.
enum RelayError {
    /// Nothing reached the client yet: the proxy may still answer with this reason.
    BeforeResponse(Reason, String),
    /// Part of a response reached the client; only closing the connection is left.
    Midway,
}

impl Exchange<'_> {
    async fn run(
        &self,
        reader: &mut Reader<OwnedReadHalf>,
        write: &mut OwnedWriteHalf,
        upstream: tokio::net::TcpStream,
    ) -> Outcome {
        let (up_read, mut up_write) = upstream.into_split();
        let mut up_reader = Reader::new(up_read, self.limits.reader_bytes());
        let keep_alive = client_keeps_alive(self.head);
        let request_encode = match self.framing {
            Framing::Chunked => Encode::Chunked,
            _ => Encode::Plain,
        };
        let send = async {
            up_write.write_all(&self.upstream_head()).await?;
            body::forward(
                reader,
                &mut up_write,
                self.framing,
                request_encode,
                self.limits.idle_timeout,
                self.limits.buffer_bytes,
            )
            .await
        };
        let (sent, relayed) = {
            let relay = self.relay(&mut up_reader, write);
            tokio::pin!(send, relay);
            // The response may come before the request body is fully sent (an early 413, or a
            // 100 Continue the client waits for), so both run at once.
            let mut sent = None;
            let relayed = loop {
                tokio::select! {
                    result = &mut send, if sent.is_none() => sent = Some(result),
                    result = &mut relay => break result,
                }
            };
            if sent.is_none() {
                sent = tokio::time::timeout(Duration::ZERO, &mut send).await.ok();
            }
            (sent, relayed)
        };
        // The request is complete on the client side only if its whole body was read.
        let (up, body_complete) = match sent {
            Some(Ok(n)) => (n, true),
            _ => (0, false),
        };
        match relayed {
            Ok((down, response_delimited)) => Outcome {
                next: if keep_alive && body_complete && response_delimited {
                    Next::KeepAlive
                } else {
                    Next::Close
                },
                up,
                down,
                failure: None,
            },
            Err(RelayError::BeforeResponse(reason, detail)) => {
                let _ = write
                    .write_all(&reply::refusal(reason, &detail, After::Close))
                    .await;
                Outcome {
                    next: Next::Close,
                    up,
                    down: 0,
                    failure: Some(reason),
                }
            }
            Err(RelayError::Midway) => Outcome {
                next: Next::Close,
                up,
                down: 0,
                failure: None,
            },
        }
    }

    fn upstream_head(&self) -> Vec<u8> {
        upstream_head(self.head, self.form, self.framing)
    }

    /// Reads response heads (forwarding interim 1xx ones) and relays the final response. Returns
    /// the body bytes and whether the response was delimited (so the client connection can
    /// carry another request).
    async fn relay(
        &self,
        from: &mut Reader<OwnedReadHalf>,
        to: &mut OwnedWriteHalf,
    ) -> Result<(u64, bool), RelayError> {
        let mut forwarded_interim = false;
        loop {
            let response = match read_response(from, self.limits).await {
                Ok(response) => response,
                Err(_) if forwarded_interim => return Err(RelayError::Midway),
                Err(failure) => return Err(failure),
            };
            let framing = response_framing(&self.head.method, &response).map_err(|e| {
                RelayError::BeforeResponse(
                    Reason::ConnectFailed,
                    format!("the upstream sent an unusable response: {e}"),
                )
            })?;
            if (100..200).contains(&response.code) {
                // 101 would switch protocols; the proxy never forwards `Upgrade`, so an upstream
                // that switches anyway is misbehaving.
                if response.code == 101 {
                    return Err(RelayError::BeforeResponse(
                        Reason::ConnectFailed,
                        "the upstream switched protocols without being asked".to_owned(),
                    ));
                }
                let interim = response_head(&response, Framing::Empty, Encode::Plain, false);
                to.write_all(&interim)
                    .await
                    .map_err(|_| RelayError::Midway)?;
                forwarded_interim = true;
                continue;
            }
            let chunked_ok = self.head.minor == 1;
            let (encode, delimited) = match framing {
                Framing::Empty | Framing::Length(_) => (Encode::Plain, true),
                Framing::Chunked if chunked_ok => (Encode::Chunked, true),
                // An HTTP/1.0 client cannot read chunked: send the payload and close.
                Framing::Chunked | Framing::UntilClose => (Encode::Plain, false),
            };
            let close = !delimited || !client_keeps_alive(self.head);
            to.write_all(&response_head(&response, framing, encode, close))
                .await
                .map_err(|_| RelayError::Midway)?;
            let limits = self.limits;
            let down = body::forward(
                from,
                to,
                framing,
                encode,
                limits.idle_timeout,
                limits.buffer_bytes,
            )
            .await
            .map_err(|_| RelayError::Midway)?;
            return Ok((down, delimited));
        }
    }
}

/// The request head sent upstream: origin form, the checked authority as `Host`, end-to-end
/// fields only, framing from the proxy's own reading of the body, and `Connection: close` (the
/// upstream connection serves this one request).
pub(super) fn upstream_head(head: &RequestHead, form: &AbsoluteForm, framing: Framing) -> Vec<u8> {
    let target = form.target();
    let mut out = format!(
        "{} {} HTTP/1.1\r\nHost: {}\r\n",
        head.method,
        form.path(),
        host_field(target)
    )
    .into_bytes();
    let connection = connection_tokens(&head.headers);
    for header in &head.headers {
        // The client's Host is replaced, never forwarded: a Host naming another server would
        // let a virtual-hosting upstream serve a destination the policy never checked.
        if header.name.eq_ignore_ascii_case("host") || is_hop_by_hop(header, &connection) {
            continue;
        }
        push_header(&mut out, header);
    }
    match framing {
        Framing::Length(n) => out.extend_from_slice(format!("Content-Length: {n}\r\n").as_bytes()),
        Framing::Chunked => out.extend_from_slice(b"Transfer-Encoding: chunked\r\n"),
        Framing::Empty | Framing::UntilClose => {}
    }
    out.extend_from_slice(b"Connection: close\r\n\r\n");
    out
}

/// `Host` for `target`: the checked authority, without the default port.
pub(super) fn host_field(target: &Target) -> String {
    if target.port() == Port::HTTP {
        target.host().to_string()
    } else {
        target.to_string()
    }
}

fn push_header(out: &mut Vec<u8>, header: &Header) {
    out.extend_from_slice(header.name.as_bytes());
    out.extend_from_slice(b": ");
    out.extend_from_slice(&header.value);
    out.extend_from_slice(b"\r\n");
}

/// The response head sent to the client: the upstream's status, its end-to-end fields, and
/// framing for how the proxy sends the body.
fn response_head(
    response: &ResponseHead,
    framing: Framing,
    encode: Encode,
    close: bool,
) -> Vec<u8> {
    let reason: String = response
        .reason
        .chars()
        .filter(|c| c.is_ascii_graphic() || *c == ' ')
        .collect();
    let mut out = format!("HTTP/1.1 {} {reason}\r\n", response.code).into_bytes();
    let connection = connection_tokens(&response.headers);
    for header in &response.headers {
        // A bodiless response (HEAD, 204, 304) keeps its Content-Length: it describes the
        // representation, not this message.
        let keep_length =
            framing == Framing::Empty && header.name.eq_ignore_ascii_case("content-length");
        if keep_length || !is_hop_by_hop(header, &connection) {
            push_header(&mut out, header);
        }
    }
    match (framing, encode) {
        (Framing::Length(n), _) => {
            out.extend_from_slice(format!("Content-Length: {n}\r\n").as_bytes())
        }
        (Framing::Chunked, Encode::Chunked) => {
            out.extend_from_slice(b"Transfer-Encoding: chunked\r\n");
        }
        _ => {}
    }
    if close {
        out.extend_from_slice(b"Connection: close\r\n");
    }
    out.extend_from_slice(b"\r\n");
    out
}

/// Reads one response head within the response timeout.
async fn read_response<R: AsyncRead + Unpin>(
    from: &mut Reader<R>,
    limits: &Limits,
) -> Result<ResponseHead, RelayError> {
    let read = async {
        loop {
            match head::parse_response(from.buffered()) {
                Ok(Parsed::Complete(response, len)) => {
                    from.consume(len);
                    return Ok(response);
                }
                Ok(Parsed::Partial) => {}
                Err(error) => return Err(unusable(&error)),
            }
            match from.fill(limits.max_head_bytes).await {
                Ok(0) => {
                    return Err(RelayError::BeforeResponse(
                        Reason::ConnectFailed,
                        "the upstream closed the connection without a response".to_owned(),
                    ));
                }
                Ok(_) => {}
                Err(error) => {
                    return Err(RelayError::BeforeResponse(
                        Reason::ConnectFailed,
                        format!("reading the upstream response failed: {error}"),
                    ));
                }
            }
        }
    };
    match tokio::time::timeout(limits.response_timeout, read).await {
        Ok(result) => result,
        Err(_) => Err(RelayError::BeforeResponse(
            Reason::UpstreamTimeout,
            format!(
                "the upstream sent no response within {} ms",
                limits.response_timeout.as_millis()
            ),
        )),
    }
}

fn unusable(error: &HeadError) -> RelayError {
    RelayError::BeforeResponse(
        Reason::ConnectFailed,
        format!("the upstream sent an unusable response: {error}"),
    )
}
