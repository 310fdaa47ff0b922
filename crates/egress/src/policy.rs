//! `Policy`: one session's egress rules, and the pure decisions made with them.
//!
//! Order of a decision, each step explained where it is made:
//! 1. operator deny → `denied_operator`; 2. pipeline deny → `denied_pipeline` (deny always wins,
//!    and an operator deny is reported as such so the user knows the pipeline cannot lift it);
//! 3. names: open mode allows every name and port, otherwise an allow pattern must name the host
//!    (`not_allowed`) and admit the port (`port_not_allowed`);
//! 4. IP literals: an `ip:` rule must admit address and port (`ip_literal`, `port_not_allowed`;
//!    open mode admits every literal), then the address is classified like a resolved one;
//! 5. after resolution ([`Policy::admit`]): every address is classified; metadata is never
//!    reachable, this process's own listeners are `self`, non-public addresses need
//!    `allow_private`, and an answer mixing reachable and unreachable addresses is `mixed_answer`.

use std::net::{IpAddr, SocketAddr};

use crate::classify::{AddressClass, classify};
use crate::rules::{Match, Rules};
use crate::{
    Cidr, Decision, Evaluation, Host, Pattern, Port, Reason, Resolver, Target, canonical_ip,
};

/// Whether the session is limited to its allow list.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Mode {
    /// Only what the allow list names (`network: {allow: …}`).
    #[default]
    Allowlist,
    /// Every name and port (`network: open`); deny lists and address classification still apply.
    Open,
}

/// The plain data a policy is built from. Patterns must have been parsed for their list
/// (`PatternList::Allow` for `allow`, `PatternList::Deny` for both deny lists).
#[derive(Clone, Debug, Default)]
pub struct PolicySpec {
    /// Allowlist or open.
    pub mode: Mode,
    /// The step's `allow` patterns, plus applied grants.
    pub allow: Vec<Pattern>,
    /// The step's `deny` patterns.
    pub deny: Vec<Pattern>,
    /// The operator policy file's `deny`.
    pub operator_deny: Vec<Pattern>,
    /// The operator's `allow_private` ranges.
    pub allow_private: Vec<Cidr>,
    /// Socket addresses this cordon process listens on (proxy, model lane, UI).
    pub listening: Vec<SocketAddr>,
}

/// A session's egress policy, indexed for decisions.
#[derive(Clone, Debug)]
pub struct Policy {
    mode: Mode,
    allow: Rules,
    deny: Rules,
    operator_deny: Rules,
    allow_private: Vec<Cidr>,
    listening: Vec<SocketAddr>,
}

/// The pure decision on a target; see [`Policy::decide`].
pub fn decide(policy: &Policy, target: &Target) -> Decision {
    policy.decide(target)
}

impl Policy {
    /// Builds and indexes a policy.
    pub fn new(spec: PolicySpec) -> Policy {
        Policy {
            mode: spec.mode,
            allow: Rules::new(spec.allow),
            deny: Rules::new(spec.deny),
            operator_deny: Rules::new(spec.operator_deny),
            allow_private: spec.allow_private,
            listening: spec.listening.into_iter().map(canonical_socket).collect(),
        }
    }

    /// Allowlist or open.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// The allow patterns, as given.
    pub fn allow(&self) -> &[Pattern] {
        self.allow.patterns()
    }

    /// The pipeline deny patterns, as given.
    pub fn deny(&self) -> &[Pattern] {
        self.deny.patterns()
    }

    /// The operator deny patterns, as given.
    pub fn operator_deny(&self) -> &[Pattern] {
        self.operator_deny.patterns()
    }

    /// The `allow_private` ranges.
    pub fn allow_private(&self) -> &[Cidr] {
        &self.allow_private
    }

    /// Decides a target without resolving it. For a name, `Allow` means "resolve it, then
    /// [`Policy::admit`] the answer"; for an IP literal, `Allow` means the address is checked.
    pub fn decide(&self, target: &Target) -> Decision {
        // Deny patterns match on host AND port: `deny: [example.com:25]` does not refuse 443.
        if self.operator_deny.lookup(target) == Match::Full {
            return Decision::Deny(Reason::DeniedOperator);
        }
        if self.deny.lookup(target) == Match::Full {
            return Decision::Deny(Reason::DeniedPipeline);
        }
        let allowed = match (self.mode, self.allow.lookup(target)) {
            (Mode::Open, _) | (Mode::Allowlist, Match::Full) => true,
            (Mode::Allowlist, Match::HostOnly) => return Decision::Deny(Reason::PortNotAllowed),
            (Mode::Allowlist, Match::None) => false,
        };
        match (target.host(), allowed) {
            (Host::Name(_), true) => Decision::Allow,
            (Host::Name(_), false) => Decision::Deny(Reason::NotAllowed),
            (Host::Ip(ip), true) => match self.check_address(*ip, target.port()) {
                Ok(_) => Decision::Allow,
                Err(reason) => Decision::Deny(reason),
            },
            (Host::Ip(_), false) => Decision::Deny(Reason::IpLiteral),
        }
    }

    /// Checks one address the proxy would connect to: its class, `allow_private`, and this
    /// process's listeners. Returns the class when the address may be dialled.
    pub fn check_address(&self, ip: IpAddr, port: Port) -> Result<AddressClass, Reason> {
        let ip = canonical_ip(ip);
        let class = classify(ip);
        // Metadata endpoints hand out cloud credentials, and an unspecified address (`0.0.0.0/8`,
        // `::`) reaches whatever listens on this host's loopback: no operator setting opens
        // either.
        if matches!(class, AddressClass::Metadata | AddressClass::Unspecified) {
            return Err(Reason::PrivateAddress);
        }
        // A connection back into this process would let a sandbox reach the UI, the model lane or
        // another session's proxy from the host side; `allow_private` cannot open it either.
        if self.is_self(ip, port) {
            return Err(Reason::SelfAddress);
        }
        if class != AddressClass::Public && !self.allow_private.iter().any(|c| c.contains(ip)) {
            return Err(Reason::PrivateAddress);
        }
        Ok(class)
    }

    /// Checks a resolver's answer for an allowed name target and returns the socket addresses
    /// to dial, in answer order without duplicates. Every address must pass
    /// [`Policy::check_address`]: dialling only the good ones of a mixed answer would let a name
    /// that also points at a private address probe the inside (DNS rebinding), so a mixed answer
    /// is refused as a whole.
    pub fn admit(&self, target: &Target, answer: &[IpAddr]) -> Result<Vec<SocketAddr>, Reason> {
        let port = target.port();
        let answer: Vec<IpAddr> = match target.host() {
            Host::Ip(ip) => vec![*ip],
            Host::Name(_) => dedupe(answer),
        };
        if answer.is_empty() {
            return Err(Reason::ResolveFailed);
        }
        let checks: Vec<Result<AddressClass, Reason>> = answer
            .iter()
            .map(|ip| self.check_address(*ip, port))
            .collect();
        // A metadata address anywhere in the answer is reported as private, never as mixed: the
        // name points somewhere nothing may reach.
        if answer
            .iter()
            .any(|ip| classify(*ip) == AddressClass::Metadata)
        {
            return Err(Reason::PrivateAddress);
        }
        if checks.contains(&Err(Reason::SelfAddress)) {
            return Err(Reason::SelfAddress);
        }
        let refused = checks.iter().filter(|c| c.is_err()).count();
        if refused == answer.len() {
            Err(Reason::PrivateAddress)
        } else if refused > 0 {
            Err(Reason::MixedAnswer)
        } else {
            Ok(answer
                .into_iter()
                .map(|ip| SocketAddr::new(ip, port.get()))
                .collect())
        }
    }

    /// Decides, resolves (names only) and admits: the whole pure pipeline with the resolver as
    /// the only effect.
    pub fn evaluate(&self, target: &Target, resolver: &dyn Resolver) -> Evaluation {
        let refuse = |reason, resolved, resolve_error| Evaluation {
            decision: Decision::Deny(reason),
            resolved,
            dial: Vec::new(),
            resolve_error,
        };
        if let Decision::Deny(reason) = self.decide(target) {
            return refuse(reason, Vec::new(), None);
        }
        let name = match target.host() {
            Host::Ip(ip) => {
                return Evaluation {
                    decision: Decision::Allow,
                    resolved: Vec::new(),
                    dial: vec![SocketAddr::new(*ip, target.port().get())],
                    resolve_error: None,
                };
            }
            Host::Name(name) => name,
        };
        let resolved = match resolver.resolve(name) {
            Ok(addresses) => dedupe(&addresses),
            Err(e) => return refuse(Reason::ResolveFailed, Vec::new(), Some(e)),
        };
        match self.admit(target, &resolved) {
            Ok(dial) => Evaluation {
                decision: Decision::Allow,
                resolved,
                dial,
                resolve_error: None,
            },
            Err(reason) => refuse(reason, resolved, None),
        }
    }

    /// Whether `ip:port` may reach one of this process's listeners. A listener on `0.0.0.0` or
    /// `::` accepts on every local address, and the pure core does not know the host's addresses,
    /// so it is taken to match every address on its port; a loopback listener is reached through
    /// any loopback address on its port (the kernel routes all of `127.0.0.0/8` locally, and
    /// nothing is lost by refusing the other ones). Refusing some public `address:port` pairs
    /// is the safe side of that gap.
    fn is_self(&self, ip: IpAddr, port: Port) -> bool {
        self.listening.iter().any(|l| {
            l.port() == port.get()
                && (l.ip() == ip
                    || l.ip().is_unspecified()
                    || ip.is_unspecified()
                    || (l.ip().is_loopback() && ip.is_loopback()))
        })
    }

    /// Whether the allow list is empty (a session with `grants: true` may start that way).
    pub fn allows_nothing(&self) -> bool {
        self.mode == Mode::Allowlist && self.allow.is_empty()
    }
}

fn canonical_socket(addr: SocketAddr) -> SocketAddr {
    SocketAddr::new(canonical_ip(addr.ip()), addr.port())
}

fn dedupe(answer: &[IpAddr]) -> Vec<IpAddr> {
    let mut out: Vec<IpAddr> = Vec::with_capacity(answer.len());
    for ip in answer.iter().map(|ip| canonical_ip(*ip)) {
        if !out.contains(&ip) {
            out.push(ip);
        }
    }
    out
}
