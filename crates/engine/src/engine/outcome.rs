//! Driving an outcome run (DESIGN §13): the outcome scheduler's actions carried out with the
//! same attempt machinery as a steps run, so every phase is a step execution (`decompose`,
//! `<task>.<phase>`) with its session, events, egress attribution, console, transcript and diff.

use std::cell::RefCell;

use cordon_agent::CustomTools;
use cordon_pipeline::{
    AgentStep, CommandSpec, CommandStep, Network, OutcomeCommit, OutcomeSpec, Route, Sandboxed,
    Step, StepKind, Timeout,
};
use cordon_protocol::event::{Outcome, OutputStream, TaskPhase, Verdict};
use cordon_protocol::{Attempt, Event, StepName};

use super::{Ending, Engine, Failure, argv};
use crate::EngineError;
use crate::agent::AgentVerdict;
use crate::executor::Purpose;
use crate::outcome::message::{self, Extra};
use crate::outcome::schedule::{self, Next, REPLAN};
use crate::outcome::state::{DECOMPOSE, DELIVER};
use crate::outcome::submit::{SubmitPlan, SubmitTasks};
use crate::output::OutputBudget;

/// The timeout of a verify command a model gave (a task's or a plan's), which has none of its
/// own; the run's wall clock bounds it further.
const MODEL_VERIFY_TIMEOUT: u64 = 600;
/// What all of one verify attempt's model-given commands may take together.
const MODEL_VERIFY_TOTAL: std::time::Duration = std::time::Duration::from_secs(1800);
/// The most bytes of a phase's final message kept as its findings (scrutinize, validate).
const MAX_FINDINGS: usize = 8 << 10;

/// Which phase an attempt is, and the engine's own tools it gets.
pub(crate) struct PhaseRun {
    kind: PhaseKind,
    tasks: Option<RefCell<SubmitTasks>>,
    plan: Option<RefCell<SubmitPlan>>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum PhaseKind {
    Decompose,
    Plan,
    Execute,
    Scrutinize,
    Validate,
}

impl PhaseRun {
    /// The tools the phase's agent gets besides its agent file's.
    pub(crate) fn custom(&self) -> Option<&RefCell<dyn CustomTools>> {
        match (&self.tasks, &self.plan) {
            (Some(tasks), _) => Some(tasks as &RefCell<dyn CustomTools>),
            (None, Some(plan)) => Some(plan as &RefCell<dyn CustomTools>),
            (None, None) => None,
        }
    }

    /// The phase's verdict from how its agent ended: decompose and plan pass once something
    /// was accepted; scrutinize keeps its report as the findings; validate reads
    /// `VERDICT: ACCEPT | REVISE | REPLAN`.
    pub(crate) fn judge(
        &self,
        result: Result<AgentVerdict, String>,
    ) -> Result<AgentVerdict, String> {
        let ended = match &result {
            Ok(verdict) if verdict.verdict == Verdict::Fail => verdict.reason.clone(),
            Ok(_) => None,
            Err(message) => Some(message.clone()),
        };
        let text = result
            .as_ref()
            .ok()
            .and_then(|v| v.text.clone())
            .unwrap_or_default();
        let submitted = |tool: &str, accepted: bool| {
            if accepted {
                Ok(AgentVerdict::pass())
            } else {
                let mut reason = format!("it ended without an accepted `{tool}` call");
                if let Some(ended) = &ended {
                    reason.push_str(&format!(" ({ended})"));
                }
                Ok(AgentVerdict::fail(reason))
            }
        };
        match self.kind {
            PhaseKind::Decompose => submitted(
                "submit_tasks",
                self.tasks
                    .as_ref()
                    .is_some_and(|t| t.borrow().accepted.is_some()),
            ),
            PhaseKind::Plan => submitted(
                "submit_plan",
                self.plan
                    .as_ref()
                    .is_some_and(|p| p.borrow().accepted.is_some()),
            ),
            PhaseKind::Execute => result,
            PhaseKind::Scrutinize => match ended {
                Some(_) => result,
                None => Ok(AgentVerdict {
                    reason: Some(bounded(&text)),
                    ..AgentVerdict::pass()
                }),
            },
            PhaseKind::Validate => {
                if let Some(ended) = ended {
                    return Ok(AgentVerdict::fail(format!(
                        "REVISE: the validator did not finish: {ended}"
                    )));
                }
                let findings = bounded(&text);
                Ok(match cordon_agent::verdict::last_keyword(&text) {
                    Some("ACCEPT") => AgentVerdict::pass(),
                    Some("REPLAN") => AgentVerdict::fail(format!("{REPLAN}: {findings}")),
                    Some("REVISE") => AgentVerdict::fail(format!("REVISE: {findings}")),
                    Some(other) => AgentVerdict::fail(format!(
                        "REVISE: the validator's last verdict line is `VERDICT: {}`, which is \
                         not ACCEPT, REVISE or REPLAN: {findings}",
                        cordon_protocol::text::escape_line(other)
                    )),
                    None => AgentVerdict::fail(format!(
                        "REVISE: the validator ended without a `VERDICT: ACCEPT|REVISE|REPLAN` \
                         line: {findings}"
                    )),
                })
            }
        }
    }
}

/// `text` cut to [`MAX_FINDINGS`] bytes at a character boundary.
fn bounded(text: &str) -> String {
    let text = text.trim();
    if text.len() <= MAX_FINDINGS {
        return text.to_owned();
    }
    let mut cut = MAX_FINDINGS;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    format!(
        "{}\n[cordon: {} more bytes]",
        &text[..cut],
        text.len() - cut
    )
}

impl Engine<'_> {
    /// Runs an outcome run's actions until it finishes or an observer stops it; with `parallel`
    /// above 1, `parallel.rs` runs the tasks' phases on threads of their own.
    pub(super) fn drive_outcome(&mut self, spec: &OutcomeSpec) -> Result<Ending, EngineError> {
        if spec.parallel.get() > 1 {
            return self.drive_parallel(spec);
        }
        loop {
            if let Some(outcome) = self.state.outcome {
                return Ok(Ending::Finished(outcome));
            }
            let next = schedule::next(&self.tasks, spec, self.state.max_attempts.max(1));
            let result = self.report_due().and_then(|()| match next {
                Next::Phase {
                    task,
                    phase,
                    attempt,
                    rerun,
                } => self.phase(spec, &task, phase, attempt, rerun),
                other => self.act(spec, other),
            });
            match result {
                Ok(()) => {}
                Err(Failure::Stop) => return Ok(Ending::Stopped),
                Err(Failure::Error(err)) => return Err(err),
            }
        }
    }

    /// Carries out an action the coordinator takes itself (everything but a task's phase).
    pub(super) fn act(&mut self, spec: &OutcomeSpec, next: Next) -> Result<(), Failure> {
        match next {
            Next::Decompose { attempt, rerun } => self.decompose(spec, attempt, rerun),
            Next::Phase {
                task,
                phase,
                attempt,
                rerun,
            } => self.phase(spec, &task, phase, attempt, rerun),
            Next::Move {
                task,
                state,
                revision,
                replan,
                reason,
            } => self
                .append(
                    None,
                    Event::TaskState {
                        task,
                        state,
                        revision,
                        replan,
                        reason,
                    },
                )
                .map(|_| ()),
            Next::Accept { task } => self.accept(spec, &task),
            Next::CommitEnd => self.commit_end(),
            Next::Deliver => self.deliver_outcome(spec),
            Next::Finish { outcome, reason } => {
                self.finish(outcome, reason)?;
                self.remove_worktrees();
                Ok(())
            }
            Next::Wait => Ok(()),
        }
    }

    fn decompose(
        &mut self,
        spec: &OutcomeSpec,
        attempt: Attempt,
        rerun: bool,
    ) -> Result<(), Failure> {
        let Ok(name) = StepName::parse(DECOMPOSE) else {
            return Ok(());
        };
        let outcome = self.tasks.outcome.clone().unwrap_or_default();
        let previous = self.tasks.decompose.last_reason.clone();
        let text = message::decompose(&outcome, spec, previous.as_deref());
        let step = phase_step(name, &spec.decompose, text);
        let run = PhaseRun {
            kind: PhaseKind::Decompose,
            tasks: Some(RefCell::new(SubmitTasks {
                max_tasks: spec.max_tasks,
                accepted: None,
            })),
            plan: None,
        };
        self.run_phase(&step, attempt, rerun, run)
    }

    pub(super) fn phase(
        &mut self,
        spec: &OutcomeSpec,
        task: &str,
        phase: &'static str,
        attempt: Attempt,
        rerun: bool,
    ) -> Result<(), Failure> {
        let (Some(planned), Some(progress), Some(name)) = (
            self.tasks.task(task).cloned(),
            self.tasks.progress.get(task).cloned(),
            StepName::task_phase(task, phase),
        ) else {
            return Ok(());
        };
        if phase == "verify" {
            self.restart(&name, rerun)?;
            let mut commands: Vec<CommandStep> = spec.verify.clone();
            let plan_verify = progress
                .plan
                .as_ref()
                .map(|p| p.verify.clone())
                .unwrap_or_default();
            let image = self.cx.pipeline.isolation.image.clone();
            commands.extend(
                planned
                    .verify
                    .iter()
                    .chain(&plan_verify)
                    .map(|text| model_command(text, image.clone())),
            );
            return self.verify(&name, attempt, &commands, spec.verify.len());
        }
        let (kind, agent) = match phase {
            "plan" => (PhaseKind::Plan, &spec.plan),
            "execute" => (PhaseKind::Execute, &spec.execute),
            "scrutinize" => (PhaseKind::Scrutinize, &spec.scrutinize),
            _ => (PhaseKind::Validate, &spec.validate),
        };
        let diff_text = match (kind, progress.diff) {
            (PhaseKind::Scrutinize | PhaseKind::Validate, Some(blob)) => self
                .cx
                .store
                .blob(blob)?
                .map(|bytes| String::from_utf8_lossy(&bytes).into_owned()),
            _ => None,
        };
        let outcome = self.tasks.outcome.clone().unwrap_or_default();
        let text = message::phase(
            phase,
            &outcome,
            &planned,
            &progress,
            spec,
            &Extra {
                diff: diff_text.as_deref(),
                per_task: spec.commit == OutcomeCommit::PerTask,
            },
        );
        let step = phase_step(name, agent, text);
        let takes_grants =
            matches!(&spec.execute.sandbox.network, Network::Allowlist(list) if list.grants);
        let run = PhaseRun {
            kind,
            tasks: None,
            plan: (kind == PhaseKind::Plan).then(|| {
                RefCell::new(SubmitPlan {
                    task: task.to_owned(),
                    grants: takes_grants,
                    accepted: None,
                })
            }),
        };
        self.run_phase(&step, attempt, rerun, run)
    }

    /// Before a phase attempt: a spent budget runs nothing, and every tool call an interrupted
    /// attempt (`rerun`) left open gets its result.
    fn restart(&mut self, name: &StepName, rerun: bool) -> Result<(), Failure> {
        self.check_budget()?;
        if rerun {
            self.answer_open_calls(
                name,
                "interrupted: cordon stopped before this call returned",
            )?;
        }
        Ok(())
    }

    /// One attempt of an agent phase with its own tools.
    fn run_phase(
        &mut self,
        step: &Step,
        attempt: Attempt,
        rerun: bool,
        run: PhaseRun,
    ) -> Result<(), Failure> {
        self.restart(&step.name, rerun)?;
        self.phase = Some(run);
        let result = self.attempt(step, attempt);
        self.phase = None;
        result
    }

    /// A task's verify: its commands in order, each in its own session, until one fails. The
    /// first `own` are the pipeline's; the rest, a model's, share [`MODEL_VERIFY_TOTAL`]. A
    /// verify that leaves the work tree other than execute left it fails: what is committed is
    /// what the critic reviewed.
    fn verify(
        &mut self,
        name: &StepName,
        attempt: Attempt,
        commands: &[CommandStep],
        own: usize,
    ) -> Result<(), Failure> {
        self.budget = OutputBudget::new(self.cx.pipeline.isolation.output_limit_bytes());
        let steps: Vec<Step> = commands
            .iter()
            .map(|command| Step {
                name: name.clone(),
                kind: StepKind::Command(command.clone()),
                on_pass: Route::Success,
                on_fail: Route::Failure,
                on_unverifiable: Route::Failure,
            })
            .collect();
        // Setup hooks first, each cached by its stamp, as a step's hook runs before it starts.
        for step in &steps {
            if let Some(setup) = step.kind.sandbox().and_then(|s| s.setup.as_ref())
                && !self.setup(step, setup, attempt)?
            {
                return Ok(());
            }
        }
        self.append(Some(name), Event::StepStarted { attempt })?;
        let mut verdict = Verdict::Pass;
        let mut exit_code = None;
        let mut reason = None;
        // Counted from the first of the model's commands: the pipeline's own take what they take.
        let mut model_deadline = None;
        for (index, step) in steps.iter().enumerate() {
            let StepKind::Command(command) = &step.kind else {
                continue;
            };
            let shown = message::shown(&command.command);
            self.append(
                Some(name),
                Event::StepOutput {
                    stream: OutputStream::Stdout,
                    text: format!("$ {shown}\n"),
                },
            )?;
            let mut spec = self.spec(step, attempt, Purpose::Step);
            if index >= own {
                let deadline = *model_deadline
                    .get_or_insert_with(|| std::time::Instant::now() + MODEL_VERIFY_TOTAL);
                let left = deadline.saturating_duration_since(std::time::Instant::now());
                if left.is_zero() {
                    verdict = Verdict::Fail;
                    reason = Some(format!(
                        "the task's and its plan's verify commands used their {} min together \
                         before `{shown}`; verify fewer or faster commands",
                        MODEL_VERIFY_TOTAL.as_secs() / 60
                    ));
                    break;
                }
                spec.timeout = Some(spec.timeout.map_or(left, |own| own.min(left)));
            }
            let argv = argv(&command.command);
            let monitor = self.guard.as_ref().map(|guard| {
                std::rc::Rc::new(RefCell::new(crate::resources::Monitor::new(guard.limits)))
            });
            let ran = self.session_command(name, &spec, &argv, monitor.as_ref())?;
            let exhausted = monitor.and_then(|m| m.borrow().exhausted().map(str::to_owned));
            let failed = match (ran, exhausted) {
                (_, Some(why)) => Some((None, format!("`{shown}`: {why}"))),
                (Ok(result), None) if result.exit_code == 0 => None,
                (Ok(result), None) if result.timed_out => Some((
                    Some(result.exit_code),
                    format!(
                        "`{shown}` timed out after {} s",
                        spec.timeout.map_or(0, |t| t.as_secs())
                    ),
                )),
                (Ok(result), None) => Some((
                    Some(result.exit_code),
                    format!("`{shown}` exited with status {}", result.exit_code),
                )),
                (Err(message), None) => Some((None, format!("`{shown}` could not run: {message}"))),
            };
            if let Some((code, why)) = failed {
                verdict = Verdict::Fail;
                exit_code = code;
                reason = Some(self.cx.secrets.scrub(&why));
                break;
            }
        }
        self.check_budget()?;
        let diff = self.diff_blob(true)?;
        if verdict == Verdict::Pass
            && let Some((task, _)) = name.task()
            && self.changed_since_execute(task, diff)?
        {
            verdict = Verdict::Fail;
            reason = Some(format!(
                "verify changed the work tree that execute left (`cordon diff --step {name} \
                 --attempt {attempt}` shows it as it is now); verify commands must leave tracked \
                 and unignored files as they found them — list build output in `.gitignore`"
            ));
        }
        self.step_finished(name, attempt, (verdict, exit_code, reason), diff)
    }

    /// Whether the work tree whose diff is `now` differs from the one `task`'s last execute
    /// left: the same blob, or the same tree digest line, is the same tree.
    fn changed_since_execute(
        &self,
        task: &str,
        now: Option<cordon_protocol::event::BlobId>,
    ) -> Result<bool, Failure> {
        let executed = self.tasks.progress.get(task).and_then(|p| p.diff);
        if executed == now {
            return Ok(false);
        }
        let digest =
            |blob: Option<cordon_protocol::event::BlobId>| -> Result<Option<Vec<u8>>, Failure> {
                match blob {
                    None => Ok(None),
                    Some(blob) => Ok(self.cx.store.blob(blob)?.map(|bytes| {
                        super::digest_line(&bytes)
                            .map(<[u8]>::to_vec)
                            .unwrap_or(bytes)
                    })),
                }
            };
        Ok(digest(executed)? != digest(now)?)
    }

    /// The validator accepted `task`: with `commit: per_task` its work is committed (message
    /// `<id>: <title>`, trailers `Cordon-Run` and `Cordon-Task`), then the task is done.
    fn accept(&mut self, spec: &OutcomeSpec, task: &str) -> Result<(), Failure> {
        let Some(planned) = self.tasks.task(task).cloned() else {
            return Ok(());
        };
        let progress = self.tasks.progress.get(task).cloned().unwrap_or_default();
        let (revision, replan) = (progress.revision, progress.replan);
        let (mut state, mut reason) = (TaskPhase::Done, None);
        let mut accepted = None;
        if spec.parallel.get() > 1 {
            match self.merge_task(task)? {
                super::parallel::Merge::Clean(id) => accepted = Some(id),
                super::parallel::Merge::Conflict(why) => {
                    return self.revise_after_merge(spec, task, why);
                }
                super::parallel::Merge::Failed(why) => {
                    state = TaskPhase::Failed;
                    reason = Some(format!(
                        "accepted, but merging its worktree into the main work tree failed: {why}"
                    ));
                }
            }
        }
        if state == TaskPhase::Done && spec.commit == OutcomeCommit::PerTask {
            let message = format!(
                "{}: {}",
                planned.id,
                cordon_protocol::text::escape_line(&planned.title)
            );
            let trailer = format!("Cordon-Run: {}\nCordon-Task: {}", self.cx.run, planned.id);
            let step = StepName::task_phase(task, "validate");
            let (verdict, _, why) = self.commit_of(step.as_ref(), &message, &trailer, accepted)?;
            reason = match verdict {
                Verdict::Pass => why,
                // A commit is never unverifiable; were one reported so, it did not commit.
                Verdict::Fail | Verdict::Unverifiable => {
                    state = TaskPhase::Failed;
                    Some(format!(
                        "accepted, but its commit failed: {}",
                        why.unwrap_or_default()
                    ))
                }
            };
        }
        self.append(
            None,
            Event::TaskState {
                task: task.to_owned(),
                state,
                revision,
                replan,
                reason,
            },
        )?;
        // Removed once the task's end is logged: until then a resumed accept merges again
        // (a merge already made changes nothing).
        if spec.parallel.get() > 1 {
            self.remove_worktree(task);
        }
        Ok(())
    }

    /// `commit: end`: one commit of the whole run once every task is done, then the run ends.
    /// `outcome.deliver`: the run's commits delivered as a `deliver` step of its own, once every
    /// task is done and committed.
    fn deliver_outcome(&mut self, spec: &OutcomeSpec) -> Result<(), Failure> {
        let (Some(deliver), Ok(name)) = (&spec.deliver, StepName::parse(DELIVER)) else {
            return Ok(());
        };
        let step = cordon_pipeline::Step {
            name,
            kind: cordon_pipeline::StepKind::Action(cordon_pipeline::Action::Deliver(
                deliver.clone(),
            )),
            on_pass: cordon_pipeline::Route::Success,
            on_fail: cordon_pipeline::Route::Failure,
            on_unverifiable: cordon_pipeline::Route::Failure,
        };
        self.attempt(&step, Attempt::FIRST)
    }

    fn commit_end(&mut self) -> Result<(), Failure> {
        let outcome = self.tasks.outcome.clone().unwrap_or_default();
        let first = outcome.lines().next().unwrap_or_default();
        let mut title: String = cordon_protocol::text::escape_line(first)
            .chars()
            .take(72)
            .collect();
        if title.trim().is_empty() {
            title = format!("cordon: {}", self.cx.pipeline.name);
        }
        let trailer = format!("Cordon-Run: {}", self.cx.run);
        // Parallel tasks: what the run accepted, not whatever else the work tree holds.
        let accepted = match self.cx.pipeline.outcome.as_ref() {
            Some(spec) if spec.parallel.get() > 1 => Some(self.accepted_now()?),
            _ => None,
        };
        // The plan's mark goes into the run's one commit (parallel tasks commit the accepted
        // tree, which the mark in the main work tree is not part of: it is left for the user).
        let before = if accepted.is_none() {
            self.mark_plan().unwrap_or(None)
        } else {
            None
        };
        let (verdict, _, why) = self.commit_of(None, &title, &trailer, accepted)?;
        let delivers = self
            .cx
            .pipeline
            .outcome
            .as_ref()
            .is_some_and(|o| o.deliver.is_some());
        let (outcome, reason) = match verdict {
            // Delivered next, then finished (the scheduler decides both from the log).
            Verdict::Pass if delivers => return Ok(()),
            Verdict::Pass => (Outcome::Success, "every task is done".to_owned()),
            Verdict::Fail | Verdict::Unverifiable => {
                self.unmark_plan(before);
                (
                    Outcome::Failure,
                    format!(
                        "every task is done, but the run's commit failed: {}",
                        why.unwrap_or_default()
                    ),
                )
            }
        };
        self.finish(outcome, reason)
    }
}

/// The step of one phase attempt: the phase's agent step with cordon's message in front of
/// the phase's own `prompt`.
fn phase_step(name: StepName, agent: &AgentStep, text: String) -> Step {
    let prompt = match &agent.prompt {
        Some(own) => format!("{text}\n{own}"),
        None => text,
    };
    Step {
        name,
        kind: StepKind::Agent(AgentStep {
            prompt: Some(prompt),
            ..agent.clone()
        }),
        on_pass: Route::Success,
        on_fail: Route::Failure,
        on_unverifiable: Route::Failure,
    }
}

/// A verify command a model gave: a shell command, offline, with a default timeout, on the
/// pipeline's image (the project's environment) when it has one.
fn model_command(text: &str, image: Option<cordon_protocol::ImageRef>) -> CommandStep {
    CommandStep {
        command: CommandSpec::Shell(text.to_owned()),
        model_lane: false,
        sandbox: Sandboxed {
            network: Network::None,
            setup: None,
            secrets: Vec::new(),
            env: Default::default(),
            timeout: std::num::NonZeroU64::new(MODEL_VERIFY_TIMEOUT).map(Timeout),
            produces: Vec::new(),
            image,
        },
    }
}
