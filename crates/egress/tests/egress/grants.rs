//! Grant coverage: `covers` as a subset relation, and requests decided against `[grants]` bounds.

use cordon_egress::{GrantBounds, Pattern, PatternList, covers, overlaps};

fn allow(text: &str) -> Pattern {
    Pattern::parse(text, PatternList::Allow).unwrap()
}

fn deny(text: &str) -> Pattern {
    Pattern::parse(text, PatternList::Deny).unwrap()
}

/// Whether `bound` (an allow pattern) covers `request`.
fn check(bound: &str, request: &str, expected: bool) {
    assert_eq!(
        covers(&allow(bound), &allow(request)),
        expected,
        "`{bound}` covers `{request}`"
    );
}

#[test]
fn a_wildcard_covers_its_subdomains_and_narrower_wildcards_but_not_the_reverse() {
    check("*.x.example", "registry.x.example", true);
    check("*.x.example", "a.b.x.example", true);
    check("*.x.example", "*.x.example", true);
    check("*.x.example", "*.a.x.example", true);
    check("*.x.example", "x.example", false);
    check("registry.x.example", "*.x.example", false);
    check("*.a.x.example", "*.x.example", false);
    check("*.x.example", "registry.y.example", false);
    check("*.x.example", "badx.example", false);
    check("registry.x.example", "registry.x.example", true);
    check("registry.x.example", "other.x.example", false);
}

#[test]
fn ports_are_part_of_coverage() {
    check("*.x.example", "a.x.example:443", true);
    check("*.x.example", "a.x.example:80", true);
    check("*.x.example", "a.x.example:8443", false);
    check("*.x.example", "a.x.example:*", false);
    check("*.x.example:*", "a.x.example", true);
    check("*.x.example:*", "a.x.example:8443", true);
    check("registry.x.example:8443", "registry.x.example", false);
    check("registry.x.example:8443", "registry.x.example:8443", true);
    check("registry.x.example:443", "registry.x.example", false);
}

#[test]
fn ip_rules_cover_by_range_and_never_names() {
    check("ip:10.0.0.0/8:*", "ip:10.1.0.0/16:443", true);
    check("ip:10.1.0.0/16:*", "ip:10.0.0.0/8:443", false);
    check("ip:10.0.0.0/8:443", "ip:10.1.2.3:8443", false);
    check("ip:[2001:db8::]/32:*", "ip:[2001:db8::1]:443", true);
    check("ip:10.0.0.0/8:*", "ip:[2001:db8::1]:443", false);
    check("*.x.example:*", "ip:10.0.0.1:443", false);
}

#[test]
fn overlap_is_symmetric_and_includes_ports() {
    let rows = [
        ("*.x.example", "a.x.example", true),
        ("*.x.example", "*.a.x.example", true),
        ("*.x.example", "x.example", false),
        ("x.example:25", "x.example:443", false),
        ("*", "ip:10.0.0.1:443", true),
        ("*:25", "a.example", false),
        ("ip:10.0.0.0/8:*", "ip:10.1.0.0/16:443", true),
    ];
    for (a, b, expected) in rows {
        assert_eq!(
            overlaps(&deny(a), &allow(b)),
            expected,
            "`{a}` overlaps `{b}`"
        );
        assert_eq!(
            overlaps(&allow(b), &deny(a)),
            expected,
            "`{b}` overlaps `{a}`"
        );
    }
}

/// A request against bounds → `Ok(())` or the refusal text.
fn check_grant(bounds: &GrantBounds, request: &str, expected: Result<(), &str>) {
    let got = bounds.decide(&allow(request)).map_err(|r| r.to_string());
    assert_eq!(
        got.as_ref().map_err(String::as_str),
        expected.as_ref().map_err(|e| *e),
        "request `{request}`"
    );
}

#[test]
fn requests_are_granted_inside_the_bounds_and_outside_every_deny() {
    let bounds = GrantBounds {
        allow: [
            "*.packages.example",
            "registry.example:8443",
            "mirror.example:80",
            "mirror.example:443",
        ]
        .map(allow)
        .to_vec(),
        deny: vec![deny("evil.packages.example")],
        operator_deny: vec![deny("*.corp.packages.example")],
    };
    check_grant(&bounds, "files.packages.example", Ok(()));
    check_grant(&bounds, "*.cdn.packages.example", Ok(()));
    check_grant(&bounds, "registry.example:8443", Ok(()));
    check_grant(&bounds, "mirror.example", Ok(()));
    check_grant(
        &bounds,
        "registry.example",
        Err(
            "not covered by the operator's [grants] allow patterns; request a narrower name or port",
        ),
    );
    check_grant(
        &bounds,
        "packages.example",
        Err(
            "not covered by the operator's [grants] allow patterns; request a narrower name or port",
        ),
    );
    check_grant(
        &bounds,
        "files.packages.example:22",
        Err(
            "not covered by the operator's [grants] allow patterns; request a narrower name or port",
        ),
    );
    check_grant(
        &bounds,
        "evil.packages.example",
        Err("overlaps [grants] deny pattern `evil.packages.example:*`"),
    );
    check_grant(
        &bounds,
        "*.packages.example",
        Err("overlaps operator deny pattern `*.corp.packages.example:*`"),
    );
    check_grant(
        &bounds,
        "x.corp.packages.example",
        Err("overlaps operator deny pattern `*.corp.packages.example:*`"),
    );
    check_grant(
        &GrantBounds::default(),
        "files.packages.example",
        Err("the operator policy has no [grants] allow patterns; ask the operator to add one"),
    );
}
