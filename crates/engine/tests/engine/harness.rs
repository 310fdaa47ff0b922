//! `Harness`: a workspace, a state directory, a pipeline and a fake executor; runs the engine
//! and summarises what the log says happened.

use std::cell::RefCell;
use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};
use std::rc::Rc;

use cordon_engine::resources::{Limits, ResourceGuard};
use cordon_engine::workspace::HostWorkspace;
use cordon_engine::{AgentDriver, Control, Ending, Engine, RunContext, RunState, Secrets};
use cordon_pipeline::Pipeline;
use cordon_protocol::event::{Outcome, Timestamp};
use cordon_protocol::{Event, Record, RunId};
use cordon_store::{RunRow, StateDir, Store};
use cordon_workspace::View;

use crate::fake::FakeExecutor;

pub struct Harness {
    pub dir: tempfile::TempDir,
    pub workspace: PathBuf,
    /// The workspace as the engine sees it (no repository: these runs neither diff nor commit).
    pub host: HostWorkspace,
    pub store: Store,
    pub pipeline: Pipeline,
    pub fake: FakeExecutor,
    pub secrets: Secrets,
    pub run: RunId,
    /// With `Some`, the engine guards steps with these `[limits]`, its disk samples taken in
    /// order from `disk_samples` (none left: the filesystem cannot be sampled).
    pub limits: Option<Limits>,
    pub disk_samples: Rc<RefCell<VecDeque<u8>>>,
    /// `--budget-*` for the next drive.
    pub overrides: cordon_engine::budget::Overrides,
    /// The environment images the run resolved.
    pub images: cordon_engine::images::RunImages,
    /// The run's plan (`--plan`).
    pub plan: Option<cordon_workspace::WsPath>,
}

/// The guard for `limits` whose workspace samples are taken from `samples` in order (none
/// left: the filesystem cannot be sampled), sampling running commands at every watch tick.
pub fn guard(limits: Option<Limits>, samples: Rc<RefCell<VecDeque<u8>>>) -> Option<ResourceGuard> {
    Some(ResourceGuard {
        limits: limits?,
        every: std::time::Duration::from_millis(1),
        sample: Rc::new(move |_| {
            samples
                .borrow_mut()
                .pop_front()
                .ok_or_else(|| std::io::Error::other("no sample left"))
        }),
    })
}

pub fn pipeline(yaml: &str) -> Pipeline {
    let files: BTreeMap<PathBuf, String> = BTreeMap::new();
    match cordon_pipeline::load_str("pipeline.yaml", yaml, Path::new(""), &files) {
        Ok(loaded) => loaded.pipeline,
        Err(diagnostics) => panic!("test pipeline is invalid: {diagnostics:?}"),
    }
}

impl Harness {
    pub fn new(yaml: &str) -> Harness {
        let dir = tempfile::tempdir().expect("tempdir");
        let workspace = dir.path().join("ws");
        std::fs::create_dir_all(&workspace).expect("mkdir");
        let workspace = workspace.canonicalize().expect("canonical");
        let store = Store::open(&StateDir::new(dir.path().join("state"))).expect("store");
        let pipeline = pipeline(yaml);
        let run = RunId::from_parts(1_769_860_800_000, 42);
        store
            .create_run(&RunRow {
                id: run,
                pipeline: pipeline.name.clone(),
                pipeline_file: workspace.join("pipeline.yaml"),
                workspace: workspace.clone(),
                started: Timestamp(0),
                snapshot: None,
            })
            .expect("create run");
        let fake = FakeExecutor::new(workspace.clone());
        let host = HostWorkspace::new(View::open(&workspace).expect("view"), None);
        Harness {
            dir,
            host,
            workspace,
            store,
            pipeline,
            fake,
            secrets: Secrets::default(),
            run,
            limits: None,
            disk_samples: Rc::default(),
            overrides: cordon_engine::budget::Overrides::default(),
            images: cordon_engine::images::RunImages::default(),
            plan: None,
        }
    }

    /// The engine's context over this harness: its store, run, pipeline and fake executor,
    /// no repository, no refresh, no tooling paths, and `agents` for agent steps.
    pub fn context<'a>(&'a mut self, agents: Option<&'a mut dyn AgentDriver>) -> RunContext<'a> {
        RunContext {
            store: &self.store,
            run: self.run,
            pipeline: &self.pipeline,
            workspace: &self.host,
            executor: &mut self.fake,
            secrets: &self.secrets,
            refresh: false,
            tooling: Vec::new(),
            agents,
            // The pipeline's budget and this harness's flags, against the log so far.
            meter: cordon_engine::budget::Meter::new(
                cordon_engine::budget::Limits::of(&self.pipeline, &self.overrides),
                self.pipeline.pricing,
                &self.store.events(self.run).expect("events"),
            ),
            images: self.images.clone(),
            plan: self.plan.clone(),
        }
    }

    /// Starts (when fresh) or resumes the run and drives it; `stop_after`: stop once the log
    /// holds that many events, as if the process died there.
    pub fn drive(&mut self, max_attempts: u32, stop_after: Option<u64>) -> Ending {
        let fresh = self.store.events(self.run).expect("events").is_empty();
        let mut observer = |record: &Record| match stop_after {
            Some(k) if record.seq >= k => Control::Stop,
            _ => Control::Continue,
        };
        let (limits, samples) = (self.limits, Rc::clone(&self.disk_samples));
        let cx = self.context(None);
        let mut engine = Engine::new(cx, &mut observer).expect("engine");
        if let Some(guard) = guard(limits, samples) {
            engine.set_resource_guard(guard);
        }
        if fresh {
            engine.start(max_attempts, None).expect("start");
            if stop_after.is_some_and(|k| k <= 1) {
                return Ending::Stopped;
            }
        } else if !engine.state().is_finished() || engine.state().exhausted.is_some() {
            engine.resume(max_attempts).expect("resume");
        }
        engine.drive().expect("drive")
    }

    pub fn run_to_end(&mut self, max_attempts: u32) -> Outcome {
        match self.drive(max_attempts, None) {
            Ending::Finished(outcome) => outcome,
            Ending::Stopped => panic!("nothing asked to stop"),
        }
    }

    pub fn records(&self) -> Vec<Record> {
        self.store.events(self.run).expect("events")
    }

    pub fn state(&self) -> RunState {
        RunState::replay(&self.records())
    }

    /// The run as a compact trace: `step@attempt:pass`, `->to`, `retry N`, `=outcome`.
    pub fn trace(&self) -> Vec<String> {
        trace(&self.records())
    }
}

pub fn trace(records: &[Record]) -> Vec<String> {
    records
        .iter()
        .filter_map(|r| match &r.event {
            Event::StepFinished {
                attempt, verdict, ..
            } => Some(format!(
                "{}@{attempt}:{}",
                r.step.as_ref().map_or("?", |s| s.as_str()),
                match verdict {
                    cordon_protocol::event::Verdict::Pass => "pass",
                    cordon_protocol::event::Verdict::Fail => "fail",
                    cordon_protocol::event::Verdict::Unverifiable => "unverifiable",
                }
            )),
            Event::Route {
                to, retry: true, ..
            } => Some(format!("->{to} (retry)")),
            Event::Route { to, .. } => Some(format!("->{to}")),
            Event::AttemptRetry { attempt, .. } => Some(format!("retry {attempt}")),
            Event::RunFinished { outcome, .. } => Some(format!("={}", outcome.as_str())),
            _ => None,
        })
        .collect()
}
