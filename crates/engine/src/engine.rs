//! `Engine`: carries out the scheduler's actions. Every change of state is an appended event that
//! is folded into [`RunState`] right away, so the in-memory state is always exactly the replay of
//! the log — which is what makes a resumed run converge to the same route.

use std::cell::RefCell;
use std::path::PathBuf;
use std::rc::Rc;
use std::time::Instant;

use cordon_pipeline::{Action as HostAction, CommandSpec, Pipeline, Route, Step, StepKind};
use cordon_protocol::event::{Outcome, OutputStream, Verdict};
use cordon_protocol::{Attempt, Event, Record, RunId, StepName};
use cordon_store::Store;
use sha2::{Digest, Sha256};

use crate::EngineError;
use crate::agent::{AgentDriver, AgentTask, AgentVerdict};
use crate::executor::{
    ExecError, Executor, Gauges, Purpose, SessionSpec, StepSession, Tick, Watch,
};
use crate::outcome::TaskFold;
use crate::output::{LineBuffer, OutputBudget};
use crate::resources::{GuardedSession, Monitor, ResourceGuard};
use crate::schedule::{self, Action, Cleanup};
use crate::secrets::Secrets;
use crate::setup;
use crate::state::RunState;
use crate::workspace::{HostWorkspace, Missing};

mod carry;
mod deliver;
mod outcome;
mod parallel;
pub mod plan;
use cordon_workspace::WsPath;
pub use deliver::{Delivery, Limits as DeliveryLimits};

/// What an observer tells the engine after seeing a record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Control {
    Continue,
    /// Stop at once, as if the process had died here (tests use this to crash after event k).
    Stop,
}

/// Sees every record right after it is appended (the cli prints progress or JSON from it).
pub trait Observer {
    fn record(&mut self, record: &Record) -> Control;
}

impl<F: FnMut(&Record) -> Control> Observer for F {
    fn record(&mut self, record: &Record) -> Control {
        self(record)
    }
}

/// How `drive` ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ending {
    Finished(Outcome),
    /// An observer asked to stop; the run is resumable.
    Stopped,
}

/// Everything a run needs from outside.
pub struct RunContext<'a> {
    pub store: &'a Store,
    pub run: RunId,
    pub pipeline: &'a Pipeline,
    /// The workspace (its view, and its repository for diffs and the commit action).
    pub workspace: &'a HostWorkspace,
    pub executor: &'a mut dyn Executor,
    pub secrets: &'a Secrets,
    /// Rerun setup hooks even when their stamp matches (`--refresh`).
    pub refresh: bool,
    /// The run's tooling paths: read-only in every session, never committed.
    pub tooling: Vec<WsPath>,
    /// Runs agent steps; `None` when the pipeline has none (an agent step then fails).
    pub agents: Option<&'a mut dyn AgentDriver>,
    /// The run's budget (shared with the model lanes of its sessions).
    pub meter: crate::budget::Meter,
    /// The environment images the run's steps name, resolved when it started.
    pub images: crate::images::RunImages,
    /// The run's plan (`--plan`), marked done in the workspace when the run succeeds.
    pub plan: Option<WsPath>,
}

pub struct Engine<'a> {
    cx: RunContext<'a>,
    state: RunState,
    observer: &'a mut dyn Observer,
    /// The changes against `HEAD` and the diff blob of the last diff taken, so an attempt that
    /// changed nothing reuses the blob. Keyed by the changes, not the work tree alone: a step
    /// that moved `HEAD` (with `allow_git_mutations`) and left the work tree changes the diff.
    last_diff: Option<LastDiff>,
    /// Blob ids of work-tree files already hashed, by path and metadata.
    cache: cordon_git::StatCache,
    /// The current attempt's stored output against `isolation.output_limit`.
    budget: OutputBudget,
    /// The resource guardrail (`[limits]`); `None` samples nothing.
    guard: Option<ResourceGuard>,
    /// An outcome run's task graph and progress, folded beside `state`.
    tasks: TaskFold,
    /// The outcome phase the attempt running now belongs to.
    phase: Option<outcome::PhaseRun>,
    /// The sequence number of the last record folded into `state` and `tasks`.
    seen: u64,
    /// How this engine shares the log: alone, or as one side of an outcome run's parallel
    /// tasks (`parallel.rs`).
    role: parallel::Role,
    /// The operator's bounds on `deliver` and `report`, and the run's scratch directory.
    delivery: Delivery,
    /// What this process knows of the report's issue.
    progress: deliver::ReportProgress,
    /// A batch run's workspace records (`carry.rs`): `None` takes none; `Err` is why none can
    /// be taken, said once in the log.
    carry: Option<Result<carry::Carry, String>>,
}

/// The changes against `HEAD` of the last diff taken, and its blob.
type LastDiff = (
    Vec<(Vec<u8>, cordon_git::Change)>,
    Option<cordon_protocol::event::BlobId>,
);

enum Failure {
    Stop,
    Error(EngineError),
}

impl From<EngineError> for Failure {
    fn from(err: EngineError) -> Failure {
        Failure::Error(err)
    }
}

impl From<cordon_store::StoreError> for Failure {
    fn from(err: cordon_store::StoreError) -> Failure {
        Failure::Error(err.into())
    }
}

impl<'a> Engine<'a> {
    /// An engine over the run's existing events (none for a fresh run).
    pub fn new(
        mut cx: RunContext<'a>,
        observer: &'a mut dyn Observer,
    ) -> Result<Engine<'a>, EngineError> {
        let records = cx.store.events(cx.run)?;
        let state = RunState::replay(&records);
        let tasks = TaskFold::replay(&records);
        let seen = records.last().map_or(0, |r| r.seq);
        if let Some(agents) = cx.agents.as_deref_mut() {
            agents.restore(&records);
        }
        Ok(Engine {
            cx,
            state,
            observer,
            last_diff: None,
            cache: cordon_git::StatCache::default(),
            budget: OutputBudget::new(u64::MAX),
            guard: None,
            tasks,
            phase: None,
            seen,
            role: parallel::Role::Alone,
            delivery: Delivery::default(),
            progress: deliver::ReportProgress::default(),
            carry: None,
        })
    }

    /// An outcome run's task graph and progress so far.
    pub fn tasks(&self) -> &TaskFold {
        &self.tasks
    }

    /// Guards every sandboxed step with `guard` (the operator's `[limits]`).
    pub fn set_resource_guard(&mut self, guard: ResourceGuard) {
        self.guard = Some(guard);
    }

    pub fn state(&self) -> &RunState {
        &self.state
    }

    /// Appends `run.started` for a fresh run, with the run's task (`--prompt`) when it has one.
    pub fn start(&mut self, max_attempts: u32, prompt: Option<String>) -> Result<(), EngineError> {
        self.start_run(max_attempts, prompt, None, Vec::new())
    }

    /// Appends `run.started` for a fresh run: of an outcome pipeline with `outcome` (`cordon
    /// do`), else of its steps with the run's task (`--prompt`) when it has one.
    pub fn start_run(
        &mut self,
        max_attempts: u32,
        prompt: Option<String>,
        outcome: Option<String>,
        context: Vec<cordon_protocol::event::ContextDocument>,
    ) -> Result<(), EngineError> {
        let kind = if self.cx.pipeline.outcome.is_some() {
            cordon_protocol::event::RunKind::Outcome
        } else {
            cordon_protocol::event::RunKind::Steps
        };
        let event = Event::RunStarted {
            pipeline: self.cx.pipeline.name.clone(),
            workspace: self.cx.workspace.path().display().to_string(),
            attempt: Attempt::FIRST,
            max_attempts,
            prompt,
            kind,
            outcome,
            context,
        };
        match self
            .append(None, event)
            .and_then(|record| self.record_workspace(record.seq))
        {
            Ok(()) | Err(Failure::Stop) => Ok(()),
            Err(Failure::Error(e)) => Err(e),
        }
    }

    /// Appends `run.resumed` with the budget from now on.
    pub fn resume(&mut self, max_attempts: u32) -> Result<(), EngineError> {
        let event = Event::RunResumed {
            attempt: self.state.attempt,
            max_attempts,
        };
        match self.append(None, event) {
            Ok(_) | Err(Failure::Stop) => Ok(()),
            Err(Failure::Error(e)) => Err(e),
        }
    }

    /// Runs actions until the run finishes or an observer stops it.
    pub fn drive(&mut self) -> Result<Ending, EngineError> {
        if let Some(spec) = &self.cx.pipeline.outcome {
            return self.drive_outcome(spec);
        }
        loop {
            // The report's comments that are due (the start, a finished step) come first.
            match self.report_due() {
                Ok(()) => {}
                Err(Failure::Stop) => return Ok(Ending::Stopped),
                Err(Failure::Error(err)) => return Err(err),
            }
            let action = schedule::next(&self.state, self.cx.pipeline);
            let result = match action {
                Action::Done(outcome) => return Ok(Ending::Finished(outcome)),
                Action::RunStep {
                    step,
                    attempt,
                    cleanup,
                } => self.run_step(&step, attempt, cleanup),
                Action::Route { from, to } => {
                    let (to, retry) = match to {
                        Route::Goto { step, retry } => (step.to_string(), retry),
                        Route::Success => ("success".to_owned(), false),
                        Route::Failure => ("failure".to_owned(), false),
                    };
                    self.append(
                        Some(&from),
                        Event::Route {
                            from: from.clone(),
                            to,
                            retry,
                        },
                    )
                    .map(|_| ())
                }
                Action::Retry { to, attempt } => self.retry(&to, attempt),
                Action::Finish { outcome, reason } => self.finish(outcome, reason),
            };
            match result {
                Ok(()) => {}
                Err(Failure::Stop) => return Ok(Ending::Stopped),
                Err(Failure::Error(err)) => return Err(err),
            }
        }
    }

    /// Appends `event` (secrets scrubbed) and folds it. When other engines append to the same
    /// log (an outcome run's parallel tasks), the records between the last one folded and this
    /// one are folded and observed first, in log order — so the state is always a replay of a
    /// prefix of the log.
    fn append(&mut self, step: Option<&StepName>, event: Event) -> Result<Record, Failure> {
        let event = self.cx.secrets.scrub_event(&event);
        let record = self.cx.store.append(self.cx.run, step, &event)?;
        if let parallel::Role::Task { wake, stop } = &self.role {
            // A task's engine folds its own records only (it works on its own task); the
            // coordinator folds and observes every record.
            self.state.apply(&record);
            self.tasks.apply(&record);
            self.seen = record.seq;
            let _ = wake.send(parallel::Msg::Appended);
            if stop.load(std::sync::atomic::Ordering::SeqCst) {
                return Err(Failure::Stop);
            }
            return Ok(record);
        }
        if record.seq == self.seen + 1 {
            self.fold(&record)?;
        } else {
            self.catch_up()?;
        }
        Ok(record)
    }

    /// Folds and observes `record`, the next one of the log.
    fn fold(&mut self, record: &Record) -> Result<(), Failure> {
        self.state.apply(record);
        self.tasks.apply(record);
        self.seen = record.seq;
        match self.observer.record(record) {
            Control::Continue => Ok(()),
            Control::Stop => Err(Failure::Stop),
        }
    }

    /// Folds and observes every record appended since the last one folded (by this engine or by
    /// a parallel task's).
    fn catch_up(&mut self) -> Result<(), Failure> {
        let records = self.cx.store.events_after(self.cx.run, self.seen)?;
        let mut stopped = false;
        for record in &records {
            // Folded to the end even once stopped: the state must be the log's.
            if let Err(failure) = self.fold(record) {
                match failure {
                    Failure::Stop => stopped = true,
                    other => return Err(other),
                }
            }
        }
        if stopped {
            return Err(Failure::Stop);
        }
        Ok(())
    }

    /// Every `produces` and `artifact` path of the pipeline, or of one step.
    fn outputs<'p>(steps: impl Iterator<Item = &'p Step>) -> Vec<WsPath> {
        let mut paths = Vec::new();
        for step in steps {
            if let StepKind::Agent(agent) = &step.kind
                && let Some(artifact) = &agent.artifact
            {
                paths.extend(WsPath::new(artifact.as_str()).ok());
            }
            if let Some(sandbox) = step.kind.sandbox() {
                paths.extend(
                    sandbox
                        .produces
                        .iter()
                        .filter_map(|p| WsPath::new(p.as_str()).ok()),
                );
            }
        }
        paths.sort();
        paths.dedup();
        paths
    }

    /// Deletes declared outputs through the workspace view: a link itself, never its target; a
    /// directory is left (and said so in an `error` event), and does not stop the run.
    fn delete(&mut self, paths: &[WsPath]) -> Result<(), Failure> {
        for path in paths {
            match self.cx.workspace.remove_output(path) {
                Ok(None) => {}
                Ok(Some(note)) => {
                    self.append(
                        None,
                        Event::Error {
                            message: format!("a declared output was not deleted: {note}"),
                        },
                    )?;
                }
                Err(source) => {
                    return Err(EngineError::Workspace {
                        action: "delete",
                        path: PathBuf::from(path.to_string_lossy()),
                        source: std::io::Error::other(source.to_string()),
                    }
                    .into());
                }
            }
        }
        Ok(())
    }

    /// A retry: the failure and every `produces`/`artifact` file go into the feedback, then
    /// `attempt.retry` is logged; the files are deleted before the next step starts.
    fn retry(&mut self, to: &StepName, attempt: Attempt) -> Result<(), Failure> {
        let mut feedback = String::new();
        if let Some(failure) = &self.state.last_failure {
            feedback.push_str(&format!(
                "step `{}` failed in attempt {}: {}\n",
                failure.step, failure.attempt, failure.reason
            ));
            if !failure.tail.is_empty() {
                feedback.push_str(&format!(
                    "--- output tail of `{}` ---\n{}",
                    failure.step, failure.tail
                ));
                if !failure.tail.ends_with('\n') {
                    feedback.push('\n');
                }
            }
        }
        for path in Self::outputs(self.cx.pipeline.steps.iter()) {
            if let Some(text) = self.cx.workspace.feedback(&path) {
                feedback.push_str(&format!("--- {} ---\n{text}", path.to_string_lossy()));
                if !text.ends_with('\n') {
                    feedback.push('\n');
                }
            }
        }
        self.append(Some(to), Event::AttemptRetry { attempt, feedback })
            .map(|_| ())
    }

    fn run_step(
        &mut self,
        name: &StepName,
        attempt: Attempt,
        cleanup: Cleanup,
    ) -> Result<(), Failure> {
        let pipeline = self.cx.pipeline;
        let Some(step) = pipeline.step(name) else {
            return Ok(());
        };
        // A spent budget runs nothing more, not even the step's setup hook.
        self.check_budget()?;
        match cleanup {
            Cleanup::None => {}
            Cleanup::Hygiene => self.delete(&Self::outputs(pipeline.steps.iter()))?,
            Cleanup::Rerun => {
                self.delete(&Self::outputs(std::iter::once(step)))?;
                // Every tool call gets exactly one result: calls the interruption left open are
                // answered before the step restarts with a fresh conversation.
                self.answer_open_calls(
                    name,
                    "interrupted: cordon stopped before this call returned",
                )?;
            }
        }
        self.attempt(step, attempt)
    }

    /// One attempt of `step`, from its setup hook to its `step.finished`. `step` is one of the
    /// pipeline's, or an outcome run's phase step made for this attempt.
    fn attempt(&mut self, step: &Step, attempt: Attempt) -> Result<(), Failure> {
        let pipeline = self.cx.pipeline;
        let name = &step.name;
        // A fresh output budget per attempt (its setup hook included).
        self.budget = OutputBudget::new(pipeline.isolation.output_limit_bytes());
        if let Some(sandbox) = step.kind.sandbox()
            && let Some(setup) = &sandbox.setup
            && !self.state.setups.contains(name)
            && !self.setup(step, setup, attempt)?
        {
            return Ok(());
        }
        self.append(Some(name), Event::StepStarted { attempt })?;
        // A fresh monitor per attempt: only this attempt's samples can fail it.
        let monitor = match (&self.guard, step.kind.sandbox()) {
            (Some(guard), Some(_)) => Some(Rc::new(RefCell::new(Monitor::new(guard.limits)))),
            _ => None,
        };
        if let Some(monitor) = &monitor {
            // Before the session exists: the workspace only.
            self.observe(name, monitor, &Gauges::default())?;
        }
        let (mut verdict, exit_code, mut reason) = match &step.kind {
            StepKind::Command(command) => {
                let argv = argv(&command.command);
                let spec = self.spec(step, attempt, Purpose::Step);
                match self.session_command(name, &spec, &argv, monitor.as_ref())? {
                    Ok(result) => {
                        let verdict = if result.exit_code == 0 {
                            Verdict::Pass
                        } else {
                            Verdict::Fail
                        };
                        let reason = result.timed_out.then(|| {
                            format!(
                                "timed out after {} s",
                                spec.timeout.map_or(0, |t| t.as_secs())
                            )
                        });
                        (verdict, Some(result.exit_code), reason)
                    }
                    Err(message) => (Verdict::Fail, None, Some(message)),
                }
            }
            StepKind::Action(HostAction::Commit { message }) => {
                let message = message
                    .replace("{name}", &self.cx.pipeline.name)
                    .replace("{run_id}", &self.cx.run.to_string());
                let trailer = format!("Cordon-Run: {}", self.cx.run);
                // The run's last step: the plan's mark goes into its commit (one that cannot
                // be made is said when the run finishes).
                let before = if step.on_pass == Route::Success {
                    self.mark_plan().unwrap_or(None)
                } else {
                    None
                };
                let committed = self.commit(Some(name), &message, &trailer)?;
                if committed.0 != Verdict::Pass {
                    self.unmark_plan(before);
                }
                committed
            }
            StepKind::Action(HostAction::Deliver(deliver)) => self.deliver(name, deliver)?,
            StepKind::Agent(agent) => self.agent_step(step, agent, attempt, monitor.as_ref())?,
        };
        if let Some(exhausted) = monitor
            .as_ref()
            .and_then(|m| m.borrow().exhausted().map(str::to_owned))
        {
            verdict = Verdict::Fail;
            reason = Some(exhausted);
        }
        if verdict == Verdict::Pass
            && let Some(sandbox) = step.kind.sandbox()
        {
            let mut missing = Vec::new();
            let mut unusable = Vec::new();
            for declared in &sandbox.produces {
                let checked = WsPath::new(declared.as_str())
                    .map_err(|err| Missing::Unusable(format!("{declared}: {err}")))
                    .and_then(|path| self.cx.workspace.produced(&path));
                match checked {
                    Ok(()) => {}
                    Err(Missing::Absent) => missing.push(declared.to_string()),
                    Err(Missing::Unusable(why)) => unusable.push(why),
                }
            }
            let mut reasons = Vec::new();
            if !missing.is_empty() {
                reasons.push(format!("expected output missing: {}", missing.join(", ")));
            }
            if !unusable.is_empty() {
                reasons.push(format!("expected output unusable: {}", unusable.join("; ")));
            }
            if !reasons.is_empty() {
                verdict = Verdict::Fail;
                reason = Some(reasons.join("; "));
            }
        }
        // A spent budget takes no route: the attempt is left open, as a provider failure leaves
        // it, and a resume with a higher limit runs it again (a lane call refused with 429, or
        // a command stopped by the wall clock, is not the step's verdict).
        self.check_budget()?;
        let diff = self.diff_blob(pipeline.outcome.is_some())?;
        self.step_finished(name, attempt, (verdict, exit_code, reason), diff)
    }

    /// Appends the attempt's `step.finished` with its diff and the output it did not store.
    fn step_finished(
        &mut self,
        name: &StepName,
        attempt: Attempt,
        (verdict, exit_code, reason): (Verdict, Option<i32>, Option<String>),
        diff: Option<cordon_protocol::event::BlobId>,
    ) -> Result<(), Failure> {
        let omitted = self.budget.omitted();
        let record = self.append(
            Some(name),
            Event::StepFinished {
                attempt,
                verdict,
                exit_code,
                reason,
                diff,
                output_omitted_bytes: (omitted > 0).then_some(omitted),
            },
        )?;
        self.record_workspace(record.seq)
    }

    /// Stops the run when a budget limit is reached, appending `budget.exhausted` first.
    fn check_budget(&mut self) -> Result<(), Failure> {
        match self.cx.meter.exhausted() {
            None => Ok(()),
            Some(exhausted) => {
                self.append(None, exhausted.event())?;
                Err(EngineError::Budget(exhausted).into())
            }
        }
    }

    /// Answers every tool call of `step` still open in the log with `output` (interrupted), so
    /// each call has exactly one result.
    fn answer_open_calls(&mut self, step: &StepName, output: &str) -> Result<(), Failure> {
        let open: Vec<String> = self
            .state
            .open_tool_calls
            .iter()
            .filter(|(s, _)| s == step)
            .map(|(_, id)| id.clone())
            .collect();
        for id in open {
            self.append(
                Some(step),
                Event::ToolResult {
                    id,
                    ok: false,
                    interrupted: Some(true),
                    output: output.to_owned(),
                },
            )?;
        }
        Ok(())
    }

    /// Takes a sample for `step`'s attempt: the workspace now, with the session's `gauges`;
    /// appends what the monitor makes of it. `true` once the disk is exhausted.
    fn observe(
        &mut self,
        step: &StepName,
        monitor: &RefCell<Monitor>,
        gauges: &Gauges,
    ) -> Result<bool, Failure> {
        let Some(guard) = &self.guard else {
            return Ok(false);
        };
        let reading = guard.reading(self.cx.workspace.path(), gauges);
        let events = monitor.borrow_mut().observe(&reading, Instant::now());
        for event in events {
            self.append(Some(step), event)?;
        }
        Ok(monitor.borrow().exhausted().is_some())
    }

    /// An agent step attempt: its session and the driver's loop, which decides the verdict.
    fn agent_step(
        &mut self,
        step: &Step,
        agent: &cordon_pipeline::AgentStep,
        attempt: Attempt,
        monitor: Option<&Rc<RefCell<Monitor>>>,
    ) -> Result<(Verdict, Option<i32>, Option<String>), Failure> {
        // The driver is taken out of the context while the loop borrows the engine as its
        // journal, and put back whatever happens.
        let Some(driver) = self.cx.agents.take() else {
            return Ok((
                Verdict::Fail,
                None,
                Some("agent steps cannot run without an agent driver".to_owned()),
            ));
        };
        // An outcome phase's own tools live outside the engine while the loop borrows it.
        let phase = self.phase.take();
        let custom = phase.as_ref().and_then(outcome::PhaseRun::custom);
        let result = self.agent_loop(driver, step, agent, attempt, monitor, custom);
        self.cx.agents = Some(driver);
        let result = result?;
        let judged = match &phase {
            Some(phase) => phase.judge(result),
            None => result,
        };
        self.phase = phase;
        match judged {
            Ok(AgentVerdict {
                verdict, reason, ..
            }) => Ok((verdict, None, reason.map(|r| self.cx.secrets.scrub(&r)))),
            Err(message) => Ok((Verdict::Fail, None, Some(message))),
        }
    }

    /// Opens the attempt's session and runs the driver in it. The inner `Err` is a session
    /// that could not open (the attempt fails); a driver error stops the run, resumable —
    /// unless the disk was exhausted, which ends the loop and fails the attempt.
    fn agent_loop(
        &mut self,
        driver: &mut dyn AgentDriver,
        step: &Step,
        agent: &cordon_pipeline::AgentStep,
        attempt: Attempt,
        monitor: Option<&Rc<RefCell<Monitor>>>,
        custom: Option<&RefCell<dyn cordon_agent::CustomTools>>,
    ) -> Result<Result<AgentVerdict, String>, Failure> {
        let spec = self.spec(step, attempt, Purpose::Step);
        let mut session = match self.cx.executor.open(&spec) {
            Ok(session) => session,
            Err(ExecError::Refused(refusal)) => return Err(EngineError::Refused(refusal).into()),
            Err(ExecError::Failed(message)) => return Ok(Err(message)),
        };
        let opened = self.append(
            Some(&step.name),
            Event::SandboxSession {
                step: step.name.clone(),
                attempt,
                network: spec.network.to_string(),
                image: recorded_image(&spec),
            },
        );
        if let Err(failure) = opened {
            session.close();
            return Err(failure);
        }
        // An outcome phase's message says everything it needs; the run's retry feedback is a
        // steps run's.
        let feedback = if self.cx.pipeline.outcome.is_some() {
            Vec::new()
        } else {
            self.state.feedback.clone()
        };
        let workspace = self.cx.workspace.path().to_path_buf();
        let task = AgentTask {
            pipeline: self.cx.pipeline,
            step,
            agent,
            attempt,
            workspace: &workspace,
            feedback: &feedback,
            custom,
            secrets: self.cx.secrets,
        };
        // Every tool process runs watched when the run has a guard.
        if let (Some(guard), Some(monitor)) = (&self.guard, monitor) {
            session = Box::new(GuardedSession::new(
                session,
                Rc::clone(monitor),
                guard.clone(),
                workspace.clone(),
            ));
        }
        let side = session.side_events();
        let mut journal = EngineJournal {
            engine: self,
            step: step.name.clone(),
            stopped: None,
            monitor: monitor.cloned(),
        };
        let result = driver.run(&task, session.as_mut(), &mut journal);
        let stopped = journal.stopped;
        if let Some(failure) = stopped {
            session.close();
            return Err(failure);
        }
        self.append_side(&step.name, side.as_ref())?;
        let exhausted = match monitor {
            Some(monitor) => {
                // The end sample, while the session's tmpfs still exists.
                let gauges = session.gauges();
                let ended = self.observe(&step.name, monitor, &gauges);
                session.close();
                ended?;
                monitor.borrow().exhausted().map(str::to_owned)
            }
            None => {
                session.close();
                None
            }
        };
        // The rest, coalesced records and tunnel closes included (the listener has stopped).
        self.finish_side(&step.name, side.as_ref())?;
        if let Some(reason) = exhausted {
            // The loop ended on the exhausted disk (a refused call, or its own end): the
            // attempt fails with the reason, and every call it left open gets its result.
            self.answer_open_calls(&step.name, "stopped: the disk was exhausted")?;
            return Ok(Ok(AgentVerdict::fail(reason)));
        }
        match result {
            Ok(verdict) => Ok(Ok(verdict)),
            Err(err) => Err(EngineError::Agent(err).into()),
        }
    }

    /// Runs the step's setup hook unless its stamp is cached. `false` when it failed (the run
    /// is then finished in failure).
    fn setup(
        &mut self,
        step: &Step,
        hook: &cordon_pipeline::Setup,
        attempt: Attempt,
    ) -> Result<bool, Failure> {
        let image = step
            .kind
            .sandbox()
            .and_then(|s| s.image.as_ref())
            .and_then(|r| self.cx.images.get(r))
            .map(|i| i.recorded.as_str());
        let stamp = setup::stamp(hook, self.cx.workspace, image);
        if !self.cx.refresh && self.cx.store.has_stamp(&stamp)? {
            self.append(Some(&step.name), Event::SetupCached { stamp })?;
            return Ok(true);
        }
        let mut spec = self.spec(step, attempt, Purpose::Setup);
        spec.network = hook.network.clone();
        spec.grants = self.grants_for(&step.name, &hook.network);
        let argv = argv(&hook.command);
        let started = std::time::Instant::now();
        // Guarded like the step itself, with a monitor of its own.
        let monitor = self
            .guard
            .as_ref()
            .map(|guard| Rc::new(RefCell::new(Monitor::new(guard.limits))));
        let ran = self.session_command(&step.name, &spec, &argv, monitor.as_ref())?;
        let exhausted = monitor.and_then(|m| m.borrow().exhausted().map(str::to_owned));
        let name = &step.name;
        // The exit code logged, and why the run fails (`None`: the setup passed).
        let (code, failure) = match (ran, exhausted) {
            (ran, Some(reason)) => (
                ran.map_or(-1, |r| r.exit_code),
                Some(format!("the setup of `{name}` failed: {reason}")),
            ),
            (Ok(result), None) if result.exit_code == 0 => (0, None),
            (Ok(result), None) => (
                result.exit_code,
                Some(format!(
                    "the setup of `{name}` failed with status {}; its output is in the log",
                    result.exit_code
                )),
            ),
            (Err(message), None) => (
                -1,
                Some(format!("the setup of `{name}` could not run: {message}")),
            ),
        };
        let duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        // The stamp is stored before `setup.ran` is logged: a crash in between finds the stamp
        // on resume and logs `setup.cached`, never a second, different outcome.
        if failure.is_none() {
            self.cx.store.put_stamp(&stamp)?;
        }
        self.append(
            Some(&step.name),
            Event::SetupRan {
                stamp: stamp.clone(),
                exit_code: code,
                duration_ms,
            },
        )?;
        let Some(mut reason) = failure else {
            return Ok(true);
        };
        if self.budget.omitted() > 0 {
            reason.push_str(&format!(
                " ({} bytes of output past the output limit were not stored)",
                self.budget.omitted()
            ));
        }
        self.append(
            None,
            Event::RunFinished {
                outcome: Outcome::Failure,
                reason,
            },
        )?;
        Ok(false)
    }

    /// The run's grants for a session with `network`: all of them when it takes grants.
    /// The grants a session of `step` with `network` gets: when the network takes grants, the
    /// run's — or, for an outcome run's phase step, only its task's.
    fn grants_for(&self, step: &StepName, network: &cordon_pipeline::Network) -> Vec<String> {
        if let Some((task, _)) = step.task() {
            return self.tasks.grants_for(task, network);
        }
        match network {
            cordon_pipeline::Network::Allowlist(list) if list.grants => self.state.grants.clone(),
            cordon_pipeline::Network::Allowlist(_)
            | cordon_pipeline::Network::None
            | cordon_pipeline::Network::Open => Vec::new(),
        }
    }

    fn spec(&self, step: &Step, attempt: Attempt, purpose: Purpose) -> SessionSpec {
        let isolation = &self.cx.pipeline.isolation;
        let mut hide: Vec<PathBuf> = isolation
            .hide
            .iter()
            .map(|p| PathBuf::from(p.as_str()))
            .collect();
        hide.extend(self.cx.workspace.env_files());
        let (network, env, timeout) = match step.kind.sandbox() {
            Some(sandbox) => {
                let mut env: Vec<(String, String)> = sandbox
                    .env
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.clone()))
                    .collect();
                env.extend(self.cx.secrets.env_for(&sandbox.secrets));
                (
                    sandbox.network.clone(),
                    env,
                    sandbox
                        .timeout
                        .map(|t| std::time::Duration::from_secs(t.seconds())),
                )
            }
            None => (cordon_pipeline::Network::None, Vec::new(), None),
        };
        // The wall clock left bounds every command (a step, a hook, each tool call).
        let timeout = match (timeout, self.cx.meter.wall_clock_left()) {
            (Some(own), Some(left)) => Some(own.min(left)),
            (own, left) => own.or(left),
        };
        let grants = self.grants_for(&step.name, &network);
        // The lane belongs to the step's own sessions, never to its setup hook.
        let model_lane = purpose == Purpose::Step
            && matches!(&step.kind, StepKind::Command(command) if command.model_lane);
        // In an outcome run only execute (and verify, whose changes are checked) may write: the
        // decompose step, the planner, the critic and the validator read (DESIGN §13) — so what
        // is committed is what execute left and the critic reviewed.
        let read_only = self.cx.pipeline.outcome.is_some()
            && match step.name.task() {
                Some((_, phase)) => !matches!(phase, "execute" | "verify"),
                None => purpose == Purpose::Step,
            };
        // A step's HTTP MCP servers are dialled on the host, through its proxy.
        let host_proxy = purpose == Purpose::Step
            && matches!(&step.kind, StepKind::Agent(agent) if agent.mcp.iter().any(|server| {
                matches!(server.transport, cordon_pipeline::McpTransport::Http { .. })
            }));
        SessionSpec {
            step: step.name.clone(),
            attempt,
            purpose,
            network,
            grants,
            model_lane,
            host_proxy,
            env,
            timeout,
            hide,
            read_only: isolation
                .read_only
                .iter()
                .filter_map(|p| match p {
                    cordon_pipeline::HostPath::Absolute(path) => Some(PathBuf::from(path)),
                    cordon_pipeline::HostPath::Home(rest) => {
                        std::env::var_os("HOME").map(|h| PathBuf::from(h).join(rest))
                    }
                })
                .collect(),
            protect: self
                .cx
                .tooling
                .iter()
                .map(|p| PathBuf::from(p.to_string_lossy()))
                .collect(),
            tmp_size: isolation.tmp_size.map(|s| s.bytes()),
            caps: cordon_sandbox::cgroup::Caps {
                memory: isolation.memory.map(|m| m.bytes()),
                pids: isolation.pids.map(std::num::NonZeroU64::get),
                cpus: isolation.cpus.map(cordon_pipeline::Cpus::as_f64),
            },
            // Never in an outcome run (validation refuses it too): cordon commits each task
            // itself, and a phase that moved `HEAD` would hide its change from the critic.
            allow_git_mutations: isolation.allow_git_mutations
                && self.cx.pipeline.outcome.is_none(),
            workspace_read_only: read_only,
            image: step
                .kind
                .sandbox()
                .and_then(|s| s.image.as_ref())
                .map(|reference| {
                    self.cx.images.get(reference).cloned().ok_or_else(|| {
                        format!("the image `{reference}` was not resolved when the run started")
                    })
                }),
        }
    }

    /// Appends the events a session produced on its own (egress audit records) since the last
    /// call.
    fn append_side(
        &mut self,
        step: &StepName,
        side: Option<&crate::side::SideEvents>,
    ) -> Result<(), Failure> {
        for event in side.map(crate::side::SideEvents::drain).unwrap_or_default() {
            self.append(Some(step), event)?;
        }
        Ok(())
    }

    /// Appends everything the session's queue still holds, once the session has ended.
    fn finish_side(
        &mut self,
        step: &StepName,
        side: Option<&crate::side::SideEvents>,
    ) -> Result<(), Failure> {
        for event in side
            .map(crate::side::SideEvents::finish)
            .unwrap_or_default()
        {
            self.append(Some(step), event)?;
        }
        Ok(())
    }

    /// Opens a session, runs one command with its output logged line by line, closes it.
    /// With a `monitor` the command is sampled while it runs (and stopped when the disk is
    /// exhausted), and once more after it ended. The inner `Err` is a sandbox failure that
    /// fails the attempt (not the run).
    fn session_command(
        &mut self,
        step: &StepName,
        spec: &SessionSpec,
        argv: &[String],
        monitor: Option<&Rc<RefCell<Monitor>>>,
    ) -> Result<Result<crate::CommandResult, String>, Failure> {
        let mut session: Box<dyn StepSession> = match self.cx.executor.open(spec) {
            Ok(session) => session,
            Err(ExecError::Refused(refusal)) => return Err(EngineError::Refused(refusal).into()),
            Err(ExecError::Failed(message)) => return Ok(Err(message)),
        };
        if let Err(failure) = self.append(
            Some(step),
            Event::SandboxSession {
                step: step.clone(),
                attempt: spec.attempt,
                network: spec.network.to_string(),
                image: recorded_image(spec),
            },
        ) {
            session.close();
            return Err(failure);
        }
        let side = session.side_events();
        let every = self.guard.as_ref().map(|g| g.every);
        // Output and the watch's samples both append through the engine; they take turns
        // (the session calls one at a time), so they share it through a cell.
        let sink = RefCell::new(CommandSink {
            engine: self,
            step,
            side: side.as_ref(),
            buffers: [LineBuffer::default(), LineBuffer::default()],
            pending: None,
        });
        let result = {
            let mut on_output =
                |stream: OutputStream, bytes: &[u8]| sink.borrow_mut().output(stream, bytes);
            match (monitor, every) {
                (Some(monitor), Some(every)) => {
                    let mut tick = |gauges: &Gauges| sink.borrow_mut().tick(monitor, gauges);
                    let watch = Watch {
                        every,
                        tick: &mut tick,
                    };
                    session.run_watched(argv, watch, &mut on_output)
                }
                _ => session.run(argv, &mut on_output),
            }
        };
        let CommandSink {
            mut buffers,
            pending,
            ..
        } = sink.into_inner();
        if let Some(failure) = pending {
            session.close();
            return Err(failure);
        }
        if let Some(monitor) = monitor {
            // The end sample, while the session's tmpfs still exists.
            let gauges = session.gauges();
            if let Err(failure) = self.observe(step, monitor, &gauges) {
                session.close();
                return Err(failure);
            }
        }
        session.close();
        // The rest, coalesced records and tunnel closes included (the listener has stopped).
        self.finish_side(step, side.as_ref())?;
        for (index, stream) in [OutputStream::Stdout, OutputStream::Stderr]
            .into_iter()
            .enumerate()
        {
            if let Some(text) = buffers[index].finish()
                && self.budget.take(text.len())
            {
                self.append(Some(step), Event::StepOutput { stream, text })?;
            }
        }
        match result {
            Ok(result) => {
                let digest = crate::setup::hex(&Sha256::digest(argv.join("\0").as_bytes()));
                self.append(
                    Some(step),
                    Event::SandboxExec {
                        argv_digest: digest,
                        exit_code: result.exit_code,
                        duration_ms: u64::try_from(result.duration.as_millis()).unwrap_or(u64::MAX),
                        timed_out: result.timed_out,
                    },
                )?;
                Ok(Ok(result))
            }
            Err(ExecError::Refused(refusal)) => Err(EngineError::Refused(refusal).into()),
            Err(ExecError::Failed(message)) => Ok(Err(message)),
        }
    }

    /// Commits the work tree with `message` and the `trailer` lines, logging `commit.created`
    /// for `step` (`None`: the run's own).
    fn commit(
        &mut self,
        step: Option<&StepName>,
        message: &str,
        trailer: &str,
    ) -> Result<(Verdict, Option<i32>, Option<String>), Failure> {
        self.commit_of(step, message, trailer, None)
    }

    /// [`Engine::commit`] of the work tree, or (`accepted`: a parallel outcome run) of the tree
    /// of the run's accepted commit, whatever else the work tree holds.
    fn commit_of(
        &mut self,
        step: Option<&StepName>,
        message: &str,
        trailer: &str,
        accepted: Option<cordon_git::ObjectId>,
    ) -> Result<(Verdict, Option<i32>, Option<String>), Failure> {
        // Host actions check the lease first (DESIGN §18): a stale holder commits nothing.
        self.cx.store.check_held(self.cx.run)?;
        let Some(git) = self.cx.workspace.git() else {
            return Ok((
                Verdict::Fail,
                None,
                Some(
                    "committing needs the workspace's git; run cordon in a git work tree, or \
                     drop the commit"
                        .to_owned(),
                ),
            ));
        };
        let mut exclude = self.cx.tooling.clone();
        exclude.extend(self.cx.pipeline.steps.iter().filter_map(|s| {
            match &s.kind {
                StepKind::Agent(a) => a
                    .artifact
                    .as_ref()
                    .and_then(|p| WsPath::new(p.as_str()).ok()),
                StepKind::Command(_) | StepKind::Action(_) => None,
            }
        }));
        // `HEAD` moves: a diff taken against the old one no longer holds.
        self.last_diff = None;
        let committed = match accepted {
            Some(accepted) => git.commit_accepted(accepted, message, trailer),
            None => git.commit(
                self.cx.workspace.view(),
                message,
                trailer,
                &exclude,
                &mut self.cache,
            ),
        };
        match committed {
            Ok(Some(committed)) => {
                if self.state.commit.as_deref() != Some(committed.sha.as_str()) {
                    self.append(
                        step,
                        Event::CommitCreated {
                            sha: committed.sha,
                            files: committed.files,
                            files_omitted: (committed.files_omitted > 0)
                                .then_some(committed.files_omitted),
                        },
                    )?;
                }
                Ok((Verdict::Pass, None, None))
            }
            Ok(None) => Ok((Verdict::Pass, None, Some("nothing to commit".to_owned()))),
            Err(err) => Ok((
                Verdict::Fail,
                None,
                Some(self.cx.secrets.scrub(&crate::error_chain(&err))),
            )),
        }
    }

    /// The workspace's diff against `HEAD` after an attempt, stored as a blob (secrets
    /// scrubbed); the blob of the last diff when the work tree is the same.
    /// With `digest` (an outcome's phase steps) the patch ends with the line `# cordon: tree
    /// <sha256>` over every changed path with its new mode and blob id — patches of binary or
    /// capped changes name them without their content, so only this says two work trees are the
    /// same (verify compares it with execute's).
    fn diff_blob(
        &mut self,
        digest: bool,
    ) -> Result<Option<cordon_protocol::event::BlobId>, Failure> {
        let Some(git) = self.cx.workspace.git() else {
            return Ok(None);
        };
        let diff = match git.diff(
            self.cx.workspace.view(),
            &mut self.cache,
            cordon_git::PatchLimits::default(),
        ) {
            Ok(diff) => diff,
            Err(err) => {
                self.append(
                    None,
                    Event::Error {
                        message: format!(
                            "the attempt's diff could not be taken: {}",
                            crate::error_chain(&err)
                        ),
                    },
                )?;
                return Ok(None);
            }
        };
        if let Some((last, blob)) = &self.last_diff
            && *last == diff.changes
            && diff.skipped.is_empty()
        {
            return Ok(*blob);
        }
        let mut patch = diff.patch;
        if digest && (!diff.changes.is_empty() || !diff.skipped.is_empty()) {
            patch.extend_from_slice(
                format!(
                    "# cordon: tree {}\n",
                    tree_digest(&diff.changes, &diff.skipped)
                )
                .as_bytes(),
            );
        }
        let blob = if patch.is_empty() {
            None
        } else {
            Some(
                self.cx
                    .store
                    .put_blob(self.cx.run, &self.cx.secrets.scrub_bytes(&patch))?,
            )
        };
        self.last_diff = Some((diff.changes, blob));
        Ok(blob)
    }
}

/// Where a running command's output and samples go: appended as the engine's own events, the
/// first failure to append kept (the command is then stopped and its rest ignored).
struct CommandSink<'e, 'a> {
    engine: &'e mut Engine<'a>,
    step: &'e StepName,
    side: Option<&'e crate::side::SideEvents>,
    buffers: [LineBuffer; 2],
    pending: Option<Failure>,
}

impl CommandSink<'_, '_> {
    fn output(&mut self, stream: OutputStream, bytes: &[u8]) {
        if self.pending.is_some() {
            return;
        }
        // Egress decisions made so far go in before the output that follows them.
        if let Err(failure) = self.engine.append_side(self.step, self.side) {
            self.pending = Some(failure);
            return;
        }
        let index = usize::from(stream == OutputStream::Stderr);
        if let Some(text) = self.buffers[index].push(bytes)
            && self.engine.budget.take(text.len())
            && let Err(failure) = self
                .engine
                .append(Some(self.step), Event::StepOutput { stream, text })
        {
            self.pending = Some(failure);
        }
    }

    fn tick(&mut self, monitor: &RefCell<Monitor>, gauges: &Gauges) -> Tick {
        if self.pending.is_some() {
            return Tick::Stop;
        }
        let observed = self
            .engine
            .append_side(self.step, self.side)
            .and_then(|()| self.engine.observe(self.step, monitor, gauges));
        match observed {
            Ok(false) => Tick::Continue,
            Ok(true) => Tick::Stop,
            Err(failure) => {
                self.pending = Some(failure);
                Tick::Stop
            }
        }
    }
}

/// The agent loop's journal: events appended (scrubbed, folded, observed) as the engine's own,
/// blobs stored scrubbed.
struct EngineJournal<'e, 'a> {
    engine: &'e mut Engine<'a>,
    step: StepName,
    /// Why appending stopped (an observer stopped the run, or the store failed): the step ends
    /// with it, as if the process died there.
    stopped: Option<Failure>,
    /// The attempt's guardrail: once the disk is exhausted, no further model call or tool call
    /// is started (the loop ends and the engine fails the attempt).
    monitor: Option<Rc<RefCell<Monitor>>>,
}

impl EngineJournal<'_, '_> {
    /// Keeps `failure` (the step ends with it) and returns the error the agent loop gets.
    fn stop(&mut self, failure: Failure) -> cordon_agent::JournalError {
        let err = match &failure {
            Failure::Stop => stopped_error(),
            Failure::Error(err) => cordon_agent::JournalError {
                message: err.to_string(),
                source: None,
            },
        };
        self.stopped = Some(failure);
        err
    }
}

impl cordon_agent::Journal for EngineJournal<'_, '_> {
    fn event(&mut self, event: Event) -> Result<(), cordon_agent::JournalError> {
        if self.stopped.is_some() {
            return Err(stopped_error());
        }
        if matches!(event, Event::LlmRequest { .. } | Event::ToolCall { .. })
            && let Some(monitor) = &self.monitor
            && let Some(reason) = monitor.borrow().exhausted()
        {
            return Err(cordon_agent::JournalError {
                message: reason.to_owned(),
                source: None,
            });
        }
        // No model call is made once the budget is spent: the run stops before it.
        if matches!(event, Event::LlmRequest { .. })
            && let Err(failure) = self.engine.check_budget()
        {
            return Err(self.stop(failure));
        }
        if let Event::LlmResponse {
            input_tokens,
            output_tokens,
            source: cordon_protocol::event::LlmSource::Agent,
            ..
        } = &event
        {
            self.engine.cx.meter.record(*input_tokens, *output_tokens);
        }
        // In an outcome run a grant or refusal belongs to the step's task (DESIGN §18).
        let event = match (event, self.step.task()) {
            (
                Event::PolicyGrant {
                    domain,
                    reason,
                    task: None,
                },
                Some((task, _)),
            ) => Event::PolicyGrant {
                domain,
                reason,
                task: Some(task.to_owned()),
            },
            (
                Event::PolicyRefuse {
                    domain,
                    reason,
                    task: None,
                },
                Some((task, _)),
            ) => Event::PolicyRefuse {
                domain,
                reason,
                task: Some(task.to_owned()),
            },
            (event, _) => event,
        };
        match self.engine.append(Some(&self.step), event) {
            Ok(_) => Ok(()),
            Err(failure) => Err(self.stop(failure)),
        }
    }

    fn blob(
        &mut self,
        bytes: &[u8],
    ) -> Result<cordon_protocol::event::BlobId, cordon_agent::JournalError> {
        let bytes = if self.engine.budget.take(bytes.len()) {
            self.engine.cx.secrets.scrub_bytes(bytes)
        } else {
            format!(
                "[cordon: {} bytes of output not stored: the step's output limit was reached]",
                bytes.len()
            )
            .into_bytes()
        };
        self.engine
            .cx
            .store
            .put_blob(self.engine.cx.run, &bytes)
            .map_err(|err| cordon_agent::JournalError {
                message: err.to_string(),
                source: Some(Box::new(err)),
            })
    }

    fn scrub(&self, text: &str) -> String {
        self.engine.cx.secrets.scrub(text)
    }
}

fn stopped_error() -> cordon_agent::JournalError {
    cordon_agent::JournalError {
        message: "the run was stopped".to_owned(),
        source: None,
    }
}

/// A digest of a work tree's changes against `HEAD`: every changed path with its new mode and
/// blob id (or its deletion).
/// Entries the snapshot skipped (a file grown sparse or huge, one turned into a FIFO) count
/// with their path and why, so a verify that makes a tracked file unreadable changes the digest.
fn tree_digest(
    changes: &[(Vec<u8>, cordon_git::Change)],
    skipped: &[cordon_git::Skipped],
) -> String {
    let mut hash = Sha256::new();
    for entry in skipped {
        let line = format!("skipped {entry}\n");
        hash.update((line.len() as u64).to_le_bytes());
        hash.update(line.as_bytes());
    }
    for (path, change) in changes {
        hash.update((path.len() as u64).to_le_bytes());
        hash.update(path);
        match change {
            cordon_git::Change::Added(new) | cordon_git::Change::Modified { new, .. } => {
                hash.update(format!(" {:?} {}\n", new.mode, new.id).as_bytes());
            }
            cordon_git::Change::Deleted(_) => hash.update(b" deleted\n"),
        }
    }
    crate::setup::hex(&hash.finalize())
}

/// The tree digest line [`Engine::diff_blob`] ends a phase step's patch with, if any.
pub(crate) fn digest_line(patch: &[u8]) -> Option<&[u8]> {
    let text = patch.strip_suffix(b"\n")?;
    let start = text.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
    text[start..].strip_prefix(b"# cordon: tree ")
}

/// `sh -c TEXT` for a string, the list itself otherwise.
fn argv(spec: &CommandSpec) -> Vec<String> {
    match spec {
        CommandSpec::Shell(text) => vec!["/bin/sh".to_owned(), "-c".to_owned(), text.clone()],
        CommandSpec::Argv(argv) => argv.clone(),
    }
}

/// What `sandbox.session{image}` records for a session opened from `spec`.
fn recorded_image(spec: &SessionSpec) -> Option<String> {
    match &spec.image {
        Some(Ok(image)) => Some(image.recorded.clone()),
        _ => None,
    }
}
