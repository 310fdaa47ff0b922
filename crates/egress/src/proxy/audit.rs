//! Audit records (DESIGN Appendix A): one per decision and one per tunnel close, handed to an
//! [`AuditSink`] — the seam the engine turns into `egress.allow` / `egress.deny` /
//! `egress.close` events — and, with `--audit FILE`, written as JSON lines.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::net::{IpAddr, SocketAddr};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use cordon_protocol::event::Timestamp;
use serde::Serialize;

use super::Identity;
use super::coalesce::Coalescer;
use crate::{Host, Reason, Target};

/// `connect` or `http`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Proto {
    Connect,
    Http,
}

/// `allow` or `deny`. A request the policy allowed but the proxy could not complete (resolve or
/// dial failure, upstream timeout) is a `deny` with that reason: the client got no connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum AuditDecision {
    Allow,
    Deny,
}

/// Which moment of a connection a record describes. Not a field of the record (Appendix A fixes
/// those); a sink that needs it — the engine, to pick `egress.close` — gets it alongside.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AuditKind {
    /// The decision on one CONNECT or one HTTP request (after the dial, for an allow).
    Decision,
    /// A tunnel or a forwarded HTTP exchange ended; carries the byte counts and duration.
    Close,
}

/// One audit record, with exactly the Appendix A fields. The JSON field order is the
/// declaration order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct AuditRecord {
    /// RFC 3339 UTC with milliseconds, when the record was made.
    pub ts: String,
    /// The listener's identity (never from a header).
    pub listener: String,
    pub step: Option<String>,
    pub attempt: Option<u32>,
    pub proto: Proto,
    /// The request target as sent (CONNECT authority or absolute URI), at most 2048 bytes,
    /// with non-printable bytes escaped.
    pub raw_target: String,
    /// The canonical host (name, IPv4, or IPv6 without brackets), `null` when unparseable.
    pub host: Option<String>,
    pub port: Option<u16>,
    /// What the name resolved to (empty for IP literals and targets refused before resolution).
    pub resolved: Vec<String>,
    /// The socket address connected to, `null` unless a connection was made.
    pub dialed: Option<String>,
    pub decision: AuditDecision,
    /// The reason code, `null` for an allow.
    pub reason: Option<&'static str>,
    /// Client → upstream bytes (body or tunnel payload, after the head).
    pub bytes_up: u64,
    /// Upstream → client bytes.
    pub bytes_down: u64,
    /// From accepting the request to the record.
    pub duration_ms: u64,
    /// The requests this record stands for (repeats coalesced, see `coalesce.rs`).
    pub count: u64,
}

/// Receives audit records. A sink that fails makes the proxy drop the connection before any byte
/// is forwarded (decision records) — an unrecorded connection is not made.
pub trait AuditSink: Send + Sync {
    /// Records one decision or close.
    fn record(&self, kind: AuditKind, record: &AuditRecord) -> io::Result<()>;
    /// Stores coalesced repeats whose window has ended.
    fn flush(&self) -> io::Result<()> {
        Ok(())
    }
    /// Stores everything still held (and the dropped count): the session or proxy is done.
    fn finish(&self) -> io::Result<()> {
        Ok(())
    }
}

/// Appends records as JSON lines to a file created with mode 0600, coalesced and capped like a
/// session's events (`coalesce.rs`); [`JsonLinesSink::finish`] writes what is still held and, when
/// the cap dropped records, a last line `{"ts","listener","dropped":N}`.
pub struct JsonLinesSink {
    state: Mutex<FileState>,
}

struct FileState {
    file: File,
    coalescer: Coalescer,
    listener: Option<String>,
}

impl std::fmt::Debug for JsonLinesSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("JsonLinesSink")
    }
}

impl JsonLinesSink {
    /// Opens `path` for appending, creating it readable and writable by the owner only (an
    /// existing file keeps its mode), keeping at most `cap` records (`usize::MAX`: no cap).
    pub fn open(path: &Path, cap: usize) -> io::Result<JsonLinesSink> {
        let file = OpenOptions::new()
            .append(true)
            .create(true)
            .mode(0o600)
            .open(path)?;
        Ok(JsonLinesSink {
            state: Mutex::new(FileState {
                file,
                coalescer: Coalescer::new(cap),
                listener: None,
            }),
        })
    }

    fn lock(&self) -> io::Result<std::sync::MutexGuard<'_, FileState>> {
        self.state
            .lock()
            .map_err(|_| io::Error::other("the audit file lock is poisoned"))
    }
}

impl JsonLinesSink {
    fn finish_file(&self) -> io::Result<()> {
        let mut state = self.lock()?;
        let (held, dropped) = state.coalescer.finish();
        write_records(&mut state.file, &held)?;
        if dropped > 0 {
            let line = serde_json::json!({
                "ts": timestamp(SystemTime::now()),
                "listener": state.listener,
                "dropped": dropped,
            });
            let mut bytes = serde_json::to_vec(&line).map_err(io::Error::other)?;
            bytes.push(b'\n');
            state.file.write_all(&bytes)?;
        }
        Ok(())
    }
}

/// One write per line on an `O_APPEND` file: concurrent writers never interleave.
fn write_records(file: &mut File, records: &[(AuditKind, AuditRecord)]) -> io::Result<()> {
    for (_, record) in records {
        let mut line = serde_json::to_vec(record).map_err(io::Error::other)?;
        line.push(b'\n');
        file.write_all(&line)?;
    }
    Ok(())
}

impl AuditSink for JsonLinesSink {
    fn record(&self, kind: AuditKind, record: &AuditRecord) -> io::Result<()> {
        let mut state = self.lock()?;
        if state.listener.is_none() {
            state.listener = Some(record.listener.clone());
        }
        state.coalescer.check_room(kind, record)?;
        let due = state.coalescer.admit(kind, record, Instant::now());
        write_records(&mut state.file, &due)
    }

    /// Writes the repeats whose window has ended (a long-running proxy calls this now and then).
    fn flush(&self) -> io::Result<()> {
        let mut state = self.lock()?;
        let due = state.coalescer.expire(Instant::now());
        write_records(&mut state.file, &due)
    }

    /// Writes everything still held, and the dropped count when the cap was reached.
    fn finish(&self) -> io::Result<()> {
        self.finish_file()
    }
}

/// A sink that discards records (for callers that audit nowhere).
#[derive(Clone, Copy, Debug, Default)]
pub struct NoAudit;

impl AuditSink for NoAudit {
    fn record(&self, _kind: AuditKind, _record: &AuditRecord) -> io::Result<()> {
        Ok(())
    }
}

const MAX_RAW_TARGET: usize = 2048;

/// What is known about one request, filled in as the proxy gets further.
pub(super) struct Draft<'a> {
    pub(super) identity: &'a Identity,
    pub(super) proto: Proto,
    pub(super) raw_target: &'a str,
    pub(super) target: Option<&'a Target>,
    pub(super) resolved: &'a [IpAddr],
    pub(super) dialed: Option<SocketAddr>,
    pub(super) started: std::time::Instant,
}

impl Draft<'_> {
    /// Records the refusal of this request with `reason` (a decision; no bytes moved). A record
    /// that cannot be written does not change the refusal, which is answered either way.
    pub(super) fn refused(&self, audit: &dyn AuditSink, reason: Reason) {
        let _ = audit.record(AuditKind::Decision, &self.record(Some(reason), 0, 0));
    }

    pub(super) fn record(&self, reason: Option<Reason>, up: u64, down: u64) -> AuditRecord {
        let raw: String = self
            .raw_target
            .bytes()
            .take(MAX_RAW_TARGET)
            .flat_map(std::ascii::escape_default)
            .map(char::from)
            .collect();
        AuditRecord {
            ts: timestamp(SystemTime::now()),
            listener: self.identity.listener.clone(),
            step: self.identity.step.clone(),
            attempt: self.identity.attempt,
            proto: self.proto,
            raw_target: raw,
            host: self.target.map(|t| match t.host() {
                Host::Name(n) => n.to_string(),
                Host::Ip(ip) => ip.to_string(),
            }),
            port: self.target.map(|t| t.port().get()),
            resolved: self.resolved.iter().map(IpAddr::to_string).collect(),
            dialed: self.dialed.map(|a| a.to_string()),
            decision: match reason {
                None => AuditDecision::Allow,
                Some(_) => AuditDecision::Deny,
            },
            reason: reason.map(Reason::as_str),
            bytes_up: up,
            bytes_down: down,
            duration_ms: u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX),
            count: 1,
        }
    }
}

/// `2026-01-31T12:00:00.123Z`: the events' own timestamp form.
pub(super) fn timestamp(at: SystemTime) -> String {
    let since = at.duration_since(UNIX_EPOCH).unwrap_or(Duration::ZERO);
    Timestamp(u64::try_from(since.as_millis()).unwrap_or(u64::MAX)).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_are_rfc3339_utc_with_milliseconds() {
        for (millis, text) in [
            (0, "1970-01-01T00:00:00.000Z"),
            (951_782_400_000, "2000-02-29T00:00:00.000Z"),
            (1_769_860_800_123, "2026-01-31T12:00:00.123Z"),
            (4_107_542_399_999, "2100-02-28T23:59:59.999Z"),
        ] {
            let at = UNIX_EPOCH + Duration::from_millis(millis);
            assert_eq!(timestamp(at), text, "{millis}");
        }
    }
}
