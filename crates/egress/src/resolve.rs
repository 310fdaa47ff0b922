//! Name resolution: the `Resolver` trait, a static table (`--resolve H=IP`, the operator's
//! `[resolve]`, tests) and the system resolver with a bounded wait, which consults the hosts file
//! first.

pub mod hosts;

use std::collections::HashMap;
use std::net::{IpAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use thiserror::Error;

use crate::name::looks_numeric;
use crate::{HostName, TargetError, canonical_ip};

/// Why a name did not resolve. In the proxy every variant is `resolve_failed` (502).
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum ResolveError {
    #[error("`{name}` has no static answer; add `--resolve {name}=ADDRESS` or a `[resolve]` entry")]
    NoStaticAnswer { name: HostName },
    #[error("`{name}` did not resolve: {source}")]
    Lookup {
        name: HostName,
        #[source]
        source: std::io::Error,
    },
    #[error("`{name}` resolved to no address")]
    NoAddress { name: HostName },
    #[error("`{name}` did not resolve within {}ms; check the host's DNS", .after.as_millis())]
    Timeout { name: HostName, after: Duration },
    #[error("too many lookups are in flight ({limit}); retry when the resolver answers again")]
    Busy { limit: usize },
    #[error("`{name}` looks numeric and is never handed to the system resolver; write an ip: rule")]
    Numeric { name: HostName },
}

/// Something that turns a canonical name into addresses. Implementations return every address
/// of the answer; [`crate::Policy::admit`] decides which may be dialled.
pub trait Resolver: Send + Sync {
    /// Resolves `name`.
    fn resolve(&self, name: &HostName) -> Result<Vec<IpAddr>, ResolveError>;
}

/// Fixed answers, consulted before anything else.
#[derive(Clone, Debug, Default)]
pub struct StaticResolver {
    answers: HashMap<HostName, Vec<IpAddr>>,
}

impl StaticResolver {
    /// An empty table.
    pub fn new() -> StaticResolver {
        StaticResolver::default()
    }

    /// Adds `address` to the answer for `name`.
    pub fn insert(&mut self, name: HostName, address: IpAddr) {
        let entry = self.answers.entry(name).or_default();
        let address = canonical_ip(address);
        if !entry.contains(&address) {
            entry.push(address);
        }
    }

    /// Parses a `--resolve HOST=IP` flag value (the address is a plain IPv4 or IPv6 address,
    /// without brackets or port) and adds it.
    pub fn insert_flag(&mut self, text: &str) -> Result<(), TargetError> {
        let (name, address) = parse_resolve_flag(text)?;
        self.insert(name, address);
        Ok(())
    }

    /// Adds the operator policy's `[resolve]` table, keeping the answer for every name this
    /// table already holds (a `--resolve` flag wins over the file).
    pub fn insert_unset(&mut self, table: &[(HostName, Vec<IpAddr>)]) {
        for (name, addresses) in table {
            if !self.contains(name) {
                for address in addresses {
                    self.insert(name.clone(), *address);
                }
            }
        }
    }

    /// Whether the table has an answer for `name`.
    pub fn contains(&self, name: &HostName) -> bool {
        self.answers.contains_key(name)
    }

    /// This table first, then `fallback` for names it does not hold.
    pub fn or<R: Resolver>(self, fallback: R) -> WithFallback<R> {
        WithFallback {
            table: self,
            fallback,
        }
    }
}

impl Resolver for StaticResolver {
    fn resolve(&self, name: &HostName) -> Result<Vec<IpAddr>, ResolveError> {
        self.answers
            .get(name)
            .cloned()
            .ok_or_else(|| ResolveError::NoStaticAnswer { name: name.clone() })
    }
}

/// A [`StaticResolver`] in front of another resolver.
#[derive(Clone, Debug)]
pub struct WithFallback<R> {
    table: StaticResolver,
    fallback: R,
}

impl<R: Resolver> Resolver for WithFallback<R> {
    fn resolve(&self, name: &HostName) -> Result<Vec<IpAddr>, ResolveError> {
        if self.table.contains(name) {
            self.table.resolve(name)
        } else {
            self.fallback.resolve(name)
        }
    }
}

/// Parses `HOST=IP`: a name (canonicalised like every other) and an IP address.
pub fn parse_resolve_flag(text: &str) -> Result<(HostName, IpAddr), TargetError> {
    let (name, address) = text
        .split_once('=')
        .ok_or_else(|| TargetError::BadResolve {
            text: text.to_owned(),
        })?;
    let name = HostName::parse(name)?;
    let address = address
        .parse::<IpAddr>()
        .map_err(|_| TargetError::BadResolve {
            text: text.to_owned(),
        })?;
    Ok((name, address))
}

/// The host's resolver (`getaddrinfo` through std), with a bounded wait.
///
/// std offers no timeout for `getaddrinfo`, and this crate forbids `unsafe`, so each lookup runs
/// on a short-lived helper thread and the caller waits on a channel with `recv_timeout`. A lookup
/// that times out is abandoned, not cancelled: its thread ends when the C library gives up (glibc:
/// `timeout × attempts` from resolv.conf). To keep abandoned threads from piling up, at most
/// `limit` lookups may be in flight; beyond that, resolution fails fast with `Busy`.
#[derive(Clone, Debug)]
pub struct SystemResolver {
    timeout: Duration,
    limit: usize,
    in_flight: Arc<AtomicUsize>,
    /// Read before every lookup (see [`hosts`]): an edit applies at once, as the C library's does.
    hosts_file: PathBuf,
}

impl SystemResolver {
    /// A resolver that waits at most `timeout` per lookup, with at most `limit` lookups (live
    /// or abandoned) at once.
    pub fn new(timeout: Duration, limit: usize) -> SystemResolver {
        SystemResolver {
            timeout,
            limit: limit.max(1),
            in_flight: Arc::new(AtomicUsize::new(0)),
            hosts_file: PathBuf::from("/etc/hosts"),
        }
    }

    /// The same resolver reading its hosts file from `path` instead of `/etc/hosts` (tests).
    pub fn with_hosts_file(mut self, path: impl Into<PathBuf>) -> SystemResolver {
        self.hosts_file = path.into();
        self
    }
}

impl Default for SystemResolver {
    /// 5 seconds, 64 lookups.
    fn default() -> SystemResolver {
        SystemResolver::new(Duration::from_secs(5), 64)
    }
}

/// Decrements the in-flight count when the helper thread ends, however it ends.
struct InFlight(Arc<AtomicUsize>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The name handed to the system resolver: always fully qualified (a trailing dot), so the
/// `search` domains of `resolv.conf` never apply. Without the dot, an allowed `db` could be
/// answered as `db.corp.example` — a name the decision never saw and an operator deny may cover.
/// glibc matches `/etc/hosts` entries without the dot, so the resolver reads that file itself
/// first ([`hosts`]).
fn query_name(name: &HostName) -> String {
    format!("{}.", name.as_str())
}

impl Resolver for SystemResolver {
    fn resolve(&self, name: &HostName) -> Result<Vec<IpAddr>, ResolveError> {
        // `HostName::parse` already refuses numeric names; this is the second lock on the door,
        // because `getaddrinfo` would read `0x7f.1` as 127.0.0.1 without asking DNS.
        if looks_numeric(name.as_str()) || name.as_str().parse::<IpAddr>().is_ok() {
            return Err(ResolveError::Numeric { name: name.clone() });
        }
        let listed = hosts::lookup(&hosts::read(&self.hosts_file), name);
        if !listed.is_empty() {
            return Ok(listed);
        }
        if self.in_flight.fetch_add(1, Ordering::AcqRel) >= self.limit {
            self.in_flight.fetch_sub(1, Ordering::AcqRel);
            return Err(ResolveError::Busy { limit: self.limit });
        }
        let guard = InFlight(Arc::clone(&self.in_flight));
        let (sender, receiver) = mpsc::sync_channel(1);
        let host = query_name(name);
        let spawned = thread::Builder::new()
            .name("cordon-resolve".into())
            .spawn(move || {
                let _guard = guard;
                // Port 0: only the addresses matter. The receiver may be gone after a timeout.
                let _ = sender.send(
                    (host.as_str(), 0)
                        .to_socket_addrs()
                        .map(|a| a.collect::<Vec<_>>()),
                );
            });
        if let Err(source) = spawned {
            return Err(ResolveError::Lookup {
                name: name.clone(),
                source,
            });
        }
        match receiver.recv_timeout(self.timeout) {
            Ok(Ok(addresses)) => {
                let mut out: Vec<IpAddr> = Vec::new();
                for ip in addresses.iter().map(|a| canonical_ip(a.ip())) {
                    if !out.contains(&ip) {
                        out.push(ip);
                    }
                }
                if out.is_empty() {
                    Err(ResolveError::NoAddress { name: name.clone() })
                } else {
                    Ok(out)
                }
            }
            Ok(Err(source)) => Err(ResolveError::Lookup {
                name: name.clone(),
                source,
            }),
            Err(_) => Err(ResolveError::Timeout {
                name: name.clone(),
                after: self.timeout,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_system_resolver_asks_for_the_fully_qualified_name_so_search_domains_never_apply() {
        for (text, query) in [("db", "db."), ("api.example.com", "api.example.com.")] {
            assert_eq!(query_name(&HostName::parse(text).unwrap()), query);
        }
    }

    /// `HostName::parse` never yields a numeric name, so the boundary check is only reachable by
    /// building one inside the crate.
    #[test]
    fn the_system_resolver_refuses_a_numeric_name_without_looking_it_up() {
        let resolver = SystemResolver::new(Duration::from_secs(1), 1);
        for text in ["127.1", "0x7f000001", "2130706433", "127.0.0.1", "::1"] {
            let name = HostName::unchecked(text);
            let error = resolver.resolve(&name).unwrap_err();
            assert!(
                matches!(error, ResolveError::Numeric { .. }),
                "{text}: {error}"
            );
        }
        assert_eq!(resolver.in_flight.load(Ordering::Acquire), 0);
    }

    #[test]
    fn the_system_resolver_answers_from_the_hosts_file_before_dns() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("hosts");
        std::fs::write(&file, "192.0.2.7 listed.example.test\n").unwrap();
        // A limit already reached: only an answer that needs no lookup can succeed.
        let resolver = SystemResolver::new(Duration::from_secs(1), 1).with_hosts_file(&file);
        resolver.in_flight.store(1, Ordering::Release);
        let listed = resolver.resolve(&HostName::parse("listed.example.test").unwrap());
        assert_eq!(listed.unwrap(), ["192.0.2.7".parse::<IpAddr>().unwrap()]);
        // Control: a name the file does not list goes to the C library (refused here as busy).
        let other = resolver.resolve(&HostName::parse("other.example.test").unwrap());
        assert!(matches!(other, Err(ResolveError::Busy { .. })), "{other:?}");
    }

    #[test]
    fn the_system_resolver_refuses_lookups_beyond_its_limit() {
        let resolver = SystemResolver::new(Duration::from_secs(1), 1)
            .with_hosts_file("/nonexistent/cordon/hosts");
        resolver.in_flight.store(1, Ordering::Release);
        let error = resolver
            .resolve(&HostName::parse("localhost").unwrap())
            .unwrap_err();
        assert_eq!(
            error.to_string(),
            "too many lookups are in flight (1); retry when the resolver answers again"
        );
    }
}
