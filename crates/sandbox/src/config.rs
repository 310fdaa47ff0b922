//! What a session is asked to be: [`SessionConfig`] and its validated parts. Paths that the
//! sandbox mounts are opened here, at configuration time, so later symlink swaps cannot redirect
//! them.

use std::ffi::OsString;
use std::fs;
use std::os::fd::OwnedFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::cgroup::Caps;
use crate::error::SandboxError;
use crate::mounts::GitMutations;

/// The default size cap of `/tmp` + `/dev/shm` + `HOME` (one tmpfs): 512 MiB.
pub const DEFAULT_TMP_SIZE: u64 = 512 << 20;

/// The workspace: a canonical directory path and a descriptor opened on it.
#[derive(Clone, Debug)]
pub struct Workspace {
    path: PathBuf,
    fd: Arc<OwnedFd>,
    /// The common git directory the host made this workspace's `.git` name, when it is a
    /// linked worktree cordon created itself (an outcome run's parallel task): accepted and
    /// mounted like a git directory although it lies outside the workspace.
    common_dir: Option<PathBuf>,
}

impl Workspace {
    /// Opens `path` (which must be a directory) and records its canonical path.
    pub fn open(path: &Path) -> Result<Workspace, SandboxError> {
        let error = |source| SandboxError::Workspace {
            path: path.to_path_buf(),
            source,
        };
        let canonical = path.canonicalize().map_err(error)?;
        if let Some(what) = reserved(&canonical) {
            return Err(SandboxError::WorkspaceReserved {
                path: canonical,
                what,
            });
        }
        let file = fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&canonical)
            .map_err(error)?;
        // An `O_PATH` open needs no read permission; the sandbox's user (the caller, when
        // unprivileged) does. Said here, rather than later as a failure to read something in it.
        if let Err(source) = fs::read_dir(&canonical) {
            return Err(SandboxError::WorkspaceUnreadable {
                path: canonical,
                source,
            });
        }
        Ok(Workspace {
            path: canonical,
            fd: Arc::new(OwnedFd::from(file)),
            common_dir: None,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// This workspace is a linked worktree cordon made, whose `.git` names a git directory
    /// whose `commondir` is `common` (the run's repository): git inside the sandbox then reads
    /// the repository, which is mounted read-only like any git directory. Only the host says
    /// this, for a worktree it created in its own state directory; a `commondir` found in a
    /// workspace is otherwise accepted only inside it or in git's own layout.
    pub fn with_common_dir(mut self, common: PathBuf) -> Workspace {
        self.common_dir = Some(common);
        self
    }

    pub fn common_dir(&self) -> Option<&Path> {
        self.common_dir.as_deref()
    }

    pub(crate) fn fd(&self) -> &OwnedFd {
        &self.fd
    }
}

/// What the sandbox itself puts at `path` (or below it), when a workspace there would be hidden or
/// would hide it: the root holds everything; `/tmp` is the session's private tmpfs, which would
/// cover the workspace mounted at the same path; `/proc` and `/dev` are made fresh; the system
/// directories are mounted read-only from the host.
fn reserved(path: &Path) -> Option<&'static str> {
    const SYSTEM: [&str; 10] = [
        "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt", "/tmp",
    ];
    if path == Path::new("/") {
        Some("root directory")
    } else if path.starts_with("/.cordon") {
        // Where init builds its scratch space (the pivoted old root, generated files); a
        // workspace there would receive those files on the host.
        Some("scratch space `/.cordon`")
    } else if path.starts_with("/proc") || path.starts_with("/dev") {
        Some("`/proc` and `/dev`")
    } else if path
        .strip_prefix("/tmp")
        .ok()
        .and_then(|rest| rest.iter().next())
        .is_some_and(|first| first.as_encoded_bytes().starts_with(b".cordon-"))
    {
        // The session's own directories in its `/tmp` (`CARGO_HOME`, the caches, bytecode).
        Some("session directories `/tmp/.cordon-*`")
    } else if path == Path::new("/tmp") {
        Some("private `/tmp`")
    } else if SYSTEM.iter().any(|dir| path == Path::new(dir)) {
        Some("system directories (mounted read-only from the host)")
    } else {
        None
    }
}

/// The program a session's init runs: a descriptor opened once, exec'd with `argv[0]` =
/// `cordon-init`. Its path is masked inside every session.
#[derive(Clone, Debug)]
pub struct InitProgram {
    path: PathBuf,
    fd: Arc<OwnedFd>,
}

impl InitProgram {
    /// The running executable itself (the `cordon` binary, which serves as init when started
    /// as `cordon-init`). Opened through `/proc/self/exe`, so a later replacement on disk does
    /// not change what runs.
    pub fn current_exe() -> Result<InitProgram, SandboxError> {
        let fd = crate::sys::process::open_own_executable()
            .map_err(SandboxError::start("open the running executable"))?;
        let path =
            std::env::current_exe().map_err(SandboxError::start("find the running executable"))?;
        Ok(InitProgram {
            path,
            fd: Arc::new(fd),
        })
    }

    /// A separate init binary (the sandbox crate's tests use one).
    pub fn open(path: &Path) -> Result<InitProgram, SandboxError> {
        let file = fs::File::open(path).map_err(SandboxError::start(format!(
            "open the init program `{}`",
            path.display()
        )))?;
        let path = path.canonicalize().unwrap_or_else(|_| path.to_path_buf());
        Ok(InitProgram {
            path,
            fd: Arc::new(OwnedFd::from(file)),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub(crate) fn fd(&self) -> &OwnedFd {
        &self.fd
    }

    /// Whether `self` and `other` are the same opened program (clones of one [`InitProgram`]),
    /// not merely the same path.
    pub(crate) fn is(&self, other: &InitProgram) -> bool {
        Arc::ptr_eq(&self.fd, &other.fd)
    }
}

/// The session's network.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Network {
    /// Its own network namespace with only `lo` up: no route, no DNS.
    None,
}

/// How a session's init is started.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InitStart {
    /// Exec the [`InitProgram`] in the cloned child: init starts with fresh memory. Always sound,
    /// whatever threads the process has.
    Exec,
    /// When the process opening the session has a single thread, run init's code in the cloned
    /// child itself, without exec'ing the program again (a one-shot `cordon exec` spends about a
    /// millisecond less); otherwise as [`InitStart::Exec`]. Init then holds a copy of the
    /// caller's memory — out of the sandbox's reach (non-dumpable, and ptrace, `process_vm_*`
    /// and `/proc/1/mem` refused) but there — so this is for callers whose memory holds nothing
    /// more secret than the host environment: `cordon exec`, not a run holding model keys.
    /// The program is still masked in the sandbox.
    InProcessWhenSingleThreaded,
}

/// Everything a session is built from.
#[derive(Clone, Debug)]
pub struct SessionConfig {
    pub workspace: Workspace,
    pub init: InitProgram,
    pub network: Network,
    /// Extra host paths mounted read-only at their host paths (`--ro`, `isolation.read_only`).
    pub read_only: Vec<PathBuf>,
    /// The host toolchains exposed (`--toolchain`, `isolation.toolchains`): their roots mounted
    /// read-only like `read_only`, their credential files masked, their `bin` directories in
    /// front of `PATH` and their variables set for every command.
    pub toolchains: crate::toolchain::Exposure,
    /// The persistent caches mounted (`--cache`, `isolation.caches`), opened by the caller, whose
    /// shared lock they hold: their directories bound read-write below `/tmp`, their variables
    /// set for every command like the toolchains'.
    pub caches: Option<crate::cache::Opened>,
    /// The operator's `[env] pass` variables with their host values (see
    /// [`crate::environment::passed`]); files they name belong in `read_only`.
    pub passed: Vec<(OsString, OsString)>,
    /// Workspace-relative paths masked inside the sandbox (`isolation.hide`).
    pub hide: Vec<PathBuf>,
    /// Workspace-relative paths kept read-only inside the sandbox (a run's tooling files): each
    /// existing one becomes a read-only mount point over the workspace, so it can be neither
    /// written, truncated, deleted nor renamed. One that does not exist is skipped; a symbolic
    /// link is refused.
    pub protect: Vec<PathBuf>,
    /// Host paths masked wherever they would be visible (state dir, policy file); the init
    /// program is always added.
    pub mask: Vec<PathBuf>,
    pub git_mutations: GitMutations,
    /// The workspace is mounted read-only and left out of Landlock's write rules (an outcome
    /// run's `scrutinize`, DESIGN §13); `git_mutations` then does not apply.
    pub workspace_read_only: bool,
    /// With `git_mutations` allowed on an ordinary repository: the private git directory that
    /// stands in for the workspace's `.git` in this session (made, and imported afterwards, by
    /// the caller — `cordon_git::private`).
    pub private_git: Option<PrivateGitDir>,
    /// Size cap of `/tmp` + `/dev/shm` + `HOME`, in bytes.
    pub tmp_size: u64,
    /// Memory, pids and CPU caps, enforced through a cgroup only when requested; a requested cap
    /// that cannot be enforced refuses the session.
    pub caps: Caps,
    /// How init starts; [`InitStart::Exec`] unless the caller opts in.
    pub init_start: InitStart,
    /// An environment image as the session's `/` instead of the host's system directories
    /// (DESIGN §14).
    pub image: Option<ImageRoot>,
}

/// An environment image's root filesystem, opened at configuration time: the session's `/`,
/// read-only, `nosuid`, `nodev` (the lower layer of an overlay made in the session's user
/// namespace), with everything else of the sandbox mounted over it as without an image.
#[derive(Clone, Debug)]
pub struct ImageRoot {
    path: PathBuf,
    fd: Arc<OwnedFd>,
    /// A throwaway writable layer over the image for each session (`image_writable`), capped at
    /// the session's `tmp_size`.
    pub writable: bool,
    /// The image's `PATH` (its configuration's `Env`): the sandbox's `PATH` when the step sets
    /// none.
    pub path_env: Option<String>,
}

impl ImageRoot {
    /// Opens the root filesystem directory `path` (its last component is not followed).
    pub fn open(
        path: &Path,
        writable: bool,
        path_env: Option<String>,
    ) -> Result<ImageRoot, SandboxError> {
        let error = |source| SandboxError::Image {
            path: path.to_path_buf(),
            source,
        };
        let canonical = path.canonicalize().map_err(error)?;
        let file = fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&canonical)
            .map_err(error)?;
        Ok(ImageRoot {
            path: canonical,
            fd: Arc::new(OwnedFd::from(file)),
            writable,
            path_env,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub(crate) fn fd(&self) -> &OwnedFd {
        &self.fd
    }
}

/// A private git directory mounted read-write where the workspace's `.git` is, the host's
/// `config`, `hooks/` and `info/` read-only over its own, and the host's object store read-only
/// at `objects_at` (inside it) for its `objects/info/alternates` to name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PrivateGitDir {
    /// The workspace's `.git` (canonical), where the session sees `dir`.
    pub git_dir: PathBuf,
    pub dir: PathBuf,
    pub objects_at: PathBuf,
}

impl SessionConfig {
    /// A configuration with the defaults: no network, nothing extra mounted or hidden, the git
    /// directory read-only, [`DEFAULT_TMP_SIZE`].
    pub fn new(workspace: Workspace, init: InitProgram) -> SessionConfig {
        SessionConfig {
            workspace,
            init,
            network: Network::None,
            read_only: Vec::new(),
            toolchains: crate::toolchain::Exposure::default(),
            caches: None,
            passed: Vec::new(),
            hide: Vec::new(),
            protect: Vec::new(),
            mask: Vec::new(),
            git_mutations: GitMutations::Deny,
            workspace_read_only: false,
            private_git: None,
            tmp_size: DEFAULT_TMP_SIZE,
            caps: Caps::default(),
            init_start: InitStart::Exec,
            image: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workspaces_where_the_sandbox_puts_its_own_directories_are_refused() {
        for (path, refused) in [
            ("/", true),
            ("/tmp", true),
            ("/usr", true),
            ("/etc", true),
            ("/proc/self", true),
            ("/dev/shm", true),
            ("/.cordon", true),
            ("/.cordon/ws", true),
            ("/.cordonx", false),
            ("/tmp/.cordon-cache", true),
            ("/tmp/.cordon-cargo-home/x", true),
            ("/tmp/cordon-cache", false),
            ("/tmp/project", false),
            ("/usr/src/project", false),
            ("/home/me/project", false),
            ("/devices", false),
        ] {
            assert_eq!(reserved(Path::new(path)).is_some(), refused, "{path}");
        }
    }

    #[test]
    fn a_tmp_workspace_is_refused_naming_the_fix() {
        let message = Workspace::open(Path::new("/tmp")).unwrap_err().to_string();
        assert_eq!(
            message,
            "the workspace `/tmp` is where the sandbox puts its own private `/tmp`; pass a \
             project directory with -w (a directory below `/tmp` or your home works)"
        );
    }
}
