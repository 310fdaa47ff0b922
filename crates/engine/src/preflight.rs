//! What a pipeline needs that `validate` cannot see, checked before anything starts: a command
//! step with `model_lane: true` needs a real provider (`openai` or `anthropic`) to forward to —
//! such a step is never run without its lane, where the external agent CLI in it would fail in
//! confusing ways or reach for a key.

use cordon_pipeline::Pipeline;

use crate::EngineError;

/// `Ok` when every step can run.
pub fn preflight(pipeline: &Pipeline) -> Result<(), EngineError> {
    crate::lane::check_provider(pipeline)
}
