//! `Cidr`: an address range, as written in `allow_private` and in `ip:` rules.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::TargetError;

/// An IPv4 or IPv6 network: an address with all bits after the prefix length zero.
///
/// IPv4-mapped IPv6 ranges (`::ffff:10.0.0.0/104`) are stored as the IPv4 range they denote
/// (`10.0.0.0/8`), because targets and resolved addresses are canonicalised the same way
/// ([`canonical_ip`]); otherwise a mapped spelling could slip past an IPv4 rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Cidr {
    network: IpAddr,
    length: u8,
}

impl Cidr {
    /// Parses `10.0.0.0/8`, `fd00::/8`, or a bare address (`/32` or `/128`). Addresses use the
    /// strict dotted-quad / RFC 4291 text forms (no octal, hex or short IPv4, no zone id); the
    /// prefix length is plain decimal. Bits after the prefix must be zero: `10.0.0.1/8` is refused
    /// rather than silently widened, since the writer probably meant something else.
    pub fn parse(text: &str) -> Result<Cidr, TargetError> {
        let bad = || TargetError::BadCidr {
            text: text.escape_default().to_string(),
        };
        let (address, length) = match text.split_once('/') {
            Some((a, l)) => (a, Some(l)),
            None => (text, None),
        };
        if address.contains('%') {
            return Err(TargetError::ZoneId {
                text: text.to_owned(),
            });
        }
        let address: IpAddr = address.parse().map_err(|_| bad())?;
        let max = max_length(address);
        let length = match length {
            None => max,
            Some(l) => parse_length(l, max).ok_or_else(|| TargetError::BadPrefixLength {
                text: text.escape_default().to_string(),
                length: l.escape_default().to_string(),
                max,
            })?,
        };
        let cidr = Cidr {
            network: address,
            length,
        }
        .canonical();
        if mask(cidr.network, cidr.length) != cidr.network {
            let network = Cidr {
                network: mask(cidr.network, cidr.length),
                length: cidr.length,
            };
            return Err(TargetError::HostBitsSet {
                text: text.to_owned(),
                network: network.to_string(),
            });
        }
        Ok(cidr)
    }

    /// The range holding exactly `ip`.
    pub fn host(ip: IpAddr) -> Cidr {
        let ip = canonical_ip(ip);
        Cidr {
            network: ip,
            length: max_length(ip),
        }
    }

    /// The first address.
    pub fn network(&self) -> IpAddr {
        self.network
    }

    /// The prefix length.
    pub fn length(&self) -> u8 {
        self.length
    }

    /// Whether `ip` (canonicalised first) is in the range.
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = canonical_ip(ip);
        same_family(self.network, ip) && mask(ip, self.length) == self.network
    }

    /// Whether every address of `other` is in `self`.
    pub fn contains_cidr(&self, other: &Cidr) -> bool {
        same_family(self.network, other.network)
            && other.length >= self.length
            && self.contains(other.network)
    }

    /// Whether some address is in both.
    pub fn overlaps(&self, other: &Cidr) -> bool {
        self.contains_cidr(other) || other.contains_cidr(self)
    }

    fn canonical(self) -> Cidr {
        if let IpAddr::V6(v6) = self.network
            && let Some(v4) = v6.to_ipv4_mapped()
            && self.length >= 96
        {
            return Cidr {
                network: IpAddr::V4(v4),
                length: self.length - 96,
            };
        }
        self
    }
}

impl fmt::Display for Cidr {
    /// `10.0.0.0/8`; a single address is written bare (`192.0.2.1`, `2001:db8::1`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.length == max_length(self.network) {
            write!(f, "{}", self.network)
        } else {
            write!(f, "{}/{}", self.network, self.length)
        }
    }
}

/// The one spelling of an address: IPv4-mapped IPv6 (`::ffff:a.b.c.d`) becomes the IPv4 address
/// it reaches. A socket connecting to a mapped address reaches the IPv4 host, so the two must be
/// decided, classified and audited alike.
pub fn canonical_ip(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => ip,
        },
        IpAddr::V4(_) => ip,
    }
}

fn same_family(a: IpAddr, b: IpAddr) -> bool {
    a.is_ipv4() == b.is_ipv4()
}

fn max_length(ip: IpAddr) -> u8 {
    if ip.is_ipv4() { 32 } else { 128 }
}

fn parse_length(text: &str, max: u8) -> Option<u8> {
    let plain = !text.is_empty()
        && text.len() <= 3
        && text.bytes().all(|b| b.is_ascii_digit())
        && !(text.len() > 1 && text.starts_with('0'));
    let length: u8 = if plain {
        text.parse().ok()?
    } else {
        return None;
    };
    (length <= max).then_some(length)
}

/// `ip` with every bit after the first `length` cleared.
pub(crate) fn mask(ip: IpAddr, length: u8) -> IpAddr {
    match ip {
        IpAddr::V4(v4) => {
            let bits = u32::from(v4);
            let kept = if length == 0 {
                0
            } else {
                bits & (u32::MAX << (32 - u32::from(length)))
            };
            IpAddr::V4(Ipv4Addr::from(kept))
        }
        IpAddr::V6(v6) => {
            let bits = u128::from(v6);
            let kept = if length == 0 {
                0
            } else {
                bits & (u128::MAX << (128 - u32::from(length)))
            };
            IpAddr::V6(Ipv6Addr::from(kept))
        }
    }
}
