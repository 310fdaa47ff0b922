//! Where runs are stored, for the commands that read them (`runs`, `logs`, `ui`, `policy`): the
//! `--state-dir` flag, else the environment, resolved and refused the same way for each; and
//! `--store URL` (else `$CORDON_STORE`), a shared PostgreSQL store, for the commands of DESIGN §16.

use std::path::PathBuf;
use std::process::ExitCode;

use cordon_protocol::RunId;
use cordon_store::{StateDir, StateDirSource, Store};

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

    /// The state directory, its runs in the store `store` names (see [`resolve_with_store`]).
    pub fn resolve_with(&self, store: &StoreArg) -> Result<StateDir, ExitCode> {
        resolve_with_store(self.state_dir.clone(), store)
    }
}

/// `--store URL` of `run`, `do`, `runs`, `logs`, `diff` and `ui` (hidden in a build without the
/// PostgreSQL store, where `$CORDON_STORE` is refused with the fix).
#[derive(Debug, Default, clap::Args)]
pub struct StoreArg {
    /// Keep runs in the shared PostgreSQL store at URL, postgres://USER@HOST:PORT/DATABASE, with
    /// the password in the file $CORDON_STORE_PASSWORD_FILE names (or $PGPASSWORD), never in the
    /// URL [default: $CORDON_STORE, else the state directory's own database]
    #[arg(long, value_name = "URL")]
    #[cfg_attr(not(feature = "scale-out"), arg(hide = true))]
    store: Option<String>,
}

impl StoreArg {
    /// The flag given as `url`.
    pub fn of(url: Option<String>) -> StoreArg {
        StoreArg { store: url }
    }

    /// The URL given, if any.
    pub fn url(&self) -> Option<String> {
        self.store.clone()
    }
}

/// [`resolve`], then the store from `store`, else `$CORDON_STORE`.
pub fn resolve_with_store(flag: Option<PathBuf>, store: &StoreArg) -> Result<StateDir, ExitCode> {
    StateDir::resolve(&StateDirSource::from_env(flag).with_store(store.url())).map_err(|err| {
        eprintln!("cordon: {err}");
        ExitCode::from(2)
    })
}

/// The state directory from `flag`, else `$CORDON_STATE_DIR`, `$XDG_STATE_HOME/cordon` or
/// `~/.local/state/cordon`. When none can be used, the reason is printed and the exit status is
/// the usage error's (2).
pub fn resolve(flag: Option<PathBuf>) -> Result<StateDir, ExitCode> {
    resolve_with_store(flag, &StoreArg::default())
}

/// The store and the run `run` names (an id or a unique prefix; `None`: the most recent), for
/// the commands that read one run. `Err` is the usage message to print (exit 2): no runs yet, or
/// no such run.
pub fn stored_run(
    state_dir: &StateDir,
    run: Option<&str>,
) -> anyhow::Result<Result<(Store, RunId), String>> {
    if !state_dir.has_runs_stored() {
        return Ok(Err(format!(
            "there are no runs in {} yet; start one with `cordon run PIPELINE`",
            state_dir.path().display()
        )));
    }
    let store = Store::open(state_dir)?;
    let id = match run {
        Some(text) => match store.find_run(text) {
            Ok(id) => id,
            Err(err) => return Ok(Err(err.to_string())),
        },
        None => match store.last_run()? {
            Some(id) => id,
            None => {
                return Ok(Err(
                    "there are no runs yet; start one with `cordon run PIPELINE`".to_owned(),
                ));
            }
        },
    };
    Ok(Ok((store, id)))
}
