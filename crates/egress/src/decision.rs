//! `Decision` (the verdict on a target) and `Evaluation` (the verdict after resolution, with
//! everything an audit record needs).

use std::net::{IpAddr, SocketAddr};

use crate::{Reason, ResolveError};

/// The verdict of [`crate::decide`] on a target, before any name is resolved.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Decision {
    /// Go on: resolve the name (and check the answer with [`crate::Policy::admit`]), or dial the
    /// already checked IP literal.
    Allow,
    /// Refuse with this reason.
    Deny(Reason),
}

impl Decision {
    /// The refusal reason, if any.
    pub fn reason(self) -> Option<Reason> {
        match self {
            Decision::Allow => None,
            Decision::Deny(r) => Some(r),
        }
    }

    /// `allow` or `deny`, as in audit records.
    pub fn as_str(self) -> &'static str {
        match self {
            Decision::Allow => "allow",
            Decision::Deny(_) => "deny",
        }
    }
}

/// The outcome of [`crate::Policy::evaluate`]: decision, the addresses the name resolved to (for
/// the audit record's `resolved`), and the checked socket addresses to dial, in answer order.
#[derive(Debug)]
pub struct Evaluation {
    /// Allow, or the first reason to refuse.
    pub decision: Decision,
    /// The resolver's answer, canonicalised (empty for IP literals and for targets refused
    /// before resolution).
    pub resolved: Vec<IpAddr>,
    /// Where the proxy may connect; empty unless the decision is `Allow`.
    pub dial: Vec<SocketAddr>,
    /// Why resolution failed, when the reason is `resolve_failed`.
    pub resolve_error: Option<ResolveError>,
}
