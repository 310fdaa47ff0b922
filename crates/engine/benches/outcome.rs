//! Outcome runs (DESIGN §13): the engine's own cost per phase, and the resume time of a 20-task
//! run's log.
//!
//! * A 20-task outcome (decompose, then plan → execute → scrutinize → verify → validate per
//!   task: 101 phase attempts) with a driver that answers at once and sessions that do nothing,
//!   over a real git workspace (a diff after every phase, fsyncs at every boundary): the time
//!   per phase is what cordon adds to a phase. The peer, side by side: a steps pipeline of the
//!   same number of command steps through the same no-op sessions — the engine's cost per step.
//! * Resume: reading that run's log and folding it into the run state and the task fold, plus
//!   the scheduler's next action (what `cordon run --resume` does before it runs anything),
//!   against folding the run state alone.
//! * Parallel tasks: the same 20 tasks with `parallel: 4` against `parallel: 1` (what the
//!   worktrees, threads and merges cost), and 8 tasks whose verify takes 200 ms, one at a time
//!   against four at once (the wall time saved).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use cordon_agent::{CustomContext, GrantDecision, Grants, Journal};
use cordon_engine::executor::{ExecError, Gauges, Watch};
use cordon_engine::side::SideEvents;
use cordon_engine::{
    AgentDriver, AgentTask, AgentVerdict, CommandResult, Control, DriverError, Engine, Executor,
    RunContext, RunState, Secrets, SessionSpec, StepSession, TaskFold,
};
use cordon_protocol::event::{OutputStream, Timestamp};
use cordon_protocol::{Event, Record, RunId};
use cordon_store::{RunRow, StateDir, Store};

const TASKS: usize = 20;
const ROUNDS: u128 = 5;

/// Sessions that run nothing, except that a command `work` takes `work` to run.
#[derive(Clone, Copy)]
struct Noop {
    work: Duration,
}

struct NoopSession {
    work: Duration,
}

impl Executor for Noop {
    fn open(&mut self, _spec: &SessionSpec) -> Result<Box<dyn StepSession>, ExecError> {
        Ok(Box::new(NoopSession { work: self.work }))
    }

    fn fork(&self, _: &Path, _: &Path) -> Result<Box<dyn Executor + Send>, ExecError> {
        Ok(Box::new(*self))
    }
}

impl StepSession for NoopSession {
    fn run_watched(
        &mut self,
        argv: &[String],
        _watch: Watch<'_>,
        on_output: &mut dyn FnMut(OutputStream, &[u8]),
    ) -> Result<CommandResult, ExecError> {
        self.run(argv, on_output)
    }

    fn gauges(&self) -> Gauges {
        Gauges::default()
    }

    fn run(
        &mut self,
        argv: &[String],
        on_output: &mut dyn FnMut(OutputStream, &[u8]),
    ) -> Result<CommandResult, ExecError> {
        if argv.last().is_some_and(|c| c == "work") {
            std::thread::sleep(self.work);
        }
        on_output(OutputStream::Stdout, b"ok\n");
        Ok(CommandResult {
            exit_code: 0,
            timed_out: false,
            stopped: false,
            duration: Duration::ZERO,
        })
    }

    fn side_events(&self) -> Option<SideEvents> {
        None
    }

    fn close(self: Box<Self>) {}
}

struct NoGrants;

impl Grants for NoGrants {
    fn request(&mut self, _: &cordon_egress::Pattern, _: &str) -> GrantDecision {
        GrantDecision::Refused("no grants".into())
    }
}

/// Submits a graph of `.0` independent tasks, plans each, accepts each.
#[derive(Clone, Copy)]
struct Instant_(usize);

impl AgentDriver for Instant_ {
    fn fork(&self) -> Option<Box<dyn AgentDriver + Send>> {
        Some(Box::new(*self))
    }

    fn run(
        &mut self,
        task: &AgentTask<'_>,
        _session: &mut dyn StepSession,
        journal: &mut dyn Journal,
    ) -> Result<AgentVerdict, DriverError> {
        let step = task.step.name.as_str();
        let (tool, arguments) = match step.split_once('.') {
            None => (
                "submit_tasks",
                serde_json::json!({"tasks": (0..self.0).map(|i| serde_json::json!({
                    "id": format!("t{i}"), "title": format!("Task {i}"),
                    "description": "Change one thing.", "acceptance": ["it works"]
                })).collect::<Vec<_>>()}),
            ),
            Some((_, "plan")) => ("submit_plan", serde_json::json!({"steps": ["do it"]})),
            Some(_) => ("", serde_json::Value::Null),
        };
        if let Some(tools) = task.custom.filter(|_| !tool.is_empty()) {
            journal
                .event(Event::ToolCall {
                    id: "c1".into(),
                    name: tool.into(),
                    arguments: arguments.clone(),
                    server: None,
                })
                .map_err(DriverError::Journal)?;
            let answer = tools
                .borrow_mut()
                .call(
                    tool,
                    &arguments.to_string(),
                    CustomContext {
                        journal: &mut *journal,
                        grants: &mut NoGrants,
                    },
                )
                .map_err(DriverError::Journal)?;
            journal
                .event(Event::ToolResult {
                    id: "c1".into(),
                    ok: answer.ok,
                    interrupted: None,
                    output: answer.output,
                })
                .map_err(DriverError::Journal)?;
        }
        Ok(AgentVerdict {
            text: Some("VERDICT: ACCEPT".into()),
            ..AgentVerdict::pass()
        })
    }
}

fn git(dir: &Path, args: &[&str]) {
    let status = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_AUTHOR_NAME", "b")
        .env("GIT_AUTHOR_EMAIL", "b@example.test")
        .env("GIT_COMMITTER_NAME", "b")
        .env("GIT_COMMITTER_EMAIL", "b@example.test")
        .status()
        .expect("git");
    assert!(status.success());
}

fn pipeline(yaml: &str) -> cordon_pipeline::Pipeline {
    let files: std::collections::BTreeMap<PathBuf, String> = [(
        PathBuf::from("agents/a.agent.md"),
        "---\nname: a\n---\nWork.\n".to_owned(),
    )]
    .into_iter()
    .collect();
    cordon_pipeline::load_str("pipeline.yaml", yaml, Path::new(""), &files)
        .expect("pipeline")
        .pipeline
}

/// Runs `pipeline` to its end; (time, records).
fn drive(
    ws: &Path,
    state: &Path,
    pipeline: &cordon_pipeline::Pipeline,
    round: u128,
    outcome: Option<&str>,
    (tasks, work): (usize, Duration),
) -> (Duration, Store, RunId) {
    let store = Store::open(&StateDir::new(state.to_path_buf())).expect("store");
    let run = RunId::from_parts(1_769_860_800_000, round);
    store
        .create_run(&RunRow {
            id: run,
            pipeline: "bench".into(),
            pipeline_file: ws.join("pipeline.yaml"),
            workspace: ws.to_path_buf(),
            started: Timestamp(0),
            snapshot: None,
        })
        .expect("run");
    let env = |_: &str| None;
    let host = cordon_engine::run::open_workspace(
        ws,
        pipeline,
        Some(&state.join(format!("scratch-{round}"))),
        &env,
    )
    .expect("git");
    let secrets = Secrets::default();
    let mut executor = Noop { work };
    let mut driver = Instant_(tasks);
    let mut observer = |_: &Record| Control::Continue;
    let start = Instant::now();
    let cx = RunContext {
        store: &store,
        run,
        pipeline,
        workspace: &host,
        executor: &mut executor,
        secrets: &secrets,
        refresh: false,
        tooling: Vec::new(),
        agents: Some(&mut driver),
        meter: cordon_engine::budget::Meter::unlimited(),
        images: cordon_engine::images::RunImages::default(),
        plan: None,
    };
    let mut engine = Engine::new(cx, &mut observer).expect("engine");
    engine
        .start_run(3, None, outcome.map(str::to_owned), Vec::new())
        .expect("start");
    engine.drive().expect("drive");
    let took = start.elapsed();
    drop(engine);
    (took, store, run)
}

fn main() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ws = dir.path().join("ws");
    std::fs::create_dir(&ws).expect("mkdir");
    let ws = ws.canonicalize().expect("canonical");
    git(&ws, &["init", "-q"]);
    for i in 0..200 {
        std::fs::write(ws.join(format!("f{i}.txt")), format!("file {i}\n")).expect("write");
    }
    git(&ws, &["add", "-A"]);
    git(&ws, &["commit", "-q", "-m", "bench"]);
    let state = dir.path().join("state");
    let outcome = pipeline(
        "name: bench\nllm: {provider: replay, transcript: t.jsonl}\noutcome:\n  decompose: a\n  plan: a\n  execute: a\n  scrutinize: a\n  validate: a\n  verify: [\"true\"]\n  commit: none\n",
    );
    let phases = 1 + 5 * TASKS;
    let mut steps_yaml = String::from("name: bench\nsteps:\n");
    for i in 0..phases {
        steps_yaml.push_str(&format!("  - {{name: s{i}, command: [\"true\"]}}\n"));
    }
    let steps = pipeline(&steps_yaml);

    let mut outcome_best = Duration::MAX;
    let mut steps_best = Duration::MAX;
    let mut resume_best = Duration::MAX;
    let mut state_only_best = Duration::MAX;
    let mut events = 0;
    for round in 0..ROUNDS {
        let (took, store, run) = drive(
            &ws,
            &state,
            &outcome,
            2 * round + 1,
            Some("Do it."),
            (TASKS, Duration::ZERO),
        );
        outcome_best = outcome_best.min(took);
        let (took, _, _) = drive(
            &ws,
            &state,
            &steps,
            2 * round + 2,
            None,
            (TASKS, Duration::ZERO),
        );
        steps_best = steps_best.min(took);
        // Resume: read the log, fold both states, decide the next action.
        let start = Instant::now();
        let records = store.events(run).expect("events");
        let state = RunState::replay(&records);
        let fold = TaskFold::replay(&records);
        let next = cordon_engine::outcome::next(
            &fold,
            outcome.outcome.as_ref().expect("outcome"),
            state.max_attempts,
        );
        resume_best = resume_best.min(start.elapsed());
        assert!(state.is_finished(), "{next:?}");
        assert_eq!(fold.tasks.len(), TASKS);
        events = records.len();
        let start = Instant::now();
        let records = store.events(run).expect("events");
        let _ = RunState::replay(&records);
        state_only_best = state_only_best.min(start.elapsed());
    }
    let per = |d: Duration| d.as_secs_f64() * 1e3 / phases as f64;
    println!(
        "{TASKS}-task outcome run ({phases} phases, no-op sessions, git diffs), best of {ROUNDS}: {:.1} ms = {:.2} ms/phase",
        outcome_best.as_secs_f64() * 1e3,
        per(outcome_best)
    );
    println!(
        "peer: {phases}-step steps run through the same sessions: {:.1} ms = {:.2} ms/step; outcome/steps {:.2}x",
        steps_best.as_secs_f64() * 1e3,
        per(steps_best),
        outcome_best.as_secs_f64() / steps_best.as_secs_f64()
    );
    println!(
        "resume of the {TASKS}-task run's log ({events} events: read + fold run state and tasks + next action): {:.2} ms (run state alone {:.2} ms)",
        resume_best.as_secs_f64() * 1e3,
        state_only_best.as_secs_f64() * 1e3
    );
    parallel(&ws, &state);
    worktrees(&ws, &state);
}

/// A task's worktree against git's own: `Repo::create_worktree` (base commit included) and
/// `git worktree add --detach` of the same 200-file repository, alternating, each removed
/// after, best of 10 each.
fn worktrees(ws: &Path, state: &Path) {
    let env = |_: &str| None;
    let bench = pipeline("name: bench\nsteps:\n  - {name: a, command: [\"true\"]}\n");
    let host = cordon_engine::run::open_workspace(ws, &bench, None, &env).expect("git");
    let repo = host.git().expect("repository");
    let (mut ours, mut theirs) = (Duration::MAX, Duration::MAX);
    for round in 0..10 {
        let dir = state.join(format!("wt-ours-{round}"));
        let start = Instant::now();
        let base = repo
            .base_commit(
                host.view(),
                "bench",
                &[],
                &mut cordon_git::StatCache::default(),
            )
            .expect("base");
        repo.create_worktree(base, &dir).expect("worktree");
        ours = ours.min(start.elapsed());
        std::fs::remove_dir_all(&dir).expect("rm");
        let dir = state.join(format!("wt-git-{round}"));
        let start = Instant::now();
        git(
            ws,
            &[
                "worktree",
                "add",
                "-q",
                "--detach",
                &dir.display().to_string(),
            ],
        );
        theirs = theirs.min(start.elapsed());
        git(
            ws,
            &["worktree", "remove", "--force", &dir.display().to_string()],
        );
    }
    println!(
        "a task's worktree of the 200-file repository: cordon {:.1} ms (base commit + checkout + index + syncfs), peer `git worktree add --detach` {:.1} ms: {:.2}x",
        ours.as_secs_f64() * 1e3,
        theirs.as_secs_f64() * 1e3,
        ours.as_secs_f64() / theirs.as_secs_f64()
    );
}

/// Parallel tasks: what a task's worktree, threads and merge cost (no-op sessions, `parallel:
/// 4` against `parallel: 1`, the same 20 tasks), and the wall time of 8 tasks whose verify
/// takes 200 ms, one at a time against four at once.
fn parallel(ws: &Path, state: &Path) {
    let yaml = |n: u32| {
        pipeline(&format!(
            "name: bench\nllm: {{provider: replay, transcript: t.jsonl}}\noutcome:\n  decompose: a\n  plan: a\n  execute: a\n  scrutinize: a\n  validate: a\n  verify: [work]\n  parallel: {n}\n  commit: none\n"
        ))
    };
    let (one, four) = (yaml(1), yaml(4));
    let phases = (1 + 5 * TASKS) as f64;
    let mut best = [Duration::MAX; 4];
    let mut round = 1000;
    for _ in 0..ROUNDS {
        for (i, (p, tasks, work)) in [
            (&one, TASKS, Duration::ZERO),
            (&four, TASKS, Duration::ZERO),
            (&one, 8, Duration::from_millis(200)),
            (&four, 8, Duration::from_millis(200)),
        ]
        .into_iter()
        .enumerate()
        {
            round += 1;
            let (took, _, _) = drive(ws, state, p, round, Some("Do it."), (tasks, work));
            best[i] = best[i].min(took);
        }
    }
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!(
        "{TASKS} tasks, no-op sessions: parallel 1 {:.1} ms ({:.2} ms/phase), parallel 4 {:.1} ms ({:.2} ms/phase): worktrees + threads + merges {:.2} ms per task",
        ms(best[0]),
        ms(best[0]) / phases,
        ms(best[1]),
        ms(best[1]) / phases,
        (ms(best[1]) - ms(best[0])) / TASKS as f64
    );
    println!(
        "8 tasks whose verify takes 200 ms: parallel 1 {:.0} ms, parallel 4 {:.0} ms: {:.2}x faster",
        ms(best[2]),
        ms(best[3]),
        best[2].as_secs_f64() / best[3].as_secs_f64()
    );
}
