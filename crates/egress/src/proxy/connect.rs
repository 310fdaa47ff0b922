//! `CONNECT host:port`: parse once, decide, resolve, check, **dial first, then `200`**, then a
//! tunnel. The client learns the tunnel exists only once the upstream accepted, so a `200` always
//! means a checked address answered.
//!
//! Except for a name on port 443 with the SNI check on (DESIGN §18, reason `sni_mismatch`): the
//! policy decides first, then the proxy answers `200`, reads the TLS ClientHello (at most
//! 16 KiB, within `client_hello_timeout`), and dials only when its server name is the CONNECT
//! host — so an allowed name cannot carry a TLS session to another host behind the same
//! addresses (domain fronting by SNI). The ClientHello is then the tunnel's first bytes.

use std::time::Instant;

use tokio::io::AsyncWriteExt;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};

use super::audit::{AuditKind, Draft, Proto};
use super::dial::Dialled;
use super::dial::dial;
use super::head::RequestHead;
use super::listener::Shared;
use super::reader::Reader;
use super::reply::{self, After};
use super::{Identity, tunnel};
use crate::{Host, Reason, Target};

/// The most bytes of a ClientHello the SNI check reads.
const MAX_CLIENT_HELLO: usize = 16 << 10;

/// Handles one CONNECT; the client connection ends with it. The `Host` header is ignored: the
/// request target is the only destination, so a misleading `Host` cannot steer anything.
pub(super) async fn handle(
    shared: &Shared,
    identity: &Identity,
    client: std::net::IpAddr,
    head: RequestHead,
    reader: Reader<OwnedReadHalf>,
    mut write: OwnedWriteHalf,
    started: Instant,
) {
    let config = &shared.config;
    let mut draft = Draft {
        identity,
        proto: Proto::Connect,
        raw_target: &head.target,
        target: None,
        resolved: &[],
        dialed: None,
        started,
    };
    // Refusals close the connection: whatever the client pipelined after the head is dropped
    // with `reader`, unread by anyone upstream.
    let target = match Target::parse(&head.target) {
        Ok(target) => target,
        Err(error) => {
            draft.refused(config.audit.as_ref(), Reason::BadTarget);
            let detail = format!("CONNECT target refused (bad_target): {error}");
            let _ = write
                .write_all(&reply::refusal(Reason::BadTarget, &detail, After::Close))
                .await;
            return;
        }
    };
    draft.target = Some(&target);
    let sni_first = config.limits.sni_port == Some(target.port().get())
        && matches!(target.host(), Host::Name(_))
        && config.policy.decide(&target).reason().is_none();
    let mut reader = reader;
    let dialled: Dialled;
    if sni_first {
        // `200` before the dial: the ClientHello comes only after it.
        if write.write_all(reply::ESTABLISHED).await.is_err() {
            return;
        }
        let checked = check_sni(&mut reader, &target, config.limits.client_hello_timeout).await;
        if checked.is_err() {
            draft.refused(config.audit.as_ref(), Reason::SniMismatch);
            return;
        }
        dialled = dial(shared, client, &target).await;
        draft.resolved = &dialled.resolved;
    } else {
        dialled = dial(shared, client, &target).await;
        draft.resolved = &dialled.resolved;
    }
    let (upstream, address) = match dialled.result {
        Ok(pair) => pair,
        Err(refused) => {
            draft.refused(config.audit.as_ref(), refused.reason);
            // After an early `200` the client learns of the failure by the close.
            if !sni_first {
                let _ = write
                    .write_all(&reply::refusal(
                        refused.reason,
                        &refused.detail,
                        After::Close,
                    ))
                    .await;
            }
            return;
        }
    };
    draft.dialed = Some(address);
    // An unrecorded tunnel is not opened.
    if config
        .audit
        .record(AuditKind::Decision, &draft.record(None, 0, 0))
        .is_err()
    {
        return;
    }
    if !sni_first && write.write_all(reply::ESTABLISHED).await.is_err() {
        let _ = config
            .audit
            .record(AuditKind::Close, &draft.record(None, 0, 0));
        return;
    }
    let limits = &config.limits;
    let (client_read, pending) = reader.into_parts();
    let (up, down) = tunnel::run(
        (client_read, write),
        upstream.into_split(),
        pending,
        limits.buffer_bytes,
        limits.idle_timeout,
    )
    .await;
    let _ = config
        .audit
        .record(AuditKind::Close, &draft.record(None, up, down));
}

/// Why the SNI check refused a tunnel.
#[derive(Debug, PartialEq, Eq)]
enum SniRefusal {
    /// No ClientHello arrived in time, or it was larger than [`MAX_CLIENT_HELLO`].
    Incomplete,
    /// The first bytes are not a TLS ClientHello.
    NotTls,
    /// The ClientHello names no server.
    Missing,
    /// It names this other server.
    Other(String),
}

/// Reads the ClientHello into `reader`'s buffer (left there, unconsumed, for the tunnel) and
/// checks its server name against the CONNECT host.
async fn check_sni(
    reader: &mut Reader<OwnedReadHalf>,
    target: &Target,
    within: std::time::Duration,
) -> Result<(), SniRefusal> {
    let Host::Name(host) = target.host() else {
        return Ok(());
    };
    let deadline = tokio::time::Instant::now() + within;
    loop {
        match server_name(reader.buffered()) {
            Hello::Complete(name) => return compare(host.as_str(), name),
            Hello::NotTls => return Err(SniRefusal::NotTls),
            Hello::Partial if reader.buffered().len() >= MAX_CLIENT_HELLO => {
                return Err(SniRefusal::Incomplete);
            }
            Hello::Partial => {}
        }
        match tokio::time::timeout_at(deadline, reader.fill(MAX_CLIENT_HELLO)).await {
            Ok(Ok(n)) if n > 0 => {}
            _ => return Err(SniRefusal::Incomplete),
        }
    }
}

fn compare(host: &str, name: Option<String>) -> Result<(), SniRefusal> {
    match name {
        None => Err(SniRefusal::Missing),
        Some(name) => {
            let canonical = name.trim_end_matches('.');
            if canonical.eq_ignore_ascii_case(host) {
                Ok(())
            } else {
                Err(SniRefusal::Other(name))
            }
        }
    }
}

/// What the first bytes of a tunnel say about the server name.
pub(super) enum Hello {
    /// A whole ClientHello, and the server name it holds.
    Complete(Option<String>),
    /// More bytes are needed.
    Partial,
    /// Not a TLS ClientHello.
    NotTls,
}

/// The server name of the ClientHello at the start of `bytes`, parsed by rustls (which only
/// parses here: nothing is decrypted or answered).
pub(super) fn server_name(bytes: &[u8]) -> Hello {
    // A TLS handshake record starts with 0x16; anything else is another protocol.
    match bytes.first() {
        None => return Hello::Partial,
        Some(0x16) => {}
        Some(_) => return Hello::NotTls,
    }
    let mut acceptor = rustls::server::Acceptor::default();
    let mut input = bytes;
    while !input.is_empty() {
        match acceptor.read_tls(&mut input) {
            Ok(0) => break,
            Ok(_) => {}
            Err(_) => return Hello::NotTls,
        }
    }
    match acceptor.accept() {
        Ok(Some(accepted)) => {
            Hello::Complete(accepted.client_hello().server_name().map(str::to_owned))
        }
        Ok(None) => Hello::Partial,
        Err(_) => Hello::NotTls,
    }
}
