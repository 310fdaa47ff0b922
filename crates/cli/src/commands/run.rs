//! `cordon run PIPELINE`: runs a pipeline (see `run/execute.rs`), resumes one, or with
//! `--dry-run` prints the resolved plan.

mod execute;

use std::fmt::Write as _;
use std::num::NonZeroU32;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use cordon_pipeline::{Action, CommandSpec, Isolation, Llm, Pipeline, Sandboxed, Step, StepKind};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The pipeline file [default: ./pipeline.yaml; with --resume / --resume-last the run's own,
    /// which a given one must be]
    #[arg(value_name = "PIPELINE")]
    pipeline: Option<PathBuf>,
    /// The run's attempt budget, instead of the pipeline's `max_attempts`.
    #[arg(long, value_name = "N")]
    max_attempts: Option<NonZeroU32>,
    /// Print the resolved plan and exit: runs nothing, touches nothing, needs no API key.
    #[arg(long, conflicts_with_all = ["resume", "resume_last"])]
    dry_run: bool,
    /// Continue a stopped run (its id, or a unique prefix of it)
    #[arg(long, value_name = "RUN_ID", conflicts_with = "resume_last")]
    resume: Option<String>,
    /// Continue the most recent run
    #[arg(long)]
    resume_last: bool,
    /// Rerun setup hooks even when their stamp says they are up to date
    #[arg(long)]
    refresh: bool,
    /// The task for this run, appended to every agent step's task message (recorded in
    /// `run.started`; a resumed run keeps its own)
    #[arg(long, value_name = "TEXT", conflicts_with = "prompt_file")]
    prompt: Option<String>,
    /// As --prompt, the text read from FILE (a regular file of at most 1 MiB, UTF-8)
    #[arg(long, value_name = "FILE")]
    prompt_file: Option<PathBuf>,
    #[command(flatten)]
    shared: Shared,
    /// `cordon do`'s outcome.
    #[arg(skip)]
    outcome: Option<String>,
    /// The batch task this run carries out (`cordon batch`'s worker).
    #[arg(skip)]
    batch: Option<BatchLink>,
}

/// The batch task a worker's run carries out: recorded in the store as the task's run before
/// the run is created, so a worker that dies leaves a task that knows its run.
#[derive(Clone, Debug)]
pub struct BatchLink {
    pub batch: cordon_protocol::RunId,
    pub index: u32,
    /// The run the task named when the worker began (one that was never created).
    pub expected: Option<cordon_protocol::RunId>,
    pub vars: Vec<(String, String)>,
}

/// What a batch worker runs: a fresh run of `pipeline` in its clone, or the resume of `resume`.
pub struct BatchRun {
    pub pipeline: Option<PathBuf>,
    pub workspace: Option<PathBuf>,
    pub resume: Option<String>,
    pub prompt: Option<String>,
    pub state_dir: Option<PathBuf>,
    pub store: Option<String>,
    pub policy: Option<PathBuf>,
    pub link: Option<BatchLink>,
}

/// A batch worker's run: quiet, no page, the run's exit codes.
pub fn run_for_batch(run: BatchRun) -> anyhow::Result<ExitCode> {
    execute::run(Args {
        pipeline: run.pipeline,
        max_attempts: None,
        dry_run: false,
        resume: run.resume,
        resume_last: false,
        refresh: false,
        prompt: run.prompt,
        prompt_file: None,
        shared: Shared {
            workspace: run.workspace,
            state_dir: run.state_dir,
            store: crate::state_dir::StoreArg::of(run.store),
            json: false,
            quiet: true,
            no_ui: true,
            ui: None,
            policy: run.policy,
            record: None,
            budget_tokens: None,
            budget_cost: None,
            budget_wall_clock: None,
            context: Vec::new(),
            plan: None,
        },
        outcome: None,
        batch: run.link,
    })
}

/// The flags `cordon run` and `cordon do` share.
#[derive(Debug, clap::Args)]
pub struct Shared {
    /// The workspace, the top of a git work tree [default: the top of the git work tree
    /// containing the pipeline].
    #[arg(short = 'w', long = "workspace", value_name = "DIR")]
    workspace: Option<PathBuf>,
    /// Where runs are stored [default: $CORDON_STATE_DIR, $XDG_STATE_HOME/cordon or
    /// ~/.local/state/cordon]
    #[arg(long, value_name = "DIR")]
    state_dir: Option<PathBuf>,
    #[command(flatten)]
    store: crate::state_dir::StoreArg,
    /// Print the run's events as JSON lines on stdout
    #[arg(long)]
    json: bool,
    /// Show only step lines, notices and the summary: no output tail under a failed step, no
    /// line per agent tool call
    #[arg(long)]
    quiet: bool,
    /// Serve no live page for the run
    #[arg(long, conflicts_with = "ui")]
    no_ui: bool,
    /// Where the run's live page listens, a loopback address [default: 127.0.0.1:8321, or the
    /// next free port]
    #[arg(long, value_name = "ADDR", value_parser = super::ui::loopback_addr)]
    ui: Option<std::net::SocketAddr>,
    /// The operator policy file, outside the workspace [default: $XDG_CONFIG_HOME/cordon/policy.toml
    /// or ~/.config/cordon/policy.toml, if it exists]
    #[arg(long, value_name = "FILE")]
    policy: Option<PathBuf>,
    /// Write every model turn of the run to FILE as a replay transcript (JSON Lines with
    /// `step`/`attempt` selectors), to replay it offline with `llm: {provider: replay}`
    #[arg(long, value_name = "FILE")]
    record: Option<PathBuf>,
    /// The run's token budget (input + output of every model call), instead of the pipeline's
    /// `budget.tokens`; raise it to resume a run that spent its budget
    #[arg(long, value_name = "N")]
    budget_tokens: Option<std::num::NonZeroU64>,
    /// The run's cost budget in US dollars (needs `llm.pricing`), instead of `budget.cost_usd`
    #[arg(long, value_name = "USD", value_parser = usd)]
    budget_cost: Option<f64>,
    /// The run's wall-clock budget (`90s`, `30m`, `2h`: time a cordon process held the run,
    /// not restarted by a resume), instead of `budget.wall_clock`
    #[arg(long, value_name = "DURATION", value_parser = wall_clock)]
    budget_wall_clock: Option<std::num::NonZeroU64>,
    /// A document every agent step's task message holds for this run (repeatable; a regular
    /// UTF-8 file of at most 1 MiB, read once at the start and kept with the run)
    #[arg(long = "context", value_name = "FILE")]
    context: Vec<PathBuf>,
    /// The run's plan, a file of the workspace tracked by git: given to every agent step like
    /// --context and, when the run succeeds, marked `Status: COMPLETED (cordon run <RUN_ID>)`
    /// (in the run's commit when the commit is its last step)
    #[arg(long, value_name = "FILE")]
    plan: Option<PathBuf>,
}

/// `cordon do "OUTCOME"`: an outcome run (DESIGN §13).
#[derive(Debug, clap::Args)]
pub struct DoArgs {
    /// What the run is to achieve, in one sentence or more: the decompose agent turns it into
    /// a task graph
    #[arg(value_name = "OUTCOME")]
    outcome: String,
    /// The outcome pipeline [default: ./outcome.yaml]
    #[arg(long, value_name = "FILE")]
    pipeline: Option<PathBuf>,
    /// The attempts of the decompose step, instead of the pipeline's `max_attempts`.
    #[arg(long, value_name = "N")]
    max_attempts: Option<NonZeroU32>,
    #[command(flatten)]
    shared: Shared,
}

/// The file in the current directory `cordon do` uses when no `--pipeline` is given.
pub const DEFAULT_OUTCOME_PIPELINE: &str = "outcome.yaml";

/// `cordon do`: a fresh run of an outcome pipeline, printed and exited as `cordon run` (its
/// exit codes; resume with `cordon run --resume`).
pub fn run_outcome(args: DoArgs) -> anyhow::Result<ExitCode> {
    if args.outcome.trim().is_empty() {
        eprintln!(
            "cordon: the OUTCOME is empty; say what the run is to achieve, like `cordon do \"Add a --json flag to the report command\"`"
        );
        return Ok(ExitCode::from(2));
    }
    let pipeline = match args.pipeline {
        Some(path) => path,
        None if Path::new(DEFAULT_OUTCOME_PIPELINE).exists() => {
            PathBuf::from(DEFAULT_OUTCOME_PIPELINE)
        }
        None => {
            eprintln!(
                "cordon: no --pipeline given and there is no ./{DEFAULT_OUTCOME_PIPELINE} here; \
                 give the outcome pipeline (`cordon do \"…\" --pipeline path/to/outcome.yaml`), \
                 run from its directory, or write one with `cordon init --outcome`"
            );
            return Ok(ExitCode::from(2));
        }
    };
    execute::run(Args {
        pipeline: Some(pipeline),
        max_attempts: args.max_attempts,
        dry_run: false,
        resume: None,
        resume_last: false,
        refresh: false,
        prompt: None,
        prompt_file: None,
        shared: args.shared,
        outcome: Some(args.outcome),
        batch: None,
    })
}

fn usd(text: &str) -> Result<f64, String> {
    cordon_pipeline::parse_amount(text)
        .filter(|v| *v > 0.0)
        .ok_or_else(|| "expected US dollars greater than 0, like `5` or `0.50`".to_owned())
}

fn wall_clock(text: &str) -> Result<std::num::NonZeroU64, String> {
    cordon_pipeline::parse_duration(text)
        .ok_or_else(|| "expected a duration greater than 0, like `90s`, `30m` or `2h`".to_owned())
}

/// The `--budget-*` flags.
pub fn budget(args: &Args) -> cordon_engine::budget::Overrides {
    cordon_engine::budget::Overrides {
        tokens: args.shared.budget_tokens,
        cost_usd: args.shared.budget_cost,
        wall_clock: args.shared.budget_wall_clock,
    }
}

/// The run's task from `--prompt` or `--prompt-file`.
pub fn prompt(args: &Args) -> Result<Option<String>, String> {
    match &args.prompt_file {
        Some(path) => read_text("--prompt-file", path).map(Some),
        None => Ok(args.prompt.clone()),
    }
}

/// The documents of `--context`, each read as [`read_text`] reads.
pub fn context(args: &Args) -> Result<Vec<cordon_engine::run::Document>, String> {
    let given = &args.shared.context;
    if given.len() > cordon_engine::run::MAX_DOCUMENTS {
        return Err(format!(
            "a run takes at most {} documents (--context and --plan together), {} were given; \
             join some of them into one file",
            cordon_engine::run::MAX_DOCUMENTS,
            given.len()
        ));
    }
    given
        .iter()
        .map(|path| {
            Ok(cordon_engine::run::Document {
                path: path.display().to_string(),
                text: read_text("--context", path)?,
                plan: false,
            })
        })
        .collect()
}

/// The text of the file `path` given to `flag`, read through a view of its directory (no link
/// followed, regular files only, bounded by [`cordon_engine::run::MAX_DOCUMENT`]): one in the
/// workspace may have been replaced by a step, and its text goes to the model provider.
fn read_text(flag: &str, path: &Path) -> Result<String, String> {
    const MAX: usize = cordon_engine::run::MAX_DOCUMENT;
    let shown = cordon_protocol::text::escape_line(&path.display().to_string()).into_owned();
    let fail = |what: String| format!("{flag} {shown}: {what}");
    let absolute = std::path::absolute(path).map_err(|err| fail(err.to_string()))?;
    let (Some(dir), Some(name)) = (absolute.parent(), absolute.file_name()) else {
        return Err(fail("is not a file".to_owned()));
    };
    let view = cordon_workspace::View::open(dir).map_err(|err| {
        fail(format!(
            "cannot open its directory ({err}); a path through a link is refused, give the \
                 file's real path"
        ))
    })?;
    let name = cordon_workspace::WsPath::name(name.as_encoded_bytes())
        .map_err(|err| fail(err.to_string()))?;
    let read = view
        .read(&name, MAX + 1)
        .map_err(|err| fail(err.to_string()))?
        .ok_or_else(|| fail("does not exist".to_owned()))?;
    if read.bytes.len() > MAX || read.omitted() > 0 {
        return Err(fail(format!("is larger than {} KiB", MAX >> 10)));
    }
    String::from_utf8(read.bytes).map_err(|_| fail("is not UTF-8 text".to_owned()))
}

/// The file in the current directory `cordon run` uses when no PIPELINE is given.
pub const DEFAULT_PIPELINE: &str = "pipeline.yaml";

/// `given`, else `./pipeline.yaml` when it exists; the error names both ways out.
pub fn default_pipeline(given: Option<PathBuf>) -> Result<PathBuf, String> {
    match given {
        Some(path) => Ok(path),
        None if std::path::Path::new(DEFAULT_PIPELINE).exists() => {
            Ok(PathBuf::from(DEFAULT_PIPELINE))
        }
        None => Err(format!(
            "no PIPELINE given and there is no ./{DEFAULT_PIPELINE} here; give the pipeline file \
             (`cordon run path/to/pipeline.yaml`), run it from the pipeline's directory, or \
             write one with `cordon init`"
        )),
    }
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    if !args.dry_run {
        return execute::run(args);
    }
    let pipeline_path = match default_pipeline(args.pipeline.clone()) {
        Ok(path) => path,
        Err(message) => {
            eprintln!("cordon: {message}");
            return Ok(ExitCode::from(2));
        }
    };
    let pipeline_file = match std::path::absolute(&pipeline_path).and_then(|p| p.canonicalize()) {
        Ok(p) => p,
        Err(err) => {
            eprintln!("cordon: cannot resolve {}: {err}", pipeline_path.display());
            return Ok(ExitCode::from(2));
        }
    };
    let workspace = match cordon_engine::run::locate_workspace(
        args.shared.workspace.as_deref(),
        &pipeline_path,
        &pipeline_file,
    ) {
        Ok(w) => w,
        Err(message) => {
            eprintln!("cordon: {message}");
            return Ok(ExitCode::from(2));
        }
    };
    // Read through the workspace view, as the run will read it.
    let (pipeline, warnings) =
        match cordon_engine::run::load_pipeline(&workspace, &pipeline_file, &pipeline_path) {
            Ok(loaded) => loaded,
            Err(err) => {
                for line in &err.details {
                    eprintln!("{}", cordon_protocol::text::escape_text(line));
                }
                eprintln!(
                    "cordon: {}",
                    cordon_protocol::text::escape_text(&err.message)
                );
                return Ok(ExitCode::from(2));
            }
        };
    let loaded = cordon_pipeline::Loaded {
        pipeline,
        warnings: Default::default(),
    };
    for warning in &warnings {
        eprintln!("{}", cordon_protocol::text::escape_text(warning));
    }
    let max_attempts = args.max_attempts.unwrap_or(loaded.pipeline.max_attempts);
    let plan = Plan {
        pipeline: &loaded.pipeline,
        file: &pipeline_file,
        workspace: &workspace,
        max_attempts,
        attempts_from_flag: args.max_attempts.is_some(),
        limits: cordon_engine::budget::Limits::of(&loaded.pipeline, &budget(&args)),
    };
    // The plan is made of the workspace's tooling files: escaped like anything from there.
    print!("{}", cordon_protocol::text::escape_text(&plan.render()));
    // The real run's host checks (git in process, nothing written), so a dry run shows what the
    // run would refuse before a model is called.
    let env = |name: &str| std::env::var_os(name);
    let mut refusals =
        cordon_engine::run::dry_run_refusals(&loaded.pipeline, &pipeline_file, &workspace, &env);
    refusals.extend(image_refusal(&loaded.pipeline, &args, &workspace));
    refusals.extend(delivery_refusals(&loaded.pipeline, &args, &workspace));
    for refusal in refusals {
        eprintln!(
            "cordon: warning: `cordon run` would refuse: {}",
            cordon_protocol::text::escape_text(&refusal)
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// What `cordon run` would say of the pipeline's images: one missing from the store, or a
/// directory the operator policy does not list.
fn image_refusal(pipeline: &Pipeline, args: &Args, workspace: &Path) -> Option<String> {
    let uses_images = pipeline.sandboxed().iter().any(|s| s.image.is_some());
    if !uses_images {
        return None;
    }
    let source = cordon_store::StateDirSource::from_env(args.shared.state_dir.clone())
        .with_store(args.shared.store.url());
    let state_dir = cordon_store::StateDir::resolve(&source).ok()?;
    let images = cordon_image::Images::at(state_dir.path());
    let paths = crate::operator::load(args.shared.policy.as_deref(), Some(workspace))
        .map(|o| o.policy.image_paths)
        .unwrap_or_default();
    cordon_engine::images::RunImages::resolve(pipeline, &images, &paths, &[])
        .err()
        .map(|e| cordon_engine::error_chain(&e))
}

/// What `cordon run` would refuse of the pipeline's delivery and report destinations: those
/// outside the operator policy's `[delivery]` bounds (decided without resolving names).
fn delivery_refusals(pipeline: &Pipeline, args: &Args, workspace: &Path) -> Vec<String> {
    let mut urls: Vec<(&cordon_pipeline::HttpUrl, &str)> = Vec::new();
    for step in &pipeline.steps {
        if let StepKind::Action(Action::Deliver(d)) = &step.kind {
            if let cordon_pipeline::Remote::Url(url) = &d.remote {
                urls.push((url, "the push remote"));
            }
            if let Some(pull) = &d.pull_request {
                urls.push((&pull.api_url, "the forge API"));
            }
        }
    }
    if let Some(report) = &pipeline.report {
        urls.push((&report.api_url, "the forge API"));
    }
    if urls.is_empty() {
        return Vec::new();
    }
    let policy = crate::operator::load(args.shared.policy.as_deref(), Some(workspace))
        .map(|o| o.policy)
        .unwrap_or_default();
    let bounds = cordon_engine::deliver::Destinations::new(
        &policy.delivery.allow,
        &policy.delivery.allow_insecure,
        &policy.deny,
        &policy.allow_private,
        &policy.resolve,
    );
    urls.into_iter()
        .filter_map(|(url, what)| bounds.decide(url, what).err().map(|e| e.to_string()))
        .collect()
}

/// The resolved plan `--dry-run` prints.
struct Plan<'a> {
    pipeline: &'a Pipeline,
    file: &'a Path,
    workspace: &'a Path,
    max_attempts: NonZeroU32,
    attempts_from_flag: bool,
    /// The budget limits the run would be held to (the pipeline's, or the flags').
    limits: cordon_engine::budget::Limits,
}

impl Plan<'_> {
    fn render(&self) -> String {
        let p = self.pipeline;
        let mut out = String::new();
        let mut line = |label: &str, value: &str| {
            let _ = writeln!(out, "{label:<13}{value}");
        };
        line("pipeline", &p.name);
        line("file", &self.file.display().to_string());
        line("workspace", &self.workspace.display().to_string());
        let source = if self.attempts_from_flag {
            " (--max-attempts)"
        } else {
            ""
        };
        line("max attempts", &format!("{}{source}", self.max_attempts));
        line("llm", &llm(p.llm.as_ref()));
        if let Some(pricing) = &p.pricing {
            line(
                "pricing",
                &format!(
                    "${} in, ${} out per million tokens",
                    pricing.input, pricing.output
                ),
            );
        }
        let mut limits = Vec::new();
        if let Some(tokens) = self.limits.tokens {
            limits.push(format!("{tokens} tokens"));
        }
        if let Some(cost) = self.limits.cost_usd {
            limits.push(format!("${cost}"));
        }
        if let Some(wall) = self.limits.wall_clock {
            limits.push(format!("{} s wall clock", wall.as_secs()));
        }
        if !limits.is_empty() {
            line("budget", &limits.join(", "));
        }
        line("isolation", &isolation(&p.isolation));
        line("network", &format!("{} (default of every step)", p.network));
        if !p.secrets.is_empty() {
            let secrets: Vec<String> = p
                .secrets
                .iter()
                .map(|(name, secret)| match secret {
                    cordon_pipeline::Secret::Env { key } => format!("{name} from ${key}"),
                })
                .collect();
            line("secrets", &secrets.join(", "));
        }
        if let Some(report) = &p.report {
            let issue = match report.issue {
                cordon_pipeline::ReportIssue::Number(n) => format!("issue #{n}"),
                cordon_pipeline::ReportIssue::Create => "a new issue".to_owned(),
            };
            let on: Vec<&str> = [
                (report.on.start, "start"),
                (report.on.step, "each step"),
                (report.on.end, "end"),
            ]
            .into_iter()
            .filter_map(|(on, what)| on.then_some(what))
            .collect();
            line(
                "report",
                &format!(
                    "{} {} at {}, {issue}: comments at {} (token: secret `{}`)",
                    report.forge,
                    report.repo,
                    report.api_url,
                    on.join(", "),
                    report.token
                ),
            );
        }
        if !p.context_files.is_empty() {
            let files: Vec<String> = p.context_files.iter().map(ToString::to_string).collect();
            line("context", &files.join(", "));
        }
        match &p.outcome {
            Some(outcome) => self.outcome(&mut out, outcome),
            None => {
                let _ = writeln!(out, "\nsteps");
                for (i, step) in p.steps.iter().enumerate() {
                    self.step(&mut out, i + 1, step);
                }
            }
        }
        let _ = writeln!(
            out,
            "\ndry run: nothing was started and no file was written"
        );
        out
    }

    /// An outcome pipeline's phases, verify commands and bounds (`cordon do`).
    fn outcome(&self, out: &mut String, spec: &cordon_pipeline::OutcomeSpec) {
        let _ = writeln!(
            out,
            "\noutcome      started with `cordon do \"OUTCOME\"`: decompose, then per task plan → \
             execute → scrutinize → verify → validate"
        );
        let _ = writeln!(
            out,
            "bounds       at most {} tasks; per task {} revision(s) and {} replan(s); parallel {}; \
             commit {}",
            spec.max_tasks,
            spec.max_revisions,
            spec.max_replans,
            spec.parallel,
            spec.commit.as_str()
        );
        if let Some(deliver) = &spec.deliver {
            let _ = writeln!(
                out,
                "deliver      once every task is done and committed (a `deliver` step)"
            );
            for (label, value) in
                self.kind_lines(&StepKind::Action(Action::Deliver(deliver.clone())), true)
            {
                let _ = writeln!(out, "       {label:<15}{value}");
            }
        }
        let _ = writeln!(out, "\nphases");
        for (i, (phase, agent)) in spec.phases().into_iter().enumerate() {
            let mut lines = self.kind_lines(&StepKind::Agent(agent.clone()), true);
            let extra = match phase {
                "decompose" => Some("submit_tasks (the task graph, checked at once)"),
                "plan" => Some("submit_plan (steps, verify commands, egress requests)"),
                "scrutinize" => Some("the workspace is read-only; gets the task's diff"),
                "validate" => Some("VERDICT: ACCEPT | REVISE | REPLAN"),
                _ => None,
            };
            if let Some(extra) = extra {
                lines.push(("cordon adds".to_owned(), extra.to_owned()));
            }
            let _ = writeln!(out, "  {:>2}. {phase}  (agent `{}`)", i + 1, agent.agent);
            for (label, value) in lines {
                let _ = writeln!(out, "       {label:<15}{value}");
            }
        }
        let _ = writeln!(
            out,
            "\nverify       every task's, in order, then the task's and its plan's own"
        );
        for (i, command) in spec.verify.iter().enumerate() {
            let mut lines = self.kind_lines(&StepKind::Command(command.clone()), true);
            lines.retain(|(label, _)| label != "command");
            let _ = writeln!(out, "  {:>2}. {}", i + 1, self::command(&command.command));
            for (label, value) in lines {
                let _ = writeln!(out, "       {label:<15}{value}");
            }
        }
    }

    fn step(&self, out: &mut String, number: usize, step: &Step) {
        let head = match &step.kind {
            StepKind::Agent(a) => format!("agent `{}`", a.agent),
            StepKind::Command(_) => "command".to_owned(),
            StepKind::Action(a) => format!("host action `{}`", a.as_str()),
        };
        let mut lines = self.kind_lines(&step.kind, false);
        lines.push(("on pass".to_owned(), format!("→ {}", step.on_pass)));
        lines.push(("on fail".to_owned(), format!("→ {}", step.on_fail)));
        let _ = writeln!(out, "  {number:>2}. {}  ({head})", step.name);
        for (label, value) in lines {
            let _ = writeln!(out, "       {label:<15}{value}");
        }
    }

    /// What a step of `kind` does, line by line; `phase`: an outcome phase (its verdict is
    /// cordon's, not `verdicts`).
    fn kind_lines(&self, kind: &StepKind, phase: bool) -> Vec<(String, String)> {
        let mut lines: Vec<(String, String)> = Vec::new();
        let mut push = |label: &str, value: String| lines.push((label.to_owned(), value));
        match kind {
            StepKind::Agent(a) => {
                let file = self.pipeline.agents_dir.as_path().join(a.agent.file_name());
                push("agent file", file.display().to_string());
                push(
                    "model",
                    a.model
                        .clone()
                        .unwrap_or_else(|| "(from the transcript)".to_owned()),
                );
                push("max iterations", a.max_iterations.to_string());
                if let Some(agent) = self.pipeline.agents.get(&a.agent) {
                    let tools: Vec<&str> = agent
                        .tools
                        .iter()
                        .map(|t| t.as_str())
                        .chain(agent.mcp_tools.iter().map(String::as_str))
                        .collect();
                    push("tools", tools.join(", "));
                    if let Some(t) = agent.temperature {
                        push("temperature", t.to_string());
                    }
                }
                if let Some(prompt) = &a.prompt {
                    push("prompt", one_line(prompt));
                }
                if let Some(artifact) = &a.artifact {
                    push("artifact", artifact.to_string());
                }
                for server in &a.mcp {
                    push("mcp", mcp_server(server));
                }
                match &a.verdicts {
                    _ if phase => {}
                    Some(v) => push(
                        "verdicts",
                        match &v.unverifiable {
                            Some(third) => format!(
                                "pass `VERDICT: {}`, fail `VERDICT: {}`, unverifiable `VERDICT: \
                                 {third}`",
                                v.pass, v.fail
                            ),
                            None => {
                                format!("pass `VERDICT: {}`, fail `VERDICT: {}`", v.pass, v.fail)
                            }
                        },
                    ),
                    None => push(
                        "verdicts",
                        "none: passes when the agent finishes".to_owned(),
                    ),
                }
                sandboxed(&mut push, &a.sandbox);
            }
            StepKind::Command(c) => {
                push("command", command(&c.command));
                if c.model_lane {
                    push("model lane", "127.0.0.1:3129 inside the sandbox".to_owned());
                }
                sandboxed(&mut push, &c.sandbox);
            }
            StepKind::Action(Action::Deliver(d)) => {
                push("remote", d.remote.to_string());
                push("branch", d.branch.clone());
                push("base", d.base.clone());
                push("token", format!("secret `{}` (host-side only)", d.token));
                push(
                    "pushes",
                    "the run's last commit, descended from the run's start through the run's                      own commits; never forced; refused if a commit holds a secret's value"
                        .to_owned(),
                );
                match &d.pull_request {
                    Some(pull) => push(
                        "pull request",
                        format!(
                            "{} {} at {}: \"{}\"{} (found first, opened if none)",
                            pull.forge,
                            pull.repo,
                            pull.api_url,
                            pull.title,
                            if pull.draft { ", a draft" } else { "" }
                        ),
                    ),
                    None => push("pull request", "none".to_owned()),
                }
                push(
                    "runs",
                    "on the host, outside any sandbox; every destination within the operator \
                     policy's `[delivery] allow`"
                        .to_owned(),
                );
            }
            StepKind::Action(Action::Commit { message }) => {
                push("message", one_line(message));
                push(
                    "runs",
                    "on the host, outside any sandbox; never pushes".to_owned(),
                );
                push(
                    "commits",
                    "every change in the workspace, untracked files that are not ignored \
                     included (the run's tooling and masked paths never)"
                        .to_owned(),
                );
            }
        }
        lines
    }
}

fn sandboxed(push: &mut impl FnMut(&str, String), s: &Sandboxed) {
    push("image", shown_image(s.image.as_ref()));
    push("network", s.network.to_string());
    if let Some(setup) = &s.setup {
        push("setup", command(&setup.command));
        push("setup network", setup.network.to_string());
    }
    push(
        "timeout",
        s.timeout
            .map_or_else(|| "none".to_owned(), |t| format!("{}s", t.seconds())),
    );
    if !s.secrets.is_empty() {
        let names: Vec<String> = s.secrets.iter().map(ToString::to_string).collect();
        push("secrets", names.join(", "));
    }
    if !s.env.is_empty() {
        let vars: Vec<String> = s
            .env
            .iter()
            .map(|(k, v)| format!("{k}={}", one_line(v)))
            .collect();
        push("env", vars.join(" "));
    }
    if !s.produces.is_empty() {
        let files: Vec<String> = s.produces.iter().map(ToString::to_string).collect();
        push("produces", files.join(", "));
    }
}

/// A step's image as `--dry-run` and `cordon policy` name it.
pub(crate) fn shown_image(image: Option<&cordon_protocol::ImageRef>) -> String {
    match image {
        None => "none: the host's system directories, read-only".to_owned(),
        Some(reference) => format!("{reference} as the read-only /"),
    }
}

/// One MCP server of a dry run: its name and what starts or reaches it (secrets by reference).
fn mcp_server(server: &cordon_pipeline::McpServer) -> String {
    let value = |v: &cordon_pipeline::McpValue| match v {
        cordon_pipeline::McpValue::Text(text) => text.clone(),
        cordon_pipeline::McpValue::Secret(name) => format!("[secret:{name}]"),
    };
    match &server.transport {
        cordon_pipeline::McpTransport::Stdio { command, env } => {
            let mut text = format!(
                "{}: started in the sandbox: {}",
                server.name,
                command.join(" ")
            );
            for (key, v) in env {
                text.push_str(&format!(" {key}={}", value(v)));
            }
            text
        }
        cordon_pipeline::McpTransport::Http { url, headers } => {
            let mut text = format!("{}: {url}, through the step's proxy", server.name);
            for (key, v) in headers {
                text.push_str(&format!(" ({key}: {})", value(v)));
            }
            text
        }
    }
}

fn command(spec: &CommandSpec) -> String {
    match spec {
        CommandSpec::Shell(text) => format!("sh -c {}", one_line(text)),
        CommandSpec::Argv(argv) => format!("{argv:?}"),
    }
}

fn one_line(text: &str) -> String {
    let first = text.lines().next().unwrap_or("");
    if first.len() == text.trim_end().len() {
        first.to_owned()
    } else {
        format!("{first} …")
    }
}

fn llm(llm: Option<&Llm>) -> String {
    match llm {
        None => "none (no agent steps)".to_owned(),
        Some(Llm::OpenAi {
            model,
            base_url,
            api_key_env,
        }) => {
            let mut text = format!("openai, model {model}");
            if let Some(url) = base_url {
                let _ = write!(text, ", {url}");
            }
            match api_key_env {
                Some(var) => {
                    let _ = write!(text, ", key from ${var} (not read by --dry-run)");
                }
                None => text.push_str(", no API key"),
            }
            text
        }
        Some(Llm::Anthropic {
            model,
            base_url,
            api_key_env,
        }) => {
            let mut text = format!("anthropic, model {model}");
            if let Some(url) = base_url {
                let _ = write!(text, ", {url}");
            }
            let _ = write!(text, ", key from ${api_key_env} (not read by --dry-run)");
            text
        }
        Some(Llm::Replay { transcript, model }) => {
            let mut text = format!("replay of {transcript}");
            if let Some(model) = model {
                let _ = write!(text, ", model {model}");
            }
            text
        }
    }
}

fn isolation(i: &Isolation) -> String {
    let mut parts = Vec::new();
    match i.memory {
        Some(m) => parts.push(format!("memory {m}")),
        None => parts.push("memory uncapped".to_owned()),
    }
    match i.pids {
        Some(p) => parts.push(format!("pids {p}")),
        None => parts.push("pids uncapped".to_owned()),
    }
    match i.cpus {
        Some(c) => parts.push(format!("cpus {c}")),
        None => parts.push("cpus uncapped".to_owned()),
    }
    if let Some(t) = i.tmp_size {
        parts.push(format!("/tmp {t}"));
    }
    if let Some(image) = &i.image {
        let layer = if i.image_writable {
            " with a throwaway writable layer"
        } else {
            ""
        };
        parts.push(format!("image {image}{layer}"));
    }
    if !i.read_only.is_empty() {
        let paths: Vec<String> = i.read_only.iter().map(ToString::to_string).collect();
        parts.push(format!("read-only {}", paths.join(" ")));
    }
    if !i.hide.is_empty() {
        let paths: Vec<String> = i.hide.iter().map(ToString::to_string).collect();
        parts.push(format!("hidden {}", paths.join(" ")));
    }
    parts.push(
        if i.allow_git_mutations {
            "git dir writable"
        } else {
            "git dir read-only"
        }
        .to_owned(),
    );
    parts.join(", ")
}
