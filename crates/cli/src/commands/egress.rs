//! `cordon egress suggest (RUN_ID | --last | --audit FILE)`: per step, the `network:` block that
//! allows exactly the destinations the step was refused as `not_allowed` or `port_not_allowed`,
//! or reached with `network: open` — the way to learn what a package manager needs (DESIGN §11,
//! §18). Other refusals (private addresses, IP literals, resolve failures) are never suggested:
//! an allow pattern would not let them through, and widening `allow_private` is the operator's
//! call.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use cordon_egress::{Pattern, PatternList};
use cordon_protocol::event::AuditRecord;
use cordon_protocol::{Event, RunId};
use cordon_store::Store;

use crate::state_dir::StateDirArg;

/// The most bytes of an audit file read.
const MAX_AUDIT: u64 = 256 << 20;
/// The most patterns suggested per step; past it the rest are counted.
const MAX_PER_STEP: usize = 200;

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, clap::Subcommand)]
enum Command {
    /// Print, per step, the `network:` block allowing what the step was refused (not_allowed,
    /// port_not_allowed) or reached with `network: open`.
    Suggest(SuggestArgs),
}

#[derive(Debug, clap::Args)]
struct SuggestArgs {
    /// The run (its id or a unique prefix) [default: the most recent run]
    #[arg(value_name = "RUN_ID", conflicts_with_all = ["last", "audit"])]
    run: Option<String>,
    /// The most recent run (the default)
    #[arg(long, conflicts_with = "audit")]
    last: bool,
    /// An audit file (`cordon exec --audit`, `cordon proxy --audit`) instead of a run
    #[arg(long, value_name = "FILE")]
    audit: Option<PathBuf>,
    #[command(flatten)]
    state_dir: StateDirArg,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let Command::Suggest(args) = args.command;
    let (source, records) = match &args.audit {
        Some(file) => match audit_records(file) {
            Ok(records) => (file.display().to_string(), records),
            Err(message) => return usage(&message),
        },
        None => {
            let state_dir = match args.state_dir.resolve() {
                Ok(dir) => dir,
                Err(code) => return Ok(code),
            };
            let (store, run) = match crate::state_dir::stored_run(&state_dir, args.run.as_deref())?
            {
                Ok(found) => found,
                Err(message) => return usage(&message),
            };
            (format!("run {run}"), run_records(&store, run)?)
        }
    };
    let suggested = suggest(&records);
    let mut out = String::new();
    if suggested.is_empty() {
        eprintln!(
            "cordon: {source}: no destination was refused as not_allowed or port_not_allowed, nor \
             reached with `network: open`; nothing to suggest"
        );
        return Ok(ExitCode::SUCCESS);
    }
    for (step, suggestion) in &suggested {
        out.push_str(&format!(
            "# {}: add to the step's `network:` (this allows exactly what it was refused or \
             reached openly)\n",
            cordon_protocol::text::escape_line(step)
        ));
        out.push_str("network:\n  allow:\n");
        for pattern in &suggestion.patterns {
            out.push_str(&format!("    - \"{pattern}\"\n"));
        }
        if suggestion.omitted > 0 {
            out.push_str(&format!(
                "  # and {} more destinations not listed\n",
                suggestion.omitted
            ));
        }
    }
    print!("{out}");
    Ok(ExitCode::SUCCESS)
}

fn usage(message: &str) -> anyhow::Result<ExitCode> {
    eprintln!("cordon: {message}");
    Ok(ExitCode::from(2))
}

/// One egress record and whether its step ran with `network: open`.
struct Seen {
    step: String,
    record: AuditRecord,
    open: bool,
}

/// The run's egress records, each with whether its step's session was `network: open`.
fn run_records(store: &Store, run: RunId) -> anyhow::Result<Vec<Seen>> {
    let mut open_steps: BTreeMap<String, bool> = BTreeMap::new();
    let mut seen = Vec::new();
    for record in store.events_after(run, 0)? {
        match record.event {
            Event::SandboxSession { step, network, .. } => {
                open_steps.insert(step.to_string(), network.starts_with("OPEN"));
            }
            Event::EgressAllow(audit) | Event::EgressDeny(audit) => {
                let step = audit.step.clone().unwrap_or_else(|| audit.listener.clone());
                let open = open_steps.get(&step).copied().unwrap_or(false);
                seen.push(Seen {
                    step,
                    record: audit,
                    open,
                });
            }
            _ => {}
        }
    }
    Ok(seen)
}

/// The records of an audit file (JSON lines, at most [`MAX_AUDIT`] bytes). Allowed records of an
/// audit file count as reached openly: a `--net open` session or proxy wrote them, or an
/// allowlist that already has them, where suggesting them again changes nothing.
fn audit_records(file: &Path) -> Result<Vec<Seen>, String> {
    let cannot = |why: String| {
        format!(
            "cannot read the audit file {}: {why}; pass the file `--audit` wrote",
            cordon_protocol::text::escape_line(&file.display().to_string())
        )
    };
    let dir = file
        .parent()
        .filter(|dir| !dir.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = file
        .file_name()
        .and_then(|name| cordon_workspace::WsPath::name(name.as_bytes()).ok())
        .ok_or_else(|| cannot("it names no file".to_owned()))?;
    let view = cordon_workspace::View::open(dir).map_err(|err| cannot(err.to_string()))?;
    // Sized before anything is read: a sparse file of a terabyte costs nothing to refuse.
    let opened = match view.open_file(&name) {
        Ok(Some(opened)) => opened,
        Ok(None) => return Err(cannot("it does not exist".to_owned())),
        Err(err) => return Err(cannot(err.to_string())),
    };
    if opened.meta.size > MAX_AUDIT {
        return Err(format!(
            "the audit file {} is larger than {} MiB; pass a smaller one (each session's audit \
             is capped at 10,000 records)",
            cordon_protocol::text::escape_line(&file.display().to_string()),
            MAX_AUDIT >> 20
        ));
    }
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(&mut std::io::Read::take(opened.file, MAX_AUDIT), &mut bytes)
        .map_err(|err| cannot(err.to_string()))?;
    let mut seen = Vec::new();
    let mut unreadable = 0usize;
    for line in bytes.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
        match serde_json::from_slice::<AuditRecord>(line) {
            Ok(record) => seen.push(Seen {
                step: record
                    .step
                    .clone()
                    .unwrap_or_else(|| record.listener.clone()),
                open: true,
                record,
            }),
            // The closing `{"dropped": N}` line, or anything else that is not a record.
            Err(_) => unreadable += 1,
        }
    }
    if seen.is_empty() && unreadable > 0 {
        return Err(format!(
            "{} holds no egress records; pass the file `--audit` wrote",
            file.display()
        ));
    }
    Ok(seen)
}

#[derive(Debug, Default, PartialEq, Eq)]
struct Suggestion {
    patterns: Vec<String>,
    omitted: usize,
}

/// Per step (in the order first seen), the allow patterns for what it was refused as
/// `not_allowed` / `port_not_allowed` or reached openly; each a pattern the grammar accepts.
fn suggest(records: &[Seen]) -> Vec<(String, Suggestion)> {
    let mut steps: Vec<(String, Suggestion)> = Vec::new();
    for seen in records {
        let record = &seen.record;
        let wanted = match (record.decision.as_str(), record.reason.as_deref()) {
            ("deny", Some("not_allowed" | "port_not_allowed")) => true,
            ("allow", _) => seen.open,
            _ => false,
        };
        let Some(pattern) = wanted
            .then(|| record.host.as_deref().zip(record.port))
            .flatten()
            .and_then(|(host, port)| pattern_for(host, port))
        else {
            continue;
        };
        let at = match steps.iter().position(|(step, _)| *step == seen.step) {
            Some(at) => at,
            None => {
                steps.push((seen.step.clone(), Suggestion::default()));
                steps.len() - 1
            }
        };
        let suggestion = &mut steps[at].1;
        if suggestion.patterns.contains(&pattern) {
            continue;
        }
        if suggestion.patterns.len() < MAX_PER_STEP {
            suggestion.patterns.push(pattern);
        } else {
            suggestion.omitted += 1;
        }
    }
    steps
}

/// The allow pattern for `host:port`: the bare name for 80 and 443 (what a bare pattern means),
/// `name:port` otherwise, `ip:ADDR:PORT` for an address. `None` when the result is not a pattern
/// the grammar accepts (the host came from the sandbox and may be anything).
fn pattern_for(host: &str, port: u16) -> Option<String> {
    let text = match host.parse::<IpAddr>() {
        Ok(IpAddr::V4(ip)) => format!("ip:{ip}:{port}"),
        Ok(IpAddr::V6(ip)) => format!("ip:[{ip}]:{port}"),
        Err(_) if port == 80 || port == 443 => host.to_owned(),
        Err(_) => format!("{host}:{port}"),
    };
    let valid = Pattern::parse(&text, PatternList::Allow).is_ok()
        && text
            .bytes()
            .all(|b| b.is_ascii_graphic() && b != b'"' && b != b'\\');
    valid.then_some(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(
        step: &str,
        host: &str,
        port: u16,
        decision: &str,
        reason: Option<&str>,
    ) -> AuditRecord {
        AuditRecord {
            ts: "2026-12-02T00:00:00.000Z".into(),
            listener: "run".into(),
            step: Some(step.into()),
            attempt: Some(1),
            proto: "connect".into(),
            raw_target: format!("{host}:{port}"),
            host: Some(host.into()),
            port: Some(port),
            resolved: Vec::new(),
            dialed: None,
            decision: decision.into(),
            reason: reason.map(str::to_owned),
            bytes_up: 0,
            bytes_down: 0,
            duration_ms: 0,
            count: 1,
        }
    }

    fn seen(record: AuditRecord, open: bool) -> Seen {
        Seen {
            step: record.step.clone().unwrap_or_default(),
            record,
            open,
        }
    }

    #[test]
    fn only_refusals_an_allow_pattern_lifts_and_open_reaches_are_suggested() {
        let records = vec![
            seen(
                record("deps", "pkgs.example.com", 443, "deny", Some("not_allowed")),
                false,
            ),
            seen(
                record("deps", "pkgs.example.com", 443, "deny", Some("not_allowed")),
                false,
            ),
            seen(
                record(
                    "deps",
                    "files.example.com",
                    8443,
                    "deny",
                    Some("port_not_allowed"),
                ),
                false,
            ),
            seen(
                record("deps", "10.0.0.1", 5432, "deny", Some("private_address")),
                false,
            ),
            seen(
                record(
                    "deps",
                    "gone.example.com",
                    443,
                    "deny",
                    Some("resolve_failed"),
                ),
                false,
            ),
            seen(
                record("deps", "already.example.com", 443, "allow", None),
                false,
            ),
            seen(
                record("fetch", "mirror.example.com", 80, "allow", None),
                true,
            ),
            seen(record("fetch", "192.0.2.7", 8080, "allow", None), true),
            seen(record("fetch", "2001:db8::1", 443, "allow", None), true),
            seen(
                record("fetch", "bad\"name", 443, "deny", Some("not_allowed")),
                false,
            ),
        ];
        assert_eq!(
            suggest(&records),
            [
                (
                    "deps".to_owned(),
                    Suggestion {
                        patterns: vec!["pkgs.example.com".into(), "files.example.com:8443".into()],
                        omitted: 0
                    }
                ),
                (
                    "fetch".to_owned(),
                    Suggestion {
                        patterns: vec![
                            "mirror.example.com".into(),
                            "ip:192.0.2.7:8080".into(),
                            "ip:[2001:db8::1]:443".into()
                        ],
                        omitted: 0
                    }
                ),
            ]
        );
    }

    #[test]
    fn a_step_past_the_bound_gets_a_count() {
        let records: Vec<Seen> = (0..MAX_PER_STEP + 3)
            .map(|i| {
                seen(
                    record(
                        "s",
                        &format!("h{i}.example.com"),
                        443,
                        "deny",
                        Some("not_allowed"),
                    ),
                    false,
                )
            })
            .collect();
        let suggested = suggest(&records);
        assert_eq!(suggested[0].1.patterns.len(), MAX_PER_STEP);
        assert_eq!(suggested[0].1.omitted, 3);
    }
}
