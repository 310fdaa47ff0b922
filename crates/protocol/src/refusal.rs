//! `Refusal`: a required sandbox layer (or a requested cap) that cannot be enforced, so nothing
//! runs. One type across the sandbox, engine and agent seams, so exit 3 (Appendix A) is decided
//! by a type, never by matching text or downcasting a source.

use std::fmt;

/// Why a session was refused, in words that name the missing layer and the remedy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal(pub String);

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Refusal {}
