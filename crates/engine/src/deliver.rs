//! Delivery and reports (DESIGN §15, §18): everything the `deliver` action and `report:` send
//! off the machine, with the token kept on the host.
//!
//! * [`Destinations`] — the operator's `[delivery] allow` bounds every destination (the push
//!   remote and the forge APIs): decided by the egress policy's own code, names resolved once
//!   and every address checked, then dialled only at those addresses (the HTTP client pinned
//!   with `resolve_to_addrs`, git with `http.curloptResolve`); `https://` only, unless
//!   `[delivery] allow_insecure` also names the destination. Anything else is refused before a
//!   byte is sent.
//! * [`push`] — the push: the host's `git`, resolved once from fixed system directories, in a
//!   scratch repository cordon writes (its config is cordon's, its objects the workspace's
//!   through `objects/info/alternates`), with a scrubbed, pinned environment; the token reaches
//!   it through a credential helper reading descriptor 3, never an argument or a variable.
//! * [`forge`] — the forge APIs behind one trait.

pub mod forge;
pub mod push;

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use cordon_egress::{
    Cidr, Decision, HostName, Mode, Pattern, Policy, PolicySpec, Resolver, StaticResolver,
    SystemResolver, Target,
};
use cordon_pipeline::HttpUrl;

/// Why a delivery or a report did not happen. Each one stops the run without taking a route:
/// it is resumable once the cause is fixed.
#[derive(Debug, thiserror::Error)]
pub enum DeliveryError {
    /// Not sent: outside the bounds, or something the run must not deliver (exit 2).
    #[error("{0}")]
    Refused(String),
    /// The forge refused the token (exit 2).
    #[error(
        "the {forge} API answered {status} to {what}{message}: the token was refused; check that \
         the secret holds a valid token with access to the repository (pull requests and issues \
         need write access), then resume"
    )]
    Auth {
        forge: String,
        status: u16,
        what: String,
        message: String,
    },
    /// The forge or the remote is down, or answered what it should not (exit 1).
    #[error("{0}; resume once it answers: `cordon run --resume <RUN_ID>`")]
    Down(String),
}

impl DeliveryError {
    /// Whether it is the user's to fix (exit 2) rather than the forge's (exit 1).
    pub fn is_usage(&self) -> bool {
        matches!(self, DeliveryError::Refused(_) | DeliveryError::Auth { .. })
    }
}

/// The operator's bounds on where delivery and reports send the token.
#[derive(Clone)]
pub struct Destinations {
    allow: Arc<Policy>,
    insecure: Arc<Policy>,
    resolver: Arc<dyn Resolver>,
    /// Whether `[delivery] allow` names anything (a clearer message when it does not).
    any: bool,
}

/// A destination the bounds admitted, and the addresses it may be dialled at.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Admitted {
    pub host: String,
    pub port: u16,
    /// Empty when the host is an address itself.
    pub addresses: Vec<SocketAddr>,
}

impl Default for Destinations {
    /// Nothing allowed.
    fn default() -> Destinations {
        Destinations::new(&[], &[], &[], &[], &[])
    }
}

impl Destinations {
    /// `[delivery] allow` and `allow_insecure`, bounded further by the operator's `deny`; the
    /// operator's `allow_private` and `[resolve]` apply as they do to the proxy.
    pub fn new(
        allow: &[Pattern],
        allow_insecure: &[Pattern],
        operator_deny: &[Pattern],
        allow_private: &[Cidr],
        resolve: &[(HostName, Vec<IpAddr>)],
    ) -> Destinations {
        let policy = |allow: &[Pattern]| {
            Arc::new(Policy::new(PolicySpec {
                mode: Mode::Allowlist,
                allow: allow.to_vec(),
                deny: Vec::new(),
                operator_deny: operator_deny.to_vec(),
                allow_private: allow_private.to_vec(),
                listening: Vec::new(),
            }))
        };
        let mut table = StaticResolver::new();
        table.insert_unset(resolve);
        Destinations {
            allow: policy(allow),
            insecure: policy(allow_insecure),
            resolver: Arc::new(table.or(SystemResolver::default())),
            any: !allow.is_empty(),
        }
    }

    /// Admits `url` for `what` (`the push remote`, `the forge API`), or says why not.
    pub fn admit(&self, url: &HttpUrl, what: &str) -> Result<Admitted, DeliveryError> {
        self.check(url, what, true)
    }

    /// [`Destinations::admit`] without resolving a name (what `--dry-run` can say).
    pub fn decide(&self, url: &HttpUrl, what: &str) -> Result<(), DeliveryError> {
        self.check(url, what, false).map(|_| ())
    }

    fn check(&self, url: &HttpUrl, what: &str, resolve: bool) -> Result<Admitted, DeliveryError> {
        let authority = if url.host.contains(':') {
            format!("[{}]:{}", url.host, url.port)
        } else {
            format!("{}:{}", url.host, url.port)
        };
        let refused = |why: String| {
            DeliveryError::Refused(format!(
                "refusing to send the token to {what} {authority}: {why}"
            ))
        };
        let denied = |reason: cordon_egress::Reason| {
            refused(format!(
                "{} ({}); the operator policy's `[delivery] allow` bounds where delivery goes",
                reason_text(reason),
                reason.as_str()
            ))
        };
        let target = Target::parse(&authority)
            .map_err(|e| refused(format!("it is not a destination cordon can check ({e})")))?;
        if !self.any {
            return Err(refused(
                "the operator policy's `[delivery] allow` is empty; add the forge's host there \
                 (`[delivery]\\nallow = [\"forge.example.com\"]`)"
                    .to_owned(),
            ));
        }
        if !url.is_https() && cordon_egress::decide(&self.insecure, &target) != Decision::Allow {
            return Err(refused(format!(
                "{} is plain `http://`; use `https://`, or list the host in the operator \
                 policy's `[delivery] allow_insecure` (local forges only)",
                url.text
            )));
        }
        if !resolve {
            return match cordon_egress::decide(&self.allow, &target) {
                Decision::Allow => Ok(Admitted {
                    host: url.host.clone(),
                    port: url.port,
                    addresses: Vec::new(),
                }),
                Decision::Deny(reason) => Err(denied(reason)),
            };
        }
        let evaluation = self.allow.evaluate(&target, self.resolver.as_ref());
        match evaluation.decision {
            Decision::Allow => Ok(Admitted {
                host: url.host.clone(),
                port: url.port,
                addresses: match target.host() {
                    cordon_egress::Host::Ip(_) => Vec::new(),
                    cordon_egress::Host::Name(_) => evaluation.dial,
                },
            }),
            Decision::Deny(reason) => Err(denied(reason)),
        }
    }
}

fn reason_text(reason: cordon_egress::Reason) -> &'static str {
    use cordon_egress::Reason;
    match reason {
        Reason::DeniedOperator => "the operator policy denies it",
        Reason::PortNotAllowed => "`[delivery] allow` names the host but not this port",
        Reason::NotAllowed | Reason::IpLiteral => "`[delivery] allow` does not name it",
        Reason::PrivateAddress => {
            "it is a private address that the operator's `allow_private` does not open"
        }
        Reason::ResolveFailed => "its name does not resolve",
        Reason::MixedAnswer => "its name resolves to public and private addresses at once",
        _ => "the delivery bounds refuse it",
    }
}

/// A branch name from `template` (`{name}` made ref-safe, `{run_id}`).
pub fn branch(template: &str, pipeline: &str, run: cordon_protocol::RunId) -> String {
    let name: String = pipeline
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect();
    let name = name.trim_matches('-');
    let name = if name.is_empty() { "pipeline" } else { name };
    template
        .replace("{name}", name)
        .replace("{run_id}", &run.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use cordon_egress::PatternList;

    fn url(text: &str) -> HttpUrl {
        HttpUrl::parse(text).expect("a URL")
    }

    fn patterns(list: &[&str]) -> Vec<Pattern> {
        list.iter()
            .map(|p| Pattern::parse(p, PatternList::Allow).expect("a pattern"))
            .collect()
    }

    #[test]
    fn destinations_are_admitted_only_inside_delivery_allow_and_plain_http_only_when_insecure() {
        let resolve = vec![(
            HostName::parse("forge.test").expect("a name"),
            vec!["127.0.0.1".parse().expect("an address")],
        )];
        let loopback = vec![Cidr::parse("127.0.0.0/8").expect("a range")];
        let bounds = Destinations::new(
            &patterns(&["forge.test", "ip:127.0.0.1:*"]),
            &patterns(&["forge.test"]),
            &[],
            &loopback,
            &resolve,
        );
        type Want = Result<Vec<&'static str>, &'static str>;
        let cases: &[(&str, Want)] = &[
            ("https://forge.test/api", Ok(vec!["127.0.0.1:443"])),
            ("http://forge.test/api", Ok(vec!["127.0.0.1:80"])),
            ("https://127.0.0.1:9/", Ok(vec![])),
            ("http://127.0.0.1:9/", Err("plain `http://`")),
            ("https://other.test/", Err("does not name it")),
            ("https://127.0.0.2/", Err("does not name it")),
        ];
        for (text, want) in cases {
            match (bounds.admit(&url(text), "the forge API"), want) {
                (Ok(admitted), Ok(addresses)) => {
                    let got: Vec<String> =
                        admitted.addresses.iter().map(|a| a.to_string()).collect();
                    assert_eq!(got, *addresses, "{text}");
                }
                (Err(err), Err(part)) => {
                    assert!(err.to_string().contains(part), "{text}: {err}");
                    assert!(err.is_usage(), "{text}");
                }
                (got, _) => panic!("{text}: {got:?}"),
            }
        }
        let none = Destinations::default().admit(&url("https://forge.test/"), "the forge API");
        assert!(
            none.is_err_and(|e| e.to_string().contains("`[delivery] allow` is empty")),
            "an empty allow list refuses everything, saying so"
        );
    }

    #[test]
    fn a_private_address_needs_allow_private_even_when_delivery_allow_names_it() {
        let bounds = Destinations::new(&patterns(&["ip:10.0.0.0/8:*"]), &[], &[], &[], &[]);
        let err = bounds
            .admit(&url("https://10.1.2.3/"), "the push remote")
            .expect_err("refused");
        assert!(err.to_string().contains("private address"), "{err}");
    }

    #[test]
    fn branch_names_fill_the_run_id_and_a_ref_safe_pipeline_name() {
        let run = cordon_protocol::RunId::from_parts(1_769_860_800_000, 42);
        assert_eq!(
            branch("cordon/{name}/{run_id}", "Fix The Bug!", run),
            format!("cordon/fix-the-bug/{run}")
        );
        assert_eq!(branch("b/{name}", "***", run), "b/pipeline");
    }
}
