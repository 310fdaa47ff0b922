//! `cordon policy PIPELINE`: each step's effective egress under the operator policy — its
//! allow and deny lists, whether it takes grants and which grants the pipeline's latest run
//! recorded, the operator's deny (which overrides everything), and `OPEN` steps flagged.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use cordon_engine::RunState;
use cordon_pipeline::policy::OperatorPolicy;
use cordon_pipeline::{Network, Pipeline, StepKind};
use cordon_protocol::RunId;
use cordon_store::{StateDir, Store};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The pipeline file whose steps to show
    #[arg(value_name = "PIPELINE")]
    pipeline: PathBuf,
    /// The operator policy file, outside the workspace [default: $XDG_CONFIG_HOME/cordon/policy.toml
    /// or ~/.config/cordon/policy.toml, if it exists]
    #[arg(long, value_name = "FILE")]
    policy: Option<PathBuf>,
    /// Where runs are stored, to show the grants of the pipeline's latest run [default:
    /// $CORDON_STATE_DIR, $XDG_STATE_HOME/cordon or ~/.local/state/cordon]
    #[arg(long, value_name = "DIR")]
    state_dir: Option<PathBuf>,
}

/// Exit 0 with the report on stdout; 2 for an invalid pipeline or policy (or a policy file inside
/// the workspace), 1 when the store cannot be read.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let loaded = match crate::pipeline_file::load(&args.pipeline) {
        Ok(loaded) => loaded,
        Err(message) => {
            eprintln!("cordon: {message}");
            return Ok(ExitCode::from(2));
        }
    };
    let pipeline_file = match std::path::absolute(&args.pipeline).and_then(|p| p.canonicalize()) {
        Ok(file) => file,
        Err(err) => {
            eprintln!("cordon: cannot resolve {}: {err}", args.pipeline.display());
            return Ok(ExitCode::from(2));
        }
    };
    let operator =
        match crate::operator::load(args.policy.as_deref(), Some(&workspace(&pipeline_file))) {
            Ok(operator) => operator,
            Err(message) => {
                eprintln!("cordon: {message}");
                return Ok(ExitCode::from(2));
            }
        };
    let state_dir = match crate::state_dir::resolve(args.state_dir.clone()) {
        Ok(dir) => dir,
        Err(code) => return Ok(code),
    };
    let latest = latest_grants(&state_dir, &pipeline_file)?;
    let report = Report {
        pipeline: &loaded.pipeline,
        operator: &operator.policy,
        operator_file: operator.path.as_deref(),
        latest: latest.as_ref(),
    };
    print!("{}", report.render());
    Ok(ExitCode::SUCCESS)
}

/// The workspace a policy file must stay out of: the git work tree holding the pipeline, else
/// the pipeline's directory.
fn workspace(pipeline_file: &Path) -> PathBuf {
    let dir = pipeline_file.parent().unwrap_or(Path::new("/"));
    dir.ancestors()
        .find(|d| std::fs::symlink_metadata(d.join(".git")).is_ok())
        .unwrap_or(dir)
        .to_path_buf()
}

/// The latest run of the pipeline stored at `pipeline_file` and the grants its events hold;
/// `None` when there is none (or no store yet).
fn latest_grants(
    state_dir: &StateDir,
    pipeline_file: &Path,
) -> anyhow::Result<Option<(RunId, Vec<String>)>> {
    if !state_dir.path().join("cordon.db").exists() {
        return Ok(None);
    }
    let store = Store::open(state_dir)?;
    let Some(row) = store
        .runs()?
        .into_iter()
        .rev()
        .find(|row| row.pipeline_file == pipeline_file)
    else {
        return Ok(None);
    };
    let state = RunState::replay(&store.events(row.id)?);
    Ok(Some((row.id, state.grants)))
}

/// What `cordon policy` prints.
struct Report<'a> {
    pipeline: &'a Pipeline,
    operator: &'a OperatorPolicy,
    operator_file: Option<&'a Path>,
    latest: Option<&'a (RunId, Vec<String>)>,
}

impl Report<'_> {
    fn render(&self) -> String {
        let mut out = String::new();
        let op = self.operator;
        let _ = writeln!(out, "pipeline {}", self.pipeline.name);
        match self.operator_file {
            Some(file) => {
                let _ = writeln!(out, "operator policy: {}", file.display());
            }
            None => out.push_str("operator policy: none\n"),
        }
        let _ = writeln!(
            out,
            "  deny (overrides every allow and grant): {}",
            list(&op.deny)
        );
        let _ = writeln!(out, "  allow_private: {}", list(&op.allow_private));
        let _ = writeln!(
            out,
            "  grant bounds: allow {}; deny {}",
            list(&op.grants.allow),
            list(&op.grants.deny)
        );
        match self.latest {
            Some((run, grants)) => {
                let _ = writeln!(out, "latest run {run}: grants {}", list(grants));
            }
            None => out.push_str("latest run: none (no grants recorded)\n"),
        }
        for step in &self.pipeline.steps {
            self.step(&mut out, &format!("step {}", step.name), &step.kind);
        }
        // An outcome run's phases, each run once per task (`<task>.<phase>`); a plan's granted
        // requests apply to its own task's execute only.
        if let Some(outcome) = &self.pipeline.outcome {
            for (phase, agent) in outcome.phases() {
                let label = if phase == "decompose" {
                    "phase decompose".to_owned()
                } else {
                    format!("phase {phase} (each task's `<task>.{phase}`)")
                };
                self.step(&mut out, &label, &StepKind::Agent(agent.clone()));
            }
            for (i, command) in outcome.verify.iter().enumerate() {
                self.step(
                    &mut out,
                    &format!("verify command {} (each task's `<task>.verify`)", i + 1),
                    &StepKind::Command(command.clone()),
                );
            }
        }
        out
    }

    fn step(&self, out: &mut String, label: &str, kind: &StepKind) {
        let (kind, sandbox, lane) = match kind {
            StepKind::Agent(agent) => ("agent", &agent.sandbox, false),
            StepKind::Command(command) => ("command", &command.sandbox, command.model_lane),
            StepKind::Action(_) => {
                let _ = writeln!(out, "\n{label} (action): host side, no network");
                return;
            }
        };
        let flag = if sandbox.network.is_open() {
            "  OPEN"
        } else {
            ""
        };
        let _ = writeln!(out, "\n{label} ({kind}){flag}");
        if let Some(image) = &sandbox.image {
            let _ = writeln!(out, "  image: {}", super::run::shown_image(Some(image)));
        }
        self.network(out, "network", &sandbox.network);
        if let Some(setup) = &sandbox.setup {
            self.network(out, "setup network", &setup.network);
        }
        if lane {
            out.push_str(
                "  model lane: 127.0.0.1:3129, inference POSTs only, the key added host-side\n",
            );
        }
    }

    fn network(&self, out: &mut String, label: &str, network: &Network) {
        match network {
            Network::None => {
                let _ = writeln!(out, "  {label}: none (loopback only)");
            }
            Network::Open => {
                let _ = writeln!(
                    out,
                    "  {label}: OPEN: every name and port; private addresses refused unless \
                     allow_private covers them; operator deny {}",
                    list(&self.operator.deny)
                );
            }
            Network::Allowlist(allowlist) => {
                let _ = writeln!(out, "  {label}: allowlist");
                let _ = writeln!(out, "    allow: {}", list(&allowlist.allow));
                let _ = writeln!(out, "    deny: {}", list(&allowlist.deny));
                if allowlist.grants {
                    let granted = match self.latest {
                        Some((_, grants)) => list(grants),
                        None => "(no run yet)".to_owned(),
                    };
                    let _ = writeln!(
                        out,
                        "    grants: true; granted in the latest run: {granted}"
                    );
                } else {
                    out.push_str("    grants: false\n");
                }
                let _ = writeln!(out, "    operator deny: {}", list(&self.operator.deny));
            }
        }
    }
}

/// `a, b, c`, or `(none)`.
fn list<T: std::fmt::Display>(items: &[T]) -> String {
    if items.is_empty() {
        return "(none)".to_owned();
    }
    items
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}
