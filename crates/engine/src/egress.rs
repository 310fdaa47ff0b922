//! Egress for networked sessions (DESIGN §5): a step (or setup hook) whose network is an
//! allowlist or `open` gets its own proxy listener at `127.0.0.1:3128` inside its session's
//! network namespace, served by a host-side runtime under a policy built from the step's
//! `allow`/`deny` and the operator policy. Each listener's identity is its run, step and attempt,
//! so every connection is attributed by construction — never by a header. Audit records become
//! `egress.allow` / `egress.deny` / `egress.close` events, queued here and appended by the engine
//! on its own thread (the store has one writer).
//!
//! Grants (`request_egress`) are decided by [`OperatorGrants`] against the operator's `[grants]`
//! bounds and deny; a step whose network has `grants: true` gets every grant of the run in each
//! new session, each re-checked against the bounds of this process (a tightened bound refuses it,
//! with a `policy.refuse` event).

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use cordon_egress::proxy::{
    AuditKind, AuditRecord, AuditSink, Identity, Limits, ListenerHandle, Proxy, ProxyConfig,
};
use cordon_egress::{
    Cidr, GrantBounds, HostName, Mode, Pattern, PatternList, Policy, PolicySpec, StaticResolver,
    SystemResolver,
};
use cordon_pipeline::Network;
use cordon_pipeline::policy::OperatorPolicy;
use cordon_protocol::{Event, RunId};

use crate::executor::{Purpose, SessionSpec};
use crate::side::SideEvents;

/// The run's egress: the operator policy's part of every session policy and the runtime the
/// listeners are served on.
pub struct Egress {
    runtime: tokio::runtime::Runtime,
    run: RunId,
    operator_deny: Vec<Pattern>,
    allow_private: Vec<Cidr>,
    resolve: Vec<(HostName, Vec<IpAddr>)>,
    /// Addresses this process listens on (the run's page): never a destination.
    listening: Vec<SocketAddr>,
    bounds: GrantBounds,
    /// The model lane's upstream client, when a step has `model_lane: true`.
    lane: Option<cordon_egress::lane::Lane>,
    /// The run's budget, which every lane call counts against (and is refused by, once spent).
    meter: crate::budget::Meter,
}

impl Egress {
    /// The egress of `run` under `operator`; `listening` are this process's own listeners.
    pub fn new(
        run: RunId,
        operator: &OperatorPolicy,
        listening: Vec<SocketAddr>,
    ) -> std::io::Result<Egress> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("cordon-egress")
            .enable_all()
            .build()?;
        Ok(Egress {
            runtime,
            run,
            operator_deny: operator.deny.clone(),
            allow_private: operator.allow_private.clone(),
            resolve: operator.resolve.clone(),
            listening,
            bounds: bounds(operator),
            lane: None,
            meter: crate::budget::Meter::unlimited(),
        })
    }

    /// Counts every lane call against `meter` (the run's budget).
    pub fn with_meter(mut self, meter: crate::budget::Meter) -> Egress {
        self.meter = meter;
        self
    }

    /// Gives the run's `model_lane: true` steps their lane to `config`'s upstream (its client,
    /// and so its CA file, is checked here, before anything runs).
    pub fn with_lane(
        mut self,
        config: cordon_egress::lane::LaneConfig,
    ) -> Result<Egress, cordon_egress::lane::LaneError> {
        self.lane = Some(cordon_egress::lane::Lane::new(config)?);
        Ok(self)
    }

    /// Serves the model lane on `listener` (created inside a session), its calls queued as
    /// events in `events`; an error when this run has no lane configured.
    pub fn serve_lane(
        &self,
        listener: std::net::TcpListener,
        events: SideEvents,
    ) -> std::io::Result<SessionLane> {
        let lane = self.lane.as_ref().ok_or_else(|| {
            std::io::Error::other("the run has no model lane configured (no `llm` upstream)")
        })?;
        let sink = Arc::new(crate::lane::LaneEvents {
            events,
            meter: self.meter.clone(),
        });
        let handle = lane.spawn(self.runtime.handle(), listener, sink)?;
        Ok(SessionLane {
            handle,
            runtime: self.runtime.handle().clone(),
        })
    }

    /// The policy of a session with `network` and the run's `grants` (given only to networks
    /// that take them); `None` for `network: none` (no proxy at all). Each grant is re-checked
    /// against the current bounds; the `policy.refuse` events of those that no longer fit come
    /// with it.
    pub fn policy(&self, network: &Network, grants: &[String]) -> Option<(PolicySpec, Vec<Event>)> {
        let (mode, mut allow, deny) = match network {
            Network::None => return None,
            Network::Open => (Mode::Open, Vec::new(), Vec::new()),
            Network::Allowlist(list) => (Mode::Allowlist, list.allow.clone(), list.deny.clone()),
        };
        let mut refused = Vec::new();
        for domain in grants {
            let checked = Pattern::parse(domain, PatternList::Allow)
                .map_err(|e| e.to_string())
                .and_then(|pattern| {
                    self.bounds
                        .decide(&pattern)
                        .map(|()| pattern)
                        .map_err(|e| e.to_string())
                });
            match checked {
                Ok(pattern) => allow.push(pattern),
                Err(why) => refused.push(Event::PolicyRefuse {
                    domain: domain.clone(),
                    reason: format!("an earlier grant no longer fits the operator policy: {why}"),
                    task: None,
                }),
            }
        }
        let spec = PolicySpec {
            mode,
            allow,
            deny,
            operator_deny: self.operator_deny.clone(),
            allow_private: self.allow_private.clone(),
            listening: self.listening.clone(),
        };
        Some((spec, refused))
    }

    /// Serves `listener` (created inside a session) under `spec`, attributed to the session's
    /// step and attempt (a setup hook's session is marked in the listener name).
    pub fn serve(
        &self,
        listener: std::net::TcpListener,
        spec: PolicySpec,
        session: &SessionSpec,
        first: Vec<Event>,
    ) -> std::io::Result<SessionEgress> {
        self.serve_into(listener, spec, session, SideEvents::new(first), None)
    }

    /// [`Egress::serve`] recording into `events` (a queue the session has already); with
    /// `credential`, the host-side listener of a step's HTTP MCP servers: named `…/host`, and
    /// every request must carry that `Proxy-Authorization` value (other local processes get
    /// `407`).
    pub fn serve_into(
        &self,
        listener: std::net::TcpListener,
        spec: PolicySpec,
        session: &SessionSpec,
        events: SideEvents,
        credential: Option<String>,
    ) -> std::io::Result<SessionEgress> {
        let suffix = if credential.is_some() { "/host" } else { "" };
        let mut resolver = StaticResolver::new();
        resolver.insert_unset(&self.resolve);
        let proxy = Proxy::new(ProxyConfig {
            policy: Arc::new(Policy::new(spec)),
            // Operator `[resolve]` answers first; every other name through the system
            // resolver, asked for the fully qualified name.
            resolver: Arc::new(resolver.or(SystemResolver::default())),
            audit: Arc::new(EventSink {
                events: events.clone(),
            }),
            limits: Limits::default(),
        });
        let kind = match session.purpose {
            Purpose::Step => "step",
            Purpose::Setup => "setup",
        };
        let identity = Identity {
            listener: format!(
                "{}/{}/{}/{kind}{suffix}",
                self.run, session.step, session.attempt
            ),
            step: Some(session.step.to_string()),
            attempt: Some(session.attempt.get()),
            credential,
        };
        let handle = proxy.spawn(self.runtime.handle(), listener, identity)?;
        Ok(SessionEgress {
            handle,
            runtime: self.runtime.handle().clone(),
            events,
        })
    }
}

/// One session's proxy listener.
pub struct SessionEgress {
    handle: ListenerHandle,
    runtime: tokio::runtime::Handle,
    events: SideEvents,
}

impl SessionEgress {
    /// The queue its audit events arrive in.
    pub fn events(&self) -> SideEvents {
        self.events.clone()
    }

    /// Stops the listener; open connections get the proxy's grace period, then are dropped (call
    /// after the session's processes are gone, so nothing is left to wait for).
    pub fn stop(self) {
        let _ = self.runtime.block_on(self.handle.stop());
    }
}

/// One session's model lane listener.
pub struct SessionLane {
    handle: cordon_egress::lane::LaneHandle,
    runtime: tokio::runtime::Handle,
}

impl SessionLane {
    /// Stops the listener and drops any call in flight (call after the session's processes are
    /// gone).
    pub fn stop(self) {
        self.runtime.block_on(self.handle.stop());
    }
}

/// Queues each audit record as its event.
struct EventSink {
    events: SideEvents,
}

impl AuditSink for EventSink {
    fn record(&self, kind: AuditKind, record: &AuditRecord) -> std::io::Result<()> {
        self.events.audit(kind, record)
    }
}

/// The operator's grant bounds: `[grants]` allow and deny, and the operator `deny`.
fn bounds(operator: &OperatorPolicy) -> GrantBounds {
    GrantBounds {
        allow: operator.grants.allow.clone(),
        deny: operator.grants.deny.clone(),
        operator_deny: operator.deny.clone(),
    }
}

/// Decides `request_egress` calls against the operator's grant bounds.
pub struct OperatorGrants {
    bounds: GrantBounds,
}

impl OperatorGrants {
    pub fn new(operator: &OperatorPolicy) -> OperatorGrants {
        OperatorGrants {
            bounds: bounds(operator),
        }
    }
}

impl cordon_agent::Grants for OperatorGrants {
    fn request(&mut self, pattern: &Pattern, _reason: &str) -> cordon_agent::GrantDecision {
        match self.bounds.decide(pattern) {
            Ok(()) => cordon_agent::GrantDecision::Granted,
            Err(refusal) => cordon_agent::GrantDecision::Refused(refusal.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn patterns(texts: &[&str], list: PatternList) -> Vec<Pattern> {
        texts
            .iter()
            .map(|t| Pattern::parse(t, list).expect("pattern"))
            .collect()
    }

    fn egress(grants_allow: &[&str], deny: &[&str]) -> Egress {
        let mut operator = OperatorPolicy::default();
        operator.grants.allow = patterns(grants_allow, PatternList::Allow);
        operator.deny = patterns(deny, PatternList::Deny);
        let run = RunId::from_parts(1_769_860_800_000, 1);
        Egress::new(run, &operator, Vec::new()).expect("runtime")
    }

    fn allowlist(grants: bool) -> Network {
        Network::Allowlist(cordon_pipeline::Allowlist {
            allow: patterns(&["example.com"], PatternList::Allow),
            deny: Vec::new(),
            grants,
        })
    }

    #[test]
    fn grants_still_inside_the_bounds_are_applied_and_the_others_refused_with_an_event() {
        let egress = egress(&["*.example.test:*"], &["blocked.example.test"]);
        let grants = [
            "api.example.test:443".to_owned(),
            "blocked.example.test:443".to_owned(),
            "other.test:443".to_owned(),
        ];
        let (spec, refused) = egress.policy(&allowlist(true), &grants).expect("a proxy");
        let allow: Vec<String> = spec.allow.iter().map(ToString::to_string).collect();
        assert_eq!(allow, ["example.com", "api.example.test:443"]);
        let refused: Vec<String> = refused
            .iter()
            .map(|e| match e {
                Event::PolicyRefuse { domain, reason, .. } => format!("{domain}: {reason}"),
                other => format!("unexpected {other:?}"),
            })
            .collect();
        assert_eq!(refused.len(), 2, "{refused:?}");
        assert!(
            refused[0].starts_with("blocked.example.test:443: an earlier grant no longer fits")
                && refused[0].contains("operator deny"),
            "{refused:?}"
        );
        assert!(refused[1].starts_with("other.test:443: "), "{refused:?}");
    }

    #[test]
    fn offline_sessions_get_no_proxy_and_open_ones_get_open_mode() {
        let egress = egress(&[], &[]);
        assert!(egress.policy(&Network::None, &[]).is_none());
        let (open, _) = egress.policy(&Network::Open, &[]).expect("a proxy");
        assert_eq!(open.mode, Mode::Open);
        let (list, _) = egress.policy(&allowlist(false), &[]).expect("a proxy");
        assert_eq!(list.mode, Mode::Allowlist);
    }
}
