//! An outcome run's parallel tasks (`parallel: N > 1`, DESIGN §13 with §18): up to N tasks are
//! between pending and an end at once, and each phase of a task runs on a thread of its own, in
//! the task's own linked worktree.
//!
//! **One writer of decisions.** This engine — the coordinator — decides everything: it logs
//! every `task.state`, makes and removes the worktrees, merges an accepted task into the main
//! work tree and commits it. A task's thread runs exactly one phase attempt (the same
//! [`Engine::phase`] as a sequential run, so sessions, events, consoles, transcripts and diffs
//! are unchanged) with an engine of its own: its own store connection, its executor forked
//! onto the worktree, its agent driver forked (sharing the provider, so a replay serves each
//! turn once), replaying the log when it starts. Its appends land in the one log; it wakes the
//! coordinator, which folds and observes every record in log order (`Engine::catch_up`). So
//! the coordinator's state is always a replay of a prefix of the log, and a resumed run —
//! which replays the whole log — decides exactly what the live one would have.
//!
//! **Worktrees.** A task's worktree is made when its first phase is about to run, at
//! `<state-dir>/worktrees/<run>/<task>` (`work/` and its git directory `git/`), from a
//! run-private commit of the main work tree as it is then: every task accepted so far is in it
//! whatever `commit:` says. It lives until the task ends (then it is removed), or until its
//! merge conflicts (removed before the revision is logged, so the next `execute` starts on a
//! fresh one on top of what was accepted since). A resumed run finds it where it was.
//!
//! **Stopping.** An observer's stop, a budget, or an error in any thread sets the shared stop
//! flag: every task's engine stops at its next append, as if the process had died there, and the
//! coordinator waits for all of them before it returns.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;

use cordon_pipeline::{OutcomeSpec, Pipeline};
use cordon_protocol::{Attempt, Event, Record, RunId};
use cordon_store::Store;
use cordon_workspace::{View, WsPath};

use super::{Control, Ending, Engine, Failure, RunContext};
use crate::EngineError;
use crate::agent::AgentDriver;
use crate::executor::{ExecError, Executor};
use crate::outcome::schedule::{self, Next};
use crate::resources::{Limits, ResourceGuard};
use crate::secrets::Secrets;
use crate::workspace::HostWorkspace;

/// The file, in the run's worktrees directory, naming its accepted commit.
const ACCEPTED: &str = "accepted";

/// How an engine shares its run's log.
pub(super) enum Role {
    /// The only engine of the run (a steps run, a sequential outcome run, the coordinator).
    Alone,
    /// A task's engine: it wakes the coordinator after each append and stops once `stop` is
    /// set.
    Task {
        wake: mpsc::Sender<Msg>,
        stop: Arc<AtomicBool>,
    },
}

/// What a task's thread tells the coordinator.
pub(super) enum Msg {
    /// A record was appended.
    Appended,
    /// The phase ended (its `step.finished` is in the log), or the thread stopped.
    Done {
        task: String,
        result: Result<(), Failure>,
    },
}

/// How an accepted task's merge went.
pub(super) enum Merge {
    /// Merged: the run's new accepted commit (saved already).
    Clean(cordon_git::ObjectId),
    /// The conflict, for the revision's findings.
    Conflict(String),
    /// The merge could not be made (the task fails with this).
    Failed(String),
}

/// Everything a task's thread needs, made by the coordinator.
struct Job {
    task: String,
    phase: &'static str,
    attempt: Attempt,
    rerun: bool,
    run: RunId,
    store: Store,
    executor: Box<dyn Executor + Send>,
    agents: Option<Box<dyn AgentDriver + Send>>,
    work: PathBuf,
    dirs: cordon_git::Dirs,
    identity: cordon_git::Identity,
    guard: cordon_git::Guard,
    refresh: bool,
    tooling: Vec<WsPath>,
    meter: crate::budget::Meter,
    images: crate::images::RunImages,
    limits: Option<Limits>,
}

impl Job {
    /// Runs the phase attempt with an engine of its own on the task's worktree.
    fn run(
        self,
        pipeline: &Pipeline,
        secrets: &Secrets,
        spec: &OutcomeSpec,
        wake: mpsc::Sender<Msg>,
        stop: Arc<AtomicBool>,
    ) -> Result<(), Failure> {
        let view = View::open(&self.work).map_err(|source| EngineError::Workspace {
            action: "open the task's worktree",
            path: self.work.clone(),
            source,
        })?;
        let repo = cordon_git::Repo::open(&view, self.dirs, None, self.identity, self.guard)
            .map_err(EngineError::from)?;
        let host = HostWorkspace::new(view, Some(repo));
        let mut executor = self.executor;
        let mut agents = self.agents;
        let cx = RunContext {
            store: &self.store,
            run: self.run,
            pipeline,
            workspace: &host,
            executor: &mut *executor,
            secrets,
            refresh: self.refresh,
            tooling: self.tooling,
            agents: agents
                .as_deref_mut()
                .map(|driver| driver as &mut dyn AgentDriver),
            meter: self.meter,
            images: self.images,
            plan: None,
        };
        // The coordinator observes every record; this engine's own observer sees nothing.
        let mut quiet = |_: &Record| Control::Continue;
        let mut engine = Engine::new(cx, &mut quiet)?;
        engine.role = Role::Task { wake, stop };
        if let Some(limits) = self.limits {
            engine.set_resource_guard(ResourceGuard::new(limits));
        }
        engine.phase(spec, &self.task, self.phase, self.attempt, self.rerun)
    }
}

impl<'a> Engine<'a> {
    /// The outcome run's actions with up to `spec.parallel` tasks at once.
    pub(super) fn drive_parallel(&mut self, spec: &OutcomeSpec) -> Result<Ending, EngineError> {
        if self.cx.workspace.git().is_none() {
            return Err(EngineError::Unsupported(
                "`parallel` above 1 gives each task a git worktree, and this workspace has no \
                 repository cordon can use; run in a git work tree, or set `parallel: 1`"
                    .to_owned(),
            ));
        }
        if self.cx.agents.as_ref().is_some_and(|a| a.fork().is_none()) {
            return Err(EngineError::Unsupported(
                "this run's agent driver cannot run tasks in parallel; set `parallel: 1`"
                    .to_owned(),
            ));
        }
        let pipeline: &'a Pipeline = self.cx.pipeline;
        let secrets: &'a Secrets = self.cx.secrets;
        let stop = Arc::new(AtomicBool::new(false));
        let (wake, inbox) = mpsc::channel::<Msg>();
        let mut busy: BTreeSet<String> = BTreeSet::new();
        let mut failure: Option<Failure> = None;
        std::thread::scope(|scope| {
            loop {
                if failure.is_none()
                    && let Err(caught) = self.catch_up().and_then(|()| self.report_due())
                {
                    failure = Some(caught);
                }
                if failure.is_some() {
                    stop.store(true, Ordering::SeqCst);
                    if busy.is_empty() {
                        break;
                    }
                    receive(&inbox, &mut busy, &mut failure);
                    continue;
                }
                if busy.is_empty()
                    && let Some(outcome) = self.state.outcome
                {
                    return Ok(Ending::Finished(outcome));
                }
                let next =
                    schedule::next_with(&self.tasks, spec, self.state.max_attempts.max(1), &busy);
                let result = match next {
                    Next::Wait => {
                        receive(&inbox, &mut busy, &mut failure);
                        continue;
                    }
                    Next::Phase {
                        task,
                        phase,
                        attempt,
                        rerun,
                    } => self.job(&task, phase, attempt, rerun).map(|job| {
                        busy.insert(task.clone());
                        let (wake, stop) = (wake.clone(), Arc::clone(&stop));
                        scope.spawn(move || {
                            let done = wake.clone();
                            let result =
                                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                                    job.run(pipeline, secrets, spec, wake, stop)
                                }))
                                .unwrap_or_else(|_| {
                                    Err(Failure::Error(EngineError::Sandbox(format!(
                                        "the thread of task `{task}` panicked; resume the run"
                                    ))))
                                });
                            let _ = done.send(Msg::Done { task, result });
                        });
                    }),
                    other => self.act(spec, other),
                };
                if let Err(caught) = result {
                    failure = Some(caught);
                }
            }
            match failure.take() {
                Some(Failure::Error(err)) => Err(err),
                Some(Failure::Stop) | None => Ok(Ending::Stopped),
            }
        })
    }

    /// The job of `task`'s next phase attempt: its worktree made when it has none yet.
    fn job(
        &mut self,
        task: &str,
        phase: &'static str,
        attempt: Attempt,
        rerun: bool,
    ) -> Result<Job, Failure> {
        let dir = self.worktree(task);
        if std::fs::symlink_metadata(&dir).is_err() {
            let base = self.accepted()?;
            let main = self.cx.workspace.git().ok_or_else(no_git)?;
            main.create_worktree(base, &dir)
                .map_err(EngineError::from)?;
        }
        let main = self.cx.workspace.git().ok_or_else(no_git)?;
        let tree = cordon_git::Worktree::at(&dir);
        let common = main.dirs().common_dir.clone();
        let executor = self
            .cx
            .executor
            .fork(&tree.work, &common)
            .map_err(|err| match err {
                ExecError::Refused(refusal) => EngineError::Refused(refusal),
                ExecError::Failed(message) => EngineError::Sandbox(message),
            })?;
        Ok(Job {
            task: task.to_owned(),
            phase,
            attempt,
            rerun,
            run: self.cx.run,
            store: self.cx.store.connect()?,
            executor,
            agents: self.cx.agents.as_ref().and_then(|a| a.fork()),
            work: tree.work,
            dirs: cordon_git::Dirs {
                git_dir: tree.git_dir,
                common_dir: main.dirs().common_dir.clone(),
            },
            identity: main.identity().clone(),
            guard: main.guard().clone(),
            refresh: self.cx.refresh,
            tooling: self.cx.tooling.clone(),
            meter: self.cx.meter.clone(),
            images: self.cx.images.clone(),
            limits: self.guard.as_ref().map(|g| g.limits),
        })
    }

    /// The run's accepted commit: every task accepted so far on top of the main work tree as
    /// the first worktree found it. Kept in `<state-dir>/worktrees/<run>/accepted`; made, the
    /// first time, from the main work tree as the commit action stages it (nothing a task did
    /// is in it yet, so its ignore rules are the user's).
    fn accepted(&mut self) -> Result<cordon_git::ObjectId, Failure> {
        let file = self.worktrees().join(ACCEPTED);
        if let Ok(text) = std::fs::read_to_string(&file)
            && let Ok(id) = cordon_git::ObjectId::from_hex(text.trim().as_bytes())
        {
            return Ok(id);
        }
        let main = self.cx.workspace.git().ok_or_else(no_git)?;
        let base = main
            .base_commit(
                self.cx.workspace.view(),
                &format!("cordon: the base of run {}", self.cx.run),
                &self.cx.tooling,
                &mut self.cache,
            )
            .map_err(EngineError::from)?;
        self.save_accepted(base)?;
        Ok(base)
    }

    /// Records `id` as the run's accepted commit (written beside, then renamed over).
    fn save_accepted(&self, id: cordon_git::ObjectId) -> Result<(), Failure> {
        let dir = self.worktrees();
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| {
                Failure::Error(EngineError::Workspace {
                    action: "record the accepted commit in",
                    path,
                    source,
                })
            }
        };
        use std::os::unix::fs::DirBuilderExt as _;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)
            .map_err(io(&dir))?;
        let partial = dir.join(format!("{ACCEPTED}.partial"));
        std::fs::write(&partial, format!("{id}\n")).map_err(io(&partial))?;
        std::fs::File::open(&partial)
            .and_then(|f| f.sync_all())
            .map_err(io(&partial))?;
        std::fs::rename(&partial, dir.join(ACCEPTED)).map_err(io(&dir))
    }

    /// Where `task`'s worktree lives: `<state-dir>/worktrees/<run>/<task>`.
    fn worktree(&self, task: &str) -> PathBuf {
        self.worktrees().join(task)
    }

    fn worktrees(&self) -> PathBuf {
        self.cx
            .store
            .dir()
            .join("worktrees")
            .join(self.cx.run.to_string())
    }

    /// Merges the accepted `task`'s worktree into the main work tree.
    pub(super) fn merge_task(&mut self, task: &str) -> Result<Merge, Failure> {
        let dir = self.worktree(task);
        if std::fs::symlink_metadata(&dir).is_err() {
            return Ok(Merge::Conflict(
                "its worktree is gone (cordon stopped while replacing it), so there is nothing \
                 to merge; execute the task again on a fresh worktree"
                    .to_owned(),
            ));
        }
        let main = self.cx.workspace.git().ok_or_else(no_git)?;
        let tree = cordon_git::Worktree::at(&dir);
        let opened = View::open(&tree.work)
            .map_err(cordon_git::GitError::io("open", &tree.work))
            .and_then(|view| {
                let dirs = cordon_git::Dirs {
                    git_dir: tree.git_dir.clone(),
                    common_dir: main.dirs().common_dir.clone(),
                };
                let repo = cordon_git::Repo::open(
                    &view,
                    dirs,
                    None,
                    main.identity().clone(),
                    main.guard().clone(),
                )?;
                Ok((view, repo))
            });
        let accepted = self.accepted()?;
        let main = self.cx.workspace.git().ok_or_else(no_git)?;
        let message = format!("cordon: run {} accepted task {task}", self.cx.run);
        let merged = opened.and_then(|(view, repo)| {
            main.merge(
                self.cx.workspace.view(),
                &repo,
                &view,
                &self.cx.tooling,
                (accepted, &message),
                &mut self.cache,
            )
        });
        self.last_diff = None;
        Ok(match merged {
            Ok(cordon_git::Merged::Clean { accepted, .. }) => {
                self.save_accepted(accepted)?;
                Merge::Clean(accepted)
            }
            Ok(cordon_git::Merged::Conflict { report, .. }) => Merge::Conflict(format!(
                "merging it into the main work tree conflicted with work accepted since it \
                 began; it executes again on a fresh worktree holding that work:\n{report}"
            )),
            Err(err) => Merge::Failed(crate::error_chain(&err)),
        })
    }

    /// A merge conflict sends `task` back to `execute` as a revision (or fails it past
    /// `max_revisions`). The worktree goes first, so the revision starts on a fresh one.
    pub(super) fn revise_after_merge(
        &mut self,
        spec: &OutcomeSpec,
        task: &str,
        why: String,
    ) -> Result<(), Failure> {
        let progress = self.tasks.progress.get(task).cloned().unwrap_or_default();
        let next = schedule::revise(task, &progress, why, spec);
        self.remove_worktree(task);
        self.act(spec, next)
    }

    /// Removes `task`'s worktree (cordon's own directory; a link inside is removed, never
    /// followed). A failure is said in an `error` event and does not stop the run.
    pub(super) fn remove_worktree(&mut self, task: &str) {
        let dir = self.worktree(task);
        if std::fs::symlink_metadata(&dir).is_ok()
            && let Err(err) = std::fs::remove_dir_all(&dir)
        {
            let _ = self.append(
                None,
                Event::Error {
                    message: format!(
                        "the worktree of task `{task}` ({}) was not removed: {err}",
                        dir.display()
                    ),
                },
            );
        }
    }

    /// The run's accepted commit as it is now (a parallel run's `commit: end` commits it).
    pub(super) fn accepted_now(&mut self) -> Result<cordon_git::ObjectId, Failure> {
        self.accepted()
    }

    /// Removes the run's worktrees directory once the run has ended.
    pub(super) fn remove_worktrees(&mut self) {
        let dir = self.worktrees();
        if std::fs::symlink_metadata(&dir).is_ok() {
            let _ = std::fs::remove_dir_all(&dir);
        }
    }
}

fn no_git() -> Failure {
    Failure::Error(EngineError::Unsupported(
        "parallel tasks need the workspace's git".to_owned(),
    ))
}

/// Waits for the next message from a task's thread: a record appended, or a phase ended (its
/// error kept, an error before a stop).
fn receive(
    inbox: &mpsc::Receiver<Msg>,
    busy: &mut BTreeSet<String>,
    failure: &mut Option<Failure>,
) {
    match inbox.recv() {
        Ok(Msg::Appended) | Err(_) => {}
        Ok(Msg::Done { task, result }) => {
            busy.remove(&task);
            if let Err(caught) = result {
                match (&failure, caught) {
                    (None | Some(Failure::Stop), caught) => *failure = Some(caught),
                    (Some(Failure::Error(_)), _) => {}
                }
            }
        }
    }
}
