//! Address classification: one row per special-purpose range, at its edges.

use std::net::IpAddr;

use cordon_egress::{AddressClass, classify};

fn check(address: &str, expected: AddressClass) {
    let ip: IpAddr = address
        .parse()
        .unwrap_or_else(|e| panic!("`{address}`: {e}"));
    assert_eq!(classify(ip), expected, "`{address}`");
}

use AddressClass::*;

#[test]
fn ipv4_special_purpose_ranges_are_classified() {
    let table = [
        ("0.0.0.0", Unspecified),
        ("0.255.255.255", Unspecified),
        ("1.0.0.0", Public),
        ("9.255.255.255", Public),
        ("10.0.0.0", Private),
        ("10.255.255.255", Private),
        ("11.0.0.0", Public),
        ("100.63.255.255", Public),
        ("100.64.0.0", Shared),
        ("100.127.255.255", Shared),
        ("100.128.0.0", Public),
        ("127.0.0.1", Loopback),
        ("127.255.255.254", Loopback),
        ("169.254.0.1", LinkLocal),
        ("169.254.255.255", LinkLocal),
        ("172.15.255.255", Public),
        ("172.16.0.0", Private),
        ("172.31.255.255", Private),
        ("172.32.0.0", Public),
        ("192.0.0.0", Reserved),
        ("192.0.0.255", Reserved),
        ("192.0.1.0", Public),
        ("192.0.2.0", Documentation),
        ("192.0.2.255", Documentation),
        ("192.88.99.1", Translated),
        ("192.167.255.255", Public),
        ("192.168.0.0", Private),
        ("192.168.255.255", Private),
        ("192.169.0.0", Public),
        ("198.17.255.255", Public),
        ("198.18.0.0", Benchmarking),
        ("198.19.255.255", Benchmarking),
        ("198.20.0.0", Public),
        ("198.51.100.1", Documentation),
        ("203.0.113.1", Documentation),
        ("223.255.255.255", Public),
        ("224.0.0.1", Multicast),
        ("239.255.255.255", Multicast),
        ("240.0.0.0", Reserved),
        ("255.255.255.254", Reserved),
        ("255.255.255.255", Broadcast),
        ("8.8.8.8", Public),
    ];
    for (address, class) in table {
        check(address, class);
    }
}

#[test]
fn metadata_addresses_are_their_own_class_in_every_spelling() {
    for address in [
        "169.254.169.254",
        "169.254.170.2",
        "169.254.170.23",
        "100.100.100.200",
        "fd00:ec2::254",
        "fd00:ec2::23",
        "::ffff:169.254.169.254",
        "::169.254.169.254",
        "64:ff9b::169.254.169.254",
        "64:ff9b::a9fe:a9fe",
        "64:ff9b:1:a9fe:a9:fe00::",
        "2002:a9fe:a9fe::1",
        "2001:0:a9fe:a9fe::1",
        "2001:0:4136:e378:8000:63bf:5601:5601",
    ] {
        check(address, Metadata);
    }
    check("169.254.169.253", LinkLocal);
    check("100.100.100.201", Shared);
}

#[test]
fn ipv6_special_purpose_ranges_are_classified() {
    let table = [
        ("::", Unspecified),
        ("::1", Loopback),
        ("::ffff:127.0.0.1", Loopback),
        ("::ffff:10.0.0.1", Private),
        ("::ffff:8.8.8.8", Public),
        ("::8.8.8.8", Translated),
        ("::2", Translated),
        ("::1:0:0:0", Reserved),
        ("::ffff:0:8.8.8.8", Reserved),
        ("64:ff9b::8.8.8.8", Translated),
        ("64:ff9b:1::1", Translated),
        ("100::1", Discard),
        ("100::ffff:ffff:ffff:ffff", Discard),
        ("100:0:0:1::1", Reserved),
        ("2001::1", Translated),
        ("2001:0:ffff::1", Translated),
        ("2001:1::1", Reserved),
        ("2001:2::1", Benchmarking),
        ("2001:1ff:ffff::1", Reserved),
        ("2001:200::1", Public),
        ("2001:db8::1", Documentation),
        ("2001:db8:ffff::1", Documentation),
        ("2002::1", Translated),
        ("2002:ffff::1", Translated),
        ("2003::1", Public),
        ("2606:4700::1111", Public),
        ("3ffe::1", Public),
        ("3fff::1", Documentation),
        ("3fff:fff::1", Documentation),
        ("3fff:1000::1", Public),
        ("4000::1", Reserved),
        ("5f00::1", Reserved),
        ("fc00::1", UniqueLocal),
        ("fd00::1", UniqueLocal),
        ("fdff:ffff::1", UniqueLocal),
        ("fe80::1", LinkLocal),
        ("febf::1", LinkLocal),
        ("fec0::1", Reserved),
        ("ff02::1", Multicast),
        ("ff0e::1", Multicast),
    ];
    for (address, class) in table {
        check(address, class);
    }
}

#[test]
fn class_names_are_lowercase_words() {
    for class in [
        Public,
        Unspecified,
        Loopback,
        Private,
        Shared,
        LinkLocal,
        Metadata,
        Documentation,
    ] {
        assert!(
            class
                .as_str()
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b == b'_'),
            "{class:?}"
        );
    }
}
