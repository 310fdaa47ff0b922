//! Address classification: which special-purpose range an address is in (IANA IPv4 and IPv6
//! special-purpose registries, DESIGN §5).
//!
//! The IPv6 side is an allowlist: only global unicast `2000::/3`, minus its special blocks, is
//! public, so a range this table forgets is refused rather than reached. Addresses that embed an
//! IPv4 address (IPv4-compatible, NAT64, 6to4, Teredo) are reached through a translator the proxy
//! cannot see, so they are their own non-public class, and a metadata address embedded in one is
//! still `Metadata`.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::canonical_ip;

/// The class of an address. Everything but `Public` needs `allow_private`; `Metadata` is never
/// reachable.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AddressClass {
    /// Globally reachable unicast.
    Public,
    /// `0.0.0.0/8` ("this network"), `::`.
    Unspecified,
    /// `127.0.0.0/8`, `::1`.
    Loopback,
    /// RFC 1918: `10.0.0.0/8`, `172.16.0.0/12`, `192.168.0.0/16`.
    Private,
    /// `100.64.0.0/10`, carrier-grade NAT (RFC 6598).
    Shared,
    /// `169.254.0.0/16`, `fe80::/10`.
    LinkLocal,
    /// Cloud instance metadata: `169.254.169.254`, `169.254.170.2`, `169.254.170.23`,
    /// `100.100.100.200`, `fd00:ec2::254`, `fd00:ec2::23`, and those embedded in IPv6.
    Metadata,
    /// `192.0.2.0/24`, `198.51.100.0/24`, `203.0.113.0/24`, `2001:db8::/32`, `3fff::/20`.
    Documentation,
    /// `198.18.0.0/15`, `2001:2::/48`.
    Benchmarking,
    /// `224.0.0.0/4`, `ff00::/8`.
    Multicast,
    /// `255.255.255.255`.
    Broadcast,
    /// `192.0.0.0/24`, `240.0.0.0/4`, `2001::/23`, `fec0::/10`, and IPv6 outside `2000::/3`.
    Reserved,
    /// `fc00::/7` (RFC 4193).
    UniqueLocal,
    /// `100::/64` (RFC 6666).
    Discard,
    /// IPv4 reached through IPv6 translation: IPv4-compatible `::/96`, NAT64 `64:ff9b::/96` and
    /// `64:ff9b:1::/48`, 6to4 `2002::/16` and its relay `192.88.99.0/24`, Teredo `2001::/32`.
    Translated,
}

impl AddressClass {
    /// A short lowercase name (docs, audit details).
    pub fn as_str(self) -> &'static str {
        match self {
            AddressClass::Public => "public",
            AddressClass::Unspecified => "unspecified",
            AddressClass::Loopback => "loopback",
            AddressClass::Private => "private",
            AddressClass::Shared => "shared",
            AddressClass::LinkLocal => "link_local",
            AddressClass::Metadata => "metadata",
            AddressClass::Documentation => "documentation",
            AddressClass::Benchmarking => "benchmarking",
            AddressClass::Multicast => "multicast",
            AddressClass::Broadcast => "broadcast",
            AddressClass::Reserved => "reserved",
            AddressClass::UniqueLocal => "unique_local",
            AddressClass::Discard => "discard",
            AddressClass::Translated => "translated",
        }
    }
}

const METADATA_V4: [Ipv4Addr; 4] = [
    Ipv4Addr::new(169, 254, 169, 254), // AWS, GCP, Azure, OCI, OpenStack instance metadata
    Ipv4Addr::new(169, 254, 170, 2),   // AWS ECS task credentials
    Ipv4Addr::new(169, 254, 170, 23),  // AWS EKS pod identity
    Ipv4Addr::new(100, 100, 100, 200), // Alibaba Cloud metadata
];

const METADATA_V6: [Ipv6Addr; 2] = [
    Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254), // AWS IMDS over IPv6
    Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x23),  // AWS EKS pod identity over IPv6
];

/// Classifies an address; IPv4-mapped IPv6 is classified as the IPv4 address it reaches.
pub fn classify(ip: IpAddr) -> AddressClass {
    match canonical_ip(ip) {
        IpAddr::V4(v4) => classify_v4(v4),
        IpAddr::V6(v6) => classify_v6(v6),
    }
}

fn in_v4(ip: Ipv4Addr, network: [u8; 4], length: u32) -> bool {
    let mask = if length == 0 {
        0
    } else {
        u32::MAX << (32 - length)
    };
    u32::from(ip) & mask == u32::from(Ipv4Addr::from(network))
}

fn in_v6(ip: Ipv6Addr, network: [u16; 8], length: u32) -> bool {
    let mask = if length == 0 {
        0
    } else {
        u128::MAX << (128 - length)
    };
    let [a, b, c, d, e, f, g, h] = network;
    u128::from(ip) & mask == u128::from(Ipv6Addr::new(a, b, c, d, e, f, g, h))
}

fn classify_v4(ip: Ipv4Addr) -> AddressClass {
    use AddressClass as C;
    if METADATA_V4.contains(&ip) {
        return C::Metadata;
    }
    // Ordered most specific first where ranges nest (none of these overlap otherwise).
    let table: [([u8; 4], u32, AddressClass); 17] = [
        ([255, 255, 255, 255], 32, C::Broadcast),
        ([0, 0, 0, 0], 8, C::Unspecified),
        ([10, 0, 0, 0], 8, C::Private),
        ([100, 64, 0, 0], 10, C::Shared),
        ([127, 0, 0, 0], 8, C::Loopback),
        ([169, 254, 0, 0], 16, C::LinkLocal),
        ([172, 16, 0, 0], 12, C::Private),
        ([192, 0, 0, 0], 24, C::Reserved),
        ([192, 0, 2, 0], 24, C::Documentation),
        ([192, 88, 99, 0], 24, C::Translated),
        ([192, 168, 0, 0], 16, C::Private),
        ([198, 18, 0, 0], 15, C::Benchmarking),
        ([198, 51, 100, 0], 24, C::Documentation),
        ([203, 0, 113, 0], 24, C::Documentation),
        ([224, 0, 0, 0], 4, C::Multicast),
        ([240, 0, 0, 0], 4, C::Reserved),
        ([0, 0, 0, 0], 0, C::Public),
    ];
    table
        .iter()
        .find(|(network, length, _)| in_v4(ip, *network, *length))
        .map_or(C::Public, |(_, _, class)| *class)
}

fn classify_v6(ip: Ipv6Addr) -> AddressClass {
    use AddressClass as C;
    if METADATA_V6.contains(&ip) {
        return C::Metadata;
    }
    if ip.is_unspecified() {
        return C::Unspecified;
    }
    if ip.is_loopback() {
        return C::Loopback;
    }
    if embedded_v4(ip).iter().any(|v4| METADATA_V4.contains(v4)) {
        return C::Metadata;
    }
    let table: [([u16; 8], u32, AddressClass); 15] = [
        ([0, 0, 0, 0, 0, 0, 0, 0], 96, C::Translated), // IPv4-compatible (deprecated)
        ([0x64, 0xff9b, 0, 0, 0, 0, 0, 0], 96, C::Translated), // NAT64 well-known prefix
        ([0x64, 0xff9b, 1, 0, 0, 0, 0, 0], 48, C::Translated), // NAT64 local-use prefix
        ([0x100, 0, 0, 0, 0, 0, 0, 0], 64, C::Discard),
        ([0x2001, 0, 0, 0, 0, 0, 0, 0], 32, C::Translated), // Teredo
        ([0x2001, 2, 0, 0, 0, 0, 0, 0], 48, C::Benchmarking),
        ([0x2001, 0xdb8, 0, 0, 0, 0, 0, 0], 32, C::Documentation),
        ([0x2001, 0, 0, 0, 0, 0, 0, 0], 23, C::Reserved), // IETF protocol assignments
        ([0x2002, 0, 0, 0, 0, 0, 0, 0], 16, C::Translated), // 6to4
        ([0x3fff, 0, 0, 0, 0, 0, 0, 0], 20, C::Documentation),
        ([0xfc00, 0, 0, 0, 0, 0, 0, 0], 7, C::UniqueLocal),
        ([0xfe80, 0, 0, 0, 0, 0, 0, 0], 10, C::LinkLocal),
        ([0xfec0, 0, 0, 0, 0, 0, 0, 0], 10, C::Reserved), // site-local (deprecated)
        ([0xff00, 0, 0, 0, 0, 0, 0, 0], 8, C::Multicast),
        ([0x2000, 0, 0, 0, 0, 0, 0, 0], 3, C::Public),
    ];
    table
        .iter()
        .find(|(network, length, _)| in_v6(ip, *network, *length))
        .map_or(C::Reserved, |(_, _, class)| *class)
}

/// The IPv4 addresses an IPv6 address carries in its translation formats (RFC 4291
/// IPv4-compatible, RFC 6052 NAT64, RFC 3056 6to4, RFC 4380 Teredo server and obfuscated client).
fn embedded_v4(ip: Ipv6Addr) -> Vec<Ipv4Addr> {
    let bits = u128::from(ip);
    let low32 = Ipv4Addr::from(bits as u32);
    let mut found = Vec::new();
    if in_v6(ip, [0; 8], 96) || in_v6(ip, [0x64, 0xff9b, 0, 0, 0, 0, 0, 0], 96) {
        found.push(low32);
    }
    if in_v6(ip, [0x64, 0xff9b, 1, 0, 0, 0, 0, 0], 48) {
        // The local-use prefix may be used at any RFC 6052 length; check the /48 layout (IPv4
        // split around the `u` octet) and the /96 layout.
        let high = ((bits >> 64) as u32) & 0xffff;
        let low = ((bits >> 40) as u32) & 0xffff;
        found.push(Ipv4Addr::from((high << 16) | low));
        found.push(low32);
    }
    if in_v6(ip, [0x2002, 0, 0, 0, 0, 0, 0, 0], 16) {
        found.push(Ipv4Addr::from((bits >> 80) as u32));
    }
    if in_v6(ip, [0x2001, 0, 0, 0, 0, 0, 0, 0], 32) {
        found.push(Ipv4Addr::from((bits >> 64) as u32));
        found.push(Ipv4Addr::from(!(bits as u32)));
    }
    found
}
