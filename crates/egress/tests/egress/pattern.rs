//! The pattern grammar of DESIGN §5: every spelling, accepted (with its canonical text) or refused
//! (with the message a user sees).

use cordon_egress::{Pattern, PatternList};

/// `Ok(canonical)` or `Err(message)`.
fn check(list: PatternList, text: &str, expected: Result<&str, &str>) {
    let got = Pattern::parse(text, list)
        .map(|p| p.to_string())
        .map_err(|e| e.to_string());
    assert_eq!(
        got.as_deref().map_err(String::as_str),
        expected,
        "pattern `{text}` in {list:?} list"
    );
    if let Ok(p) = Pattern::parse(text, list) {
        assert_eq!(
            Pattern::parse(&p.to_string(), list).as_ref(),
            Ok(&p),
            "round trip of `{text}`"
        );
    }
}

use PatternList::{Allow, Deny};

#[test]
fn names_are_canonicalised_to_lowercase_without_one_trailing_dot() {
    check(Allow, "example.com", Ok("example.com"));
    check(Allow, "Example.COM", Ok("example.com"));
    check(Allow, "example.com.", Ok("example.com"));
    check(Allow, "a_b-c.example.test", Ok("a_b-c.example.test"));
    check(Allow, "localhost", Ok("localhost"));
    check(Allow, "1.example.test", Ok("1.example.test"));
}

#[test]
fn malformed_names_are_refused_with_the_fix() {
    check(
        Allow,
        "",
        Err("the pattern is empty; write a name such as `example.com`"),
    );
    check(
        Allow,
        "example.com..",
        Err("`example.com..` has an empty label; remove the extra `.` (one trailing dot at most)"),
    );
    check(
        Allow,
        ".example.com",
        Err("`.example.com` has an empty label; remove the extra `.` (one trailing dot at most)"),
    );
    check(
        Allow,
        "a..example.com",
        Err("`a..example.com` has an empty label; remove the extra `.` (one trailing dot at most)"),
    );
    check(
        Allow,
        ".",
        Err("`.` has an empty label; remove the extra `.` (one trailing dot at most)"),
    );
    check(
        Allow,
        "exa%mple.com",
        Err(
            "`exa%mple.com` contains `%`, which a host name cannot contain; use only ASCII letters, digits, `-`, `_` and `.`",
        ),
    );
    check(
        Allow,
        "exa\\mple.com",
        Err(
            "`exa\\\\mple.com` contains `\\`, which a host name cannot contain; use only ASCII letters, digits, `-`, `_` and `.`",
        ),
    );
    check(
        Allow,
        "user@example.com",
        Err(
            "`user@example.com` contains `@`, which a host name cannot contain; use only ASCII letters, digits, `-`, `_` and `.`",
        ),
    );
    check(
        Allow,
        "example.com/path",
        Err(
            "`example.com/path` contains `/`, which a host name cannot contain; use only ASCII letters, digits, `-`, `_` and `.`",
        ),
    );
    check(
        Allow,
        " example.com",
        Err(
            "pattern ` example.com` contains whitespace or a control character; write it without spaces",
        ),
    );
    check(
        Allow,
        "example.com\n",
        Err(
            "pattern `example.com\\n` contains whitespace or a control character; write it without spaces",
        ),
    );
    check(
        Allow,
        "bücher.example",
        Err("`bücher.example` is not ASCII; write the name's `xn--` A-label (punycode) instead"),
    );
    check(Allow, "xn--bcher-kva.example", Ok("xn--bcher-kva.example"));
    check(
        Allow,
        &format!("{}.example", "a".repeat(64)),
        Err(&format!(
            "label `{}` is longer than 63 bytes; shorten it, DNS labels hold at most 63 bytes",
            "a".repeat(64)
        )),
    );
    check(
        Allow,
        &format!("{}.example", "a".repeat(63)),
        Ok(&format!("{}.example", "a".repeat(63))),
    );
    let long = [
        "a".repeat(63),
        "b".repeat(63),
        "c".repeat(63),
        "d".repeat(61),
    ]
    .join(".");
    check(Allow, &long, Ok(&long));
    check(Allow, &format!("{long}."), Ok(&long));
    check(
        Allow,
        &format!("{long}e"),
        Err("the host name is 254 bytes long; shorten it, names hold at most 253 bytes"),
    );
    check(
        Allow,
        "example.com:443:80",
        Err(
            "`example.com:443:80` contains `:`, which a host name cannot contain; use only ASCII letters, digits, `-`, `_` and `.`",
        ),
    );
}

#[test]
fn ports_are_ascii_digits_from_1_to_65535() {
    check(Allow, "example.com:443", Ok("example.com:443"));
    check(Allow, "example.com:1", Ok("example.com:1"));
    check(Allow, "example.com:65535", Ok("example.com:65535"));
    check(Allow, "example.com:*", Ok("example.com:*"));
    check(
        Allow,
        "example.com:0",
        Err(
            "port `0` is not a number from 1 to 65535; write ASCII digits without a sign, such as `443`",
        ),
    );
    check(
        Allow,
        "example.com:65536",
        Err(
            "port `65536` is not a number from 1 to 65535; write ASCII digits without a sign, such as `443`",
        ),
    );
    check(
        Allow,
        "example.com:+443",
        Err(
            "port `+443` is not a number from 1 to 65535; write ASCII digits without a sign, such as `443`",
        ),
    );
    check(
        Allow,
        "example.com:-1",
        Err(
            "port `-1` is not a number from 1 to 65535; write ASCII digits without a sign, such as `443`",
        ),
    );
    check(
        Allow,
        "example.com:",
        Err(
            "port `` is not a number from 1 to 65535; write ASCII digits without a sign, such as `443`",
        ),
    );
    check(
        Allow,
        "example.com:0443",
        Err("port `0443` has a leading zero; write it without one, such as `443`"),
    );
    check(
        Allow,
        "example.com:99999999999",
        Err(
            "port `99999999999` is not a number from 1 to 65535; write ASCII digits without a sign, such as `443`",
        ),
    );
    check(
        Allow,
        "example.com:４４３",
        Err(
            "port `\\u{ff14}\\u{ff14}\\u{ff13}` is not a number from 1 to 65535; write ASCII digits without a sign, such as `443`",
        ),
    );
    check(
        Allow,
        "example.com:0x1bb",
        Err(
            "port `0x1bb` is not a number from 1 to 65535; write ASCII digits without a sign, such as `443`",
        ),
    );
}

#[test]
fn a_deny_pattern_without_a_port_means_every_port() {
    check(Deny, "example.com", Ok("example.com:*"));
    check(Deny, "example.com:25", Ok("example.com:25"));
    check(Deny, "*.example.com", Ok("*.example.com:*"));
    check(Deny, "*", Ok("*:*"));
    check(Deny, "*:25", Ok("*:25"));
}

#[test]
fn wildcards_are_a_whole_first_label_over_at_least_two_labels() {
    check(Allow, "*.example.com", Ok("*.example.com"));
    check(Allow, "*.Example.COM.", Ok("*.example.com"));
    check(
        Allow,
        "*.a.b.example.com:8443",
        Ok("*.a.b.example.com:8443"),
    );
    check(Allow, "*.co.uk", Ok("*.co.uk"));
    check(
        Allow,
        "*.com",
        Err(
            "`*.com` needs at least two labels after `*.`; write a narrower wildcard such as `*.example.com`",
        ),
    );
    check(
        Allow,
        "*.com:443",
        Err(
            "`*.com:443` needs at least two labels after `*.`; write a narrower wildcard such as `*.example.com`",
        ),
    );
    check(
        Allow,
        "*",
        Err("`*` in an allow list would allow every name; list the names, or use `network: open`"),
    );
    check(
        Allow,
        "*:443",
        Err(
            "`*:443` in an allow list would allow every name; list the names, or use `network: open`",
        ),
    );
    check(
        Allow,
        "foo*.example.com",
        Err("`foo*.example.com`: `*` may only be the whole first label, as in `*.example.com`"),
    );
    check(
        Allow,
        "a.*.example.com",
        Err("`a.*.example.com`: `*` may only be the whole first label, as in `*.example.com`"),
    );
    check(
        Allow,
        "*.*.example.com",
        Err("`*.*.example.com`: `*` may only be the whole first label, as in `*.example.com`"),
    );
    check(
        Allow,
        "**.example.com",
        Err("`**.example.com`: `*` may only be the whole first label, as in `*.example.com`"),
    );
    check(
        Allow,
        "*example.com",
        Err("`*example.com`: `*` may only be the whole first label, as in `*.example.com`"),
    );
    check(
        Allow,
        "*.",
        Err("the host name is empty; write a name such as `example.com`"),
    );
    check(
        Allow,
        "*.10.0.0.1",
        Err(
            "`10.0.0.1` is an IP literal, not a host name; write an ip: rule such as `ip:10.0.0.1:443`",
        ),
    );
}

#[test]
fn ip_literals_and_numeric_names_are_refused_with_an_ip_rule_to_write() {
    check(
        Allow,
        "10.0.0.1",
        Err("`10.0.0.1` is an IP literal; write an ip: rule such as `ip:10.0.0.1:443`"),
    );
    check(
        Allow,
        "10.0.0.1:8080",
        Err("`10.0.0.1:8080` is an IP literal; write an ip: rule such as `ip:10.0.0.1:8080`"),
    );
    check(
        Allow,
        "::1",
        Err("`::1` is an IP literal; write an ip: rule such as `ip:[::1]:443`"),
    );
    check(
        Allow,
        "2001:db8::1:443",
        Err(
            "`2001:db8::1:443` is an IP literal; write an ip: rule such as `ip:[2001:db8::1:443]:443`",
        ),
    );
    check(
        Allow,
        "[2001:db8::1]:443",
        Err(
            "`[2001:db8::1]:443` is an IP literal; write an ip: rule such as `ip:[2001:db8::1]:443`",
        ),
    );
    check(
        Allow,
        "[2001:db8::1]",
        Err("`[2001:db8::1]` is an IP literal; write an ip: rule such as `ip:[2001:db8::1]:443`"),
    );
    check(
        Allow,
        "[10.0.0.1]:443",
        Err("`[10.0.0.1]:443` is an IP literal; write an ip: rule such as `ip:10.0.0.1:443`"),
    );
    check(
        Allow,
        "[example.com]:443",
        Err(
            "`[example.com]:443` puts brackets around something that is not an IPv6 address; brackets are only for IPv6, write `example.com` without them",
        ),
    );
    check(
        Allow,
        "127.1",
        Err(
            "`127.1` looks like a numeric IP address, which resolvers read as an address; write an ip: rule such as `ip:127.0.0.1:443`",
        ),
    );
    check(
        Allow,
        "0x7f000001",
        Err(
            "`0x7f000001` looks like a numeric IP address, which resolvers read as an address; write an ip: rule such as `ip:127.0.0.1:443`",
        ),
    );
    check(
        Allow,
        "0X7F000001",
        Err(
            "`0X7F000001` looks like a numeric IP address, which resolvers read as an address; write an ip: rule such as `ip:127.0.0.1:443`",
        ),
    );
    check(
        Allow,
        "2130706433",
        Err(
            "`2130706433` looks like a numeric IP address, which resolvers read as an address; write an ip: rule such as `ip:127.0.0.1:443`",
        ),
    );
    check(
        Allow,
        "0177.0.0.1",
        Err(
            "`0177.0.0.1` looks like a numeric IP address, which resolvers read as an address; write an ip: rule such as `ip:127.0.0.1:443`",
        ),
    );
    check(
        Allow,
        "0",
        Err(
            "`0` looks like a numeric IP address, which resolvers read as an address; write an ip: rule such as `ip:0.0.0.0:443`",
        ),
    );
    check(
        Allow,
        "010.0.0.1",
        Err(
            "`010.0.0.1` looks like a numeric IP address, which resolvers read as an address; write an ip: rule such as `ip:8.0.0.1:443`",
        ),
    );
    check(
        Allow,
        "0x7f.1",
        Err(
            "`0x7f.1` looks like a numeric IP address, which resolvers read as an address; write an ip: rule such as `ip:127.0.0.1:443`",
        ),
    );
    check(
        Allow,
        "127.0.0.1.",
        Err(
            "`127.0.0.1.` looks like a numeric IP address, which resolvers read as an address; write an ip: rule such as `ip:127.0.0.1:443`",
        ),
    );
    check(
        Allow,
        "example.123",
        Err(
            "`example.123` looks like a numeric IP address, which resolvers read as an address; write an ip: rule such as `ip:192.0.2.1:443`",
        ),
    );
    check(
        Allow,
        "example.0x",
        Err(
            "`example.0x` looks like a numeric IP address, which resolvers read as an address; write an ip: rule such as `ip:192.0.2.1:443`",
        ),
    );
    check(Allow, "example.0x1g", Ok("example.0x1g"));
    check(Allow, "123.example", Ok("123.example"));
}

#[test]
fn ip_rules_need_a_port_and_bracket_ipv6() {
    check(Allow, "ip:10.0.0.1:443", Ok("ip:10.0.0.1:443"));
    check(Allow, "IP:10.0.0.1:443", Ok("ip:10.0.0.1:443"));
    check(Allow, "ip:10.0.0.0/8:*", Ok("ip:10.0.0.0/8:*"));
    check(Allow, "ip:10.0.0.1/32:443", Ok("ip:10.0.0.1:443"));
    check(Allow, "ip:[2001:db8::1]:443", Ok("ip:[2001:db8::1]:443"));
    check(Allow, "ip:[2001:DB8::]/32:*", Ok("ip:[2001:db8::]/32:*"));
    check(Allow, "ip:[::ffff:10.0.0.1]:443", Ok("ip:10.0.0.1:443"));
    check(
        Allow,
        "ip:[::ffff:10.0.0.0]/104:443",
        Ok("ip:10.0.0.0/8:443"),
    );
    check(Deny, "ip:0.0.0.0/0:*", Ok("ip:0.0.0.0/0:*"));
    check(
        Allow,
        "ip:10.0.0.1",
        Err(
            "`ip:10.0.0.1` has no port; ip: rules need one, such as `ip:10.0.0.1:443` or `ip:10.0.0.1:*`",
        ),
    );
    check(
        Deny,
        "ip:10.0.0.0/8",
        Err(
            "`ip:10.0.0.0/8` has no port; ip: rules need one, such as `ip:10.0.0.0/8:443` or `ip:10.0.0.0/8:*`",
        ),
    );
    check(
        Allow,
        "ip:[2001:db8::1]",
        Err(
            "`ip:[2001:db8::1]` has no port; ip: rules need one, such as `ip:[2001:db8::1]:443` or `ip:[2001:db8::1]:*`",
        ),
    );
    check(
        Allow,
        "ip:2001:db8::1:443",
        Err(
            "`ip:2001:db8::1:443`: IPv6 addresses in ip: rules need brackets; write one such as `ip:[2001:db8::1]:443`",
        ),
    );
    check(
        Allow,
        "ip:2001:db8::1",
        Err(
            "`ip:2001:db8::1`: IPv6 addresses in ip: rules need brackets; write one such as `ip:[2001:db8::1]:443`",
        ),
    );
    check(
        Allow,
        "ip:[10.0.0.1]:443",
        Err(
            "`ip:[10.0.0.1]:443` puts brackets around something that is not an IPv6 address; brackets are only for IPv6, write `10.0.0.1` without them",
        ),
    );
    check(
        Allow,
        "ip:[fe80::1%eth0]:443",
        Err(
            "`ip:[fe80::1%eth0]:443` has an IPv6 zone id (`%`); zone ids are not allowed, use a global address",
        ),
    );
    check(
        Allow,
        "ip:example.com:443",
        Err(
            "`ip:example.com:443`: `example.com` is not an IP address or CIDR; write an ip: rule such as `ip:192.0.2.0/24:443` or `ip:[2001:db8::]/32:*`",
        ),
    );
    check(
        Allow,
        "ip:127.1:443",
        Err(
            "`ip:127.1:443`: `127.1` is not an IP address or CIDR; write an ip: rule such as `ip:192.0.2.0/24:443` or `ip:[2001:db8::]/32:*`",
        ),
    );
    check(
        Allow,
        "ip:010.0.0.1:443",
        Err(
            "`ip:010.0.0.1:443`: `010.0.0.1` is not an IP address or CIDR; write an ip: rule such as `ip:192.0.2.0/24:443` or `ip:[2001:db8::]/32:*`",
        ),
    );
    check(
        Allow,
        "ip:10.0.0.1/8:443",
        Err("`10.0.0.1/8` has address bits set after the prefix length; write `10.0.0.0/8`"),
    );
    check(
        Allow,
        "ip:10.0.0.0/33:443",
        Err(
            "prefix length `33` in `10.0.0.0/33` is not a number from 0 to 32; write one such as `10.0.0.0/32`",
        ),
    );
    check(
        Allow,
        "ip:10.0.0.0/+8:443",
        Err(
            "prefix length `+8` in `10.0.0.0/+8` is not a number from 0 to 32; write one such as `10.0.0.0/32`",
        ),
    );
    check(
        Allow,
        "ip:[2001:db8::]/129:443",
        Err(
            "prefix length `129` in `2001:db8::/129` is not a number from 0 to 128; write one such as `2001:db8::/128`",
        ),
    );
    check(
        Allow,
        "ip:10.0.0.1:+443",
        Err(
            "port `+443` is not a number from 1 to 65535; write ASCII digits without a sign, such as `443`",
        ),
    );
    check(
        Allow,
        "ip:[2001:db8::1]443",
        Err(
            "`ip:[2001:db8::1]443`: `[2001:db8::1]443` is not an IP address or CIDR; write an ip: rule such as `ip:192.0.2.0/24:443` or `ip:[2001:db8::]/32:*`",
        ),
    );
    check(
        Allow,
        "ip:",
        Err(
            "`ip:`: `` is not an IP address or CIDR; write an ip: rule such as `ip:192.0.2.0/24:443` or `ip:[2001:db8::]/32:*`",
        ),
    );
}
