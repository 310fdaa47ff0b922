//! `FakeExecutor`: opens no sandbox; each command's exit code, output and workspace writes come
//! from a script keyed by the command text and the attempt.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cordon_engine::executor::{ExecError, Gauges, Purpose, Tick, Watch};
use cordon_engine::side::SideEvents;
use cordon_engine::{CommandResult, Executor, SessionSpec, StepSession};
use cordon_protocol::Event;
use cordon_protocol::event::OutputStream;

/// What one command does when run.
#[derive(Clone, Debug, Default)]
pub struct Behaviour {
    pub exit_code: i32,
    pub stdout: String,
    pub stderr: String,
    /// Files written into the workspace (relative path, content).
    pub writes: Vec<(String, String)>,
    /// Events the session produces on its own while the command runs (egress audit records).
    pub side: Vec<Event>,
    /// The command keeps running until a watch stops it (at most [`MAX_TICKS`] ticks, then it
    /// exits with `exit_code`); each tick sees the next of `gauges` (the last one repeats).
    pub until_stopped: bool,
    /// What the session measures on its own (memory, tmpfs), tick by tick.
    pub gauges: Vec<Gauges>,
    /// `(mine, theirs)`: the command makes the file `mine`, then waits (at most [`MEET_WAIT`])
    /// for `theirs` to exist, and fails when it does not — so two commands meeting each other
    /// both pass only when they run at the same time.
    pub meet: Option<(PathBuf, PathBuf)>,
}

/// How long a [`Behaviour::meet`] command waits for the other.
pub const MEET_WAIT: Duration = Duration::from_secs(20);

/// How long a command that runs `until_stopped` lasts without a stop, in watch ticks.
pub const MAX_TICKS: usize = 1000;

/// One session the engine opened.
#[derive(Clone, Debug)]
pub struct Opened {
    pub step: String,
    pub purpose: Purpose,
    pub env: Vec<(String, String)>,
    pub network: cordon_pipeline::Network,
    pub grants: Vec<String>,
    pub read_only: bool,
    /// The image's recorded digest, or the message of an unresolved one.
    pub image: Option<Result<String, String>>,
}

/// Commands are the last argv element (the `sh -c` text); `(command, attempt)` wins over
/// `(command, 0)`; unknown commands pass silently.
#[derive(Clone, Debug, Default)]
pub struct FakeExecutor {
    pub workspace: PathBuf,
    pub script: BTreeMap<(String, u32), Behaviour>,
    /// Every session opened, in order.
    pub opened: Vec<Opened>,
    pub refuse: Option<String>,
    /// The commands a watch stopped, in order.
    pub stopped: Rc<RefCell<Vec<String>>>,
    /// The sessions the executors forked from this one opened (parallel tasks), in order.
    pub forked: Arc<Mutex<Vec<(PathBuf, Opened)>>>,
}

/// A [`FakeExecutor`] forked onto a task's worktree: the same script, its sessions recorded in
/// the parent's `forked`.
struct ForkedFake {
    workspace: PathBuf,
    script: BTreeMap<(String, u32), Behaviour>,
    forked: Arc<Mutex<Vec<(PathBuf, Opened)>>>,
}

impl Executor for ForkedFake {
    fn open(&mut self, spec: &SessionSpec) -> Result<Box<dyn StepSession>, ExecError> {
        self.forked
            .lock()
            .expect("forked")
            .push((self.workspace.clone(), opened(spec)));
        Ok(Box::new(FakeSession {
            workspace: self.workspace.clone(),
            attempt: spec.attempt.get(),
            script: self.script.clone(),
            side: SideEvents::default(),
            stopped: Rc::default(),
            gauges: Gauges::default(),
        }))
    }
}

fn opened(spec: &SessionSpec) -> Opened {
    Opened {
        step: spec.step.to_string(),
        purpose: spec.purpose,
        env: spec.env.clone(),
        network: spec.network.clone(),
        grants: spec.grants.clone(),
        read_only: spec.workspace_read_only,
        image: spec
            .image
            .as_ref()
            .map(|i| i.as_ref().map(|i| i.recorded.clone()).map_err(Clone::clone)),
    }
}

impl FakeExecutor {
    pub fn new(workspace: PathBuf) -> FakeExecutor {
        FakeExecutor {
            workspace,
            ..FakeExecutor::default()
        }
    }

    /// `command` behaves like this in every attempt (0) or one attempt.
    pub fn on(&mut self, command: &str, attempt: u32, behaviour: Behaviour) -> &mut FakeExecutor {
        self.script.insert((command.to_owned(), attempt), behaviour);
        self
    }
}

struct FakeSession {
    workspace: PathBuf,
    attempt: u32,
    script: BTreeMap<(String, u32), Behaviour>,
    side: SideEvents,
    stopped: Rc<RefCell<Vec<String>>>,
    /// The gauges of the last command run.
    gauges: Gauges,
}

impl Executor for FakeExecutor {
    fn fork(
        &self,
        workspace: &Path,
        _common: &Path,
    ) -> Result<Box<dyn Executor + Send>, ExecError> {
        Ok(Box::new(ForkedFake {
            workspace: workspace.to_path_buf(),
            script: self.script.clone(),
            forked: Arc::clone(&self.forked),
        }))
    }

    fn open(&mut self, spec: &SessionSpec) -> Result<Box<dyn StepSession>, ExecError> {
        if let Some(message) = &self.refuse {
            return Err(ExecError::Refused(cordon_protocol::Refusal(
                message.clone(),
            )));
        }
        self.opened.push(opened(spec));
        // As the real executor: an image the run did not resolve fails the session.
        if let Some(Err(message)) = &spec.image {
            return Err(ExecError::Failed(message.clone()));
        }
        Ok(Box::new(FakeSession {
            workspace: self.workspace.clone(),
            attempt: spec.attempt.get(),
            script: self.script.clone(),
            side: SideEvents::default(),
            stopped: Rc::clone(&self.stopped),
            gauges: Gauges::default(),
        }))
    }
}

impl FakeSession {
    fn behaviour(&self, argv: &[String]) -> Behaviour {
        let command = argv.last().cloned().unwrap_or_default();
        self.script
            .get(&(command.clone(), self.attempt))
            .or_else(|| self.script.get(&(command, 0)))
            .cloned()
            .unwrap_or_default()
    }
}

impl StepSession for FakeSession {
    fn run_watched(
        &mut self,
        argv: &[String],
        watch: Watch<'_>,
        on_output: &mut dyn FnMut(OutputStream, &[u8]),
    ) -> Result<CommandResult, ExecError> {
        let behaviour = self.behaviour(argv);
        if !behaviour.until_stopped {
            self.gauges = behaviour.gauges.last().copied().unwrap_or_default();
            return self.run(argv, on_output);
        }
        // Started: its writes and output happen, then it runs on, watched.
        let mut result = self.run(argv, on_output)?;
        for tick in 0..MAX_TICKS {
            let last = behaviour.gauges.len().saturating_sub(1);
            self.gauges = behaviour
                .gauges
                .get(tick.min(last))
                .copied()
                .unwrap_or_default();
            if (watch.tick)(&self.gauges) == Tick::Stop {
                self.stopped
                    .borrow_mut()
                    .push(argv.last().cloned().unwrap_or_default());
                result.exit_code = 137;
                result.stopped = true;
                break;
            }
        }
        Ok(result)
    }

    fn gauges(&self) -> Gauges {
        self.gauges
    }

    fn run(
        &mut self,
        argv: &[String],
        on_output: &mut dyn FnMut(OutputStream, &[u8]),
    ) -> Result<CommandResult, ExecError> {
        let behaviour = self.behaviour(argv);
        if let Some((mine, theirs)) = &behaviour.meet {
            std::fs::write(mine, "").map_err(|e| ExecError::Failed(e.to_string()))?;
            let deadline = std::time::Instant::now() + MEET_WAIT;
            while !theirs.exists() {
                if std::time::Instant::now() > deadline {
                    on_output(
                        OutputStream::Stderr,
                        b"the other command never ran alongside\n",
                    );
                    return Ok(CommandResult {
                        exit_code: 1,
                        timed_out: false,
                        stopped: false,
                        duration: MEET_WAIT,
                    });
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        for (path, content) in &behaviour.writes {
            let full = self.workspace.join(path);
            if let Some(parent) = full.parent() {
                std::fs::create_dir_all(parent).map_err(|e| ExecError::Failed(e.to_string()))?;
            }
            std::fs::write(full, content).map_err(|e| ExecError::Failed(e.to_string()))?;
        }
        for event in &behaviour.side {
            self.side.push(event.clone());
        }
        if !behaviour.stdout.is_empty() {
            on_output(OutputStream::Stdout, behaviour.stdout.as_bytes());
        }
        if !behaviour.stderr.is_empty() {
            on_output(OutputStream::Stderr, behaviour.stderr.as_bytes());
        }
        Ok(CommandResult {
            exit_code: behaviour.exit_code,
            timed_out: false,
            stopped: false,
            duration: Duration::from_millis(1),
        })
    }

    fn side_events(&self) -> Option<SideEvents> {
        Some(self.side.clone())
    }

    fn close(self: Box<Self>) {}
}

pub fn fails(code: i32, stderr: &str) -> Behaviour {
    Behaviour {
        exit_code: code,
        stderr: stderr.to_owned(),
        ..Behaviour::default()
    }
}

pub fn writes(path: &str, content: &str) -> Behaviour {
    Behaviour {
        writes: vec![(path.to_owned(), content.to_owned())],
        ..Behaviour::default()
    }
}
