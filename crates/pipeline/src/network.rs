//! A step's network policy (DESIGN §5): none, an allowlist through the proxy, or open.

use cordon_egress::Pattern;

#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub enum Network {
    /// Only loopback: no route, no DNS, no proxy destinations.
    #[default]
    None,
    /// Exactly the allowed destinations, through the session's proxy.
    Allowlist(Allowlist),
    /// Every name and port through the session's proxy (private addresses still refused).
    Open,
}

#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Allowlist {
    pub allow: Vec<Pattern>,
    pub deny: Vec<Pattern>,
    /// The step gets the run's plan-declared grants (`request_egress`).
    pub grants: bool,
}

impl Network {
    pub fn is_open(&self) -> bool {
        matches!(self, Network::Open)
    }
}

impl std::fmt::Display for Network {
    /// One line: `none`, `OPEN`, or `allow [a, b] deny [c] grants`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Network::None => f.write_str("none"),
            Network::Open => f.write_str("OPEN (every name and port)"),
            Network::Allowlist(list) => {
                let join = |ps: &[Pattern]| {
                    ps.iter()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join(", ")
                };
                write!(f, "allow [{}]", join(&list.allow))?;
                if !list.deny.is_empty() {
                    write!(f, " deny [{}]", join(&list.deny))?;
                }
                if list.grants {
                    f.write_str(" + grants")?;
                }
                Ok(())
            }
        }
    }
}
