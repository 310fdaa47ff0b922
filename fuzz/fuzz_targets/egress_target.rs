//! Fuzz target: the egress target parser (CONNECT authority and absolute-form URI) and the pattern
//! parser. Properties checked on every input: no panic; a parsed target's text parses back to the
//! same target; a parsed pattern's canonical text parses back to the same pattern; deciding a
//! parsed target against a fixed policy never panics; and, for input `PATTERN\nTARGET`, the indexed
//! decision on a name target agrees with the grant arithmetic (`covers`) on the same pattern.
#![no_main]

use std::sync::OnceLock;

use cordon_egress::{
    Decision, Host, Pattern, PatternList, Policy, PolicySpec, Reason, Target, covers, decide,
};
use libfuzzer_sys::fuzz_target;

fn policy() -> &'static Policy {
    static POLICY: OnceLock<Policy> = OnceLock::new();
    POLICY.get_or_init(|| {
        let parse = |list: &[&str], kind| {
            list.iter()
                .map(|p| Pattern::parse(p, kind).expect("fixed pattern"))
                .collect()
        };
        Policy::new(PolicySpec {
            allow: parse(
                &[
                    "example.com",
                    "*.example.test:*",
                    "ip:192.0.2.0/24:443",
                    "ip:[2001:db8::]/32:*",
                ],
                PatternList::Allow,
            ),
            deny: parse(&["bad.example.test"], PatternList::Deny),
            operator_deny: parse(
                &["*.corp.example.test", "ip:192.0.2.66:*"],
                PatternList::Deny,
            ),
            ..PolicySpec::default()
        })
    })
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(target) = Target::parse(text) {
        assert_eq!(Target::parse(&target.to_string()).as_ref(), Ok(&target));
        let _ = decide(policy(), &target);
    }
    if let Ok(uri) = Target::parse_absolute(text) {
        assert!(uri.path().starts_with('/'));
        assert_eq!(
            Target::parse(&uri.target().to_string()).as_ref(),
            Ok(uri.target())
        );
        let _ = decide(policy(), uri.target());
    }
    for list in [PatternList::Allow, PatternList::Deny] {
        if let Ok(pattern) = Pattern::parse(text, list) {
            assert_eq!(
                Pattern::parse(&pattern.to_string(), list).as_ref(),
                Ok(&pattern)
            );
        }
    }
    if let Some((pattern, target)) = text.split_once('\n') {
        differential(pattern, target);
    }
});

/// One allow pattern, one target: the index and `covers` must agree.
fn differential(pattern: &str, target: &str) {
    let (Ok(pattern), Ok(target)) = (
        Pattern::parse(pattern, PatternList::Allow),
        Target::parse(target),
    ) else {
        return;
    };
    let Host::Name(name) = target.host() else {
        return;
    };
    // The single-label name `ip` is a valid target but cannot be written as a pattern.
    if name.as_str() == "ip" {
        return;
    }
    let exact = Pattern::parse(&format!("{name}:{}", target.port()), PatternList::Allow)
        .expect("a parsed target's name and port form a pattern");
    let policy = Policy::new(PolicySpec {
        allow: vec![pattern.clone()],
        ..PolicySpec::default()
    });
    let allowed = decide(&policy, &target) == Decision::Allow;
    assert_eq!(allowed, covers(&pattern, &exact), "{pattern} vs {target}");
    if !allowed {
        let reason = decide(&policy, &target).reason();
        assert!(matches!(
            reason,
            Some(Reason::NotAllowed | Reason::PortNotAllowed)
        ));
    }
}
