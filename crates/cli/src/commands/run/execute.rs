//! Running and resuming: the command line handed to `cordon_engine::run` (which assembles and
//! drives the run), and what only the binary does — the page, the progress view, signals, and the
//! exit codes of DESIGN Appendix A.

use std::io::Write as _;
use std::process::ExitCode;

use cordon_engine::run::{self, Drive, Prepared, Request, RunError, Start};
use cordon_engine::{Control, Ending, ErrorClass};
use cordon_protocol::event::Outcome;
use cordon_protocol::text::escape_text;
use cordon_protocol::{Event, Record, RunId};
use cordon_store::{StateDir, StateDirSource, Store};

use super::Args;
use crate::commands::ui;
use crate::progress::{Mode, Progress};

fn code(class: ErrorClass) -> u8 {
    match class {
        ErrorClass::Usage => 2,
        ErrorClass::Layer => 3,
        ErrorClass::Runtime => 1,
    }
}

/// Prints a run error as the user sees it: its details (diagnostics), then `cordon: message`,
/// every piece escaped (file names and reasons come from the workspace).
fn report(err: &RunError) -> ExitCode {
    for line in &err.details {
        eprintln!("{}", escape_text(line));
    }
    eprintln!("cordon: {}", escape_text(&err.message));
    ExitCode::from(code(err.class))
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let source =
        StateDirSource::from_env(args.shared.state_dir.clone()).with_store(args.shared.store.url());
    let state_dir = match StateDir::resolve(&source) {
        Ok(dir) => dir,
        Err(err) => return Ok(report(&RunError::from(err))),
    };
    let result = execute(&args, &state_dir);
    // An interrupt wins over whatever the run returned meanwhile (the engine's own append may
    // have lost the race with `run.interrupted`): the signal handler ends the process with
    // 128 + the signal; this waits for it, bounded.
    let signal = SIGNALLED.load(std::sync::atomic::Ordering::SeqCst);
    if signal != 0 {
        std::thread::sleep(std::time::Duration::from_secs(2));
        return Ok(ExitCode::from(u8::try_from(128 + signal).unwrap_or(1)));
    }
    Ok(match result {
        Ok(code) => code,
        Err(err) => report(&err),
    })
}

/// The signal (`SIGINT`, `SIGTERM`) that interrupted this run, 0 before one arrived.
static SIGNALLED: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);

fn execute(args: &Args, state_dir: &StateDir) -> Result<ExitCode, RunError> {
    let start = if args.resume.is_some() || args.resume_last {
        Start::Resume {
            run: args.resume.clone(),
            pipeline: args.pipeline.clone(),
        }
    } else {
        let pipeline = super::default_pipeline(args.pipeline.clone()).map_err(RunError::usage)?;
        Start::Fresh {
            pipeline,
            workspace: args.shared.workspace.clone(),
        }
    };
    let operator = |workspace: &std::path::Path| {
        crate::operator::load(args.shared.policy.as_deref(), Some(workspace))
    };
    let env = |name: &str| std::env::var_os(name);
    let request = Request {
        start,
        state_dir,
        max_attempts: args.max_attempts,
        refresh: args.refresh,
        record: args.shared.record.clone(),
        prompt: super::prompt(args).map_err(RunError::usage)?,
        budget: super::budget(args),
        outcome: args.outcome.clone(),
        operator: &operator,
        env: &env,
        context: super::context(args).map_err(RunError::usage)?,
        plan: args.shared.plan.clone(),
        vars: args
            .batch
            .as_ref()
            .map(|b| b.vars.clone())
            .unwrap_or_default(),
    };
    let mut ready = match run::prepare(&request)? {
        Prepared::Finished { run, outcome } => {
            eprintln!("run {run} already finished: {}", outcome.as_str());
            return Ok(ExitCode::from(match outcome {
                Outcome::Success => 0,
                Outcome::Failure => 1,
            }));
        }
        Prepared::Ready(ready) => ready,
    };
    if args.shared.budget_cost.is_some() && ready.pipeline.pricing.is_none() {
        return Err(RunError::usage(
            "`--budget-cost` needs `llm.pricing` to count cost; add `pricing: {input: 3, \
             output: 15}` (US dollars per million tokens) under `llm`"
                .to_owned(),
        ));
    }
    for warning in &ready.warnings {
        eprintln!("{}", escape_text(warning));
    }
    // The page listens before a fresh run exists, so an address that cannot be bound leaves no
    // run behind.
    let page = serve_page(args, state_dir, ready.run, &ready.pipeline)?;
    if let Some(link) = &args.batch {
        Store::open(state_dir)?.set_task_run(link.batch, link.index, link.expected, ready.run)?;
    }
    ready.create()?;
    let progress = Progress::new(
        ready.run,
        &ready.pipeline.name,
        ui::graph(&ready.pipeline),
        Mode::detect(args.shared.json),
    );
    progress.set_memory_cap(ready.pipeline.isolation.memory.map(|m| m.bytes()));
    progress.set_quiet(args.shared.quiet);
    if ready.resumed() {
        progress.catch_up(&ready.records()?);
    }
    let json = args.shared.json;
    let mut observer = |record: &Record| {
        if json {
            let mut out = std::io::stdout().lock();
            let line = record.to_json_line();
            let _ = writeln!(out, "{}", cordon_protocol::text::escape_json(&line));
            let _ = out.flush();
        }
        progress.record(record);
        Control::Continue
    };
    let url = page.as_ref().map(|p| p.url.clone());
    let mut started = |run: RunId, kept: &str| {
        // `run.started` / `run.resumed` is durable: signals from now on leave a resumable run,
        // and the id can be printed (after the handler is in place, so whoever reads it may
        // signal).
        exit_on_signals(run, state_dir);
        #[cfg(feature = "scale-out")]
        cordon_store::on_lease_lost(exit_on_lost_lease);
        eprintln!("run {run}");
        if let Some(url) = &url {
            eprintln!("ui {url}");
        }
        if !kept.is_empty() {
            eprint!(
                "workspace changes kept from before the interruption:\n{}",
                escape_text(kept)
            );
        }
        progress.show();
    };
    let drive = Drive {
        listening: page.iter().map(|p| p.addr).collect(),
        started: &mut started,
    };
    let ending = ready.drive(drive, &mut observer);
    progress.finish();
    if let Some(page) = page {
        page.finish();
    }
    match ending? {
        Ending::Finished(Outcome::Success) => Ok(ExitCode::SUCCESS),
        Ending::Finished(Outcome::Failure) | Ending::Stopped => Ok(ExitCode::from(1)),
    }
}

/// The run's live page, unless `--no-ui`. A `--ui ADDR` that cannot be bound is a usage error.
fn serve_page(
    args: &Args,
    state_dir: &StateDir,
    run: RunId,
    pipeline: &cordon_pipeline::Pipeline,
) -> Result<Option<ui::RunUi>, RunError> {
    if args.shared.no_ui {
        return Ok(None);
    }
    ui::serve_run(state_dir, run, pipeline, args.shared.ui)
        .map(Some)
        .map_err(|err| RunError {
            class: if args.shared.ui.is_some() {
                ErrorClass::Usage
            } else {
                ErrorClass::Runtime
            },
            message: format!(
                "the run's page cannot be served: {err:#}; pass another --ui ADDR, or --no-ui"
            ),
            details: Vec::new(),
        })
}

/// A holder whose lease renewals the store has not taken for 20 s stops before the lease can
/// expire (30 s) and another machine resume the run: nothing more can be appended under it, so
/// the process ends at once, exit 1 (a failure that leaves the run resumable), and the session's
/// init dies with it (its parent death signal).
#[cfg(feature = "scale-out")]
fn exit_on_lost_lease(run: RunId) {
    eprintln!(
        "cordon: {}",
        cordon_store::StoreError::LeaseLost(run.to_string())
    );
    std::process::exit(1);
}

/// SIGINT → 130, SIGTERM → 143, after `run.interrupted{signal}` is appended (through a store
/// connection of its own, durable: a boundary event). The process exits at once: every event that
/// matters is already durable, the lock dies with the process, and the session's init dies with
/// it (its parent death signal), so the run is exactly as resumable as after `kill -9`.
fn exit_on_signals(run: RunId, state_dir: &StateDir) {
    let state_dir = state_dir.clone();
    let Ok(mut signals) = signal_hook::iterator::Signals::new([
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGTERM,
    ]) else {
        return;
    };
    std::thread::spawn(move || {
        if let Some(signal) = signals.forever().next() {
            SIGNALLED.store(signal, std::sync::atomic::Ordering::SeqCst);
            cordon_engine::run::note_stopping();
            // The engine may be appending on its own connection at this moment: the store then
            // refuses this one's write (busy, or the sequence number taken), so it is tried
            // again, for at most a second. One connection: a shared store that does not answer
            // costs one call's deadline, not one per try.
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(1);
            if let Ok(store) = Store::open(&state_dir) {
                while store
                    .append(run, None, &Event::RunInterrupted { signal })
                    .is_err()
                    && std::time::Instant::now() < deadline
                {
                    std::thread::sleep(std::time::Duration::from_millis(25));
                }
            }
            // The run's lease in a shared store is released now, so a resume need not wait it
            // out (exit skips its destructor).
            #[cfg(feature = "scale-out")]
            cordon_store::release_leases();
            // A push in flight leaves its scratch repository (exit skips its destructor).
            let _ = std::fs::remove_dir_all(cordon_engine::run::delivery_scratch(
                state_dir.path(),
                run,
            ));
            eprintln!("cordon: interrupted; continue with `cordon run --resume {run}`");
            std::process::exit(128 + signal);
        }
    });
}
