//! The real executor: one `cordon_sandbox::Session` per step attempt or setup hook, with its
//! egress proxy listener when its network is an allowlist or `open`.

use std::path::PathBuf;
use std::sync::Arc;

use cordon_protocol::event::OutputStream;
use cordon_sandbox::mounts::GitMutations;
use cordon_sandbox::{
    ExecRequest, InitProgram, Network, SandboxError, Session, SessionConfig, Stream, Workspace,
};

use super::{CommandResult, ExecError, Executor, Gauges, SessionSpec, StepSession, Tick, Watch};
use crate::egress::{Egress, SessionEgress, SessionLane};
use crate::error_chain;
use crate::resources::{Memory, used_percent};
use crate::side::SideEvents;

/// Opens sandbox sessions on the workspace, masking `mask` (state dir, policy file) everywhere.
#[derive(Clone)]
pub struct SandboxExecutor {
    workspace: Workspace,
    init: InitProgram,
    mask: Vec<PathBuf>,
    /// Serves networked sessions' proxies; without it a networked session is refused.
    egress: Option<Arc<Egress>>,
    /// The host toolchains exposed in every session (`isolation.toolchains`).
    toolchains: cordon_sandbox::toolchain::Exposure,
    /// The operator's `[env] pass` values and the files they name.
    passed: cordon_sandbox::environment::Passed,
    /// The persistent caches mounted in every session (`isolation.caches`).
    caches: Option<cordon_sandbox::cache::Opened>,
    /// Where sessions that may change an ordinary repository's git directory get their private
    /// one (`allow_git_mutations`, see `cordon_git::private`): the state directory.
    private_git: Option<PathBuf>,
}

impl SandboxExecutor {
    pub fn new(workspace: Workspace, init: InitProgram, mask: Vec<PathBuf>) -> SandboxExecutor {
        SandboxExecutor {
            workspace,
            init,
            mask,
            egress: None,
            toolchains: cordon_sandbox::toolchain::Exposure::default(),
            passed: (Vec::new(), Vec::new()),
            caches: None,
            private_git: None,
        }
    }

    /// Gives each session allowed to change an ordinary repository's git directory a private
    /// one under `state_dir`, imported into the host's when the session ends.
    pub fn with_private_git(mut self, state_dir: PathBuf) -> SandboxExecutor {
        self.private_git = Some(state_dir);
        self
    }

    /// Mounts `caches` in every session.
    pub fn with_caches(mut self, caches: Option<cordon_sandbox::cache::Opened>) -> SandboxExecutor {
        self.caches = caches;
        self
    }

    /// Sets the operator's `[env] pass` values in every session, the files they name read-only.
    pub fn with_passed(mut self, passed: cordon_sandbox::environment::Passed) -> SandboxExecutor {
        self.passed = passed;
        self
    }

    /// Exposes `toolchains` in every session.
    pub fn with_toolchains(
        mut self,
        toolchains: cordon_sandbox::toolchain::Exposure,
    ) -> SandboxExecutor {
        self.toolchains = toolchains;
        self
    }

    /// Serves the proxy of every session whose network is not `none` through `egress`.
    pub fn with_egress(mut self, egress: Arc<Egress>) -> SandboxExecutor {
        self.egress = Some(egress);
        self
    }
}

fn convert(err: SandboxError) -> ExecError {
    match err {
        // A cap that cannot be enforced refuses like a missing layer (exit 3).
        SandboxError::Refused { .. } | SandboxError::Cap(_) => {
            ExecError::Refused(cordon_protocol::Refusal(err.to_string()))
        }
        other => ExecError::Failed(error_chain(&other)),
    }
}

impl Executor for SandboxExecutor {
    /// Everything the same — proxy, toolchains, caches, passed variables, masks — but the
    /// workspace: a parallel task's worktree, whose git layout is found as any workspace's.
    fn fork(
        &self,
        workspace: &std::path::Path,
        common: &std::path::Path,
    ) -> Result<Box<dyn Executor + Send>, ExecError> {
        let mut fork = self.clone();
        let common = common.canonicalize().map_err(|err| {
            ExecError::Failed(format!("cannot resolve {}: {err}", common.display()))
        })?;
        fork.workspace = Workspace::open(workspace)
            .map_err(convert)?
            .with_common_dir(common);
        Ok(Box::new(fork))
    }

    fn open(&mut self, spec: &SessionSpec) -> Result<Box<dyn StepSession>, ExecError> {
        let mut config = SessionConfig::new(self.workspace.clone(), self.init.clone());
        config.network = Network::None;
        config.read_only.clone_from(&spec.read_only);
        config.toolchains.clone_from(&self.toolchains);
        // A read-only session (an outcome's planner, critic or validator) writes nothing that
        // outlives it: no persistent cache is mounted, so it cannot seed one for later sessions.
        if !spec.workspace_read_only {
            config.caches.clone_from(&self.caches);
        }
        config.passed.clone_from(&self.passed.0);
        config.read_only.extend(self.passed.1.iter().cloned());
        config.hide.clone_from(&spec.hide);
        config.protect.clone_from(&spec.protect);
        config.mask.clone_from(&self.mask);
        if let Some(size) = spec.tmp_size {
            config.tmp_size = size;
        }
        config.caps = spec.caps;
        config.workspace_read_only = spec.workspace_read_only;
        config.image = match &spec.image {
            None => None,
            Some(Err(message)) => return Err(ExecError::Failed(message.clone())),
            Some(Ok(image)) => Some(
                cordon_sandbox::ImageRoot::open(&image.rootfs, image.writable, image.path.clone())
                    .map_err(convert)?,
            ),
        };
        config.git_mutations = if spec.allow_git_mutations {
            GitMutations::Allow
        } else {
            GitMutations::Deny
        };
        // A networked session is never run without its proxy (silently offline), nor with the
        // host's network: its own namespace, and the proxy as the only way out.
        let offline = matches!(spec.network, cordon_pipeline::Network::None);
        let policy = match (&self.egress, offline) {
            (_, true) => None,
            (Some(egress), false) => egress.policy(&spec.network, &spec.grants),
            (None, false) => {
                return Err(ExecError::Failed(format!(
                    "`{}` needs the egress proxy, which this executor has not been given",
                    spec.network
                )));
            }
        };
        let private = match (&self.private_git, spec.allow_git_mutations) {
            (Some(state_dir), true) => {
                let prepared = cordon_git::private::prepare(self.workspace.path(), state_dir)
                    .map_err(|err| ExecError::Failed(error_chain(&err)))?;
                note(&prepared.notes);
                prepared.private
            }
            _ => None,
        };
        config.private_git = private.as_ref().map(|p| cordon_sandbox::PrivateGitDir {
            git_dir: p.git_dir().to_path_buf(),
            dir: p.dir().to_path_buf(),
            objects_at: p.objects_mount(),
        });
        // A session that never opened has run nothing: its private directory is removed (the
        // import finds nothing to bring in).
        let mut session = match Session::open(config) {
            Ok(session) => session,
            Err(err) => {
                if let Some(private) = private {
                    import(private);
                }
                return Err(convert(err));
            }
        };
        let (egress, host_egress) = match (policy, &self.egress) {
            (Some((policy, refused)), Some(egress)) => {
                let host_policy = spec.host_proxy.then(|| policy.clone());
                let listener = session.listen_proxy().map_err(convert)?;
                let served = egress.serve(listener, policy, spec, refused).map_err(|e| {
                    ExecError::Failed(format!("the session's egress proxy cannot start: {e}"))
                })?;
                // The host-side listener of the step's HTTP MCP servers: the same policy, the
                // same event queue, on an ephemeral loopback port that lives with the session.
                let host = match host_policy {
                    Some(policy) => {
                        let fail = |e: std::io::Error| {
                            ExecError::Failed(format!(
                                "the session's host-side egress listener cannot start: {e}"
                            ))
                        };
                        let listener =
                            std::net::TcpListener::bind(("127.0.0.1", 0)).map_err(fail)?;
                        let addr = listener.local_addr().map_err(fail)?;
                        let credential =
                            format!("Bearer {}", cordon_store::random_hex::<16>().map_err(fail)?);
                        let host = egress
                            .serve_into(
                                listener,
                                policy,
                                spec,
                                served.events(),
                                Some(credential.clone()),
                            )
                            .map_err(fail)?;
                        Some((host, crate::executor::HostProxy { addr, credential }))
                    }
                    None => None,
                };
                (Some(served), host)
            }
            _ => (None, None),
        };
        let mut env = Vec::new();
        let mut events = egress.as_ref().map(SessionEgress::events);
        let lane = if spec.model_lane {
            let Some(run_egress) = &self.egress else {
                return Err(ExecError::Failed(format!(
                    "step `{}` needs the model lane, which this executor has not been given",
                    spec.step
                )));
            };
            let queue = events.get_or_insert_with(SideEvents::default).clone();
            let listener = session
                .listen_tcp(cordon_sandbox::environment::LANE_ADDR)
                .map_err(convert)?;
            let lane = run_egress.serve_lane(listener, queue).map_err(|e| {
                ExecError::Failed(format!("the session's model lane cannot start: {e}"))
            })?;
            // Appendix A's lane variables. The sandbox sets these itself only through its own
            // lane listener; this one is served by the engine, so they travel with the step's
            // variables — first, so a step's own `env` still wins. Only the dummy key enters.
            env.extend(lane_env());
            Some(lane)
        } else {
            None
        };
        env.extend(spec.env.iter().cloned());
        Ok(Box::new(Live {
            session,
            private,
            env,
            timeout: spec.timeout,
            egress,
            host_egress,
            lane,
            events,
        }))
    }
}

/// Brings a closed session's git work into the host's repository, saying on stderr what was left
/// as the host has it (a failure loses only the session's refs and index: its files are in the
/// work tree).
fn import(private: cordon_git::private::PrivateGit) {
    match private.import() {
        Ok(imported) => note(&imported.notes),
        Err(err) => note(&[format!(
            "the session's git work (commits, refs, index) was not imported: {}",
            error_chain(&err)
        )]),
    }
}

/// One stderr line per note, escaped (ref names are the sandbox's).
fn note(notes: &[String]) {
    for line in notes {
        eprintln!("cordon: git: {}", cordon_protocol::text::escape_line(line));
    }
}

/// The model lane's variables inside a session (Appendix A).
fn lane_env() -> Vec<(String, String)> {
    use cordon_sandbox::environment::{LANE_ADDR, LANE_DUMMY_KEY};
    vec![
        (
            "OPENAI_BASE_URL".to_owned(),
            format!("http://{LANE_ADDR}/v1"),
        ),
        (
            "ANTHROPIC_BASE_URL".to_owned(),
            format!("http://{LANE_ADDR}"),
        ),
        ("OPENAI_API_KEY".to_owned(), LANE_DUMMY_KEY.to_owned()),
        ("ANTHROPIC_API_KEY".to_owned(), LANE_DUMMY_KEY.to_owned()),
    ]
}

struct Live {
    session: Session,
    /// The session's private git directory, imported once the session is closed.
    private: Option<cordon_git::private::PrivateGit>,
    env: Vec<(String, String)>,
    timeout: Option<std::time::Duration>,
    egress: Option<SessionEgress>,
    /// The host-side listener of the step's HTTP MCP servers, its address and credential.
    host_egress: Option<(SessionEgress, crate::executor::HostProxy)>,
    lane: Option<SessionLane>,
    /// Where the proxy's and the lane's events queue (one queue for both).
    events: Option<SideEvents>,
}

impl Live {
    fn exec(
        &mut self,
        argv: &[String],
        watch: Option<Watch<'_>>,
        on_output: &mut dyn FnMut(OutputStream, &[u8]),
    ) -> Result<CommandResult, ExecError> {
        let mut request = ExecRequest::new(argv.to_vec());
        request.env.clone_from(&self.env);
        request.timeout = self.timeout;
        // The engine logs every chunk through `on_output`; the capture is not used.
        request.capture_limit = 0;
        let mut on_output = |stream, bytes: &[u8]| {
            let stream = match stream {
                Stream::Stdout => OutputStream::Stdout,
                Stream::Stderr => OutputStream::Stderr,
            };
            on_output(stream, bytes);
        };
        let outcome = match watch {
            None => self.session.exec(&request, &mut on_output),
            Some(Watch { every, tick }) => {
                let mut tick = |session: &Session| match tick(&gauges(session)) {
                    Tick::Continue => cordon_sandbox::Tick::Continue,
                    Tick::Stop => cordon_sandbox::Tick::Stop {
                        reason: "the engine's resource guard".to_owned(),
                    },
                };
                let watch = cordon_sandbox::Watch {
                    every,
                    tick: &mut tick,
                };
                self.session
                    .exec_watched(&request, Some(watch), &mut on_output)
            }
        }
        .map_err(convert)?;
        if !outcome.timed_out
            && outcome.stopped.is_none()
            && outcome.oom.is_none()
            && crate::run::stopping_kill(outcome.exit_code())
        {
            // The signal handler is ending the process with `run.interrupted`: this step's end
            // is left unrecorded, so a resume runs it again from its start.
            loop {
                std::thread::sleep(std::time::Duration::from_secs(60));
            }
        }
        Ok(CommandResult {
            exit_code: outcome.exit_code(),
            timed_out: outcome.timed_out,
            stopped: outcome.stopped.is_some(),
            duration: outcome.duration,
        })
    }
}

/// What a session measures: its memory (with a cap) and its tmpfs, sampled from the host.
fn gauges(session: &Session) -> Gauges {
    Gauges {
        memory: session.memory_usage().map(|m| Memory {
            used: m.used,
            cap: m.cap,
        }),
        tmp_percent: used_percent(&session.tmp_path()).ok(),
    }
}

impl StepSession for Live {
    fn run(
        &mut self,
        argv: &[String],
        on_output: &mut dyn FnMut(OutputStream, &[u8]),
    ) -> Result<CommandResult, ExecError> {
        self.exec(argv, None, on_output)
    }

    fn run_watched(
        &mut self,
        argv: &[String],
        watch: Watch<'_>,
        on_output: &mut dyn FnMut(OutputStream, &[u8]),
    ) -> Result<CommandResult, ExecError> {
        self.exec(argv, Some(watch), on_output)
    }

    fn gauges(&self) -> Gauges {
        gauges(&self.session)
    }

    fn side_events(&self) -> Option<SideEvents> {
        self.events.clone()
    }

    fn host_proxy(&self) -> Option<crate::executor::HostProxy> {
        self.host_egress.as_ref().map(|(_, proxy)| proxy.clone())
    }

    fn spawn_background(
        &mut self,
        argv: &[String],
        env: &[(String, String)],
    ) -> Result<crate::executor::Background, ExecError> {
        let mut request = ExecRequest::new(argv.to_vec());
        request.env.clone_from(&self.env);
        request.env.extend(env.iter().cloned());
        let started = self.session.spawn_background(&request).map_err(convert)?;
        Ok(crate::executor::Background {
            stdin: started.stdin,
            stdout: started.stdout,
            stderr: started.stderr,
        })
    }

    fn close(self: Box<Self>) {
        let Live {
            session,
            private,
            egress,
            host_egress,
            lane,
            ..
        } = *self;
        // The processes first, so no connection is left for the listeners to wait for — and
        // nothing changes the private git directory while it is imported.
        session.close();
        if let Some(private) = private {
            import(private);
        }
        if let Some(egress) = egress {
            egress.stop();
        }
        if let Some((egress, _)) = host_egress {
            egress.stop();
        }
        if let Some(lane) = lane {
            lane.stop();
        }
    }
}
