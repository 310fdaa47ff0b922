//! The sandbox's error type. Every message names what failed and, where there is one, the fix.

use std::io;
use std::path::PathBuf;

use crate::sys::process::WorkloadStage;

#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// A required layer is missing: cordon refuses rather than run with less isolation.
    #[error("refusing to run: the sandbox layer `{layer}` is not available ({detail}); {remedy}")]
    Refused {
        layer: &'static str,
        detail: String,
        remedy: String,
    },
    #[error(
        "the workspace `{path}` is where the sandbox puts its own {what}; pass a project \
         directory with -w (a directory below `/tmp` or your home works)"
    )]
    WorkspaceReserved { path: PathBuf, what: &'static str },
    #[error("cannot open the workspace `{path}`; pass an existing directory with -w")]
    Workspace {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error(
        "the workspace `{path}` cannot be read by this user; pass a directory you can read and \
         write with -w, or run as its owner"
    )]
    WorkspaceUnreadable {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error(
        "cannot open the image root filesystem `{path}`; import the image again (`cordon image \
         import`) or give an existing directory"
    )]
    Image {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error(
        "the image directory `{}` holds `{}`, which every sandbox hides (the home directory, the \
         state directory, the operator policy or cordon itself); give a directory holding only an \
         unpacked root filesystem, or import the image (`cordon image import`)",
        path.display(),
        hidden.display()
    )]
    ImageHoldsHidden { path: PathBuf, hidden: PathBuf },
    #[error(
        "the image directory `{}` is the host's own root or system directory, not an unpacked \
         image; give a directory holding a root filesystem, or import the image (`cordon image \
         import`)",
        path.display()
    )]
    ImageIsSystem { path: PathBuf },
    #[error("cannot open `{path}` to mount it read-only; check that it exists and is readable")]
    ReadOnlyPath {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot mount the cache directory `{}`: {source}", path.display())]
    CachePath {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("the path `{path}` is not valid UTF-8; cordon needs UTF-8 paths inside the sandbox")]
    NotUtf8 { path: PathBuf },
    #[error("cannot {action} while starting the sandbox")]
    Start {
        action: String,
        #[source]
        source: io::Error,
    },
    #[error("cannot set up the sandbox: {message}")]
    Setup { message: String },
    #[error(
        "lost contact with the sandbox's init process (it was killed or the session was closed)"
    )]
    Lost {
        #[source]
        source: Option<io::Error>,
    },
    #[error(
        "cannot enter the working directory `{path}` inside the sandbox; it must exist in the workspace or another mounted path"
    )]
    WorkingDirectory {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot start the command: the {stage:?} step failed")]
    Workload {
        stage: WorkloadStage,
        #[source]
        source: io::Error,
    },
    /// A requested cap cannot be enforced (or is invalid): nothing ran.
    /// The message carries the cap, the reason and the remedy (not chained as a source, so it is
    /// printed once).
    #[error("refusing to run: {0}")]
    Cap(crate::cgroup::CgroupError),
    #[error(
        "`{path}` is to be hidden but is (or passes through) a symbolic link, which the sandbox \
         could repoint; replace the link with what it names, or hide the real path instead"
    )]
    HiddenSymlink { path: PathBuf },
    /// A path to keep read-only cannot be protected by a mount.
    #[error(
        "`{path}` is to be kept read-only in the sandbox but {problem}; protect only real files \
         and directories inside the workspace, named by a relative path without `..`"
    )]
    ProtectedPath {
        path: PathBuf,
        problem: &'static str,
    },
    #[error(transparent)]
    Git(#[from] crate::git::GitError),
    /// `allow_git_mutations` cannot keep a protected git entry read-only.
    #[error(
        "refusing `allow_git_mutations`: `{path}` {problem}, so a sandbox could make a later git \
         command on the host run its code; a mount can only keep an existing, real entry \
         read-only. Leave allow_git_mutations off (the git directory is then read-only as a whole)"
    )]
    GitMutations {
        path: PathBuf,
        problem: &'static str,
    },
    #[error("invalid command: {reason}")]
    InvalidRequest { reason: &'static str },
    /// A background process ([`crate::Session::spawn_background`]) could not be started.
    #[error("cannot start `{program}` in the background: {reason}")]
    Background { program: String, reason: String },
}

impl SandboxError {
    pub(crate) fn start(action: impl Into<String>) -> impl FnOnce(io::Error) -> SandboxError {
        let action = action.into();
        move |source| SandboxError::Start { action, source }
    }
}
