//! `Rules`: one list of patterns, indexed so that matching a target costs O(labels), not a scan.
//!
//! Names are looked up in two hash maps keyed by canonical text: exact names, and wildcard
//! suffixes (`*.example.com` is stored under `example.com` and found from each proper suffix of
//! the target name). Address rules are grouped by prefix length, so an IP target costs one hash
//! lookup per distinct prefix length in use (at most 33 + 129).

use std::collections::HashMap;
use std::net::IpAddr;

use crate::cidr::mask;
use crate::{Host, HostName, Pattern, Ports, Scope, Target, canonical_ip};

/// How a list matched a target.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Match {
    /// No pattern names the host.
    None,
    /// A pattern names the host, but none admits the port.
    HostOnly,
    /// A pattern names the host and admits the port.
    Full,
}

#[derive(Clone, Debug, Default)]
pub(crate) struct Rules {
    patterns: Vec<Pattern>,
    exact: HashMap<HostName, Vec<Ports>>,
    subdomains: HashMap<HostName, Vec<Ports>>,
    everything: Vec<Ports>,
    /// `(prefix length, network → ports)` for IPv4 and IPv6, lengths ascending.
    v4: Vec<(u8, HashMap<IpAddr, Vec<Ports>>)>,
    v6: Vec<(u8, HashMap<IpAddr, Vec<Ports>>)>,
}

impl Rules {
    pub(crate) fn new(patterns: Vec<Pattern>) -> Rules {
        let mut rules = Rules::default();
        for pattern in &patterns {
            let ports = pattern.ports();
            match pattern.scope() {
                Scope::Name(n) => rules.exact.entry(n.clone()).or_default().push(ports),
                Scope::Subdomains(s) => rules.subdomains.entry(s.clone()).or_default().push(ports),
                Scope::Everything => rules.everything.push(ports),
                Scope::Ip(cidr) => {
                    let family = if cidr.network().is_ipv4() {
                        &mut rules.v4
                    } else {
                        &mut rules.v6
                    };
                    let slot = match family.binary_search_by_key(&cidr.length(), |(l, _)| *l) {
                        Ok(i) => i,
                        Err(i) => {
                            family.insert(i, (cidr.length(), HashMap::new()));
                            i
                        }
                    };
                    family[slot]
                        .1
                        .entry(cidr.network())
                        .or_default()
                        .push(ports);
                }
            }
        }
        rules.patterns = patterns;
        rules
    }

    pub(crate) fn patterns(&self) -> &[Pattern] {
        &self.patterns
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.patterns.is_empty()
    }

    pub(crate) fn lookup(&self, target: &Target) -> Match {
        let port = target.port();
        let mut best = Match::None;
        let mut see = |ports: &[Ports]| {
            if ports.iter().any(|p| p.admits(port)) {
                best = Match::Full;
            } else if !ports.is_empty() && best == Match::None {
                best = Match::HostOnly;
            }
        };
        see(&self.everything);
        match target.host() {
            Host::Name(name) => {
                if let Some(ports) = self.exact.get(name.as_str()) {
                    see(ports);
                }
                // Each proper suffix at a label boundary; `*.example.com` is keyed by
                // `example.com`, so `a.b.example.com` finds it and `example.com` itself does not.
                for suffix in name.parent_suffixes() {
                    if let Some(ports) = self.subdomains.get(suffix) {
                        see(ports);
                    }
                }
            }
            Host::Ip(ip) => {
                let ip = canonical_ip(*ip);
                let family = if ip.is_ipv4() { &self.v4 } else { &self.v6 };
                for (length, networks) in family {
                    if let Some(ports) = networks.get(&mask(ip, *length)) {
                        see(ports);
                    }
                }
            }
        }
        best
    }
}
