//! `Journal`: where the loop reports — events for the run's log, blobs for full tool outputs, and
//! the run's secret scrubber for everything on its way to the model or the log.

use cordon_protocol::Event;
use cordon_protocol::event::BlobId;

/// The store went away under the loop; the step cannot continue.
#[derive(Debug, thiserror::Error)]
#[error("could not record the agent's progress: {message}")]
pub struct JournalError {
    pub message: String,
    #[source]
    pub source: Option<Box<dyn std::error::Error + Send + Sync>>,
}

/// The engine's side of the loop's bookkeeping, for the step attempt being run.
pub trait Journal {
    /// Appends an event of this step attempt.
    fn event(&mut self, event: Event) -> Result<(), JournalError>;
    /// Stores a large output and returns its id.
    fn blob(&mut self, bytes: &[u8]) -> Result<BlobId, JournalError>;
    /// `text` with every secret value of the run replaced (`[secret:<ref>]`); applied to tool
    /// output before it reaches the model or an event.
    fn scrub(&self, text: &str) -> String {
        text.to_owned()
    }
}
