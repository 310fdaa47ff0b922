//! `Reason`: the stable codes a refusal or failure carries (`X-Cordon-Reason`, audit records,
//! events). The strings and statuses are DESIGN Appendix A; never rename them.

use std::fmt;

/// Why a connection was refused or failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reason {
    /// No allow pattern names the host (403).
    NotAllowed,
    /// A pipeline deny pattern matches (403).
    DeniedPipeline,
    /// An operator deny pattern matches (403).
    DeniedOperator,
    /// An allow pattern names the host, but not on this port (403).
    PortNotAllowed,
    /// An IP literal that no `ip:` rule allows (403).
    IpLiteral,
    /// A loopback, private, link-local, CGNAT, metadata, … address that `allow_private` does not
    /// cover, or a metadata address, which nothing can allow (403).
    PrivateAddress,
    /// A name resolved to public and non-public addresses at once (403).
    MixedAnswer,
    /// An address and port this cordon process listens on (403).
    SelfAddress,
    /// The target could not be parsed (400).
    BadTarget,
    /// The name did not resolve (502).
    ResolveFailed,
    /// No checked address accepted the connection (502).
    ConnectFailed,
    /// The upstream did not answer in time (504).
    UpstreamTimeout,
    /// A CONNECT to port 443 whose TLS ClientHello names another host, or none (403, Appendix
    /// B): the tunnel is closed before any upstream connection is made.
    SniMismatch,
}

impl Reason {
    /// Every reason, in Appendix A order (then Appendix B's).
    pub const ALL: [Reason; 13] = [
        Reason::NotAllowed,
        Reason::DeniedPipeline,
        Reason::DeniedOperator,
        Reason::PortNotAllowed,
        Reason::IpLiteral,
        Reason::PrivateAddress,
        Reason::MixedAnswer,
        Reason::SelfAddress,
        Reason::BadTarget,
        Reason::ResolveFailed,
        Reason::ConnectFailed,
        Reason::UpstreamTimeout,
        Reason::SniMismatch,
    ];

    /// The Appendix A code.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::NotAllowed => "not_allowed",
            Reason::DeniedPipeline => "denied_pipeline",
            Reason::DeniedOperator => "denied_operator",
            Reason::PortNotAllowed => "port_not_allowed",
            Reason::IpLiteral => "ip_literal",
            Reason::PrivateAddress => "private_address",
            Reason::MixedAnswer => "mixed_answer",
            Reason::SelfAddress => "self",
            Reason::BadTarget => "bad_target",
            Reason::ResolveFailed => "resolve_failed",
            Reason::ConnectFailed => "connect_failed",
            Reason::UpstreamTimeout => "upstream_timeout",
            Reason::SniMismatch => "sni_mismatch",
        }
    }

    /// The reason with this code.
    pub fn from_code(code: &str) -> Option<Reason> {
        Reason::ALL.into_iter().find(|r| r.as_str() == code)
    }

    /// The HTTP status the proxy answers with.
    pub fn status(self) -> u16 {
        match self {
            Reason::NotAllowed
            | Reason::DeniedPipeline
            | Reason::DeniedOperator
            | Reason::PortNotAllowed
            | Reason::IpLiteral
            | Reason::PrivateAddress
            | Reason::MixedAnswer
            | Reason::SelfAddress
            | Reason::SniMismatch => 403,
            Reason::BadTarget => 400,
            Reason::ResolveFailed | Reason::ConnectFailed => 502,
            Reason::UpstreamTimeout => 504,
        }
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
