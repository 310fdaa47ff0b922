//! `cordon logs [RUN_ID | --last]`: a run's events, filtered by type prefix and step, as plain
//! lines or JSON lines; `--follow` keeps printing until the run finishes or nobody holds it.

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use cordon_engine::RunState;
use cordon_protocol::{Event, Record};

use crate::state_dir::{StateDirArg, StoreArg};

/// How often `--follow` looks for new events.
const FOLLOW_INTERVAL: Duration = Duration::from_millis(200);

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The run (its id or a unique prefix) [default: the most recent run]
    #[arg(value_name = "RUN_ID", conflicts_with = "last")]
    run: Option<String>,
    /// Show the most recent run (the default)
    #[arg(long)]
    last: bool,
    /// Only events whose type is P or starts with `P.` (repeatable)
    #[arg(long = "type", value_name = "P")]
    types: Vec<String>,
    /// Only events of this step
    #[arg(long, value_name = "NAME")]
    step: Option<String>,
    /// Keep printing new events until the run finishes or is no longer held
    #[arg(long)]
    follow: bool,
    /// Print events as JSON lines
    #[arg(long)]
    json: bool,
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
    let mut seen = 0;
    let mut state = RunState::default();
    let mut out = std::io::stdout().lock();
    loop {
        let records = store.events_after(run, seen)?;
        for record in &records {
            state.apply(record);
            seen = record.seq;
            if matches(&args, record) {
                // Everything in a record may come from a step, a model or the workspace: no
                // control character reaches the terminal raw.
                let line = if args.json {
                    cordon_protocol::text::escape_json(&record.to_json_line()).into_owned()
                } else {
                    cordon_protocol::text::escape_text(&plain(record)).into_owned()
                };
                if writeln!(out, "{line}").is_err() {
                    return Ok(ExitCode::SUCCESS);
                }
            }
        }
        let _ = out.flush();
        if !args.follow || state.is_finished() || !store.is_held(run) {
            return Ok(ExitCode::SUCCESS);
        }
        std::thread::sleep(FOLLOW_INTERVAL);
    }
}

fn usage(message: &str) -> anyhow::Result<ExitCode> {
    eprintln!("cordon: {message}");
    Ok(ExitCode::from(2))
}

fn matches(args: &Args, record: &Record) -> bool {
    let kind = record.event.kind();
    let type_ok = args.types.is_empty()
        || args.types.iter().any(|p| {
            kind == p
                || kind
                    .strip_prefix(p.as_str())
                    .is_some_and(|rest| rest.starts_with('.'))
        });
    let step_ok = args
        .step
        .as_ref()
        .is_none_or(|s| record.step.as_ref().is_some_and(|r| r.as_str() == s));
    type_ok && step_ok
}

/// `TS  SEQ  TYPE  STEP  DATA`, with output text shown as it was written.
fn plain(record: &Record) -> String {
    let step = record.step.as_ref().map_or("-", |s| s.as_str());
    let data = match &record.event {
        Event::StepOutput { stream, text } => format!(
            "{}: {}",
            if *stream == cordon_protocol::event::OutputStream::Stdout {
                "out"
            } else {
                "err"
            },
            text.trim_end_matches('\n')
        ),
        other => other.data_json(),
    };
    format!(
        "{} {:>5} {:<17} {:<12} {data}",
        record.ts,
        record.seq,
        record.event.kind(),
        step
    )
}
