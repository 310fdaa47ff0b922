//! `Target`: the one canonical parse of a proxy destination (CONNECT authority or absolute-form
//! URI). The same value drives the decision, the resolution, the dial and the audit record.
//!
//! The parser is strict on purpose. Proxies of other agent sandboxes were bypassed by inputs on
//! which two parsers disagreed: `[allowed.example]` brackets, unbracketed IPv6 whose last group
//! was taken as the port, `user@` prefixes, `%`-escapes and `\` that one side decoded, octal or
//! hex IPv4 spellings that the resolver turned into loopback. Each of those is refused here rather
//! than interpreted, so there is nothing for a second parser to read differently.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::{HostName, Port, TargetError, canonical_ip};

/// Longest authority accepted: a 253-byte name, `:`, a 5-digit port, with room to spare. Longer
/// input is refused before any other work.
const MAX_AUTHORITY: usize = 300;
/// Longest absolute-form URI accepted (the proxy also bounds the whole request head).
const MAX_URI: usize = 8192;

/// Where a connection wants to go: a canonical name or address.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Host {
    /// A DNS name, to be resolved by the proxy.
    Name(HostName),
    /// An IP literal (IPv4-mapped IPv6 already converted to IPv4).
    Ip(IpAddr),
}

impl fmt::Display for Host {
    /// The name, the IPv4 address, or the IPv6 address in brackets, as in an authority.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Host::Name(n) => write!(f, "{n}"),
            Host::Ip(IpAddr::V4(v4)) => write!(f, "{v4}"),
            Host::Ip(IpAddr::V6(v6)) => write!(f, "[{v6}]"),
        }
    }
}

/// A destination: host and port. `Display` writes the authority (`example.com:443`,
/// `[2001:db8::1]:443`), which [`Target::parse`] reads back to an equal value.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Target {
    host: Host,
    port: Port,
}

/// Whether an authority must carry a port.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PortRule {
    /// CONNECT: `host:port` (RFC 9110 §9.3.6).
    Required,
    /// Absolute-form URI: a missing port means this one.
    Default(Port),
}

/// A parsed absolute-form request target (`http://host[:port]/path?query`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AbsoluteForm {
    target: Target,
    path: Box<str>,
}

impl AbsoluteForm {
    /// The destination (port 80 when the URI has none).
    pub fn target(&self) -> &Target {
        &self.target
    }

    /// The origin form to send upstream: the path and query, always starting with `/`.
    pub fn path(&self) -> &str {
        &self.path
    }
}

impl Target {
    /// A target from its parts (IPv4-mapped IPv6 addresses are canonicalised to IPv4).
    pub fn new(host: Host, port: Port) -> Target {
        let host = match host {
            Host::Ip(ip) => Host::Ip(canonical_ip(ip)),
            name => name,
        };
        Target { host, port }
    }

    /// Parses a CONNECT authority: `name:port`, `a.b.c.d:port` or `[ipv6]:port`.
    pub fn parse(text: &str) -> Result<Target, TargetError> {
        parse_authority(text, PortRule::Required)
    }

    /// Parses an absolute-form request target: `http://` (any case), an authority with an
    /// optional port (default 80), and a path/query of printable ASCII. `https://` and other
    /// schemes are refused: TLS goes through CONNECT. A fragment (`#`) is refused, since clients
    /// never send one.
    pub fn parse_absolute(text: &str) -> Result<AbsoluteForm, TargetError> {
        if text.len() > MAX_URI {
            return Err(TargetError::TooLong {
                text: truncate(text),
                max: MAX_URI,
            });
        }
        check_bytes(text)?;
        let rest = text
            .get(..7)
            .filter(|s| s.eq_ignore_ascii_case("http://"))
            .map(|_| &text[7..])
            .ok_or_else(|| TargetError::NotHttpUri {
                text: text.to_owned(),
            })?;
        if rest.contains('#') {
            return Err(TargetError::TargetCharacter {
                text: text.to_owned(),
                character: '#',
            });
        }
        let end = rest.find(['/', '?']).unwrap_or(rest.len());
        let (authority, path) = rest.split_at(end);
        let target = parse_authority(authority, PortRule::Default(Port::HTTP))?;
        let path = if path.starts_with('/') {
            path.to_owned()
        } else {
            format!("/{path}")
        };
        Ok(AbsoluteForm {
            target,
            path: path.into_boxed_str(),
        })
    }

    /// The host.
    pub fn host(&self) -> &Host {
        &self.host
    }

    /// The port.
    pub fn port(&self) -> Port {
        self.port
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.host, self.port)
    }
}

fn parse_authority(text: &str, rule: PortRule) -> Result<Target, TargetError> {
    if text.is_empty() {
        return Err(TargetError::EmptyTarget);
    }
    if text.len() > MAX_AUTHORITY {
        return Err(TargetError::TooLong {
            text: truncate(text),
            max: MAX_AUTHORITY,
        });
    }
    check_bytes(text)?;
    // Userinfo is how `allowed.example@evil.example` tricks a parser that splits at the first
    // `@` while another splits at the last; no client needs it in a proxy target.
    if text.contains('@') {
        return Err(TargetError::Userinfo {
            text: text.to_owned(),
        });
    }
    let (host, port) = if let Some(inner) = text.strip_prefix('[') {
        let (address, rest) = inner.split_once(']').ok_or_else(|| TargetError::BadIpv6 {
            text: text.to_owned(),
        })?;
        let host = parse_bracketed(text, address)?;
        let port = match rest {
            "" => None,
            r => Some(r.strip_prefix(':').ok_or_else(|| TargetError::BadIpv6 {
                text: text.to_owned(),
            })?),
        };
        (host, port)
    } else {
        let (host, port) = match text.matches(':').count() {
            0 => (text, None),
            // Two or more colons outside brackets is an IPv6 address whose port cannot be told
            // from its last group (`::1:443`); refuse instead of guessing.
            1 => text
                .split_once(':')
                .map(|(h, p)| (h, Some(p)))
                .unwrap_or((text, None)),
            _ => {
                return Err(TargetError::UnbracketedIpv6 {
                    text: text.to_owned(),
                });
            }
        };
        (parse_unbracketed(host)?, port)
    };
    let port = match (port, rule) {
        (Some(p), _) => Port::parse(p)?,
        (None, PortRule::Default(p)) => p,
        (None, PortRule::Required) => {
            return Err(TargetError::MissingPort {
                text: text.to_owned(),
            });
        }
    };
    Ok(Target::new(host, port))
}

/// Only an IPv6 address may sit in brackets: a bracketed name or IPv4 address is a spelling some
/// parsers unwrap and others keep, so it is refused.
fn parse_bracketed(text: &str, address: &str) -> Result<Host, TargetError> {
    if address.contains('%') {
        return Err(TargetError::ZoneId {
            text: text.to_owned(),
        });
    }
    if let Ok(v6) = address.parse::<Ipv6Addr>() {
        return Ok(Host::Ip(IpAddr::V6(v6)));
    }
    if address.is_empty() || address.contains(':') {
        return Err(TargetError::BadIpv6 {
            text: text.to_owned(),
        });
    }
    Err(TargetError::BracketedName {
        text: text.to_owned(),
        inner: address.to_owned(),
    })
}

/// A dotted-quad IPv4 address (std's parser: exactly four decimal parts, no leading zeros) or a
/// name; every other numeric spelling is refused by [`HostName::parse`].
fn parse_unbracketed(host: &str) -> Result<Host, TargetError> {
    if let Ok(v4) = host.parse::<Ipv4Addr>() {
        return Ok(Host::Ip(IpAddr::V4(v4)));
    }
    HostName::parse(host).map(Host::Name)
}

/// Refuses non-ASCII, control bytes, space, DEL and `\`. `%` is refused in the authority by the
/// name grammar (no percent-decoding, ever); in a path it is ordinary.
fn check_bytes(text: &str) -> Result<(), TargetError> {
    if !text.is_ascii() {
        return Err(TargetError::NonAscii {
            text: text.escape_default().to_string(),
        });
    }
    match text.chars().find(|&c| !c.is_ascii_graphic() || c == '\\') {
        Some(character) => Err(TargetError::TargetCharacter {
            text: text.to_owned(),
            character,
        }),
        None => Ok(()),
    }
}

fn truncate(text: &str) -> String {
    let mut end = 64.min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", text[..end].escape_default())
}
