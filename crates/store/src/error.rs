//! The store's error type: every message names the file and what to do.

use std::io;
use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error(
        "the state database `{path}` is damaged ({detail}); move it aside (for example to \
         `{path}.broken`) and run again to start a fresh one, or restore it from a backup"
    )]
    Corrupt { path: PathBuf, detail: String },
    #[error(
        "the state database `{path}` was written by a newer cordon (schema {found}, this one \
         knows up to {known}); upgrade cordon or use another --state-dir"
    )]
    TooNew {
        path: PathBuf,
        found: i64,
        known: i64,
    },
    #[error("cannot use the state database `{path}`")]
    Sqlite {
        path: PathBuf,
        #[source]
        source: rusqlite::Error,
    },
    #[error("cannot create or open `{path}`; check its permissions or pass another --state-dir")]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error(
        "the state directory `{state}` is inside the workspace `{workspace}`, where sandboxed \
         steps could rewrite it; pass a --state-dir outside the workspace"
    )]
    InsideWorkspace { state: PathBuf, workspace: PathBuf },
    #[error(
        "no state directory: none of --state-dir, $CORDON_STATE_DIR, $XDG_STATE_HOME or $HOME is \
         set; pass --state-dir DIR"
    )]
    NoStateDir,
    #[error("the state directory `{0}` must be an absolute path; pass an absolute --state-dir")]
    RelativeStateDir(PathBuf),
    #[error("no run matches `{0}`; list the runs with `cordon runs`")]
    UnknownRun(String),
    #[error("`{prefix}` matches {count} runs; give more characters of the id (see `cordon runs`)")]
    AmbiguousRun { prefix: String, count: usize },
    #[error(
        "run {0} is held by another cordon process (lock `{1}`); wait for it to finish or stop \
         that process"
    )]
    Held(String, PathBuf),
    #[error("stored event {seq} of run {run} cannot be read: {detail}")]
    BadEvent {
        run: String,
        seq: u64,
        detail: String,
    },
}
