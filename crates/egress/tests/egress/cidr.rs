//! `Cidr::parse` (the `allow_private` and `--allow-private` syntax) and range membership.

use std::net::IpAddr;

use cordon_egress::Cidr;

/// `Ok(canonical)` or `Err(message)`.
fn check(text: &str, expected: Result<&str, &str>) {
    let got = Cidr::parse(text)
        .map(|c| c.to_string())
        .map_err(|e| e.to_string());
    assert_eq!(
        got.as_deref().map_err(String::as_str),
        expected,
        "cidr `{text}`"
    );
}

#[test]
fn cidrs_are_networks_or_single_addresses() {
    check("10.0.0.0/8", Ok("10.0.0.0/8"));
    check("10.20.0.0/16", Ok("10.20.0.0/16"));
    check("0.0.0.0/0", Ok("0.0.0.0/0"));
    check("192.0.2.1", Ok("192.0.2.1"));
    check("192.0.2.1/32", Ok("192.0.2.1"));
    check("fd00::/8", Ok("fd00::/8"));
    check("FD00::/8", Ok("fd00::/8"));
    check("2001:db8::1", Ok("2001:db8::1"));
    check("::/0", Ok("::/0"));
    check("::ffff:10.0.0.0/104", Ok("10.0.0.0/8"));
    check("::ffff:10.0.0.1", Ok("10.0.0.1"));
}

#[test]
fn malformed_cidrs_are_refused_with_the_fix() {
    check(
        "",
        Err(
            "`` is not an address or CIDR; write one such as `10.0.0.0/8`, `fd00::/8` or `192.0.2.1`",
        ),
    );
    check(
        "10.0.0.0/",
        Err(
            "prefix length `` in `10.0.0.0/` is not a number from 0 to 32; write one such as `10.0.0.0/32`",
        ),
    );
    check(
        "10.0.0.0/08",
        Err(
            "prefix length `08` in `10.0.0.0/08` is not a number from 0 to 32; write one such as `10.0.0.0/32`",
        ),
    );
    check(
        "10.0.0.1/8",
        Err("`10.0.0.1/8` has address bits set after the prefix length; write `10.0.0.0/8`"),
    );
    check(
        "fd00::1/8",
        Err("`fd00::1/8` has address bits set after the prefix length; write `fd00::/8`"),
    );
    check(
        "10/8",
        Err(
            "`10/8` is not an address or CIDR; write one such as `10.0.0.0/8`, `fd00::/8` or `192.0.2.1`",
        ),
    );
    check(
        "010.0.0.0/8",
        Err(
            "`010.0.0.0/8` is not an address or CIDR; write one such as `10.0.0.0/8`, `fd00::/8` or `192.0.2.1`",
        ),
    );
    check(
        "[fd00::]/8",
        Err(
            "`[fd00::]/8` is not an address or CIDR; write one such as `10.0.0.0/8`, `fd00::/8` or `192.0.2.1`",
        ),
    );
    check(
        "fe80::1%eth0",
        Err(
            "`fe80::1%eth0` has an IPv6 zone id (`%`); zone ids are not allowed, use a global address",
        ),
    );
    check(
        "example.com",
        Err(
            "`example.com` is not an address or CIDR; write one such as `10.0.0.0/8`, `fd00::/8` or `192.0.2.1`",
        ),
    );
    check(
        "10.0.0.0/8 ",
        Err(
            "prefix length `8 ` in `10.0.0.0/8 ` is not a number from 0 to 32; write one such as `10.0.0.0/32`",
        ),
    );
}

#[test]
fn membership_follows_the_prefix_and_canonicalises_mapped_addresses() {
    let rows = [
        ("10.0.0.0/8", "10.255.0.1", true),
        ("10.0.0.0/8", "11.0.0.1", false),
        ("10.0.0.0/8", "::ffff:10.1.2.3", true),
        ("10.0.0.0/8", "::10.1.2.3", false),
        ("0.0.0.0/0", "2001:db8::1", false),
        ("fd00::/8", "fd12::1", true),
        ("fd00::/8", "fe00::1", false),
        ("::/0", "10.0.0.1", false),
        ("192.0.2.1", "192.0.2.1", true),
        ("192.0.2.1", "192.0.2.2", false),
    ];
    for (cidr, ip, expected) in rows {
        let got = Cidr::parse(cidr)
            .unwrap()
            .contains(ip.parse::<IpAddr>().unwrap());
        assert_eq!(got, expected, "`{cidr}` contains `{ip}`");
    }
}
