//! The destinations a `cordon exec` session's proxy refused, printed after the command as one
//! line each with the fix (DESIGN §11): a package manager's own error rarely says which host it
//! was refused, and learning them one `--audit` read at a time is slow.

use std::io;
use std::sync::{Arc, Mutex};

use cordon_egress::proxy::{AuditDecision, AuditKind, AuditRecord, AuditSink};
use cordon_protocol::text::escape_line;

/// The most distinct destinations listed; the rest are counted.
pub const MAX_LISTED: usize = 20;

/// One refused destination: the host (or, unparseable, the target as sent), port and reason.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Refused {
    host: String,
    port: Option<u16>,
    reason: &'static str,
}

#[derive(Default)]
struct Seen {
    listed: Vec<Refused>,
    unlisted: u64,
}

/// An audit sink that remembers every distinct refusal, within [`MAX_LISTED`], and passes every
/// record on to `inner`.
pub struct Refusals {
    inner: Arc<dyn AuditSink>,
    seen: Mutex<Seen>,
}

impl Refusals {
    pub fn new(inner: Arc<dyn AuditSink>) -> Refusals {
        Refusals {
            inner,
            seen: Mutex::new(Seen::default()),
        }
    }

    /// The lines to print, one per distinct refusal, then the count of those not listed.
    pub fn lines(&self) -> Vec<String> {
        let seen = self
            .seen
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let mut lines: Vec<String> = seen.listed.iter().map(line).collect();
        if seen.unlisted > 0 {
            lines.push(format!(
                "cordon: and {} more refused destinations; pass `--audit FILE` to see them all",
                seen.unlisted
            ));
        }
        lines
    }
}

impl AuditSink for Refusals {
    fn record(&self, kind: AuditKind, record: &AuditRecord) -> io::Result<()> {
        if record.decision == AuditDecision::Deny
            && let Some(reason) = record.reason
        {
            let refused = Refused {
                host: record
                    .host
                    .clone()
                    .unwrap_or_else(|| record.raw_target.clone()),
                port: record.port,
                reason,
            };
            let mut seen = self
                .seen
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            if !seen.listed.contains(&refused) {
                if seen.listed.len() < MAX_LISTED {
                    seen.listed.push(refused);
                } else {
                    seen.unlisted += 1;
                }
            }
        }
        self.inner.record(kind, record)
    }

    fn flush(&self) -> io::Result<()> {
        self.inner.flush()
    }

    fn finish(&self) -> io::Result<()> {
        self.inner.finish()
    }
}

/// `cordon: refused HOST:PORT (REASON): FIX`, the host escaped (the command chose it).
fn line(refused: &Refused) -> String {
    let host = escape_line(&refused.host);
    // An IPv6 address is bracketed before its port.
    let shown = match refused.port {
        Some(port) if host.contains(':') => format!("[{host}]:{port}"),
        Some(port) => format!("{host}:{port}"),
        None => host.into_owned(),
    };
    format!(
        "cordon: refused {shown} ({}): {}",
        refused.reason,
        fix(refused.reason, &shown)
    )
}

/// What lets the command reach `shown`, in `cordon exec`'s options.
fn fix(reason: &str, shown: &str) -> String {
    match reason {
        "not_allowed" | "port_not_allowed" => format!("allow it with `--allow {shown}`"),
        "ip_literal" => format!("allow the address with `--allow ip:{shown}`"),
        "private_address" => "a non-public address: let allowed names reach its range with \
                              `--allow-private CIDR` (metadata addresses stay refused)"
            .to_owned(),
        "mixed_answer" => "the name resolves to public and non-public addresses at once; pin \
                           it with `--resolve HOST=IP`"
            .to_owned(),
        "denied_pipeline" => "a `--deny` pattern matches it; drop that pattern".to_owned(),
        "denied_operator" => {
            "the operator policy denies it; only the policy file can change that".to_owned()
        }
        "self_address" => "an address of cordon's own listeners, never reachable".to_owned(),
        "sni_mismatch" => {
            "its TLS ClientHello named another host (or none); connect to the name you CONNECT to"
                .to_owned()
        }
        "bad_target" => "not a host and port a proxy can reach; check the URL".to_owned(),
        "resolve_failed" => {
            "the name did not resolve; check it, or answer it with `--resolve HOST=IP`".to_owned()
        }
        "connect_failed" => "nothing accepted the connection; is the service up?".to_owned(),
        "upstream_timeout" => "the upstream did not answer in time".to_owned(),
        _ => "see `--audit FILE` for the decision".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cordon_egress::proxy::{NoAudit, Proto};

    fn denied(host: Option<&str>, port: Option<u16>, reason: &'static str) -> AuditRecord {
        AuditRecord {
            ts: "2026-12-02T00:00:00.000Z".into(),
            listener: "exec".into(),
            step: None,
            attempt: None,
            proto: Proto::Connect,
            raw_target: "raw\u{1b}]0;title\u{7}".into(),
            host: host.map(str::to_owned),
            port,
            resolved: Vec::new(),
            dialed: None,
            decision: AuditDecision::Deny,
            reason: Some(reason),
            bytes_up: 0,
            bytes_down: 0,
            duration_ms: 0,
            count: 1,
        }
    }

    #[test]
    fn each_distinct_refusal_is_one_line_with_its_fix_and_hostile_names_are_escaped() {
        let refusals = Refusals::new(Arc::new(NoAudit));
        for record in [
            denied(Some("pkgs.example.com"), Some(443), "not_allowed"),
            denied(Some("pkgs.example.com"), Some(443), "not_allowed"),
            denied(Some("2001:db8::1"), Some(80), "ip_literal"),
            denied(Some("10.0.0.1"), Some(5432), "private_address"),
            denied(None, None, "bad_target"),
        ] {
            refusals.record(AuditKind::Decision, &record).unwrap();
        }
        let mut allowed = denied(Some("ok.example.com"), Some(443), "not_allowed");
        allowed.decision = AuditDecision::Allow;
        allowed.reason = None;
        refusals.record(AuditKind::Decision, &allowed).unwrap();
        assert_eq!(
            refusals.lines(),
            [
                "cordon: refused pkgs.example.com:443 (not_allowed): allow it with `--allow pkgs.example.com:443`",
                "cordon: refused [2001:db8::1]:80 (ip_literal): allow the address with `--allow ip:[2001:db8::1]:80`",
                "cordon: refused 10.0.0.1:5432 (private_address): a non-public address: let allowed names reach its range with `--allow-private CIDR` (metadata addresses stay refused)",
                "cordon: refused raw\\e]0;title\\x07 (bad_target): not a host and port a proxy can reach; check the URL",
            ]
        );
    }

    #[test]
    fn past_the_listed_bound_refusals_are_counted() {
        let refusals = Refusals::new(Arc::new(NoAudit));
        for i in 0..MAX_LISTED + 5 {
            let host = format!("h{i}.example.com");
            refusals
                .record(
                    AuditKind::Decision,
                    &denied(Some(&host), Some(443), "not_allowed"),
                )
                .unwrap();
        }
        let lines = refusals.lines();
        assert_eq!(lines.len(), MAX_LISTED + 1);
        assert_eq!(
            lines[MAX_LISTED],
            "cordon: and 5 more refused destinations; pass `--audit FILE` to see them all"
        );
    }
}
