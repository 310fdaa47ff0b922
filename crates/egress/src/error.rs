//! What can be wrong with egress text a user or a client wrote: targets, names, CIDRs, patterns.
//!
//! Messages are lowercase, quote the offending text, and end with the fix, because the pipeline
//! crate prints them verbatim after `file:line:col: ` and the proxy logs them in audit records.

use std::net::{IpAddr, Ipv4Addr};

use thiserror::Error;

/// A host name, CIDR or proxy target that cannot be used. In the proxy every variant is the
/// `bad_target` reason (400).
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum TargetError {
    #[error("the host name is empty; write a name such as `example.com`")]
    EmptyName,
    #[error("`{text}` is not ASCII; write the name's `xn--` A-label (punycode) instead")]
    NonAscii { text: String },
    #[error("`{text}` is an IP literal, not a host name; write an ip: rule such as `{}`", ip_rule_example(*.ip, None))]
    IpLiteral { text: String, ip: IpAddr },
    #[error("`{}` contains {}, which a host name cannot contain; use only ASCII letters, digits, `-`, `_` and `.`", .text.escape_default(), describe_char(*.character))]
    InvalidCharacter { text: String, character: char },
    #[error("`{text}` has an empty label; remove the extra `.` (one trailing dot at most)")]
    EmptyLabel { text: String },
    #[error(
        "label `{label}` is longer than 63 bytes; shorten it, DNS labels hold at most 63 bytes"
    )]
    LabelTooLong { label: String },
    #[error("the host name is {length} bytes long; shorten it, names hold at most 253 bytes")]
    NameTooLong { length: usize },
    #[error("`{text}` looks like a numeric IP address, which resolvers read as an address; write an ip: rule such as `{}`", numeric_example(*.address))]
    NumericName {
        text: String,
        address: Option<Ipv4Addr>,
    },
    #[error("the target is empty; write `host:port`, such as `example.com:443`")]
    EmptyTarget,
    #[error("`{}` contains {}; a target is `host:port` or `http://host[:port]/path` in printable ASCII", .text.escape_default(), describe_char(*.character))]
    TargetCharacter { text: String, character: char },
    #[error("`{text}` contains userinfo (`@`); send the target without a user name or password")]
    Userinfo { text: String },
    #[error("`{text}` has no port; write `host:port`, such as `example.com:443`")]
    MissingPort { text: String },
    #[error(
        "port `{port}` is not a number from 1 to 65535; write ASCII digits without a sign, such as `443`"
    )]
    BadPort { port: String },
    #[error("port `{port}` has a leading zero; write it without one, such as `443`")]
    PortLeadingZero { port: String },
    #[error(
        "`{text}` puts brackets around something that is not an IPv6 address; brackets are only for IPv6, write `{inner}` without them"
    )]
    BracketedName { text: String, inner: String },
    #[error("`{text}` has an IPv6 zone id (`%`); zone ids are not allowed, use a global address")]
    ZoneId { text: String },
    #[error(
        "`{text}` is not a valid bracketed IPv6 address; write one such as `[2001:db8::1]:443`"
    )]
    BadIpv6 { text: String },
    #[error(
        "`{text}` looks like an IPv6 address without brackets; write it as `[ADDRESS]:PORT`, such as `[2001:db8::1]:443`"
    )]
    UnbracketedIpv6 { text: String },
    #[error(
        "`{text}` is not an absolute `http://` URI; send `CONNECT host:port` for TLS, or `GET http://host/path`"
    )]
    NotHttpUri { text: String },
    #[error(
        "`{text}` is not an address or CIDR; write one such as `10.0.0.0/8`, `fd00::/8` or `192.0.2.1`"
    )]
    BadCidr { text: String },
    #[error("prefix length `{length}` in `{text}` is not a number from 0 to {max}; write one such as `{text_network}/{max}`", text_network = .text.split('/').next().unwrap_or_default())]
    BadPrefixLength {
        text: String,
        length: String,
        max: u8,
    },
    #[error("`{text}` has address bits set after the prefix length; write `{network}`")]
    HostBitsSet { text: String, network: String },
    #[error("`{text}` is not `HOST=ADDRESS`; write one such as `registry.example=192.0.2.10`")]
    BadResolve { text: String },
    #[error("`{text}` is too long; a target is at most {max} bytes")]
    TooLong { text: String, max: usize },
}

/// A network pattern (DESIGN §5) that cannot be used.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum PatternError {
    #[error("the pattern is empty; write a name such as `example.com`")]
    Empty,
    #[error("pattern `{}` contains whitespace or a control character; write it without spaces", .text.escape_default())]
    Whitespace { text: String },
    #[error("`{text}` is an IP literal; write an ip: rule such as `{rule}`")]
    IpLiteral { text: String, rule: String },
    #[error("`{text}`: `*` may only be the whole first label, as in `*.example.com`")]
    WildcardPosition { text: String },
    #[error(
        "`{text}` needs at least two labels after `*.`; write a narrower wildcard such as `*.example.com`"
    )]
    WildcardTooShort { text: String },
    #[error(
        "`{text}` in an allow list would allow every name; list the names, or use `network: open`"
    )]
    EverythingAllowed { text: String },
    #[error("`{text}` has no port; ip: rules need one, such as `{text}:443` or `{text}:*`")]
    IpRuleNeedsPort { text: String },
    #[error(
        "`{text}`: `{address}` is not an IP address or CIDR; write an ip: rule such as `ip:192.0.2.0/24:443` or `ip:[2001:db8::]/32:*`"
    )]
    IpRuleAddress { text: String, address: String },
    #[error(
        "`{text}`: IPv6 addresses in ip: rules need brackets; write one such as `ip:[2001:db8::1]:443`"
    )]
    IpRuleUnbracketed { text: String },
    #[error(
        "`{text}` reads as the start of an ip: rule; the single-label name `ip` cannot be a pattern, write an ip: rule such as `ip:192.0.2.1:443`"
    )]
    NameIp { text: String },
    #[error(transparent)]
    Target(#[from] TargetError),
}

/// `ip:192.0.2.1:443`, `ip:[2001:db8::1]:443`: the rule that reaches `ip` on `port` (443 if none).
pub(crate) fn ip_rule_example(ip: IpAddr, port: Option<&str>) -> String {
    let port = port.unwrap_or("443");
    match ip {
        IpAddr::V4(v4) => format!("ip:{v4}:{port}"),
        IpAddr::V6(v6) => format!("ip:[{v6}]:{port}"),
    }
}

fn numeric_example(address: Option<Ipv4Addr>) -> String {
    match address {
        Some(a) => format!("ip:{a}:443"),
        None => "ip:192.0.2.1:443".to_owned(),
    }
}

fn describe_char(c: char) -> String {
    if c.is_ascii_graphic() {
        format!("`{c}`")
    } else {
        format!("the byte `{}`", c.escape_default())
    }
}

impl TargetError {
    /// The proxy reason for every unparseable target: `bad_target` (400).
    pub fn reason(&self) -> crate::Reason {
        crate::Reason::BadTarget
    }
}
