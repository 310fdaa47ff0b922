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
    #[error("no batch matches `{0}`; its id is the `batch ID` line `cordon batch` printed first")]
    UnknownBatch(String),
    #[error("`{prefix}` matches {count} batches; give more characters of the id")]
    AmbiguousBatch { prefix: String, count: usize },
    #[error("task {index} of batch {batch} is already run {run}; a task has one run")]
    TaskTaken {
        batch: String,
        index: u32,
        run: String,
    },
    #[error(
        "run {0} is held by another cordon process (lock `{1}`); wait for it to finish or stop \
         that process"
    )]
    Held(String, PathBuf),
    #[error(
        "run {run} is held by {holder}, whose lease runs {seconds} s more; wait for it to \
         finish, or stop that process and resume once its lease has expired"
    )]
    Leased {
        run: String,
        holder: String,
        seconds: u64,
    },
    #[error(
        "run {run} was taken over by another cordon (lease generation {current}; this process \
         held {held}) after this one stopped renewing its lease, so this process stops working \
         on it; follow the run with `cordon logs {run} --follow`"
    )]
    Fenced {
        run: String,
        held: i64,
        current: i64,
    },
    #[error(
        "lost the lease of run {0}: the store did not answer its renewals for 20 s, so another \
         machine may resume it; `cordon resume {0}` continues it here once the lease has expired \
         (30 s)"
    )]
    LeaseLost(String),
    #[error(
        "cannot use the store `{store}`: {detail}; check that the server is running and \
         reachable (and, when it refused the login, that $CORDON_STORE_PASSWORD_FILE or \
         $PGPASSWORD holds the password)"
    )]
    Postgres { store: String, detail: String },
    #[error(
        "the store `{store}` was written by a newer cordon (schema {found}, this one knows up to \
         {known}); upgrade cordon or use another --store"
    )]
    StoreTooNew {
        store: String,
        found: i64,
        known: i64,
    },
    #[error(
        "`{url}` is not a store URL this cordon can use ({detail}); pass --store \
         postgres://USER@HOST:PORT/DATABASE"
    )]
    StoreUrl { url: String, detail: String },
    #[error(
        "the store URL `{0}` carries a password, which every user of this machine can read in the \
         process list; remove it from the URL and put it in a file named by \
         $CORDON_STORE_PASSWORD_FILE (or in $PGPASSWORD)"
    )]
    PasswordInUrl(String),
    #[error(
        "cannot use the store's password file `{path}` named by $CORDON_STORE_PASSWORD_FILE \
         ({detail}); write the password on its first line, in a regular file this user can read, \
         or unset $CORDON_STORE_PASSWORD_FILE"
    )]
    PasswordFile { path: PathBuf, detail: String },
    #[error(
        "the store `{0}` is a PostgreSQL store, and this cordon was built without it; build cordon \
         with `--features scale-out`, or unset --store and $CORDON_STORE to keep runs in the state \
         directory"
    )]
    NoScaleOut(String),
    #[error("stored event {seq} of run {run} cannot be read: {detail}")]
    BadEvent {
        run: String,
        seq: u64,
        detail: String,
    },
}
