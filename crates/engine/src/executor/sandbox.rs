//! The real executor: one `cordon_sandbox::Session` per step attempt or setup hook, with its
//! egress proxy listener when its network is an allowlist or `open`.

use std::path::PathBuf;
use std::sync::Arc;

use cordon_protocol::event::OutputStream;
use cordon_sandbox::mounts::GitMutations;
use cordon_sandbox::{
    ExecRequest, InitProgram, Network, SandboxError, Session, SessionConfig, Stream, Workspace,
};

use super::{CommandResult, ExecError, Executor, SessionSpec, StepSession};
use crate::egress::{Egress, SessionEgress, SessionLane, SideEvents};
use crate::error_chain;

/// Opens sandbox sessions on the workspace, masking `mask` (state dir, policy file) everywhere.
pub struct SandboxExecutor {
    workspace: Workspace,
    init: InitProgram,
    mask: Vec<PathBuf>,
    /// Serves networked sessions' proxies; without it a networked session is refused.
    egress: Option<Arc<Egress>>,
}

impl SandboxExecutor {
    pub fn new(workspace: Workspace, init: InitProgram, mask: Vec<PathBuf>) -> SandboxExecutor {
        SandboxExecutor {
            workspace,
            init,
            mask,
            egress: None,
        }
    }

    /// Serves the proxy of every session whose network is not `none` through `egress`.
    pub fn with_egress(mut self, egress: Arc<Egress>) -> SandboxExecutor {
        self.egress = Some(egress);
        self
    }
}

fn convert(err: SandboxError) -> ExecError {
    match err {
        SandboxError::Refused { .. } => ExecError::Refused(err.to_string()),
        other => ExecError::Failed(error_chain(&other)),
    }
}

impl Executor for SandboxExecutor {
    fn open(&mut self, spec: &SessionSpec) -> Result<Box<dyn StepSession>, ExecError> {
        let mut config = SessionConfig::new(self.workspace.clone(), self.init.clone());
        config.network = Network::None;
        config.read_only.clone_from(&spec.read_only);
        config.hide.clone_from(&spec.hide);
        config.protect.clone_from(&spec.protect);
        config.mask.clone_from(&self.mask);
        if let Some(size) = spec.tmp_size {
            config.tmp_size = size;
        }
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
        let mut session = Session::open(config).map_err(convert)?;
        let egress = match (policy, &self.egress) {
            (Some((policy, refused)), Some(egress)) => {
                let listener = session.listen_proxy().map_err(convert)?;
                let served = egress.serve(listener, policy, spec, refused).map_err(|e| {
                    ExecError::Failed(format!("the session's egress proxy cannot start: {e}"))
                })?;
                Some(served)
            }
            _ => None,
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
            env,
            timeout: spec.timeout,
            egress,
            lane,
            events,
        }))
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
    env: Vec<(String, String)>,
    timeout: Option<std::time::Duration>,
    egress: Option<SessionEgress>,
    lane: Option<SessionLane>,
    /// Where the proxy's and the lane's events queue (one queue for both).
    events: Option<SideEvents>,
}

impl StepSession for Live {
    fn run(
        &mut self,
        argv: &[String],
        on_output: &mut dyn FnMut(OutputStream, &[u8]),
    ) -> Result<CommandResult, ExecError> {
        let mut request = ExecRequest::new(argv.to_vec());
        request.env.clone_from(&self.env);
        request.timeout = self.timeout;
        // The engine logs every chunk through `on_output`; the capture is not used.
        request.capture_limit = 0;
        let outcome = self
            .session
            .exec(&request, &mut |stream, bytes| {
                let stream = match stream {
                    Stream::Stdout => OutputStream::Stdout,
                    Stream::Stderr => OutputStream::Stderr,
                };
                on_output(stream, bytes);
            })
            .map_err(convert)?;
        Ok(CommandResult {
            exit_code: outcome.exit_code(),
            timed_out: outcome.timed_out,
            duration: outcome.duration,
        })
    }

    fn side_events(&self) -> Option<SideEvents> {
        self.events.clone()
    }

    fn close(self: Box<Self>) {
        let Live {
            session,
            egress,
            lane,
            ..
        } = *self;
        // The processes first, so no connection is left for the listeners to wait for.
        session.close();
        if let Some(egress) = egress {
            egress.stop();
        }
        if let Some(lane) = lane {
            lane.stop();
        }
    }
}
