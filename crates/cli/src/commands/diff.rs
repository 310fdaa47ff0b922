//! `cordon diff [RUN_ID | --last] [--step NAME] [--attempt N] [--stat]` (DESIGN §12): the changes
//! recorded after a step attempt — the work tree against HEAD at that moment, the patch the
//! engine stored with `step.finished{diff}` — or, by default, the run's: the last such record
//! (a commit action's own empty one passed over, so a run that ended in a commit shows what it
//! committed).
//!
//! The patch is the workspace's content: on a terminal it is escaped like every other hostile
//! byte cordon prints; into a pipe or a file it is written exactly as recorded, so
//! `cordon diff | git apply` works.

use std::io::{IsTerminal, Write};
use std::process::ExitCode;

use cordon_protocol::event::BlobId;
use cordon_protocol::{Event, Record};

use crate::state_dir::{StateDirArg, StoreArg};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The run (its id or a unique prefix) [default: the most recent run]
    #[arg(value_name = "RUN_ID", conflicts_with = "last")]
    run: Option<String>,
    /// Show the most recent run (the default)
    #[arg(long)]
    last: bool,
    /// The changes recorded after this step's attempt (its latest, or --attempt N)
    #[arg(long, value_name = "NAME")]
    step: Option<String>,
    /// Which start of the step: 1 for its first, 2 for its second… [default: its latest]
    #[arg(long, value_name = "N", requires = "step")]
    attempt: Option<std::num::NonZeroU32>,
    /// A summary per file (changed lines) instead of the patch
    #[arg(long)]
    stat: bool,
    #[command(flatten)]
    state_dir: StateDirArg,
    #[command(flatten)]
    store: StoreArg,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let state_dir = match args.state_dir.resolve_with(&args.store) {
        Ok(dir) => dir,
        Err(code) => return Ok(code),
    };
    let (store, run) = match crate::state_dir::stored_run(&state_dir, args.run.as_deref())? {
        Ok(found) => found,
        Err(message) => return usage(&message),
    };
    let records = store.events(run)?;
    let found = match &args.step {
        Some(step) => attempt_diff(&records, step, args.attempt.map(|a| a.get())),
        None => Ok(run_diff(&records)),
    };
    let (what, blob) = match found {
        Ok(found) => found,
        Err(message) => return usage(&message),
    };
    let patch = match blob {
        Some(id) => store.blob(id)?.unwrap_or_default(),
        None => Vec::new(),
    };
    if patch.is_empty() {
        eprintln!("cordon: no changes {what}");
        return Ok(ExitCode::SUCCESS);
    }
    let text = if args.stat {
        stat(&patch).into_bytes()
    } else {
        patch
    };
    let mut out = std::io::stdout().lock();
    let written = if out.is_terminal() {
        let shown = String::from_utf8_lossy(&text);
        out.write_all(cordon_protocol::text::escape_text(&shown).as_bytes())
    } else {
        out.write_all(&text)
    };
    // A closed pipe (`| head`) ends quietly.
    let _ = written.and_then(|()| out.flush());
    Ok(ExitCode::SUCCESS)
}

fn usage(message: &str) -> anyhow::Result<ExitCode> {
    eprintln!("cordon: {message}");
    Ok(ExitCode::from(2))
}

/// The diff recorded after `step`'s `attempt`-th start (its latest without one), with what to call
/// it; an error naming the fix when the step never finished that often.
fn attempt_diff(
    records: &[Record],
    step: &str,
    attempt: Option<u32>,
) -> Result<(String, Option<BlobId>), String> {
    let finished: Vec<Option<BlobId>> = records
        .iter()
        .filter(|r| r.step.as_ref().is_some_and(|s| s.as_str() == step))
        .filter_map(|r| match &r.event {
            Event::StepFinished { diff, .. } => Some(*diff),
            _ => None,
        })
        .collect();
    if finished.is_empty() {
        let names: std::collections::BTreeSet<&str> = records
            .iter()
            .filter(|r| matches!(r.event, Event::StepFinished { .. }))
            .filter_map(|r| r.step.as_ref().map(|s| s.as_str()))
            .collect();
        let names: Vec<&str> = names.into_iter().collect();
        return Err(format!(
            "step `{}` has no finished attempt in this run; steps that have: {}",
            cordon_protocol::text::escape_line(step),
            if names.is_empty() {
                "none".to_owned()
            } else {
                names.join(", ")
            }
        ));
    }
    let n = attempt.unwrap_or(finished.len() as u32);
    match finished.get((n as usize).wrapping_sub(1)) {
        Some(diff) => Ok((format!("after `{step}` (attempt {n})"), *diff)),
        None => Err(format!(
            "step `{step}` finished {} time{}; pass --attempt 1 to {}",
            finished.len(),
            if finished.len() == 1 { "" } else { "s" },
            finished.len()
        )),
    }
}

/// The run's changes: the last recorded diff, passing over the empty one of a commit action (the
/// work tree equals HEAD right after it commits).
fn run_diff(records: &[Record]) -> (String, Option<BlobId>) {
    let mut committed = std::collections::BTreeSet::new();
    let mut found: Option<Option<BlobId>> = None;
    for record in records {
        match &record.event {
            Event::StepStarted { .. } => {
                if let Some(step) = &record.step {
                    committed.remove(step.as_str());
                }
            }
            Event::CommitCreated { .. } => {
                if let Some(step) = &record.step {
                    committed.insert(step.as_str().to_owned());
                }
            }
            Event::StepFinished { diff, .. } => {
                let by_commit = record
                    .step
                    .as_ref()
                    .is_some_and(|s| committed.contains(s.as_str()));
                if diff.is_some() || !by_commit {
                    found = Some(*diff);
                }
            }
            _ => {}
        }
    }
    ("in this run".to_owned(), found.flatten())
}

/// `git diff --stat` of a patch: one line per file with its changed lines, then the totals.
fn stat(patch: &[u8]) -> String {
    let mut files: Vec<(String, u64, u64, bool)> = Vec::new();
    for line in patch.split(|&b| b == b'\n') {
        if let Some(rest) = line.strip_prefix(b"diff --git ") {
            let name = rest
                .split(|&b| b == b' ')
                .next_back()
                .map(|b| b.strip_prefix(b"b/").unwrap_or(b))
                .unwrap_or(rest);
            files.push((String::from_utf8_lossy(name).into_owned(), 0, 0, false));
            continue;
        }
        let Some(file) = files.last_mut() else {
            continue;
        };
        if line.starts_with(b"+++ ") || line.starts_with(b"--- ") {
            continue;
        }
        if line.starts_with(b"Binary files ") {
            file.3 = true;
        } else if line.starts_with(b"+") {
            file.1 += 1;
        } else if line.starts_with(b"-") {
            file.2 += 1;
        }
    }
    let width = files.iter().map(|f| f.0.chars().count()).max().unwrap_or(0);
    let mut out = String::new();
    let (mut added, mut removed) = (0, 0);
    for (name, plus, minus, binary) in &files {
        added += plus;
        removed += minus;
        let bar = if *binary {
            "Bin".to_owned()
        } else {
            format!(
                "{} {}{}",
                plus + minus,
                "+".repeat((*plus).min(40) as usize),
                "-".repeat((*minus).min(40) as usize)
            )
        };
        out.push_str(&format!(" {name:<width$} | {bar}\n"));
    }
    let plural = |n: u64, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
    out.push_str(&format!(
        " {}, {}(+), {}(-)\n",
        plural(files.len() as u64, "file changed", "files changed"),
        plural(added, "insertion", "insertions"),
        plural(removed, "deletion", "deletions")
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stat_counts_each_files_added_and_removed_lines() {
        let patch = b"diff --git a/src/a.rs b/src/a.rs\n--- a/src/a.rs\n+++ b/src/a.rs\n\
@@ -1,2 +1,2 @@\n-old\n+new\n+more\n ctx\ndiff --git a/img.png b/img.png\nBinary files a/img.png and b/img.png differ\n";
        assert_eq!(
            stat(patch),
            " src/a.rs | 3 ++-\n img.png  | Bin\n 2 files changed, 2 insertions(+), 1 deletion(-)\n"
        );
        assert_eq!(
            stat(b""),
            " 0 files changed, 0 insertions(+), 0 deletions(-)\n"
        );
    }
}
