//! The real executor: one `cordon_sandbox::Session` per step attempt or setup hook.

use std::path::PathBuf;

use cordon_protocol::event::OutputStream;
use cordon_sandbox::mounts::GitMutations;
use cordon_sandbox::{
    ExecRequest, InitProgram, Network, SandboxError, Session, SessionConfig, Stream, Workspace,
};

use super::{CommandResult, ExecError, Executor, SessionSpec, StepSession};

/// Opens sandbox sessions on the workspace, masking `mask` (state dir, policy file) everywhere.
pub struct SandboxExecutor {
    workspace: Workspace,
    init: InitProgram,
    mask: Vec<PathBuf>,
}

impl SandboxExecutor {
    pub fn new(workspace: Workspace, init: InitProgram, mask: Vec<PathBuf>) -> SandboxExecutor {
        SandboxExecutor {
            workspace,
            init,
            mask,
        }
    }
}

fn convert(err: SandboxError) -> ExecError {
    match err {
        SandboxError::Refused { .. } => ExecError::Refused(err.to_string()),
        other => ExecError::Failed(error_chain(&other)),
    }
}

fn error_chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(next) = source {
        text.push_str(": ");
        text.push_str(&next.to_string());
        source = next.source();
    }
    text
}

impl Executor for SandboxExecutor {
    fn open(&mut self, spec: &SessionSpec) -> Result<Box<dyn StepSession>, ExecError> {
        let mut config = SessionConfig::new(self.workspace.clone(), self.init.clone());
        config.network = Network::None;
        config.read_only.clone_from(&spec.read_only);
        config.hide.clone_from(&spec.hide);
        config.mask.clone_from(&self.mask);
        if let Some(size) = spec.tmp_size {
            config.tmp_size = size;
        }
        config.git_mutations = if spec.allow_git_mutations {
            GitMutations::Allow
        } else {
            GitMutations::Deny
        };
        let session = Session::open(config).map_err(convert)?;
        Ok(Box::new(Live {
            session,
            env: spec.env.clone(),
            timeout: spec.timeout,
        }))
    }
}

struct Live {
    session: Session,
    env: Vec<(String, String)>,
    timeout: Option<std::time::Duration>,
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

    fn close(self: Box<Self>) {
        self.session.close();
    }
}
