//! `CONNECT host:port`: parse once, decide, resolve, check, **dial first, then `200`**, then a
//! tunnel. The client learns the tunnel exists only once the upstream accepted, so a `200` always
//! means a checked address answered.

use std::time::Instant;

use tokio::io::AsyncWriteExt;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};

use super::audit::{AuditKind, Draft, Proto};
use super::dial::dial;
use super::head::RequestHead;
use super::listener::Shared;
use super::reader::Reader;
use super::reply::{self, After};
use super::{Identity, tunnel};
use crate::{Reason, Target};

/// Handles one CONNECT; the client connection ends with it. The `Host` header is ignored: the
/// request target is the only destination, so a misleading `Host` cannot steer anything.
pub(super) async fn handle(
    shared: &Shared,
    identity: &Identity,
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
    let dialled = dial(&config.policy, &config.resolver, &config.limits, &target).await;
    draft.resolved = &dialled.resolved;
    let (upstream, address) = match dialled.result {
        Ok(pair) => pair,
        Err(refused) => {
            draft.refused(config.audit.as_ref(), refused.reason);
            let _ = write
                .write_all(&reply::refusal(
                    refused.reason,
                    &refused.detail,
                    After::Close,
                ))
                .await;
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
    if write.write_all(reply::ESTABLISHED).await.is_err() {
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
