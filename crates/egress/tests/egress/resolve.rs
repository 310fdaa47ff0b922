//! Resolvers: the static table, the fallback chain, `--resolve` parsing, and the system resolver's
//! refusal of numeric names (checked without touching DNS).

use std::net::IpAddr;

use cordon_egress::{HostName, Resolver, StaticResolver, parse_resolve_flag};

fn name(text: &str) -> HostName {
    HostName::parse(text).unwrap()
}

/// A `--resolve` value → `Ok((name, address))` or the message.
fn check(flag: &str, expected: Result<(&str, &str), &str>) {
    let got = parse_resolve_flag(flag)
        .map(|(n, a)| (n.to_string(), a.to_string()))
        .map_err(|e| e.to_string());
    let got = match &got {
        Ok((n, a)) => Ok((n.as_str(), a.as_str())),
        Err(e) => Err(e.as_str()),
    };
    assert_eq!(got, expected, "--resolve {flag}");
}

#[test]
fn resolve_flags_are_a_canonical_name_and_an_address() {
    check(
        "Registry.Example.=10.20.0.5",
        Ok(("registry.example", "10.20.0.5")),
    );
    check(
        "registry.example=2001:db8::5",
        Ok(("registry.example", "2001:db8::5")),
    );
    check(
        "registry.example",
        Err(
            "`registry.example` is not `HOST=ADDRESS`; write one such as `registry.example=192.0.2.10`",
        ),
    );
    check(
        "registry.example=[2001:db8::5]",
        Err(
            "`registry.example=[2001:db8::5]` is not `HOST=ADDRESS`; write one such as `registry.example=192.0.2.10`",
        ),
    );
    check(
        "registry.example=127.1",
        Err(
            "`registry.example=127.1` is not `HOST=ADDRESS`; write one such as `registry.example=192.0.2.10`",
        ),
    );
    check(
        "10.0.0.1=10.0.0.2",
        Err(
            "`10.0.0.1` is an IP literal, not a host name; write an ip: rule such as `ip:10.0.0.1:443`",
        ),
    );
}

#[test]
fn static_answers_are_merged_and_canonicalised() {
    let mut table = StaticResolver::new();
    table.insert_flag("registry.example=10.20.0.5").unwrap();
    table
        .insert_flag("REGISTRY.example=::ffff:10.20.0.6")
        .unwrap();
    table.insert_flag("registry.example=10.20.0.5").unwrap();
    let want: Vec<IpAddr> = vec!["10.20.0.5".parse().unwrap(), "10.20.0.6".parse().unwrap()];
    assert_eq!(table.resolve(&name("registry.example")).unwrap(), want);
    assert_eq!(
        table
            .resolve(&name("other.example"))
            .unwrap_err()
            .to_string(),
        "`other.example` has no static answer; add `--resolve other.example=ADDRESS` or a `[resolve]` entry"
    );
}

#[test]
fn the_static_table_answers_before_its_fallback() {
    let mut first = StaticResolver::new();
    first.insert(name("a.example"), "192.0.2.1".parse().unwrap());
    let mut second = StaticResolver::new();
    second.insert(name("a.example"), "192.0.2.2".parse().unwrap());
    second.insert(name("b.example"), "192.0.2.3".parse().unwrap());
    let chain = first.or(second);
    assert_eq!(
        chain.resolve(&name("a.example")).unwrap(),
        vec!["192.0.2.1".parse::<IpAddr>().unwrap()]
    );
    assert_eq!(
        chain.resolve(&name("b.example")).unwrap(),
        vec!["192.0.2.3".parse::<IpAddr>().unwrap()]
    );
    assert!(chain.resolve(&name("c.example")).is_err());
}
