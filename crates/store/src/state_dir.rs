//! Where state lives: `--state-dir`, else `$CORDON_STATE_DIR`, else `$XDG_STATE_HOME/cordon`,
//! else `~/.local/state/cordon` (DESIGN Appendix A "Paths"); never inside the workspace. Runs and
//! their events live in the state directory's SQLite database unless `--store URL` (else
//! `$CORDON_STORE`) names a shared PostgreSQL store (DESIGN §16); the state directory still holds
//! what is this machine's own (workspace locks, caches, images).

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use crate::StoreError;

/// The values the state directory is chosen from (the environment, passed in so the rule is
/// testable as data).
#[derive(Clone, Debug, Default)]
pub struct StateDirSource {
    pub flag: Option<PathBuf>,
    /// `--store URL`.
    pub store_flag: Option<String>,
    pub cordon_store: Option<OsString>,
    pub cordon_state_dir: Option<OsString>,
    pub xdg_state_home: Option<OsString>,
    pub home: Option<OsString>,
}

impl StateDirSource {
    /// The flag plus this process's environment.
    pub fn from_env(flag: Option<PathBuf>) -> StateDirSource {
        StateDirSource {
            flag,
            store_flag: None,
            cordon_store: std::env::var_os("CORDON_STORE"),
            cordon_state_dir: std::env::var_os("CORDON_STATE_DIR"),
            xdg_state_home: std::env::var_os("XDG_STATE_HOME"),
            home: std::env::var_os("HOME"),
        }
    }

    /// The same, with `--store URL` given.
    pub fn with_store(mut self, store: Option<String>) -> StateDirSource {
        self.store_flag = store;
        self
    }
}

/// An absolute state directory path (it may not exist yet), and the shared store's URL when one
/// is named.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StateDir {
    path: PathBuf,
    store: Option<String>,
}

impl StateDir {
    /// Applies the precedence rule; empty variables count as unset.
    pub fn resolve(source: &StateDirSource) -> Result<StateDir, StoreError> {
        let set = |v: &Option<OsString>| v.as_ref().filter(|v| !v.is_empty()).map(PathBuf::from);
        let path = source
            .flag
            .clone()
            .or_else(|| set(&source.cordon_state_dir))
            .or_else(|| set(&source.xdg_state_home).map(|d| d.join("cordon")))
            .or_else(|| set(&source.home).map(|h| h.join(".local/state/cordon")))
            .ok_or(StoreError::NoStateDir)?;
        let store = source
            .store_flag
            .clone()
            .filter(|s| !s.is_empty())
            .or_else(|| set(&source.cordon_store).map(|s| s.to_string_lossy().into_owned()));
        // Refused before anything connects: not a postgres:// URL, or one carrying a password.
        if let Some(url) = &store {
            crate::url::check(url)?;
        }
        if !path.is_absolute() {
            // A relative --state-dir is taken from the current directory, like any path flag.
            if source.flag.is_some() {
                let absolute = std::path::absolute(&path).map_err(|source| StoreError::Io {
                    path: path.clone(),
                    source,
                })?;
                return Ok(StateDir {
                    path: absolute,
                    store,
                });
            }
            return Err(StoreError::RelativeStateDir(path));
        }
        Ok(StateDir { path, store })
    }

    pub fn new(path: PathBuf) -> StateDir {
        StateDir { path, store: None }
    }

    /// The same state directory, its runs kept in the store at `url` (`None`: its own SQLite).
    pub fn with_store(mut self, url: Option<String>) -> StateDir {
        self.store = url;
        self
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The shared store's URL, when runs are not kept in the state directory.
    pub fn store(&self) -> Option<&str> {
        self.store.as_deref()
    }

    /// Whether there is a store to read runs from: a shared one, or this directory's database
    /// (a state directory never used has none, and reading it should not create one).
    pub fn has_runs_stored(&self) -> bool {
        self.store.is_some() || self.path.join(crate::store::DATABASE).exists()
    }

    /// Where runs are kept, for messages: the store's URL or the state directory.
    pub fn shown(&self) -> String {
        match &self.store {
            Some(url) => url.clone(),
            None => self.path.display().to_string(),
        }
    }

    /// Refuses a state directory inside `workspace` (both compared after resolving symlinks as
    /// far as they exist), because sandboxed steps can write the workspace.
    pub fn refuse_inside(&self, workspace: &Path) -> Result<(), StoreError> {
        let state = canonical_prefix(&self.path);
        let workspace = workspace
            .canonicalize()
            .unwrap_or_else(|_| workspace.to_path_buf());
        if state.starts_with(&workspace) {
            return Err(StoreError::InsideWorkspace {
                state: self.path.clone(),
                workspace,
            });
        }
        Ok(())
    }
}

/// The path with its longest existing prefix canonicalised.
fn canonical_prefix(path: &Path) -> PathBuf {
    let mut rest = Vec::new();
    let mut current = path.to_path_buf();
    loop {
        if let Ok(canonical) = current.canonicalize() {
            return rest
                .iter()
                .rev()
                .fold(canonical, |acc, part| acc.join(part));
        }
        match (current.file_name().map(ToOwned::to_owned), current.parent()) {
            (Some(name), Some(parent)) => {
                rest.push(name);
                current = parent.to_path_buf();
            }
            _ => return path.to_path_buf(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(source: StateDirSource, expected: Result<&str, &str>) {
        let got = StateDir::resolve(&source)
            .map(|d| d.path().display().to_string())
            .map_err(|e| e.to_string());
        assert_eq!(
            got,
            expected.map(str::to_owned).map_err(str::to_owned),
            "{source:?}"
        );
    }

    #[test]
    fn state_dir_follows_the_documented_precedence() {
        let os = |s: &str| Some(OsString::from(s));
        let all = StateDirSource {
            flag: Some(PathBuf::from("/flag")),
            store_flag: None,
            cordon_store: None,
            cordon_state_dir: os("/cordon"),
            xdg_state_home: os("/xdg"),
            home: os("/home/me"),
        };
        check(all.clone(), Ok("/flag"));
        check(
            StateDirSource {
                flag: None,
                ..all.clone()
            },
            Ok("/cordon"),
        );
        check(
            StateDirSource {
                flag: None,
                cordon_state_dir: os(""),
                ..all.clone()
            },
            Ok("/xdg/cordon"),
        );
        check(
            StateDirSource {
                flag: None,
                cordon_state_dir: None,
                xdg_state_home: None,
                ..all.clone()
            },
            Ok("/home/me/.local/state/cordon"),
        );
        check(
            StateDirSource::default(),
            Err(
                "no state directory: none of --state-dir, $CORDON_STATE_DIR, $XDG_STATE_HOME or $HOME is set; pass --state-dir DIR",
            ),
        );
        check(
            StateDirSource {
                cordon_state_dir: os("rel"),
                ..StateDirSource::default()
            },
            Err("the state directory `rel` must be an absolute path; pass an absolute --state-dir"),
        );
    }

    #[test]
    fn the_store_flag_wins_over_cordon_store_and_empty_values_count_as_unset() {
        let store = |flag: Option<&str>, env: Option<&str>| {
            StateDir::resolve(&StateDirSource {
                flag: Some(PathBuf::from("/state")),
                store_flag: flag.map(str::to_owned),
                cordon_store: env.map(OsString::from),
                ..StateDirSource::default()
            })
            .map(|d| d.store().map(str::to_owned))
            .map_err(|e| e.to_string())
        };
        let url = |s: &str| Ok(Some(s.to_owned()));
        assert_eq!(
            store(Some("postgres://a"), Some("postgres://b")),
            url("postgres://a")
        );
        assert_eq!(store(None, Some("postgres://b")), url("postgres://b"));
        assert_eq!(store(Some(""), Some("postgres://b")), url("postgres://b"));
        assert_eq!(store(None, Some("")), Ok(None));
        assert_eq!(store(None, None), Ok(None));
    }
}
