//! Deciding, resolving and dialling one target: the only place the proxy opens an upstream
//! connection, and only ever to an address [`crate::Policy::evaluate`] checked.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use tokio::net::TcpStream;

use super::listener::Shared;
use crate::{Decision, Host, Reason, Target};

/// The outcome of deciding and dialling: what the audit record needs either way.
pub(super) struct Dialled {
    pub(super) resolved: Vec<IpAddr>,
    pub(super) result: Result<(TcpStream, SocketAddr), Refused>,
}

/// Why no connection was made, and the detail for the client's response body.
pub(super) struct Refused {
    pub(super) reason: Reason,
    pub(super) detail: String,
}

/// Decides `target`, resolves it (names only), checks every address, then connects to the
/// checked addresses in answer order. Never re-resolves between the check and the dial (that
/// gap is what DNS rebinding uses).
pub(super) async fn dial(shared: &Shared, client: IpAddr, target: &Target) -> Dialled {
    let (policy, resolver, limits) = (
        &shared.config.policy,
        &shared.config.resolver,
        &shared.config.limits,
    );
    // A name may block in the resolver: one client gets a share of the lookups, so its slow
    // names cannot make everyone else's fail.
    let _lookup = match target.host() {
        Host::Ip(_) => None,
        Host::Name(_) if policy.decide(target).reason().is_some() => None,
        Host::Name(_) => match shared.share(client, true) {
            Some(share) => Some(share),
            None => {
                return Dialled {
                    resolved: Vec::new(),
                    result: Err(Refused {
                        reason: Reason::ResolveFailed,
                        detail: format!(
                            "`{target}` was not resolved: this client already has {} lookups in flight; retry when they end",
                            limits.max_lookups_per_client
                        ),
                    }),
                };
            }
        },
    };
    let evaluation = match target.host() {
        // An IP literal is never resolved: evaluate without leaving the async thread.
        Host::Ip(_) => policy.evaluate(target, resolver.as_ref()),
        // Resolvers may block (the system resolver waits up to its timeout), so they run on the
        // blocking pool; the policy is only consulted for names it allows.
        Host::Name(_) => {
            let (policy, resolver, owned) =
                (Arc::clone(policy), Arc::clone(resolver), target.clone());
            match tokio::task::spawn_blocking(move || policy.evaluate(&owned, resolver.as_ref()))
                .await
            {
                Ok(evaluation) => evaluation,
                Err(_) => {
                    return Dialled {
                        resolved: Vec::new(),
                        result: Err(Refused {
                            reason: Reason::ResolveFailed,
                            detail: format!("resolving `{target}` failed; retry the request"),
                        }),
                    };
                }
            }
        }
    };
    let resolved = evaluation.resolved;
    if let Decision::Deny(reason) = evaluation.decision {
        let detail = match (&evaluation.resolve_error, reason) {
            (Some(error), _) => format!("`{target}`: {error}"),
            (None, reason) => explain(target, reason),
        };
        return Dialled {
            resolved,
            result: Err(Refused { reason, detail }),
        };
    }
    let mut timed_out = false;
    let mut last_error = None;
    for address in evaluation.dial {
        match tokio::time::timeout(limits.connect_timeout, TcpStream::connect(address)).await {
            Ok(Ok(stream)) => {
                // Interactive protocols (TLS handshakes, request/response) suffer from Nagle.
                let _ = stream.set_nodelay(true);
                return Dialled {
                    resolved,
                    result: Ok((stream, address)),
                };
            }
            Ok(Err(error)) => last_error = Some(format!("{address}: {error}")),
            Err(_) => timed_out = true,
        }
    }
    let (reason, detail) = if timed_out && last_error.is_none() {
        (
            Reason::UpstreamTimeout,
            format!("`{target}` did not accept a connection in time"),
        )
    } else {
        (
            Reason::ConnectFailed,
            format!(
                "`{target}` refused the connection ({})",
                last_error.unwrap_or_default()
            ),
        )
    };
    Dialled {
        resolved,
        result: Err(Refused { reason, detail }),
    }
}

/// The response body for a policy refusal: what was refused and where the rule lives.
pub(super) fn explain(target: &impl std::fmt::Display, reason: Reason) -> String {
    let why = match reason {
        Reason::NotAllowed => "no allow pattern names it; add it to the step's `network.allow`",
        Reason::DeniedPipeline => "a pipeline deny pattern matches it",
        Reason::DeniedOperator => "the operator policy denies it; a pipeline cannot lift that",
        Reason::PortNotAllowed => "an allow pattern names the host but not this port; add `:PORT`",
        Reason::IpLiteral => "IP literals need an `ip:` rule, such as `ip:192.0.2.1:443`",
        Reason::PrivateAddress => {
            "it is (or resolves to) a non-public address; the operator may add `allow_private`"
        }
        Reason::MixedAnswer => "it resolves to public and non-public addresses at once",
        Reason::SelfAddress => "it is an address this cordon process listens on",
        Reason::BadTarget => "the target is not `host:port` or `http://host/path`",
        Reason::ResolveFailed => "the name did not resolve",
        Reason::ConnectFailed => "the connection failed",
        Reason::UpstreamTimeout => "the upstream did not answer in time",
        Reason::SniMismatch => "the TLS ClientHello names another host than the CONNECT target",
    };
    format!("`{target}` refused ({reason}): {why}")
}
