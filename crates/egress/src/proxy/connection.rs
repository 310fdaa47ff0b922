//! One client connection: read a bounded request head within the head timeout, hand it to the
//! CONNECT or the plain-HTTP handler, and repeat while the connection is kept alive.

use std::net::IpAddr;
use std::time::{Duration, Instant};

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

/// Answers a connection from a client that already holds its share of the slots: `429`, closed.
pub(super) async fn over_share(mut stream: TcpStream, share: usize) {
    let detail = format!(
        "this client already holds {share} connections to the proxy, its share; close some and retry"
    );
    let _ = stream
        .write_all(&reply::response(429, None, &detail, After::Close))
        .await;
}

/// Serves one accepted connection from `client` until it closes; its first head must arrive
/// within `head_timeout`.
pub(super) async fn serve(
    shared: &Shared,
    identity: &Identity,
    stream: TcpStream,
    mut signal: ShutdownSignal,
    client: IpAddr,
    head_timeout: Duration,
) {
    let _ = stream.set_nodelay(true);
    let limits = &shared.config.limits;
    let (read, mut write) = stream.into_split();
    let mut reader = Reader::new(read, limits.reader_bytes());
    let mut first = true;
    loop {
        let timing = Timing {
            head: if first {
                head_timeout
            } else {
                limits.head_timeout
            },
            idle: limits.idle_timeout,
        };
        let read = read_head(&mut reader, limits, timing, first, &mut signal, shared);
        let (head, started) = match read.await {
            HeadRead::Head(head, started) => (head, started),
            HeadRead::Closed => return,
            HeadRead::Refuse(response) => {
                let _ = write.write_all(&response).await;
                return;
            }
        };
        first = false;
        if let Some(expected) = &identity.credential {
            let given = head
                .headers
                .iter()
                .find(|h| h.is("proxy-authorization"))
                .map(|h| h.value.as_slice());
            if !cordon_protocol::secret::same(given.unwrap_or_default(), expected.as_bytes()) {
                let detail = "this listener serves cordon itself; it takes no other client";
                let _ = write
                    .write_all(&reply::response(407, None, detail, After::Close))
                    .await;
                return;
            }
        }
        // Methods are case-sensitive (RFC 9110 §9.1): `connect` is not CONNECT, and as an
        // origin-less request it is refused by the HTTP handler.
        if head.method == "CONNECT" {
            connect::handle(shared, identity, client, head, reader, write, started).await;
            return;
        }
        let next = http::handle(
            shared,
            identity,
            client,
            &head,
            &mut reader,
            &mut write,
            started,
        )
        .await;
        if next == Next::Close || signal.has_fired() {
            return;
        }
    }
}

/// The deadlines of one head.
#[derive(Clone, Copy)]
struct Timing {
    /// For the whole head (from accept for a connection's first request).
    head: Duration,
    /// For the first byte of a later request on a kept-alive connection.
    idle: Duration,
}

/// Reads the next request head. The first request of a connection must be complete within the
/// head timeout of the accept; later ones may wait up to the idle timeout for their first byte —
/// unless slots run out meanwhile, which closes the idle connection — then have the head timeout
/// for the rest. The head may not grow past `max_head_bytes`.
async fn read_head(
    reader: &mut Reader<OwnedReadHalf>,
    limits: &Limits,
    timing: Timing,
    first: bool,
    signal: &mut ShutdownSignal,
    shared: &Shared,
) -> HeadRead {
    let accepted = Instant::now();
    if reader.buffered().is_empty() {
        let wait = if first { timing.head } else { timing.idle };
        let arrived = if first {
            tokio::select! {
                () = signal.fired() => return HeadRead::Closed,
                arrived = tokio::time::timeout(wait, reader.fill_some()) => arrived,
            }
        } else {
            tokio::select! {
                () = signal.fired() => return HeadRead::Closed,
                // Another client waits for a slot: an idle keep-alive connection gives it up.
                () = shared.pressure.notified() => return HeadRead::Closed,
                arrived = tokio::time::timeout(wait, reader.fill_some()) => arrived,
            }
        };
        match arrived {
            Ok(Ok(bytes)) if !bytes.is_empty() => {}
            Err(_) if first => return HeadRead::Refuse(timed_out(timing.head)),
            _ => return HeadRead::Closed,
        }
    }
    let started = if first { accepted } else { Instant::now() };
    // A later head that starts while slots are scarce gets the scarce deadline too: otherwise a
    // kept-alive connection trickling one byte of each head keeps its slot for the full head
    // timeout, round after round.
    let head_timeout = if !first && shared.scarce() {
        limits.scarce_head_timeout.min(timing.head)
    } else {
        timing.head
    };
    let deadline = tokio::time::Instant::from_std(started + head_timeout);
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
            Err(_) => return HeadRead::Refuse(timed_out(head_timeout)),
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

fn timed_out(within: Duration) -> Vec<u8> {
    let detail = format!(
        "the request head was not complete within {} ms; send it at once",
        within.as_millis()
    );
    reply::response(408, None, &detail, After::Close)
}
