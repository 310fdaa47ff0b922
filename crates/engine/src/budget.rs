//! The run's budget (DESIGN §12, §18): tokens, cost and wall clock, counted across every process
//! that held the run. A [`Meter`] is shared by the engine (agent steps' model calls) and the
//! model lanes of command steps (which run on their own threads); each model call is counted
//! where it is made, and before each one the meter says whether it may be made.

use std::num::NonZeroU64;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use cordon_pipeline::{Pipeline, Pricing};
use cordon_protocol::{Event, Record};

/// The limits a run is held to: the pipeline's `budget`, each overridden by its flag.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Limits {
    pub tokens: Option<u64>,
    pub cost_usd: Option<f64>,
    pub wall_clock: Option<Duration>,
}

/// `--budget-tokens`, `--budget-cost`, `--budget-wall-clock`: for this process, instead of the
/// pipeline's.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Overrides {
    pub tokens: Option<NonZeroU64>,
    pub cost_usd: Option<f64>,
    pub wall_clock: Option<NonZeroU64>,
}

impl Limits {
    pub fn of(pipeline: &Pipeline, overrides: &Overrides) -> Limits {
        let budget = &pipeline.budget;
        Limits {
            tokens: overrides.tokens.or(budget.tokens).map(NonZeroU64::get),
            cost_usd: overrides.cost_usd.or(budget.cost_usd),
            wall_clock: overrides
                .wall_clock
                .or(budget.wall_clock)
                .map(|s| Duration::from_secs(s.get())),
        }
    }
}

/// A limit that was reached.
#[derive(Clone, Debug, PartialEq)]
pub struct Exhausted {
    /// `tokens`, `cost_usd` or `wall_clock`.
    pub kind: &'static str,
    pub used: serde_json::Number,
    pub limit: serde_json::Number,
}

impl Exhausted {
    /// `budget exhausted: <kind> <used> of <limit>` (Appendix B).
    pub fn reason(&self) -> String {
        format!(
            "budget exhausted: {} {} of {}",
            self.kind, self.used, self.limit
        )
    }

    /// The flag that raises this limit on resume.
    pub fn flag(&self) -> &'static str {
        match self.kind {
            "tokens" => "--budget-tokens",
            "cost_usd" => "--budget-cost",
            _ => "--budget-wall-clock",
        }
    }

    pub fn event(&self) -> Event {
        Event::BudgetExhausted {
            kind: self.kind.to_owned(),
            used: self.used.clone(),
            limit: self.limit.clone(),
        }
    }
}

/// The run's usage so far against its limits; cloned handles share one count.
#[derive(Clone, Debug)]
pub struct Meter {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    limits: Limits,
    pricing: Option<Pricing>,
    used: Mutex<Used>,
    /// Wall clock the run was held by earlier processes.
    held_before: Duration,
    /// When this process took the run.
    since: Instant,
}

#[derive(Clone, Copy, Debug, Default)]
struct Used {
    input: u64,
    output: u64,
}

impl Meter {
    /// A meter for a run whose events so far are `records` (none for a fresh run).
    pub fn new(limits: Limits, pricing: Option<Pricing>, records: &[Record]) -> Meter {
        let mut used = Used::default();
        for record in records {
            if let Event::LlmResponse {
                input_tokens,
                output_tokens,
                ..
            } = &record.event
            {
                used.input = used.input.saturating_add(*input_tokens);
                used.output = used.output.saturating_add(*output_tokens);
            }
        }
        Meter {
            inner: Arc::new(Inner {
                limits,
                pricing,
                used: Mutex::new(used),
                held_before: held(records),
                since: Instant::now(),
            }),
        }
    }

    /// A meter without limits, for a run that has none (and tests).
    pub fn unlimited() -> Meter {
        Meter::new(Limits::default(), None, &[])
    }

    /// Tokens in and out so far, and their cost when the pipeline is priced.
    pub fn used(&self) -> (u64, u64, Option<f64>) {
        let used = *self.lock();
        let cost = self
            .inner
            .pricing
            .as_ref()
            .map(|p| p.cost(used.input, used.output));
        (used.input, used.output, cost)
    }

    /// Counts one model call's tokens.
    pub fn record(&self, input: u64, output: u64) {
        let mut used = self.lock();
        used.input = used.input.saturating_add(input);
        used.output = used.output.saturating_add(output);
    }

    /// The first limit reached, if any: tokens, then cost, then wall clock.
    pub fn exhausted(&self) -> Option<Exhausted> {
        let limits = &self.inner.limits;
        let used = *self.lock();
        let tokens = used.input.saturating_add(used.output);
        if let Some(limit) = limits.tokens
            && tokens >= limit
        {
            return Some(Exhausted {
                kind: "tokens",
                used: tokens.into(),
                limit: limit.into(),
            });
        }
        if let (Some(limit), Some(pricing)) = (limits.cost_usd, &self.inner.pricing) {
            let cost = pricing.cost(used.input, used.output);
            if cost >= limit {
                return Some(Exhausted {
                    kind: "cost_usd",
                    used: dollars(cost),
                    limit: dollars(limit),
                });
            }
        }
        if let Some(limit) = limits.wall_clock {
            let held = self.held();
            if held >= limit {
                return Some(Exhausted {
                    kind: "wall_clock",
                    used: held.as_secs().into(),
                    limit: limit.as_secs().into(),
                });
            }
        }
        None
    }

    /// The wall clock left, when the run has a wall-clock limit (a command step is stopped when
    /// it runs out).
    pub fn wall_clock_left(&self) -> Option<Duration> {
        self.inner
            .limits
            .wall_clock
            .map(|limit| limit.saturating_sub(self.held()))
    }

    /// Wall clock the run has been held, this process included.
    fn held(&self) -> Duration {
        self.inner.held_before + self.inner.since.elapsed()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Used> {
        self.inner
            .used
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

/// An amount of dollars for an event: rounded to a millionth, as JSON.
fn dollars(amount: f64) -> serde_json::Number {
    let rounded = (amount * 1_000_000.0).round() / 1_000_000.0;
    serde_json::Number::from_f64(rounded).unwrap_or_else(|| 0.into())
}

/// The wall clock processes held the run, from its events: each process held it from the event
/// that took it (`run.started`, `run.resumed`) to the last event it appended. A process killed
/// between two events is counted to its last one.
pub fn held(records: &[Record]) -> Duration {
    let mut total = 0u64;
    let mut segment: Option<(u64, u64)> = None;
    for record in records {
        let ts = record.ts.unix_millis();
        match record.event {
            Event::RunStarted { .. } | Event::RunResumed { .. } => {
                if let Some((from, to)) = segment {
                    total = total.saturating_add(to.saturating_sub(from));
                }
                segment = Some((ts, ts));
            }
            _ => {
                if let Some((_, to)) = segment.as_mut() {
                    *to = (*to).max(ts);
                }
            }
        }
    }
    if let Some((from, to)) = segment {
        total = total.saturating_add(to.saturating_sub(from));
    }
    Duration::from_millis(total)
}

#[cfg(test)]
mod tests {
    use super::*;
    use cordon_protocol::event::{LlmSource, Timestamp};
    use cordon_protocol::{Attempt, RunId};

    fn record(ts: u64, event: Event) -> Record {
        Record {
            run: RunId::from_u128(1),
            seq: 0,
            ts: Timestamp(ts),
            step: None,
            event,
        }
    }

    fn started(ts: u64) -> Record {
        record(
            ts,
            Event::RunStarted {
                pipeline: "p".into(),
                workspace: "/w".into(),
                attempt: Attempt::FIRST,
                max_attempts: 3,
                prompt: None,
                kind: cordon_protocol::event::RunKind::Steps,
                outcome: None,
                context: Vec::new(),
            },
        )
    }

    fn resumed(ts: u64) -> Record {
        record(
            ts,
            Event::RunResumed {
                attempt: Attempt::FIRST,
                max_attempts: 3,
            },
        )
    }

    fn response(ts: u64, input: u64, output: u64) -> Record {
        record(
            ts,
            Event::LlmResponse {
                model: "m".into(),
                input_tokens: input,
                output_tokens: output,
                latency_ms: 1,
                source: LlmSource::Agent,
                estimated: None,
            },
        )
    }

    #[test]
    fn wall_clock_counts_only_the_time_processes_held_the_run() {
        // Held 10 s, then nobody for an hour, then 5 s: 15 s, not an hour.
        let records = [
            started(1_000),
            response(11_000, 1, 1),
            resumed(3_611_000),
            response(3_616_000, 1, 1),
        ];
        assert_eq!(held(&records), Duration::from_secs(15));
        assert_eq!(held(&[]), Duration::ZERO);
        assert_eq!(held(&[started(5)]), Duration::ZERO);
    }

    #[test]
    fn each_limit_is_reached_at_its_value_tokens_first() {
        let pricing = Pricing {
            input: 3.0,
            output: 15.0,
        };
        let records = [started(0), response(0, 600, 400)];
        let meter = |limits| Meter::new(limits, Some(pricing), &records);
        let tokens = meter(Limits {
            tokens: Some(1000),
            ..Limits::default()
        });
        assert_eq!(
            tokens.exhausted().map(|e| e.reason()).as_deref(),
            Some("budget exhausted: tokens 1000 of 1000")
        );
        assert!(
            meter(Limits {
                tokens: Some(1001),
                ..Limits::default()
            })
            .exhausted()
            .is_none()
        );
        // 600 × 3 + 400 × 15 = 7800 dollars per million: 0.0078.
        let cost = meter(Limits {
            cost_usd: Some(0.0078),
            ..Limits::default()
        });
        assert_eq!(
            cost.exhausted().map(|e| e.reason()).as_deref(),
            Some("budget exhausted: cost_usd 0.0078 of 0.0078")
        );
        let under = meter(Limits {
            cost_usd: Some(0.01),
            ..Limits::default()
        });
        assert!(under.exhausted().is_none());
        under.record(1000, 0);
        assert_eq!(under.exhausted().map(|e| e.kind), Some("cost_usd"));
        let wall = Meter::new(
            Limits {
                wall_clock: Some(Duration::from_secs(10)),
                ..Limits::default()
            },
            None,
            &[started(0), response(10_000, 1, 1)],
        );
        assert_eq!(
            wall.exhausted().map(|e| e.reason()).as_deref(),
            Some("budget exhausted: wall_clock 10 of 10")
        );
        assert_eq!(wall.wall_clock_left(), Some(Duration::ZERO));
        assert!(Meter::unlimited().exhausted().is_none());
    }

    #[test]
    fn a_flag_wins_over_the_pipelines_limit() {
        let files: std::collections::BTreeMap<std::path::PathBuf, String> = Default::default();
        let pipeline = cordon_pipeline::load_str(
            "pipeline.yaml",
            "name: p\nbudget:\n  tokens: 10\n  wall_clock: 1m\nsteps:\n  - name: a\n    command: 'true'\n",
            std::path::Path::new("/p"),
            &files,
        )
        .expect("valid")
        .pipeline;
        let limits = Limits::of(
            &pipeline,
            &Overrides {
                tokens: NonZeroU64::new(500),
                ..Overrides::default()
            },
        );
        assert_eq!(limits.tokens, Some(500));
        assert_eq!(limits.wall_clock, Some(Duration::from_secs(60)));
        assert_eq!(limits.cost_usd, None);
    }
}
