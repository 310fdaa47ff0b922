//! `Grants`: how a `request_egress` call is decided. The operator's bounds come from the policy
//! file's `[grants]` table (DESIGN §5); until the engine supplies them, [`NoGrants`] refuses.

use cordon_egress::Pattern;

/// The decision on one requested pattern.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GrantDecision {
    Granted,
    /// Refused, with the reason given to the model and recorded in `policy.refuse`.
    Refused(String),
}

/// Decides egress requests for a step attempt.
pub trait Grants {
    fn request(&mut self, pattern: &Pattern, reason: &str) -> GrantDecision;
}

/// Refuses every request: no grant bounds are configured.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoGrants;

impl Grants for NoGrants {
    fn request(&mut self, _pattern: &Pattern, _reason: &str) -> GrantDecision {
        GrantDecision::Refused(
            "egress grants are not configured; an operator can allow such requests under \
             `[grants]` in the policy file, or the pipeline can list the destination in the \
             step's `network.allow`"
                .to_owned(),
        )
    }
}
