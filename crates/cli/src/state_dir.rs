//! Where runs are stored, for the commands that read them (`runs`, `logs`, `ui`, `policy`): the
//! `--state-dir` flag, else the environment, resolved and refused the same way for each.

use std::path::PathBuf;
use std::process::ExitCode;

use cordon_store::{StateDir, StateDirSource};

/// The `--state-dir` option of `runs`, `logs` and `ui`.
#[derive(Debug, clap::Args)]
pub struct StateDirArg {
    /// Where runs are stored [default: $CORDON_STATE_DIR, $XDG_STATE_HOME/cordon or
    /// ~/.local/state/cordon]
    #[arg(long, value_name = "DIR")]
    state_dir: Option<PathBuf>,
}

impl StateDirArg {
    /// See [`resolve`].
    pub fn resolve(&self) -> Result<StateDir, ExitCode> {
        resolve(self.state_dir.clone())
    }
}

/// The state directory from `flag`, else `$CORDON_STATE_DIR`, `$XDG_STATE_HOME/cordon` or
/// `~/.local/state/cordon`. When none can be used, the reason is printed and the exit status is
/// the usage error's (2).
pub fn resolve(flag: Option<PathBuf>) -> Result<StateDir, ExitCode> {
    StateDir::resolve(&StateDirSource::from_env(flag)).map_err(|err| {
        eprintln!("cordon: {err}");
        ExitCode::from(2)
    })
}
