//! `cordon runs`: every stored run with its status (`running`, `interrupted`, `success`,
//! `failure`), oldest first; `--json` prints DESIGN Appendix A's line shape.

use std::process::ExitCode;

use cordon_engine::RunState;
use cordon_protocol::Event;
use cordon_store::Store;

use crate::state_dir::{StateDirArg, StoreArg};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Print one JSON object per run
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    state_dir: StateDirArg,
    #[command(flatten)]
    store: StoreArg,
    /// Only the runs of this batch (its id, or a unique prefix of it)
    #[arg(long, value_name = "BATCH_ID")]
    batch: Option<String>,
}

/// A stored run's status: its outcome, else `running` while a live process holds it, else
/// `interrupted`.
pub fn status(store: &Store, id: cordon_protocol::RunId, state: &RunState) -> &'static str {
    match state.outcome {
        Some(outcome) => outcome.as_str(),
        None if store.is_held(id) => "running",
        None => "interrupted",
    }
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let state_dir = match args.state_dir.resolve_with(&args.store) {
        Ok(dir) => dir,
        Err(code) => return Ok(code),
    };
    if !state_dir.has_runs_stored() {
        if let Some(batch) = &args.batch {
            eprintln!(
                "cordon: {}",
                cordon_store::StoreError::UnknownBatch(batch.clone())
            );
            return Ok(ExitCode::from(2));
        }
        if !args.json {
            eprintln!("no runs yet in {}", state_dir.path().display());
        }
        return Ok(ExitCode::SUCCESS);
    }
    let store = Store::open(&state_dir)?;
    let only = match &args.batch {
        None => None,
        Some(text) => match store.find_batch(text) {
            Ok(batch) => Some(
                store
                    .batch_tasks(batch)?
                    .into_iter()
                    .filter_map(|t| t.run)
                    .collect::<std::collections::BTreeSet<_>>(),
            ),
            Err(err) => {
                eprintln!("cordon: {err}");
                return Ok(ExitCode::from(2));
            }
        },
    };
    for row in store.runs()? {
        if only.as_ref().is_some_and(|runs| !runs.contains(&row.id)) {
            continue;
        }
        let records = store.events(row.id)?;
        let state = RunState::replay(&records);
        let status = status(&store, row.id, &state);
        let finished = records.iter().rev().find_map(|r| match r.event {
            Event::RunFinished { .. } => Some(r.ts),
            _ => None,
        });
        let (tokens_in, tokens_out) =
            records
                .iter()
                .fold((0u64, 0u64), |(i, o), r| match r.event {
                    Event::LlmResponse {
                        input_tokens,
                        output_tokens,
                        ..
                    } => (
                        i.saturating_add(input_tokens),
                        o.saturating_add(output_tokens),
                    ),
                    _ => (i, o),
                });
        let kind = records
            .iter()
            .find_map(|r| match &r.event {
                Event::RunStarted { kind, .. } => Some(*kind),
                _ => None,
            })
            .unwrap_or_default();
        if args.json {
            // Appendix B: `kind` (`steps` or `outcome`, from `run.started`), the run's model
            // tokens, and `cost_usd` at the run's own `llm.pricing` (null without one).
            let line = serde_json::json!({
                "id": row.id.to_string(),
                "pipeline": row.pipeline,
                "status": status,
                "started": row.started.to_string(),
                "finished": finished.map(|t| t.to_string()),
                "attempt": state.attempt.get(),
                "kind": kind.as_str(),
                "tokens_in": tokens_in,
                "tokens_out": tokens_out,
                "cost_usd": cost(&store, &row, tokens_in, tokens_out),
            });
            println!("{line}");
        } else {
            let kind = match kind {
                cordon_protocol::event::RunKind::Outcome => "  (outcome)",
                cordon_protocol::event::RunKind::Steps => "",
            };
            println!(
                "{}  {status:<11}  attempt {}  started {}  {}{kind}",
                row.id, state.attempt, row.started, row.pipeline
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The run's cost at the `llm.pricing` of the pipeline it ran (from its tooling snapshot, so an
/// edited pipeline does not reprice it); null without pricing. Rounded to a millionth.
fn cost(
    store: &Store,
    row: &cordon_store::RunRow,
    tokens_in: u64,
    tokens_out: u64,
) -> serde_json::Value {
    let pricing = cordon_engine::run::ToolingSnapshot::stored(store, row)
        .ok()
        .and_then(|snapshot| snapshot.pipeline(&row.pipeline_file, &row.workspace).ok())
        .and_then(|loaded| loaded.pipeline.pricing);
    match pricing {
        Some(pricing) => {
            let cost = pricing.cost(tokens_in, tokens_out);
            serde_json::json!((cost * 1_000_000.0).round() / 1_000_000.0)
        }
        None => serde_json::Value::Null,
    }
}
