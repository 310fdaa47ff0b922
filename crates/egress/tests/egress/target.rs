//! The target parser: CONNECT authorities and absolute-form URIs, every accepted spelling with its
//! canonical form and every refused one with its message.

use cordon_egress::{Reason, Target};

/// CONNECT authority → `Ok(canonical authority)` or `Err(message)`.
fn check(text: &str, expected: Result<&str, &str>) {
    let parsed = Target::parse(text);
    if let Err(e) = &parsed {
        assert_eq!(e.reason(), Reason::BadTarget);
    }
    let got = parsed
        .as_ref()
        .map(|t| t.to_string())
        .map_err(|e| e.to_string());
    assert_eq!(
        got.as_deref().map_err(String::as_str),
        expected,
        "authority `{}`",
        text.escape_default()
    );
    if let Ok(t) = parsed {
        assert_eq!(
            Target::parse(&t.to_string()),
            Ok(t),
            "round trip of `{text}`"
        );
    }
}

/// Absolute-form URI → `Ok((authority, path))` or `Err(message)`.
fn check_absolute(text: &str, expected: Result<(&str, &str), &str>) {
    let got = Target::parse_absolute(text)
        .map(|a| (a.target().to_string(), a.path().to_owned()))
        .map_err(|e| e.to_string());
    let got = match &got {
        Ok((t, p)) => Ok((t.as_str(), p.as_str())),
        Err(e) => Err(e.as_str()),
    };
    assert_eq!(got, expected, "uri `{}`", text.escape_default());
}

#[test]
fn connect_authorities_parse_to_canonical_targets() {
    check("example.com:443", Ok("example.com:443"));
    check("EXAMPLE.com.:443", Ok("example.com:443"));
    check("a_b.example.test:8080", Ok("a_b.example.test:8080"));
    check("192.0.2.1:443", Ok("192.0.2.1:443"));
    check("[2001:db8::1]:443", Ok("[2001:db8::1]:443"));
    check("[2001:DB8:0:0:0:0:0:1]:443", Ok("[2001:db8::1]:443"));
    check("[::ffff:127.0.0.1]:443", Ok("127.0.0.1:443"));
    check("[::ffff:7f00:1]:443", Ok("127.0.0.1:443"));
    check("[::1]:22", Ok("[::1]:22"));
}

#[test]
fn connect_authorities_need_a_plain_port() {
    check(
        "example.com",
        Err("`example.com` has no port; write `host:port`, such as `example.com:443`"),
    );
    check(
        "[2001:db8::1]",
        Err("`[2001:db8::1]` has no port; write `host:port`, such as `example.com:443`"),
    );
    check(
        "example.com:",
        Err(
            "port `` is not a number from 1 to 65535; write ASCII digits without a sign, such as `443`",
        ),
    );
    check(
        "example.com:+443",
        Err(
            "port `+443` is not a number from 1 to 65535; write ASCII digits without a sign, such as `443`",
        ),
    );
    check(
        "example.com:0",
        Err(
            "port `0` is not a number from 1 to 65535; write ASCII digits without a sign, such as `443`",
        ),
    );
    check(
        "example.com:65536",
        Err(
            "port `65536` is not a number from 1 to 65535; write ASCII digits without a sign, such as `443`",
        ),
    );
    check(
        "example.com:0443",
        Err("port `0443` has a leading zero; write it without one, such as `443`"),
    );
    check(
        "example.com:443a",
        Err(
            "port `443a` is not a number from 1 to 65535; write ASCII digits without a sign, such as `443`",
        ),
    );
    check(
        "example.com:*",
        Err(
            "port `*` is not a number from 1 to 65535; write ASCII digits without a sign, such as `443`",
        ),
    );
}

#[test]
fn bypass_spellings_are_bad_targets() {
    check(
        "",
        Err("the target is empty; write `host:port`, such as `example.com:443`"),
    );
    check(
        "user@example.com:443",
        Err(
            "`user@example.com:443` contains userinfo (`@`); send the target without a user name or password",
        ),
    );
    check(
        "allowed.example@evil.example:443",
        Err(
            "`allowed.example@evil.example:443` contains userinfo (`@`); send the target without a user name or password",
        ),
    );
    check(
        ":443",
        Err("the host name is empty; write a name such as `example.com`"),
    );
    check(
        "[example.com]:443",
        Err(
            "`[example.com]:443` puts brackets around something that is not an IPv6 address; brackets are only for IPv6, write `example.com` without them",
        ),
    );
    check(
        "[192.0.2.1]:443",
        Err(
            "`[192.0.2.1]:443` puts brackets around something that is not an IPv6 address; brackets are only for IPv6, write `192.0.2.1` without them",
        ),
    );
    check(
        "[fe80::1%eth0]:443",
        Err(
            "`[fe80::1%eth0]:443` has an IPv6 zone id (`%`); zone ids are not allowed, use a global address",
        ),
    );
    check(
        "[fe80::1%25eth0]:443",
        Err(
            "`[fe80::1%25eth0]:443` has an IPv6 zone id (`%`); zone ids are not allowed, use a global address",
        ),
    );
    check(
        "[2001:db8::1:443",
        Err(
            "`[2001:db8::1:443` is not a valid bracketed IPv6 address; write one such as `[2001:db8::1]:443`",
        ),
    );
    check(
        "[2001:db8::1]x:443",
        Err(
            "`[2001:db8::1]x:443` is not a valid bracketed IPv6 address; write one such as `[2001:db8::1]:443`",
        ),
    );
    check(
        "[]:443",
        Err(
            "`[]:443` is not a valid bracketed IPv6 address; write one such as `[2001:db8::1]:443`",
        ),
    );
    check(
        "[1:2]:443",
        Err(
            "`[1:2]:443` is not a valid bracketed IPv6 address; write one such as `[2001:db8::1]:443`",
        ),
    );
    check(
        "::1:443",
        Err(
            "`::1:443` looks like an IPv6 address without brackets; write it as `[ADDRESS]:PORT`, such as `[2001:db8::1]:443`",
        ),
    );
    check(
        "2001:db8::1:443",
        Err(
            "`2001:db8::1:443` looks like an IPv6 address without brackets; write it as `[ADDRESS]:PORT`, such as `[2001:db8::1]:443`",
        ),
    );
    check(
        "127.1:443",
        Err(
            "`127.1` looks like a numeric IP address, which resolvers read as an address; write an ip: rule such as `ip:127.0.0.1:443`",
        ),
    );
    check(
        "0x7f000001:443",
        Err(
            "`0x7f000001` looks like a numeric IP address, which resolvers read as an address; write an ip: rule such as `ip:127.0.0.1:443`",
        ),
    );
    check(
        "2130706433:443",
        Err(
            "`2130706433` looks like a numeric IP address, which resolvers read as an address; write an ip: rule such as `ip:127.0.0.1:443`",
        ),
    );
    check(
        "0177.0.0.1:443",
        Err(
            "`0177.0.0.1` looks like a numeric IP address, which resolvers read as an address; write an ip: rule such as `ip:127.0.0.1:443`",
        ),
    );
    check(
        "0:443",
        Err(
            "`0` looks like a numeric IP address, which resolvers read as an address; write an ip: rule such as `ip:0.0.0.0:443`",
        ),
    );
    check(
        "127.0.0.1.:443",
        Err(
            "`127.0.0.1.` looks like a numeric IP address, which resolvers read as an address; write an ip: rule such as `ip:127.0.0.1:443`",
        ),
    );
    check(
        "exa%6dple.com:443",
        Err(
            "`exa%6dple.com` contains `%`, which a host name cannot contain; use only ASCII letters, digits, `-`, `_` and `.`",
        ),
    );
    check(
        "example.com\\@evil.example:443",
        Err(
            "`example.com\\\\@evil.example:443` contains `\\`; a target is `host:port` or `http://host[:port]/path` in printable ASCII",
        ),
    );
    check(
        "example.com:443\r\n",
        Err(
            "`example.com:443\\r\\n` contains the byte `\\r`; a target is `host:port` or `http://host[:port]/path` in printable ASCII",
        ),
    );
    check(
        "example.com\0:443",
        Err(
            "`example.com\\u{0}:443` contains the byte `\\u{0}`; a target is `host:port` or `http://host[:port]/path` in printable ASCII",
        ),
    );
    check(
        "example .com:443",
        Err(
            "`example .com:443` contains the byte ` `; a target is `host:port` or `http://host[:port]/path` in printable ASCII",
        ),
    );
    check(
        "bücher.example:443",
        Err(
            "`b\\u{fc}cher.example:443` is not ASCII; write the name's `xn--` A-label (punycode) instead",
        ),
    );
    check(
        "ｅxample.com:443",
        Err(
            "`\\u{ff45}xample.com:443` is not ASCII; write the name's `xn--` A-label (punycode) instead",
        ),
    );
    check(
        "example.com/:443",
        Err(
            "`example.com/` contains `/`, which a host name cannot contain; use only ASCII letters, digits, `-`, `_` and `.`",
        ),
    );
    check(
        "example..com:443",
        Err("`example..com` has an empty label; remove the extra `.` (one trailing dot at most)"),
    );
    check(
        "*.example.com:443",
        Err(
            "`*.example.com` contains `*`, which a host name cannot contain; use only ASCII letters, digits, `-`, `_` and `.`",
        ),
    );
    check(
        &format!("{}:443", "a".repeat(300)),
        Err(
            "`aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa…` is too long; a target is at most 300 bytes",
        ),
    );
}

#[test]
fn absolute_form_uris_give_a_target_and_an_origin_form_path() {
    check_absolute("http://example.com/", Ok(("example.com:80", "/")));
    check_absolute(
        "HTTP://Example.COM:8080/a/b?c=d",
        Ok(("example.com:8080", "/a/b?c=d")),
    );
    check_absolute("http://example.com", Ok(("example.com:80", "/")));
    check_absolute("http://example.com?q", Ok(("example.com:80", "/?q")));
    check_absolute("http://[2001:db8::1]/x", Ok(("[2001:db8::1]:80", "/x")));
    check_absolute(
        "http://192.0.2.1:8080/%2e%2e/",
        Ok(("192.0.2.1:8080", "/%2e%2e/")),
    );
    check_absolute(
        "http://evil.example?@allowed.example/",
        Ok(("evil.example:80", "/?@allowed.example/")),
    );
}

#[test]
fn absolute_form_refuses_other_schemes_userinfo_and_fragments() {
    check_absolute(
        "https://example.com/",
        Err(
            "`https://example.com/` is not an absolute `http://` URI; send `CONNECT host:port` for TLS, or `GET http://host/path`",
        ),
    );
    check_absolute(
        "/index.html",
        Err(
            "`/index.html` is not an absolute `http://` URI; send `CONNECT host:port` for TLS, or `GET http://host/path`",
        ),
    );
    check_absolute(
        "http:/example.com/",
        Err(
            "`http:/example.com/` is not an absolute `http://` URI; send `CONNECT host:port` for TLS, or `GET http://host/path`",
        ),
    );
    check_absolute(
        "http://",
        Err("the target is empty; write `host:port`, such as `example.com:443`"),
    );
    check_absolute(
        "http:///path",
        Err("the target is empty; write `host:port`, such as `example.com:443`"),
    );
    check_absolute(
        "http://user:pw@example.com/",
        Err(
            "`user:pw@example.com` contains userinfo (`@`); send the target without a user name or password",
        ),
    );
    check_absolute(
        "http://allowed.example\\@evil.example/",
        Err(
            "`http://allowed.example\\\\@evil.example/` contains `\\`; a target is `host:port` or `http://host[:port]/path` in printable ASCII",
        ),
    );
    check_absolute(
        "http://example.com/#frag",
        Err(
            "`http://example.com/#frag` contains `#`; a target is `host:port` or `http://host[:port]/path` in printable ASCII",
        ),
    );
    check_absolute(
        "http://example.com/a b",
        Err(
            "`http://example.com/a b` contains the byte ` `; a target is `host:port` or `http://host[:port]/path` in printable ASCII",
        ),
    );
    check_absolute(
        "http://127.1/",
        Err(
            "`127.1` looks like a numeric IP address, which resolvers read as an address; write an ip: rule such as `ip:127.0.0.1:443`",
        ),
    );
    check_absolute(
        "http://example.com:+80/",
        Err(
            "port `+80` is not a number from 1 to 65535; write ASCII digits without a sign, such as `443`",
        ),
    );
}
