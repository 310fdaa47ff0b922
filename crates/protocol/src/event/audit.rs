//! `AuditRecord`: one egress decision or tunnel close (DESIGN Appendix A "Audit record").

use serde::{Deserialize, Serialize};

/// The proxy's audit record, carried as the `data` of `egress.allow`, `egress.deny` and
/// `egress.close`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditRecord {
    pub ts: String,
    pub listener: String,
    pub step: Option<String>,
    pub attempt: Option<u32>,
    /// `connect` or `http`.
    pub proto: String,
    pub raw_target: String,
    pub host: Option<String>,
    pub port: Option<u16>,
    pub resolved: Vec<String>,
    pub dialed: Option<String>,
    /// `allow` or `deny`.
    pub decision: String,
    pub reason: Option<String>,
    pub bytes_up: u64,
    pub bytes_down: u64,
    pub duration_ms: u64,
    /// How many requests this record stands for: repeats of one (decision, reason, host, port)
    /// within a second are coalesced into one record (DESIGN §10).
    #[serde(default = "one")]
    pub count: u64,
}

fn one() -> u64 {
    1
}
