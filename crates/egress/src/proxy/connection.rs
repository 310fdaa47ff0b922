//! One client connection: read a bounded request head within the head timeout, hand it to the
//! CONNECT or the plain-HTTP handler, and repeat while the connection is kept alive.

use std::time::Instant;

use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::net::tcp::OwnedReadHalf;

use super::head::{self, Parsed, RequestHead};
use super::http::{self, Next};
use super::listener::{Shared, ShutdownSignal};
use super::reader::Reader;
use super::reply::{self, After};
use super::{Identity, Limits, connect};
use crate::Reason;

/// What reading a request head produced.
enum HeadRead {
    /// A head, and when its first byte arrived (or the connection was accepted).
    Head(RequestHead, Instant),
    /// The client closed, went idle, or the proxy is shutting down: close quietly.
    Closed,
    /// The head is unusable: send this and close.
    Refuse(Vec<u8>),
}

/// Serves one accepted connection until it closes.
pub(super) async fn serve(
    shared: &Shared,
    identity: &Identity,
    stream: TcpStream,
    mut signal: ShutdownSignal,
) {
    let _ = stream.set_nodelay(true);
    let limits = &shared.config.limits;
    let (read, mut write) = stream.into_split();
    let mut reader = Reader::new(read, limits.reader_bytes());
    let mut first = true;
    loop {
        let (head, started) = match read_head(&mut reader, limits, first, &mut signal).await {
            HeadRead::Head(head, started) => (head, started),
            HeadRead::Closed => return,
            HeadRead::Refuse(response) => {
                let _ = write.write_all(&response).await;
                return;
            }
        };
        first = false;
        // Methods are case-sensitive (RFC 9110 §9.1): `connect` is not CONNECT, and as an
        // origin-less request it is refused by the HTTP handler.
        if head.method == "CONNECT" {
            connect::handle(shared, identity, head, reader, write, started).await;
            return;
        }
        let next = http::handle(shared, identity, &head, &mut reader, &mut write, started).await;
        if next == Next::Close || signal.has_fired() {
            return;
        }
    }
}

/// Reads the next request head. The first request of a connection must be complete within the
/// head timeout of the accept; later ones may wait up to the idle timeout for their first byte,
/// then have the head timeout for the rest. The head may not grow past `max_head_bytes`.
async fn read_head(
    reader: &mut Reader<OwnedReadHalf>,
    limits: &Limits,
    first: bool,
    signal: &mut ShutdownSignal,
) -> HeadRead {
    let accepted = Instant::now();
    if reader.buffered().is_empty() {
        let wait = if first {
            limits.head_timeout
        } else {
            limits.idle_timeout
        };
        let arrived = tokio::select! {
            () = signal.fired() => return HeadRead::Closed,
            arrived = tokio::time::timeout(wait, reader.fill_some()) => arrived,
        };
        match arrived {
            Ok(Ok(bytes)) if !bytes.is_empty() => {}
            Err(_) if first => return HeadRead::Refuse(timed_out(limits)),
            _ => return HeadRead::Closed,
        }
    }
    let started = if first { accepted } else { Instant::now() };
    let deadline = tokio::time::Instant::from_std(started + limits.head_timeout);
    loop {
        match head::parse_request(reader.buffered()) {
            // The bound holds however the bytes arrived: one large read can hold a whole head.
            Ok(Parsed::Complete(_, len)) if len > limits.max_head_bytes => {
                return HeadRead::Refuse(too_large(limits));
            }
            Ok(Parsed::Complete(head, len)) => {
                reader.consume(len);
                return HeadRead::Head(head, started);
            }
            Ok(Parsed::Partial) => {}
            Err(error) => {
                let detail = format!("request refused (bad_target): {error}");
                return HeadRead::Refuse(reply::refusal(Reason::BadTarget, &detail, After::Close));
            }
        }
        if reader.buffered().len() >= limits.max_head_bytes {
            return HeadRead::Refuse(too_large(limits));
        }
        match tokio::time::timeout_at(deadline, reader.fill(limits.max_head_bytes)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return HeadRead::Closed,
            Ok(Ok(_)) => {}
            Err(_) => return HeadRead::Refuse(timed_out(limits)),
        }
    }
}

fn too_large(limits: &Limits) -> Vec<u8> {
    let detail = format!(
        "the request head is larger than {} bytes; send fewer or shorter header fields",
        limits.max_head_bytes
    );
    reply::response(431, Some(Reason::BadTarget), &detail, After::Close)
}

fn timed_out(limits: &Limits) -> Vec<u8> {
    let detail = format!(
        "the request head was not complete within {} ms; send it at once",
        limits.head_timeout.as_millis()
    );
    reply::response(408, None, &detail, After::Close)
}
