//! `cordon validate PIPELINE`: check a pipeline and its agent files; print every problem.

use std::path::PathBuf;
use std::process::ExitCode;

use cordon_pipeline::{Disk, Severity};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The pipeline file to check (its agent files are checked too).
    #[arg(value_name = "PIPELINE")]
    pipeline: PathBuf,
}

/// Exit 0 when valid (warnings are printed to stderr), 2 with every diagnostic otherwise.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    match cordon_pipeline::load(&args.pipeline, &Disk) {
        Ok(loaded) => {
            for warning in &loaded.warnings {
                eprintln!("{warning}");
            }
            let steps = loaded.pipeline.steps.len();
            let noun = if steps == 1 { "step" } else { "steps" };
            let what = match &loaded.pipeline.outcome {
                Some(outcome) => format!(
                    "outcome pipeline `{}` with 5 phases and {} verify command{} (start it with \
                     `cordon do \"OUTCOME\"`)",
                    loaded.pipeline.name,
                    outcome.verify.len(),
                    if outcome.verify.len() == 1 { "" } else { "s" }
                ),
                None => format!("pipeline `{}` with {steps} {noun}", loaded.pipeline.name),
            };
            println!("{}: valid {what}", args.pipeline.display());
            Ok(ExitCode::SUCCESS)
        }
        Err(diagnostics) => {
            for d in &diagnostics {
                eprintln!("{d}");
            }
            let errors = diagnostics
                .iter()
                .filter(|d| d.severity == Severity::Error)
                .count();
            let noun = if errors == 1 { "error" } else { "errors" };
            eprintln!(
                "cordon: {} is invalid: {errors} {noun}",
                args.pipeline.display()
            );
            Ok(ExitCode::from(2))
        }
    }
}
