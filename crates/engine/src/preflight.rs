//! What this version refuses to run, checked before anything starts: agent steps (the agent
//! driver arrives with the agents work) and steps or setup hooks whose network needs the egress
//! proxy. Such a step is never run with no network silently, nor with the host's network.

use cordon_pipeline::{Network, Pipeline, StepKind};

use crate::EngineError;

/// Whether an [`crate::AgentDriver`] is available to run agent steps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Agents {
    Unavailable,
    Available,
}

/// `Ok` when every step can run in this version.
pub fn preflight(pipeline: &Pipeline, agents: Agents) -> Result<(), EngineError> {
    for step in &pipeline.steps {
        if let (StepKind::Agent(_), Agents::Unavailable) = (&step.kind, agents) {
            return Err(EngineError::Unsupported(format!(
                "step `{}` is an agent step, and agent steps cannot run in this version yet; \
                 `cordon run --dry-run` shows the plan, and command-only pipelines run",
                step.name
            )));
        }
        if let Some(sandbox) = step.kind.sandbox() {
            if needs_proxy(&sandbox.network) {
                return Err(EngineError::Unsupported(format!(
                    "step `{}` has `network: {}`, which needs the egress proxy; egress arrives with \
                     the proxy, so set `network: none` for now",
                    step.name, sandbox.network
                )));
            }
            if let Some(setup) = &sandbox.setup
                && needs_proxy(&setup.network)
            {
                return Err(EngineError::Unsupported(format!(
                    "the setup of step `{}` has `setup_network: {}`, which needs the egress proxy; \
                     egress arrives with the proxy, so drop `setup_network` for now",
                    step.name, setup.network
                )));
            }
        }
    }
    Ok(())
}

fn needs_proxy(network: &Network) -> bool {
    match network {
        Network::None => false,
        Network::Allowlist(_) | Network::Open => true,
    }
}
