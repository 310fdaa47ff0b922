//! `RunState`: everything the scheduler needs, rebuilt by folding a run's events in order.
//! `apply` is total and infallible: an event that makes no sense in the current position is
//! recorded where it can be and otherwise ignored, so replay never fails.

use std::collections::{BTreeMap, BTreeSet};

use cordon_protocol::event::{Outcome, Verdict};
use cordon_protocol::{Attempt, Event, Record, RunId, StepName};

/// How much of an attempt's output the state keeps for feedback (the tail).
pub const OUTPUT_TAIL: usize = 4096;

/// Where the run is between two events.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Position {
    /// No `run.started` yet.
    NotStarted,
    /// The next thing is starting `step` (`None`: the pipeline's first step). `hygiene`: a retry
    /// happened, so every step's `produces`/`artifact` files are deleted before it starts.
    At {
        step: Option<StepName>,
        hygiene: bool,
    },
    /// `step.started` is logged and no `step.finished` yet: on resume, re-run it from the start.
    Running { step: StepName, attempt: Attempt },
    /// The step finished; its route is not logged yet.
    Finished { step: StepName, verdict: Verdict },
    /// A `retry: true` route to `step` is logged; `attempt.retry` is not.
    RetryDue { step: StepName },
    /// A route to `success` or `failure` is logged; `run.finished` is not.
    Ending { outcome: Outcome, reason: String },
    /// `run.finished` is logged.
    Done,
}

/// One step's history in the run.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StepStatus {
    /// How many times `step.started` was logged.
    pub started: u32,
    /// The latest finished attempt's verdict.
    pub verdict: Option<Verdict>,
    pub running: bool,
}

/// A failed attempt, remembered for the next retry's feedback.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    pub step: StepName,
    pub attempt: Attempt,
    pub reason: String,
    /// The tail of its output, stdout and stderr interleaved as logged.
    pub tail: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunState {
    pub run: Option<RunId>,
    pub pipeline: String,
    /// The run's task (`--prompt`), as `run.started` recorded it.
    pub prompt: Option<String>,
    /// The run's documents (`--context`), as `run.started` recorded them.
    pub context: Vec<cordon_protocol::event::ContextDocument>,
    pub attempt: Attempt,
    pub max_attempts: u32,
    pub position: Position,
    pub outcome: Option<Outcome>,
    pub reason: Option<String>,
    /// The signal that interrupted the process holding the run, since it last started or
    /// resumed (`run.interrupted`).
    pub interrupted: Option<i32>,
    /// The retry target when the run ended because its attempt budget ran out.
    pub exhausted: Option<StepName>,
    pub steps: BTreeMap<StepName, StepStatus>,
    /// Every (step, attempt) that logged `step.finished`.
    pub finished: BTreeSet<(StepName, Attempt)>,
    /// Every retry's feedback, in order.
    pub feedback: Vec<String>,
    pub last_failure: Option<Failure>,
    /// Steps whose setup ran (or was cached) in this run.
    pub setups: BTreeSet<StepName>,
    pub commit: Option<String>,
    /// Every `commit.created` sha, in order (what `deliver` may push).
    pub commits: Vec<String>,
    /// Every `step.finished`, in order: what `report: {on: [step]}` comments on.
    pub results: Vec<(StepName, Attempt, Verdict)>,
    /// How many `report.comment`s the run has made.
    pub report_comments: usize,
    /// The last `delivery.pushed` (remote, branch, sha) and `delivery.pull_request` (url,
    /// number).
    pub pushed: Option<(String, String, String)>,
    pub pull_request: Option<(String, u64)>,
    /// `tool.call`s without a `tool.result` yet: (step, call id).
    pub open_tool_calls: Vec<(StepName, String)>,
    /// Every pattern granted by `request_egress` (`policy.grant`), in order, once each.
    pub grants: Vec<String>,
    pub last_seq: u64,
    tail: String,
}

impl Default for RunState {
    fn default() -> RunState {
        RunState {
            run: None,
            pipeline: String::new(),
            prompt: None,
            context: Vec::new(),
            attempt: Attempt::FIRST,
            max_attempts: 0,
            position: Position::NotStarted,
            outcome: None,
            reason: None,
            interrupted: None,
            exhausted: None,
            steps: BTreeMap::new(),
            finished: BTreeSet::new(),
            feedback: Vec::new(),
            last_failure: None,
            setups: BTreeSet::new(),
            commit: None,
            commits: Vec::new(),
            results: Vec::new(),
            report_comments: 0,
            pushed: None,
            pull_request: None,
            open_tool_calls: Vec::new(),
            grants: Vec::new(),
            last_seq: 0,
            tail: String::new(),
        }
    }
}

impl RunState {
    /// Folds a whole log.
    pub fn replay<'a>(records: impl IntoIterator<Item = &'a Record>) -> RunState {
        let mut state = RunState::default();
        for record in records {
            state.apply(record);
        }
        state
    }

    /// Folds one event.
    pub fn apply(&mut self, record: &Record) {
        self.run = Some(record.run);
        self.last_seq = record.seq;
        let step = record.step.clone();
        match &record.event {
            Event::RunStarted {
                pipeline,
                attempt,
                max_attempts,
                prompt,
                context,
                ..
            } => {
                self.pipeline.clone_from(pipeline);
                self.prompt.clone_from(prompt);
                self.context.clone_from(context);
                self.attempt = *attempt;
                self.max_attempts = *max_attempts;
                self.position = Position::At {
                    step: None,
                    hygiene: false,
                };
            }
            Event::RunResumed {
                attempt,
                max_attempts,
            } => {
                self.attempt = *attempt;
                self.max_attempts = *max_attempts;
                self.interrupted = None;
                // A run that ran out of attempts continues with a larger budget.
                if let Some(target) = self.exhausted.clone()
                    && *max_attempts > attempt.get()
                {
                    self.exhausted = None;
                    self.outcome = None;
                    self.reason = None;
                    self.position = Position::RetryDue { step: target };
                }
            }
            Event::RunInterrupted { signal } => self.interrupted = Some(*signal),
            Event::RunFinished { outcome, reason } => {
                if let (Outcome::Failure, Position::RetryDue { step }) = (outcome, &self.position) {
                    self.exhausted = Some(step.clone());
                }
                self.outcome = Some(*outcome);
                self.reason = Some(reason.clone());
                self.position = Position::Done;
            }
            Event::StepStarted { attempt } => {
                if let Some(step) = step {
                    let status = self.steps.entry(step.clone()).or_default();
                    status.started += 1;
                    status.running = true;
                    self.tail.clear();
                    self.position = Position::Running {
                        step,
                        attempt: *attempt,
                    };
                }
            }
            Event::StepOutput { text, .. } => {
                if matches!(self.position, Position::Running { .. }) {
                    push_tail(&mut self.tail, text);
                }
            }
            Event::StepFinished {
                attempt,
                verdict,
                reason,
                exit_code,
                ..
            } => {
                if let Some(step) = step {
                    let status = self.steps.entry(step.clone()).or_default();
                    status.verdict = Some(*verdict);
                    status.running = false;
                    self.finished.insert((step.clone(), *attempt));
                    self.results.push((step.clone(), *attempt, *verdict));
                    // What the retried attempt is told: a failure, or why it could not be
                    // verified.
                    if *verdict != Verdict::Pass {
                        let reason = reason.clone().unwrap_or_else(|| match exit_code {
                            Some(code) => format!("exited with status {code}"),
                            None => "failed".to_owned(),
                        });
                        let tail = tail_of(&self.tail);
                        self.last_failure = Some(Failure {
                            step: step.clone(),
                            attempt: *attempt,
                            reason,
                            tail,
                        });
                    }
                    self.position = Position::Finished {
                        step,
                        verdict: *verdict,
                    };
                }
            }
            Event::Route { from, to, retry } => {
                self.position = match (to.as_str(), StepName::parse(to)) {
                    ("success", _) => Position::Ending {
                        outcome: Outcome::Success,
                        reason: format!("`{from}` routed to success"),
                    },
                    ("failure", _) => Position::Ending {
                        outcome: Outcome::Failure,
                        reason: format!("`{from}` routed to failure"),
                    },
                    (_, Ok(step)) if *retry => Position::RetryDue { step },
                    (_, Ok(step)) => Position::At {
                        step: Some(step),
                        hygiene: false,
                    },
                    (_, Err(_)) => Position::Ending {
                        outcome: Outcome::Failure,
                        reason: format!("`{from}` routed to unknown `{to}`"),
                    },
                };
            }
            Event::AttemptRetry { attempt, feedback } => {
                self.attempt = *attempt;
                self.feedback.push(feedback.clone());
                if let Position::RetryDue { step } = &self.position {
                    self.position = Position::At {
                        step: Some(step.clone()),
                        hygiene: true,
                    };
                }
            }
            Event::SetupRan { exit_code: 0, .. } | Event::SetupCached { .. } => {
                if let Some(step) = step {
                    self.setups.insert(step);
                }
            }
            Event::CommitCreated { sha, .. } => {
                self.commit = Some(sha.clone());
                if !self.commits.contains(sha) {
                    self.commits.push(sha.clone());
                }
            }
            Event::DeliveryPushed {
                remote,
                branch,
                sha,
            } => self.pushed = Some((remote.clone(), branch.clone(), sha.clone())),
            Event::DeliveryPullRequest { url, number } => {
                self.pull_request = Some((url.clone(), *number));
            }
            Event::ReportComment { .. } => self.report_comments += 1,
            Event::ToolCall { id, .. } => {
                if let Some(step) = step {
                    self.open_tool_calls.push((step, id.clone()));
                }
            }
            Event::ToolResult { id, .. } => {
                self.open_tool_calls
                    .retain(|(s, open)| !(open == id && step.as_ref() == Some(s)));
            }
            // A task's grants belong to the task (the outcome fold keeps them).
            Event::PolicyGrant {
                domain, task: None, ..
            } => {
                if !self.grants.contains(domain) {
                    self.grants.push(domain.clone());
                }
            }
            Event::SetupRan { .. }
            | Event::SandboxSession { .. }
            | Event::SandboxExec { .. }
            | Event::EgressAllow(_)
            | Event::EgressDeny(_)
            | Event::EgressClose(_)
            | Event::EgressDropped { .. }
            | Event::PolicyGrant { task: Some(_), .. }
            | Event::PolicyRefuse { .. }
            | Event::TasksPlanned { .. }
            | Event::TaskState { .. }
            | Event::LlmRequest { .. }
            | Event::LlmResponse { .. }
            | Event::BudgetExhausted { .. }
            | Event::ArtifactWritten { .. }
            | Event::ResourcesSample { .. }
            | Event::ResourcesWarning { .. }
            | Event::Error { .. } => {}
        }
    }

    /// Whether the run has a final outcome.
    pub fn is_finished(&self) -> bool {
        self.outcome.is_some()
    }
}

/// Appends `text` to a running step's `tail`, keeping it between [`OUTPUT_TAIL`] and twice that.
pub(crate) fn push_tail(tail: &mut String, text: &str) {
    tail.push_str(text);
    if tail.len() > 2 * OUTPUT_TAIL {
        let mut cut = tail.len() - OUTPUT_TAIL;
        while !tail.is_char_boundary(cut) {
            cut += 1;
        }
        tail.drain(..cut);
    }
}

/// The last [`OUTPUT_TAIL`] bytes of `text`, from a character boundary.
pub(crate) fn tail_of(text: &str) -> String {
    if text.len() <= OUTPUT_TAIL {
        return text.to_owned();
    }
    let mut cut = text.len() - OUTPUT_TAIL;
    while !text.is_char_boundary(cut) {
        cut += 1;
    }
    text[cut..].to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use cordon_protocol::event::Timestamp;

    fn record(seq: u64, step: Option<&str>, event: Event) -> Record {
        Record {
            run: RunId::from_u128(1),
            seq,
            ts: Timestamp(0),
            step: step.and_then(|s| StepName::parse(s).ok()),
            event,
        }
    }

    #[test]
    fn the_fold_accepts_events_in_any_order_without_failing() {
        let attempt = Attempt::FIRST;
        let odd = [
            record(
                1,
                None,
                Event::StepFinished {
                    attempt,
                    verdict: Verdict::Pass,
                    exit_code: None,
                    reason: None,
                    diff: None,
                    output_omitted_bytes: None,
                },
            ),
            record(
                2,
                None,
                Event::AttemptRetry {
                    attempt,
                    feedback: "f".into(),
                },
            ),
            record(
                3,
                Some("a"),
                Event::StepOutput {
                    stream: cordon_protocol::event::OutputStream::Stdout,
                    text: "x".repeat(3 * OUTPUT_TAIL),
                },
            ),
            record(
                4,
                None,
                Event::Route {
                    from: StepName::parse("a").expect("name"),
                    to: "NOT A STEP".into(),
                    retry: false,
                },
            ),
            record(
                5,
                None,
                Event::RunResumed {
                    attempt,
                    max_attempts: 9,
                },
            ),
        ];
        let state = RunState::replay(&odd);
        assert_eq!(state.last_seq, 5);
        assert_eq!(state.max_attempts, 9);
        assert!(
            matches!(
                state.position,
                Position::Ending {
                    outcome: Outcome::Failure,
                    ..
                }
            ),
            "{:?}",
            state.position
        );
    }

    #[test]
    fn the_run_prompt_is_what_run_started_recorded() {
        let started = |prompt: Option<&str>| {
            record(
                1,
                None,
                Event::RunStarted {
                    pipeline: "p".into(),
                    workspace: "/w".into(),
                    attempt: Attempt::FIRST,
                    max_attempts: 3,
                    prompt: prompt.map(str::to_owned),
                    kind: cordon_protocol::event::RunKind::Steps,
                    outcome: None,
                    context: Vec::new(),
                },
            )
        };
        for prompt in [None, Some("Rename the module.")] {
            let state = RunState::replay(&[started(prompt)]);
            assert_eq!(state.prompt.as_deref(), prompt);
        }
        // An old `run.started` without the field reads as no prompt.
        let json = r#"{"run":"01h00000000000000000000001","seq":1,"ts":"2026-01-31T12:00:00.000Z","type":"run.started","step":null,"data":{"pipeline":"p","workspace":"/w","attempt":1,"max_attempts":3}}"#;
        let old = Record::from_json_line(json).expect("an old line parses");
        assert_eq!(RunState::replay(&[old]).prompt, None);
    }

    #[test]
    fn output_tail_is_bounded_and_kept_for_the_failure() {
        let attempt = Attempt::FIRST;
        let text = format!("{}END", "é".repeat(OUTPUT_TAIL));
        let state = RunState::replay(&[
            record(1, Some("a"), Event::StepStarted { attempt }),
            record(
                2,
                Some("a"),
                Event::StepOutput {
                    stream: cordon_protocol::event::OutputStream::Stderr,
                    text,
                },
            ),
            record(
                3,
                Some("a"),
                Event::StepFinished {
                    attempt,
                    verdict: Verdict::Fail,
                    exit_code: Some(2),
                    reason: None,
                    diff: None,
                    output_omitted_bytes: None,
                },
            ),
        ]);
        let failure = state.last_failure.expect("failure");
        assert!(failure.tail.len() <= OUTPUT_TAIL && failure.tail.ends_with("END"));
        assert_eq!(failure.reason, "exited with status 2");
    }
}
