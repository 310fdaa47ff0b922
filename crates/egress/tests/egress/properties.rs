//! Property tests: spelling variants decide alike, targets and patterns round-trip through their
//! text, no input panics, and the indexed matcher agrees with a naive scan.

use cordon_egress::{
    Cidr, HostName, Pattern, PatternList, Policy, PolicySpec, Ports, Scope, Target, covers, decide,
};
use proptest::prelude::*;

fn label() -> impl Strategy<Value = String> {
    prop_oneof![
        // A small alphabet so that generated names and patterns often collide.
        "[ab]{1,2}",
        "[a-z][a-z0-9_-]{0,10}",
        Just("example".to_owned()),
        Just("test".to_owned()),
        Just("ip".to_owned()),
    ]
}

fn name() -> impl Strategy<Value = String> {
    prop::collection::vec(label(), 1..5).prop_map(|labels| labels.join("."))
}

fn port() -> impl Strategy<Value = u16> {
    prop_oneof![Just(80u16), Just(443u16), Just(8443u16), 1u16..=65535]
}

fn pattern_text() -> impl Strategy<Value = String> {
    let ports = prop_oneof![
        Just(String::new()),
        Just(":*".to_owned()),
        port().prop_map(|p| format!(":{p}"))
    ];
    let scope = prop_oneof![
        name(),
        (label(), label(), prop::collection::vec(label(), 0..2))
            .prop_map(|(a, b, rest)| format!("*.{}", [vec![a, b], rest].concat().join("."))),
    ];
    (scope, ports).prop_map(|(s, p)| format!("{s}{p}"))
}

fn policy() -> impl Strategy<Value = Policy> {
    (
        prop::collection::vec(pattern_text(), 0..12),
        prop::collection::vec(pattern_text(), 0..4),
        prop::collection::vec(pattern_text(), 0..3),
    )
        .prop_map(|(allow, deny, operator_deny)| {
            let parse = |list: Vec<String>, kind| {
                list.iter()
                    .filter_map(|t| Pattern::parse(t, kind).ok())
                    .collect::<Vec<_>>()
            };
            Policy::new(PolicySpec {
                allow: parse(allow, PatternList::Allow),
                deny: parse(deny, PatternList::Deny),
                operator_deny: parse(operator_deny, PatternList::Deny),
                ..PolicySpec::default()
            })
        })
}

/// A spelling of `name` with some letters uppercased and maybe one trailing dot.
fn respell(name: &str, flips: &[bool], dot: bool) -> String {
    let mut out: String = name
        .chars()
        .zip(flips.iter().cycle())
        .map(|(c, &up)| if up { c.to_ascii_uppercase() } else { c })
        .collect();
    if dot {
        out.push('.');
    }
    out
}

/// The reference matcher: scan every pattern.
fn naive_matches(patterns: &[Pattern], host: &HostName, port: u16) -> (bool, bool) {
    let mut host_seen = false;
    let mut full = false;
    for p in patterns {
        let host_match = match p.scope() {
            Scope::Everything => true,
            Scope::Name(n) => n == host,
            Scope::Subdomains(s) => host.as_str().ends_with(&format!(".{s}")),
            Scope::Ip(_) => false,
        };
        if host_match {
            host_seen = true;
            let admits = match p.ports() {
                Ports::Any => true,
                Ports::Web => port == 80 || port == 443,
                Ports::One(q) => q.get() == port,
            };
            full |= admits;
        }
    }
    (host_seen, full)
}

fn naive_decide(policy: &Policy, host: &HostName, port: u16) -> &'static str {
    if naive_matches(policy.operator_deny(), host, port).1 {
        return "denied_operator";
    }
    if naive_matches(policy.deny(), host, port).1 {
        return "denied_pipeline";
    }
    match naive_matches(policy.allow(), host, port) {
        (_, true) => "allow",
        (true, false) => "port_not_allowed",
        (false, false) => "not_allowed",
    }
}

fn code(target: &Target, policy: &Policy) -> &'static str {
    decide(policy, target)
        .reason()
        .map_or("allow", |r| r.as_str())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn decisions_are_invariant_under_case_and_trailing_dot(
        policy in policy(),
        name in name(),
        port in port(),
        flips in prop::collection::vec(any::<bool>(), 1..8),
        dot in any::<bool>(),
    ) {
        let plain = Target::parse(&format!("{name}:{port}"));
        let variant = Target::parse(&format!("{}:{port}", respell(&name, &flips, dot)));
        match (plain, variant) {
            (Ok(a), Ok(b)) => {
                prop_assert_eq!(&a, &b);
                prop_assert_eq!(code(&a, &policy), code(&b, &policy));
            }
            // Both refused: a numeric-looking last label is refused in every spelling.
            (Err(_), Err(_)) => {}
            (a, b) => prop_assert!(false, "{a:?} vs {b:?}"),
        }
    }

    #[test]
    fn the_index_agrees_with_a_scan_over_every_pattern(
        policy in policy(),
        name in name(),
        port in port(),
    ) {
        if let Ok(target) = Target::parse(&format!("{name}:{port}")) {
            let host = HostName::parse(&name).unwrap();
            prop_assert_eq!(code(&target, &policy), naive_decide(&policy, &host, port));
        }
    }

    #[test]
    fn a_single_allow_pattern_allows_exactly_what_it_covers(
        pattern in pattern_text(),
        name in name(),
        port in port(),
    ) {
        let (Ok(pattern), Ok(target)) =
            (Pattern::parse(&pattern, PatternList::Allow), Target::parse(&format!("{name}:{port}")))
        else {
            return Ok(());
        };
        let Ok(exact) = Pattern::parse(&target.to_string(), PatternList::Allow) else {
            return Ok(());
        };
        let policy = Policy::new(PolicySpec { allow: vec![pattern.clone()], ..PolicySpec::default() });
        prop_assert_eq!(code(&target, &policy) == "allow", covers(&pattern, &exact), "{} vs {}", pattern, target);
    }

    #[test]
    fn targets_round_trip_through_their_text(
        host in prop_oneof![
            name(),
            any::<std::net::Ipv4Addr>().prop_map(|ip| ip.to_string()),
            any::<std::net::Ipv6Addr>().prop_map(|ip| format!("[{ip}]")),
        ],
        port in 1u16..=65535,
    ) {
        let text = format!("{host}:{port}");
        if let Ok(target) = Target::parse(&text) {
            prop_assert_eq!(Target::parse(&target.to_string()), Ok(target.clone()));
            let uri = Target::parse_absolute(&format!("http://{target}/")).unwrap();
            prop_assert_eq!(uri.target(), &target);
        } else {
            // Only names may be refused (numeric-looking last label).
            prop_assert!(!host.starts_with('[') && host.parse::<std::net::Ipv4Addr>().is_err(), "{text}");
        }
    }

    #[test]
    fn patterns_round_trip_through_their_canonical_text(text in pattern_text(), deny in any::<bool>()) {
        let list = if deny { PatternList::Deny } else { PatternList::Allow };
        if let Ok(p) = Pattern::parse(&text, list) {
            prop_assert_eq!(Pattern::parse(&p.to_string(), list), Ok(p));
        }
    }

    #[test]
    fn nothing_panics_on_arbitrary_input(bytes in prop::collection::vec(any::<u8>(), 0..80)) {
        let text = String::from_utf8_lossy(&bytes);
        if let Ok(t) = Target::parse(&text) {
            prop_assert_eq!(Target::parse(&t.to_string()), Ok(t));
        }
        let _ = Target::parse_absolute(&text);
        let _ = Target::parse_absolute(&format!("http://{text}"));
        let _ = HostName::parse(&text);
        let _ = Cidr::parse(&text);
        for list in [PatternList::Allow, PatternList::Deny] {
            if let Ok(p) = Pattern::parse(&text, list) {
                prop_assert_eq!(Pattern::parse(&p.to_string(), list), Ok(p));
            }
            let _ = Pattern::parse(&format!("ip:{text}"), list);
        }
    }

    #[test]
    fn nothing_panics_on_text_made_of_grammar_characters(text in "[a-f0-9.:\\[\\]/*%@x+-]{0,40}") {
        if let Ok(t) = Target::parse(&text) {
            prop_assert_eq!(Target::parse(&t.to_string()), Ok(t));
        }
        let _ = Target::parse_absolute(&format!("http://{text}"));
        let _ = Cidr::parse(&text);
        for list in [PatternList::Allow, PatternList::Deny] {
            if let Ok(p) = Pattern::parse(&text, list) {
                prop_assert_eq!(Pattern::parse(&p.to_string(), list), Ok(p));
            }
            if let Ok(p) = Pattern::parse(&format!("ip:{text}"), list) {
                prop_assert_eq!(Pattern::parse(&p.to_string(), list), Ok(p));
            }
        }
    }
}
