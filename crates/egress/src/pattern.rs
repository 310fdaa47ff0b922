//! `Pattern`: one entry of an allow or deny list (DESIGN §5 "Patterns").
//!
//! ```text
//! pattern   = "ip:" ip-rule | names [ ":" ports ]
//! names     = "*" (deny lists only) | "*." NAME (>= 2 labels) | NAME
//! ip-rule   = ( IPV4 | "[" IPV6 "]" ) [ "/" LENGTH ] ":" ports     ; port required
//! ports     = PORT (1-65535, ASCII digits, no sign, no leading zero) | "*"
//! ```
//! Without a port an allow pattern admits 80 and 443 and a deny pattern every port.

use std::fmt;
use std::net::IpAddr;

use crate::error::ip_rule_example;
use crate::{Cidr, HostName, PatternError, Port, Ports, TargetError};

/// Which list a pattern is written in; it decides what a missing port means.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PatternList {
    /// No port means 80 and 443; `*` alone is refused (that is `network: open`).
    Allow,
    /// No port means every port.
    Deny,
}

/// The destinations a pattern names, without its ports.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Scope {
    /// `example.com`: exactly that name.
    Name(HostName),
    /// `*.example.com`: every strict subdomain of the name, at any depth, never the name itself.
    Subdomains(HostName),
    /// `*`: every name and every address (deny lists only).
    Everything,
    /// `ip:ADDR[/LEN]`: the addresses of a range, reached as IP literals.
    Ip(Cidr),
}

/// A parsed, canonical network pattern. `Display` writes the canonical text, which parses back
/// to an equal pattern in the same list.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Pattern {
    scope: Scope,
    ports: Ports,
}

impl Pattern {
    /// Parses one pattern written in `list`.
    pub fn parse(text: &str, list: PatternList) -> Result<Pattern, PatternError> {
        if text.is_empty() {
            return Err(PatternError::Empty);
        }
        // Whitespace would be trimmed by some readers and not others; refuse it outright.
        if text.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(PatternError::Whitespace {
                text: text.to_owned(),
            });
        }
        if let Some(rule) = strip_prefix_ignore_case(text, "ip:") {
            return parse_ip_rule(text, rule);
        }
        let (host, port) = split_name_port(text)?;
        let ports = match port {
            None => match list {
                PatternList::Allow => Ports::Web,
                PatternList::Deny => Ports::Any,
            },
            Some("*") => Ports::Any,
            Some(p) => Ports::One(Port::parse(p)?),
        };
        let scope = if host == "*" {
            match list {
                PatternList::Allow => {
                    return Err(PatternError::EverythingAllowed {
                        text: text.to_owned(),
                    });
                }
                PatternList::Deny => Scope::Everything,
            }
        } else if let Some(suffix) = host.strip_prefix("*.") {
            if suffix.contains('*') {
                return Err(PatternError::WildcardPosition {
                    text: text.to_owned(),
                });
            }
            let suffix = HostName::parse(suffix)?;
            if suffix.label_count() < 2 {
                return Err(PatternError::WildcardTooShort {
                    text: text.to_owned(),
                });
            }
            Scope::Subdomains(suffix)
        } else if host.contains('*') {
            return Err(PatternError::WildcardPosition {
                text: text.to_owned(),
            });
        } else if host.trim_end_matches('.').eq_ignore_ascii_case("ip") {
            // `ip` with a port would print as `ip:443`, which reads back as an ip: rule.
            return Err(PatternError::NameIp {
                text: text.to_owned(),
            });
        } else {
            Scope::Name(HostName::parse(host).map_err(|e| match e {
                TargetError::IpLiteral { ip, .. } => PatternError::IpLiteral {
                    text: text.to_owned(),
                    rule: ip_rule_example(ip, port),
                },
                other => other.into(),
            })?)
        };
        Ok(Pattern { scope, ports })
    }

    /// A pattern from parts the grammar produced (grant arithmetic); kept crate-private so every
    /// public `Pattern` prints as text that parses back to it.
    pub(crate) fn new(scope: Scope, ports: Ports) -> Pattern {
        Pattern { scope, ports }
    }

    /// The destinations.
    pub fn scope(&self) -> &Scope {
        &self.scope
    }

    /// The ports.
    pub fn ports(&self) -> Ports {
        self.ports
    }
}

impl fmt::Display for Pattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.scope {
            Scope::Name(n) => write!(f, "{n}")?,
            Scope::Subdomains(s) => write!(f, "*.{s}")?,
            Scope::Everything => f.write_str("*")?,
            Scope::Ip(c) => match c.network() {
                IpAddr::V4(_) => write!(f, "ip:{c}")?,
                IpAddr::V6(v6) if c.length() == 128 => write!(f, "ip:[{v6}]")?,
                IpAddr::V6(v6) => write!(f, "ip:[{v6}]/{}", c.length())?,
            },
        }
        match self.ports {
            Ports::Web => Ok(()),
            Ports::Any => f.write_str(":*"),
            Ports::One(p) => write!(f, ":{p}"),
        }
    }
}

fn strip_prefix_ignore_case<'a>(text: &'a str, prefix: &str) -> Option<&'a str> {
    let head = text.get(..prefix.len())?;
    head.eq_ignore_ascii_case(prefix)
        .then(|| &text[prefix.len()..])
}

/// Splits `name[:port]`, recognising IP literals written where a name belongs so the error can
/// name the `ip:` rule to write instead.
fn split_name_port(text: &str) -> Result<(&str, Option<&str>), PatternError> {
    let ip_literal = |ip: IpAddr, port: Option<&str>| PatternError::IpLiteral {
        text: text.to_owned(),
        rule: ip_rule_example(ip, port),
    };
    if let Some(inner) = text.strip_prefix('[') {
        let (address, rest) = inner.split_once(']').unwrap_or((inner, ""));
        let port = rest.strip_prefix(':');
        return Err(match address.parse::<IpAddr>() {
            Ok(ip) => ip_literal(ip, port),
            Err(_) => TargetError::BracketedName {
                text: text.to_owned(),
                inner: address.to_owned(),
            }
            .into(),
        });
    }
    match text.matches(':').count() {
        0 => Ok((text, None)),
        1 => Ok(text
            .split_once(':')
            .map(|(h, p)| (h, Some(p)))
            .unwrap_or((text, None))),
        _ => {
            if let Ok(ip) = text.parse::<IpAddr>() {
                return Err(ip_literal(ip, None));
            }
            if let Some((address, port)) = text.rsplit_once(':')
                && let Ok(ip) = address.parse::<IpAddr>()
            {
                return Err(ip_literal(ip, Some(port)));
            }
            Err(TargetError::InvalidCharacter {
                text: text.to_owned(),
                character: ':',
            }
            .into())
        }
    }
}

/// `rule` is the text after `ip:`.
fn parse_ip_rule(text: &str, rule: &str) -> Result<Pattern, PatternError> {
    let address_error = |address: &str| PatternError::IpRuleAddress {
        text: text.to_owned(),
        address: address.to_owned(),
    };
    let (range, port) = if let Some(inner) = rule.strip_prefix('[') {
        let Some((address, rest)) = inner.split_once(']') else {
            return Err(address_error(rule));
        };
        if address.contains('%') {
            return Err(TargetError::ZoneId {
                text: text.to_owned(),
            }
            .into());
        }
        if address.parse::<std::net::Ipv6Addr>().is_err() {
            return Err(match address.parse::<IpAddr>() {
                Ok(_) => TargetError::BracketedName {
                    text: text.to_owned(),
                    inner: address.to_owned(),
                }
                .into(),
                Err(_) => address_error(address),
            });
        }
        let (length, port) = match rest.split_once(':') {
            Some((length, port)) => (length, Some(port)),
            None => (rest, None),
        };
        let length = match length {
            "" => String::new(),
            l if l.starts_with('/') => l.to_owned(),
            _ => return Err(address_error(rule)),
        };
        (format!("{address}{length}"), port)
    } else {
        match rule.rsplit_once(':') {
            Some((range, _)) if range.contains(':') => {
                return Err(PatternError::IpRuleUnbracketed {
                    text: text.to_owned(),
                });
            }
            Some((range, port)) => (range.to_owned(), Some(port)),
            None if rule.parse::<std::net::Ipv6Addr>().is_ok() => {
                return Err(PatternError::IpRuleUnbracketed {
                    text: text.to_owned(),
                });
            }
            None => (rule.to_owned(), None),
        }
    };
    let cidr = Cidr::parse(&range).map_err(|e| match e {
        TargetError::BadCidr { .. } => address_error(&range),
        other => other.into(),
    })?;
    let ports = match port {
        None => {
            return Err(PatternError::IpRuleNeedsPort {
                text: text.to_owned(),
            });
        }
        Some("*") => Ports::Any,
        Some(p) => Ports::One(Port::parse(p)?),
    };
    Ok(Pattern {
        scope: Scope::Ip(cidr),
        ports,
    })
}
