//! `request_egress {domain, reason}`: the pattern is checked with egress's own grammar, the
//! decision comes from the engine's [`Grants`](crate::Grants), and it is recorded as
//! `policy.grant` or `policy.refuse`. The model gets `granted <pattern>` or
//! `refused <pattern>: <reason>` (DESIGN Appendix A).

use cordon_egress::{Pattern, PatternList};
use cordon_protocol::Event;
use serde::Deserialize;

use super::{Context, Outcome};
use crate::agent_loop::AgentError;
use crate::grants::GrantDecision;

pub(super) const EXPECTED: &str =
    r#"{"domain": "registry.example.com", "reason": "install the pinned dependencies"}"#;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Args {
    domain: String,
    reason: String,
}

pub(super) fn request(args: Args, cx: &mut Context<'_>) -> Result<Outcome, AgentError> {
    let pattern = match Pattern::parse(args.domain.trim(), PatternList::Allow) {
        Ok(pattern) => pattern,
        Err(err) => {
            return Ok(Outcome::error(format!(
                "error: `domain` is not a destination pattern: {err}"
            )));
        }
    };
    if args.reason.trim().is_empty() {
        return Ok(Outcome::error(
            "error: `reason` is empty; say why the step needs this destination",
        ));
    }
    let domain = pattern.to_string();
    match cx.grants.request(&pattern, &args.reason) {
        GrantDecision::Granted => {
            cx.journal
                .event(Event::PolicyGrant {
                    domain: domain.clone(),
                    reason: args.reason,
                    // The engine's journal scopes it to the step's task in an outcome run.
                    task: None,
                })
                .map_err(AgentError::Journal)?;
            Ok(Outcome::ok(format!("granted {domain}")))
        }
        GrantDecision::Refused(why) => {
            cx.journal
                .event(Event::PolicyRefuse {
                    domain: domain.clone(),
                    reason: why.clone(),
                    task: None,
                })
                .map_err(AgentError::Journal)?;
            Ok(Outcome::error(format!("refused {domain}: {why}")))
        }
    }
}
