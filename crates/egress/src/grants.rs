//! Grant coverage (DESIGN §5 "Grants"): whether a plan-declared egress request stays inside the
//! operator's `[grants]` bounds. Pure set arithmetic over patterns.
//!
//! A request is granted when every name and port it can match is covered by `[grants].allow` and
//! none of them is matched by `[grants].deny` or the operator `deny`. Coverage is subset, not
//! overlap: `registry.x` ⊂ `*.x`, but `*.x` ⊄ `registry.x`, and `*.x` ⊄ `*.y.x`.

use std::fmt;

use crate::{Pattern, Port, Ports, Scope};

/// Whether every (name or address, port) that `request` matches is also matched by `bound`.
pub fn covers(bound: &Pattern, request: &Pattern) -> bool {
    scope_covers(bound.scope(), request.scope()) && bound.ports().contains(request.ports())
}

/// Whether some (name or address, port) is matched by both patterns.
pub fn overlaps(a: &Pattern, b: &Pattern) -> bool {
    scope_overlaps(a.scope(), b.scope()) && a.ports().intersects(b.ports())
}

fn scope_covers(bound: &Scope, request: &Scope) -> bool {
    match (bound, request) {
        (Scope::Everything, _) => true,
        (_, Scope::Everything) => false,
        (Scope::Name(a), Scope::Name(b)) => a == b,
        (Scope::Subdomains(s), Scope::Name(n)) => n.is_strict_subdomain_of(s),
        (Scope::Subdomains(s), Scope::Subdomains(t)) => t == s || t.is_strict_subdomain_of(s),
        (Scope::Ip(c), Scope::Ip(d)) => c.contains_cidr(d),
        (Scope::Name(_) | Scope::Subdomains(_) | Scope::Ip(_), _) => false,
    }
}

fn scope_overlaps(a: &Scope, b: &Scope) -> bool {
    match (a, b) {
        (Scope::Everything, _) | (_, Scope::Everything) => true,
        (Scope::Name(x), Scope::Name(y)) => x == y,
        (Scope::Name(n), Scope::Subdomains(s)) | (Scope::Subdomains(s), Scope::Name(n)) => {
            n.is_strict_subdomain_of(s)
        }
        (Scope::Subdomains(s), Scope::Subdomains(t)) => {
            s == t || s.is_strict_subdomain_of(t) || t.is_strict_subdomain_of(s)
        }
        (Scope::Ip(c), Scope::Ip(d)) => c.overlaps(d),
        (Scope::Ip(_), _) | (_, Scope::Ip(_)) => false,
    }
}

/// The bounds a grant request is checked against: the operator file's `[grants]` and `deny`.
#[derive(Clone, Debug, Default)]
pub struct GrantBounds {
    /// `[grants].allow` (parsed as an allow list); empty means no grant is possible.
    pub allow: Vec<Pattern>,
    /// `[grants].deny` (parsed as a deny list).
    pub deny: Vec<Pattern>,
    /// The operator `deny` (parsed as a deny list).
    pub operator_deny: Vec<Pattern>,
}

/// Why a grant request was refused; `Display` is the text after `refused <pattern>: `.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GrantRefusal {
    /// `[grants].allow` is empty.
    NoBounds,
    /// Some name or port of the request is outside every `[grants].allow` pattern.
    NotCovered,
    /// The request overlaps this `[grants].deny` pattern.
    DeniedByGrants(Pattern),
    /// The request overlaps this operator `deny` pattern.
    DeniedByOperator(Pattern),
}

impl fmt::Display for GrantRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GrantRefusal::NoBounds => {
                f.write_str("the operator policy has no [grants] allow patterns; ask the operator to add one")
            }
            GrantRefusal::NotCovered => {
                f.write_str("not covered by the operator's [grants] allow patterns; request a narrower name or port")
            }
            GrantRefusal::DeniedByGrants(p) => write!(f, "overlaps [grants] deny pattern `{p}`"),
            GrantRefusal::DeniedByOperator(p) => write!(f, "overlaps operator deny pattern `{p}`"),
        }
    }
}

impl GrantBounds {
    /// Decides a request (parsed as an allow pattern). Deny is checked first so a request that is
    /// both uncovered and denied names the deny pattern, which is the more useful answer.
    ///
    /// Ports may be covered by several patterns together (`example.com:80` and `example.com:443`
    /// cover `example.com`), each port by a pattern covering all the request's names.
    pub fn decide(&self, request: &Pattern) -> Result<(), GrantRefusal> {
        if let Some(p) = self.operator_deny.iter().find(|d| overlaps(d, request)) {
            return Err(GrantRefusal::DeniedByOperator(p.clone()));
        }
        if let Some(p) = self.deny.iter().find(|d| overlaps(d, request)) {
            return Err(GrantRefusal::DeniedByGrants(p.clone()));
        }
        if self.allow.is_empty() {
            return Err(GrantRefusal::NoBounds);
        }
        let names = Pattern::new(request.scope().clone(), Ports::Any);
        let bounds = self
            .allow
            .iter()
            .filter(|b| scope_covers(b.scope(), names.scope()));
        let covered = match request.ports() {
            Ports::Any => bounds.clone().any(|b| b.ports() == Ports::Any),
            Ports::One(p) => bounds.clone().any(|b| b.ports().admits(p)),
            Ports::Web => [Port::HTTP, Port::HTTPS]
                .into_iter()
                .all(|p| bounds.clone().any(|b| b.ports().admits(p))),
        };
        if covered {
            Ok(())
        } else {
            Err(GrantRefusal::NotCovered)
        }
    }
}
