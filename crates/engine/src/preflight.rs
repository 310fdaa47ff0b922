//! What this version refuses to run, checked before anything starts: command steps with
//! `model_lane: true` (the lane is not built yet). Such a step is never run without its lane
//! silently — the external agent CLI in it would fail in confusing ways, or reach for a key.

use cordon_pipeline::{Pipeline, StepKind};

use crate::EngineError;

/// `Ok` when every step can run in this version.
pub fn preflight(pipeline: &Pipeline) -> Result<(), EngineError> {
    for step in &pipeline.steps {
        if let StepKind::Command(command) = &step.kind
            && command.model_lane
        {
            return Err(EngineError::Unsupported(format!(
                "step `{}` has `model_lane: true`, and the model lane cannot run in this version \
                 yet; turn it into an agent step, or drop `model_lane`",
                step.name
            )));
        }
    }
    Ok(())
}
