//! `decide` and `admit`: every rule of DESIGN §5 as (policy, target) → verdict rows.

use std::net::{IpAddr, SocketAddr};

use cordon_egress::{
    Cidr, Decision, Mode, Pattern, PatternList, Policy, PolicySpec, Reason, StaticResolver, Target,
    decide,
};

/// A policy from pattern strings.
#[derive(Default)]
struct Spec {
    spec: PolicySpec,
}

impl Spec {
    fn allow(mut self, patterns: &[&str]) -> Spec {
        self.spec.allow = parse(patterns, PatternList::Allow);
        self
    }
    fn deny(mut self, patterns: &[&str]) -> Spec {
        self.spec.deny = parse(patterns, PatternList::Deny);
        self
    }
    fn operator_deny(mut self, patterns: &[&str]) -> Spec {
        self.spec.operator_deny = parse(patterns, PatternList::Deny);
        self
    }
    fn allow_private(mut self, cidrs: &[&str]) -> Spec {
        self.spec.allow_private = cidrs.iter().map(|c| Cidr::parse(c).unwrap()).collect();
        self
    }
    fn listening(mut self, addrs: &[&str]) -> Spec {
        self.spec.listening = addrs
            .iter()
            .map(|a| a.parse::<SocketAddr>().unwrap())
            .collect();
        self
    }
    fn open(mut self) -> Spec {
        self.spec.mode = Mode::Open;
        self
    }
    fn build(self) -> Policy {
        Policy::new(self.spec)
    }
}

fn parse(patterns: &[&str], list: PatternList) -> Vec<Pattern> {
    patterns
        .iter()
        .map(|p| Pattern::parse(p, list).unwrap())
        .collect()
}

fn verdict(decision: Decision) -> &'static str {
    decision.reason().map_or("allow", Reason::as_str)
}

/// `target` (a CONNECT authority) under `policy` → `"allow"` or a reason code.
fn check(policy: &Policy, target: &str, expected: &str) {
    let target = Target::parse(target).unwrap_or_else(|e| panic!("target `{target}`: {e}"));
    assert_eq!(
        verdict(decide(policy, &target)),
        expected,
        "target `{target}`"
    );
}

/// A name target whose static answer is `answer` → `"allow"` or a reason code, through
/// `Policy::evaluate`.
fn check_answer(policy: &Policy, target: &str, answer: &[&str], expected: &str) {
    let target = Target::parse(target).unwrap();
    let mut resolver = StaticResolver::new();
    if let cordon_egress::Host::Name(name) = target.host() {
        for a in answer {
            resolver.insert(name.clone(), a.parse::<IpAddr>().unwrap());
        }
    }
    let evaluation = policy.evaluate(&target, &resolver);
    assert_eq!(
        verdict(evaluation.decision),
        expected,
        "target `{target}` answered {answer:?}"
    );
    assert_eq!(
        evaluation.dial.is_empty(),
        expected != "allow",
        "dial list of `{target}`"
    );
}

#[test]
fn exact_names_match_only_themselves_on_80_and_443() {
    let p = Spec::default().allow(&["example.com"]).build();
    check(&p, "example.com:443", "allow");
    check(&p, "example.com:80", "allow");
    check(&p, "EXAMPLE.COM.:443", "allow");
    check(&p, "example.com:8443", "port_not_allowed");
    check(&p, "example.com:22", "port_not_allowed");
    check(&p, "www.example.com:443", "not_allowed");
    check(&p, "badexample.com:443", "not_allowed");
    check(&p, "example.com.evil.example:443", "not_allowed");
    check(&p, "com:443", "not_allowed");
}

#[test]
fn wildcards_match_subdomains_at_any_depth_but_never_the_apex() {
    let p = Spec::default().allow(&["*.example.com"]).build();
    check(&p, "a.example.com:443", "allow");
    check(&p, "a.b.c.example.com:80", "allow");
    check(&p, "example.com:443", "not_allowed");
    check(&p, "badexample.com:443", "not_allowed");
    check(&p, "a.badexample.com:443", "not_allowed");
    check(&p, "example.com.evil.example:443", "not_allowed");
    check(&p, "a.example.com:22", "port_not_allowed");
}

#[test]
fn explicit_ports_and_any_port_are_honoured() {
    let p = Spec::default()
        .allow(&["example.com:8443", "*.example.test:*", "example.org"])
        .build();
    check(&p, "example.com:8443", "allow");
    check(&p, "example.com:443", "port_not_allowed");
    check(&p, "x.example.test:1", "allow");
    check(&p, "x.example.test:65535", "allow");
    check(&p, "example.test:443", "not_allowed");
    check(&p, "example.org:80", "allow");
}

#[test]
fn several_patterns_for_one_name_add_up() {
    let p = Spec::default()
        .allow(&["example.com:22", "example.com", "*.example.com:8080"])
        .build();
    check(&p, "example.com:22", "allow");
    check(&p, "example.com:443", "allow");
    check(&p, "example.com:8080", "port_not_allowed");
    check(&p, "a.example.com:8080", "allow");
    check(&p, "a.example.com:443", "port_not_allowed");
}

#[test]
fn deny_always_wins_and_names_who_denied() {
    let p = Spec::default()
        .allow(&["*.example.com", "example.com:*", "ip:192.0.2.0/24:*"])
        .deny(&["bad.example.com", "example.com:25"])
        .operator_deny(&["*.corp.example.com", "ip:192.0.2.66:*"])
        .allow_private(&["192.0.2.0/24"])
        .build();
    check(&p, "good.example.com:443", "allow");
    check(&p, "bad.example.com:443", "denied_pipeline");
    check(&p, "bad.example.com:80", "denied_pipeline");
    check(&p, "x.bad.example.com:443", "allow");
    check(&p, "example.com:25", "denied_pipeline");
    check(&p, "example.com:26", "allow");
    check(&p, "a.corp.example.com:443", "denied_operator");
    check(&p, "a.b.corp.example.com:443", "denied_operator");
    check(&p, "192.0.2.66:443", "denied_operator");
    check(&p, "[::ffff:192.0.2.66]:443", "denied_operator");
    check(&p, "192.0.2.67:443", "allow");
}

#[test]
fn operator_deny_wins_over_pipeline_deny_and_open_mode() {
    let p = Spec::default()
        .open()
        .deny(&["example.com"])
        .operator_deny(&["example.com", "*:25"])
        .build();
    check(&p, "example.com:443", "denied_operator");
    check(&p, "anything.example:25", "denied_operator");
    check(&p, "anything.example:443", "allow");
}

#[test]
fn operator_deny_star_refuses_names_and_ip_rules_alike() {
    let p = Spec::default()
        .allow(&["example.com", "ip:192.0.2.1:443"])
        .operator_deny(&["*"])
        .allow_private(&["192.0.2.0/24"])
        .build();
    check(&p, "example.com:443", "denied_operator");
    check(&p, "192.0.2.1:443", "denied_operator");
    check(&p, "[2001:db8::1]:443", "denied_operator");
}

#[test]
fn an_empty_allow_list_allows_nothing() {
    let p = Spec::default().build();
    assert!(p.allows_nothing());
    check(&p, "example.com:443", "not_allowed");
    check(&p, "192.0.2.1:443", "ip_literal");
}

#[test]
fn ip_literals_need_an_ip_rule_and_a_public_or_allowed_private_address() {
    let p = Spec::default()
        .allow(&[
            "ip:8.8.8.8:443",
            "ip:[2606:4700::]/32:*",
            "ip:10.0.0.0/8:443",
            "ip:192.168.0.0/16:443",
            "ip:169.254.169.254:80",
            "ip:127.0.0.1:*",
            "8.8.4.4.example.com",
        ])
        .allow_private(&["192.168.1.0/24", "169.254.0.0/16", "127.0.0.0/8"])
        .listening(&["127.0.0.1:3128"])
        .build();
    check(&p, "8.8.8.8:443", "allow");
    check(&p, "8.8.8.8:80", "port_not_allowed");
    check(&p, "8.8.4.4:443", "ip_literal");
    check(&p, "[2606:4700::1111]:8443", "allow");
    check(&p, "[2606:4701::1]:443", "ip_literal");
    check(&p, "[::ffff:8.8.8.8]:443", "allow");
    check(&p, "10.1.2.3:443", "private_address");
    check(&p, "192.168.1.7:443", "allow");
    check(&p, "192.168.2.7:443", "private_address");
    check(&p, "169.254.169.254:80", "private_address");
    check(&p, "127.0.0.1:8080", "allow");
    check(&p, "127.0.0.1:3128", "self");
}

#[test]
fn open_mode_allows_every_name_and_port_but_still_classifies_addresses() {
    let p = Spec::default()
        .open()
        .allow_private(&["10.20.0.0/16"])
        .build();
    check(&p, "example.com:443", "allow");
    check(&p, "example.com:22", "allow");
    check(&p, "93.184.215.14:443", "allow");
    check(&p, "127.0.0.1:443", "private_address");
    check(&p, "10.20.0.5:443", "allow");
    check(&p, "10.21.0.5:443", "private_address");
    check(&p, "[fd00:ec2::254]:80", "private_address");
    check(&p, "100.100.100.200:80", "private_address");
    check(&p, "100.64.0.1:80", "private_address");
    check_answer(&p, "localhost:443", &["127.0.0.1"], "private_address");
    check_answer(&p, "internal.example:443", &["10.20.0.5"], "allow");
}

#[test]
fn resolved_answers_are_classified_as_a_whole() {
    let p = Spec::default()
        .allow(&["*.example.com:*"])
        .allow_private(&["10.20.0.0/16", "169.254.0.0/16"])
        .listening(&["0.0.0.0:3128", "[::1]:8321"])
        .build();
    check_answer(&p, "a.example.com:443", &["93.184.215.14"], "allow");
    check_answer(
        &p,
        "a.example.com:443",
        &["93.184.215.14", "2606:2800:21f:cb07:6820:80da:af6b:8b2c"],
        "allow",
    );
    check_answer(&p, "a.example.com:443", &["127.0.0.1"], "private_address");
    check_answer(
        &p,
        "a.example.com:443",
        &["10.0.0.1", "192.168.0.1"],
        "private_address",
    );
    check_answer(
        &p,
        "a.example.com:443",
        &["93.184.215.14", "10.0.0.1"],
        "mixed_answer",
    );
    check_answer(
        &p,
        "a.example.com:443",
        &["::ffff:10.0.0.1", "93.184.215.14"],
        "mixed_answer",
    );
    check_answer(
        &p,
        "a.example.com:443",
        &["93.184.215.14", "10.20.0.9"],
        "allow",
    );
    check_answer(
        &p,
        "a.example.com:443",
        &["93.184.215.14", "169.254.169.254"],
        "private_address",
    );
    check_answer(
        &p,
        "a.example.com:80",
        &["169.254.170.2"],
        "private_address",
    );
    check_answer(&p, "a.example.com:3128", &["93.184.215.14"], "self");
    check_answer(&p, "a.example.com:8321", &["::1"], "self");
    check_answer(&p, "a.example.com:8321", &["93.184.215.14"], "allow");
    check_answer(&p, "a.example.com:443", &[], "resolve_failed");
    let wildcard_listener = Spec::default().open().listening(&["[::]:9000"]).build();
    check_answer(
        &wildcard_listener,
        "a.example.com:9000",
        &["93.184.215.14"],
        "self",
    );
    check_answer(
        &wildcard_listener,
        "a.example.com:9001",
        &["93.184.215.14"],
        "allow",
    );
    check_answer(
        &p,
        "b.example.com:443",
        &["64:ff9b::a00:1"],
        "private_address",
    );
    check_answer(
        &p,
        "b.example.com:443",
        &["64:ff9b::a9fe:a9fe"],
        "private_address",
    );
}

#[test]
fn refusals_before_resolution_never_reach_the_resolver() {
    let p = Spec::default().allow(&["example.com"]).build();
    let target = Target::parse("other.example:443").unwrap();
    let evaluation = p.evaluate(&target, &StaticResolver::new());
    assert_eq!(evaluation.decision, Decision::Deny(Reason::NotAllowed));
    assert!(evaluation.resolve_error.is_none());
    let target = Target::parse("example.com:443").unwrap();
    let evaluation = p.evaluate(&target, &StaticResolver::new());
    assert_eq!(evaluation.decision, Decision::Deny(Reason::ResolveFailed));
    assert_eq!(
        evaluation.resolve_error.unwrap().to_string(),
        "`example.com` has no static answer; add `--resolve example.com=ADDRESS` or a `[resolve]` entry"
    );
}

#[test]
fn an_allowed_ip_literal_is_dialled_as_written() {
    let p = Spec::default().allow(&["ip:[2001:4860::]/32:443"]).build();
    let target = Target::parse("[2001:4860::8888]:443").unwrap();
    let evaluation = p.evaluate(&target, &StaticResolver::new());
    assert_eq!(evaluation.decision, Decision::Allow);
    assert_eq!(
        evaluation.dial,
        vec!["[2001:4860::8888]:443".parse::<SocketAddr>().unwrap()]
    );
}

#[test]
fn reason_codes_and_statuses_are_appendix_a() {
    let table: Vec<(&str, u16)> = Reason::ALL
        .iter()
        .map(|r| (r.as_str(), r.status()))
        .collect();
    assert_eq!(
        table,
        [
            ("not_allowed", 403),
            ("denied_pipeline", 403),
            ("denied_operator", 403),
            ("port_not_allowed", 403),
            ("ip_literal", 403),
            ("private_address", 403),
            ("mixed_answer", 403),
            ("self", 403),
            ("bad_target", 400),
            ("resolve_failed", 502),
            ("connect_failed", 502),
            ("upstream_timeout", 504),
            ("sni_mismatch", 403),
        ]
    );
    for r in Reason::ALL {
        assert_eq!(Reason::from_code(r.as_str()), Some(r));
    }
}

#[test]
fn unspecified_addresses_are_never_dialled_whatever_allow_private_says() {
    let p = Spec::default()
        .open()
        .allow_private(&["0.0.0.0/0", "::/0"])
        .build();
    check(&p, "0.0.0.0:8321", "private_address");
    check(&p, "0.1.2.3:22", "private_address");
    check(&p, "[::]:8321", "private_address");
    check(&p, "[::ffff:0.0.0.0]:8321", "private_address");
    // Control: the same setting opens other non-public ranges.
    check(&p, "10.1.2.3:443", "allow");
    check(&p, "127.0.0.1:8080", "allow");
    check_answer(&p, "a.example.com:443", &["0.0.0.0"], "private_address");
    check_answer(&p, "a.example.com:443", &["::"], "private_address");
}

#[test]
fn every_address_that_reaches_a_listener_of_this_process_is_self() {
    let p = Spec::default()
        .open()
        .allow_private(&["0.0.0.0/0", "::/0"])
        .listening(&["127.0.0.1:8321", "[::1]:3129", "0.0.0.0:4000"])
        .build();
    for target in [
        "127.0.0.1:8321",
        "127.0.0.2:8321",
        "[::ffff:127.0.0.1]:8321",
        "[::1]:3129",
        "127.0.0.1:3129",
        "10.9.8.7:4000",
        "[2001:db8::1]:4000",
    ] {
        check(&p, target, "self");
    }
    // Control: other ports of the same addresses are reachable with `allow_private`.
    check(&p, "127.0.0.1:8322", "allow");
    check(&p, "[::1]:8321", "self");
    check(&p, "10.9.8.7:4001", "allow");
}
