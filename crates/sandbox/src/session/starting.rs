//! Opening a session in two halves, so the child's namespace work overlaps the caller's own.
//!
//! [`Session::start`] clones init at once: its child spends the costliest part of a start
//! (making the network, mount, IPC and UTS namespaces, see `sys::spawn::clone_init`) on its own
//! CPU, while the caller goes on preparing the configuration (parsing its arguments, reading
//! policy files, opening the workspace). [`Starting::open`] then does everything else
//! [`Session::open`] does: the cgroup, the fail-closed probe, the id maps, the host facts, the
//! setup message, the wait for init to build the root. [`Session::open`] is the two run back to
//! back. [`Starting::open_without_waiting`] skips the wait, for a caller that sends its first
//! command right behind the setup (a one-shot `cordon exec`): init reads its messages one after
//! the other, so the command starts as soon as the root is built, without a round trip through
//! the host in between.
//!
//! Nothing can run in the session between the halves: the child waits for one byte on the sync
//! pipe, which only [`Starting::open`] writes, after the probe passed, the maps are written and
//! the child is in the session's cgroup; and even then init only builds the root (from the setup
//! message) and starts a command when asked — never when building failed (it reports the failure
//! and exits). A [`Starting`] dropped instead of opened kills its init, which has run nothing of
//! the sandbox.

use std::ffi::OsString;
use std::fs;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::PathBuf;

use super::{NAMESPACES, SETUP_TIMEOUT, Session, SetupState, refuse_missing_layers, spawner};
use crate::cgroup;
use crate::config::{InitProgram, InitStart, SessionConfig};
use crate::environment::EnvInput;
use crate::error::SandboxError;
use crate::facts;
use crate::identity::{Identity, Privilege, SetGroups};
use crate::init;
use crate::sys;
use crate::sys::fd::Poll;
use crate::sys::spawn::{Groups, ImageFds, InitImage, PendingUserNamespace, Stage};
use crate::wire::{self, FromInit, ToInit};

/// A session whose init is cloned and making its namespaces, waiting for [`Starting::open`];
/// made by [`Session::start`]. Dropping it kills init.
pub struct Starting {
    program: InitProgram,
    init_start: InitStart,
    /// The clone, or why it failed: reported by [`Starting::open`], so that errors the caller
    /// finds in its own configuration meanwhile still come first.
    cloned: Result<Cloned, SandboxError>,
}

/// The host's side of a cloned init that waits for its maps.
struct Cloned {
    /// Owns init (dropping it kills init); its workspace and environment are filled in by
    /// [`Starting::open`].
    session: Session,
    /// Closing it without writing ends the child; writing one byte lets it go on.
    sync: OwnedFd,
    /// What the child writes when it fails before running init's code.
    report: OwnedFd,
    /// As root, the child making the workspace's idmapping namespace meanwhile.
    early_idmap: Option<PendingUserNamespace>,
}

impl Session {
    /// Clones init for a session that `program` will serve, started as `init_start` says,
    /// and returns at once; finish with [`Starting::open`], whose configuration must name the
    /// same program and start. Any failure (a required layer missing included) is reported by
    /// [`Starting::open`] (or [`Starting::open_without_waiting`]), so that errors the caller finds
    /// in its own configuration meanwhile still come first.
    pub fn start(program: &InitProgram, init_start: InitStart) -> Starting {
        Starting {
            program: program.clone(),
            init_start,
            cloned: clone(program, init_start),
        }
    }
}

impl Starting {
    /// The program init runs: the one to put in the [`SessionConfig`] given to
    /// [`Starting::open`].
    pub fn program(&self) -> &InitProgram {
        &self.program
    }

    /// Finishes opening the session as `config` describes (see [`Session::open`]). Refuses
    /// (nothing has run) when a required layer is missing or a requested cap cannot be
    /// enforced; `config.init` and `config.init_start` must be those given to
    /// [`Session::start`].
    pub fn open(self, config: SessionConfig) -> Result<Session, SandboxError> {
        let mut session = self.open_without_waiting(config)?;
        session.wait_ready()?;
        Ok(session)
    }

    /// [`Starting::open`] up to sending init its setup message, without waiting for init to
    /// build the root: the session's first command is sent right behind it, and init, which
    /// reads one message after the other, starts it as soon as the root is built — one round
    /// trip between the processes fewer. That first [`Session::exec`] (or
    /// [`Session::wait_ready`]) reports a setup failure instead; init never starts a command
    /// when building failed. Every layer is checked here as in [`Starting::open`].
    pub fn open_without_waiting(self, config: SessionConfig) -> Result<Session, SandboxError> {
        if !config.init.is(&self.program) || config.init_start != self.init_start {
            return Err(SandboxError::InvalidRequest {
                reason: "the configuration names another init program or start than \
                         `Session::start` was given; build it with `Starting::program`",
            });
        }
        let Cloned {
            mut session,
            sync,
            report,
            early_idmap,
        } = self.cloned?;
        // From here on any failure drops `session`, which kills init (and removes the group).
        //
        // Caps: a cap that cannot be enforced refuses while init still waits for its maps.
        session.cgroup = cgroup::create_for_session(&super::session_label(), &config.caps)
            .map_err(SandboxError::Cap)?;
        // Fail closed: the probe runs now, while init's child is still making its namespaces (the
        // slowest step of a start, see `sys::spawn::clone_init`), rather than before the clone.
        // Nothing has run yet — init has built nothing and waits for its maps — so a refusal
        // here, which kills init, is still a refusal before anything runs.
        refuse_missing_layers(session.identity.privilege, config.image.is_some())?;
        if let Err(err) = write_maps(session.init.pid, &session.identity) {
            // A child that could not make its namespaces has exited already and said why; a live
            // one ends on the closed sync pipe, so reading its report cannot block.
            drop(sync);
            return Err(reported_or(report.as_fd(), err));
        }
        // Init waits for the sync byte before it execs, so it is in the group before it (or
        // anything it starts) runs a single instruction of its own.
        if let Some(group) = &session.cgroup {
            let pid = u32::try_from(session.init.pid).unwrap_or_default();
            group.add_process(pid).map_err(SandboxError::Cap)?;
        }
        sys::fd::write_all(sync.as_fd(), b"1").map_err(|e| report_failure(report.as_fd(), e))?;
        drop(sync);
        // Init is now taking its identity (and, exec'd, loading the binary); gather the host facts
        // meanwhile. Nothing depends on them before the setup message.
        let facts = facts::gather(&config, &session.identity, early_idmap).inspect_err(|_| {
            // The idmapping helper has done its work whatever failed here; do not leave it a
            // zombie until the next session.
            sys::spawn::reap_released();
        })?;
        let borrowed: Vec<BorrowedFd<'_>> = facts.fds.iter().map(AsFd::as_fd).collect();
        wire::send(
            session.control.as_fd(),
            &ToInit::Setup(Box::new(facts.setup)),
            &borrowed,
        )
        .map_err(|e| {
            sys::spawn::reap_released();
            report_failure(report.as_fd(), e)
        })?;
        drop(facts.fds);
        // Init builds the root now and the host only waits: the moment to reap the idmapping
        // helper, which has exited by now.
        sys::spawn::reap_released();
        session.workspace = config.workspace.path().to_path_buf();
        session.caches.clone_from(&config.caches);
        session.env.host = std::env::vars_os().collect();
        session.env.path_prefix = config.toolchains.path.clone();
        session.env.base_path = config
            .image
            .as_ref()
            .and_then(|image| image.path_env.as_ref())
            .map(OsString::from);
        session.env.passed = config.passed.clone();
        session.env.forced = config.toolchains.env.clone();
        if let Some(caches) = &config.caches {
            session.env.forced.extend(caches.env.iter().cloned());
        }
        session.setup = SetupState::Pending { report };
        Ok(session)
    }
}

/// Waits (at most [`SETUP_TIMEOUT`]) for init's answer to the setup message: ready, or why not.
pub(super) fn await_ready(control: &OwnedFd, report: BorrowedFd<'_>) -> Result<(), SandboxError> {
    let mut ready = [Poll {
        fd: control.as_raw_fd(),
        readable: false,
    }];
    if sys::fd::poll(&mut ready, SETUP_TIMEOUT.as_millis() as i32)
        .map_err(SandboxError::start("wait for the sandbox"))?
        == 0
    {
        return Err(SandboxError::Setup {
            message: format!("init did not finish within {} s", SETUP_TIMEOUT.as_secs()),
        });
    }
    match wire::receive::<FromInit>(control) {
        Ok(Some((FromInit::Ready, _))) => Ok(()),
        Ok(Some((FromInit::SetupFailed { message }, _))) => Err(SandboxError::Setup { message }),
        Ok(Some((other, _))) => Err(SandboxError::Setup {
            message: format!("unexpected message from init: {other:?}"),
        }),
        Ok(None) => Err(report_failure(report, io::ErrorKind::UnexpectedEof.into())),
        Err(e) => Err(report_failure(report, e)),
    }
}

/// Clones init into fresh namespaces, waiting for its maps.
fn clone(program: &InitProgram, init_start: InitStart) -> Result<Cloned, SandboxError> {
    // The clone needs only the sandbox's ids. As root they come from `/etc/subuid` and
    // `/etc/subgid`, read now; unprivileged they are the caller's own, and the names and home
    // (`/etc/passwd`, `/etc/group`) are read after the clone, while the child makes its
    // namespaces — every file read before the clone delays the child's start.
    let (host_uid, host_gid) = sys::process::ids();
    let early_identity = (host_uid == 0).then(facts::identity);
    let (privilege, uid, gid) = match &early_identity {
        Some(identity) => (identity.privilege, identity.uid, identity.gid),
        None => (Privilege::Unprivileged, host_uid, host_gid),
    };
    // As root the workspace is idmapped through a user namespace of its own; its child makes it
    // now, in parallel with everything up to `facts::gather` (see `PendingUserNamespace`). Not
    // worth it when one is cached; if it cannot start, `gather` makes the namespace itself (and
    // reports the error). Started before init's clone: started after it, a one-shot exec measured
    // ~0.25 ms slower as root (likely the copy-on-write faults the helper's start then takes).
    let early_idmap = (privilege == Privilege::Root && facts::no_idmap_cached())
        .then(sys::spawn::start_user_namespace)
        .and_then(Result::ok);
    let (control, init_end) =
        sys::fd::socket_pair().map_err(SandboxError::start("create the control socket"))?;
    let (sync_read, sync_write) = sys::fd::pipe().map_err(SandboxError::start("create a pipe"))?;
    let (report_read, report_write) =
        sys::fd::pipe().map_err(SandboxError::start("create a pipe"))?;
    let null =
        OwnedFd::from(fs::File::open("/dev/null").map_err(SandboxError::start("open /dev/null"))?);
    let groups = match privilege {
        Privilege::Root => Groups::Clear,
        Privilege::Unprivileged => Groups::Keep,
    };
    let fds = ImageFds {
        exe: program.fd().as_fd(),
        control: init_end.as_fd(),
        sync: sync_read.as_fd(),
        report: report_write.as_fd(),
        null: null.as_fd(),
    };
    let image = InitImage::new(&fds, init::ARGV0, uid, gid, groups);
    let spawned = match spawner::clone_init(image, NAMESPACES, init_start) {
        Ok(spawned) => spawned,
        Err(source) => {
            // A missing layer is the likely cause; name it and its remedy.
            refuse_missing_layers(privilege, false)?;
            return Err(SandboxError::start("create the sandbox namespaces")(source));
        }
    };
    drop((init_end, sync_read, report_write, null));
    let identity = early_identity.unwrap_or_else(facts::identity);
    let session = Session {
        control,
        init: spawned,
        workspace: PathBuf::new(),
        env: EnvInput {
            home: identity.home.clone(),
            user: OsString::from(&identity.name),
            uid: identity.uid,
            ..EnvInput::default()
        },
        execs: 0,
        identity,
        cgroup: None,
        // Not handed out before `open_without_waiting` has sent the setup and made it pending.
        setup: SetupState::Ready,
        caches: None,
        closed: false,
    };
    Ok(Cloned {
        session,
        sync: sync_write,
        report: report_read,
        early_idmap,
    })
}

/// Writes the session's uid and gid maps (from the host side, which has the rights the child
/// lacks).
fn write_maps(pid: i32, identity: &Identity) -> Result<(), SandboxError> {
    let maps = identity.maps();
    let proc = PathBuf::from(format!("/proc/{pid}"));
    if maps.setgroups == SetGroups::Deny {
        fs::write(proc.join("setgroups"), "deny")
            .map_err(SandboxError::start("deny setgroups in the sandbox"))?;
    }
    fs::write(proc.join("uid_map"), &maps.uid_map)
        .map_err(SandboxError::start("write the sandbox's uid map"))?;
    fs::write(proc.join("gid_map"), &maps.gid_map)
        .map_err(SandboxError::start("write the sandbox's gid map"))?;
    Ok(())
}

/// The error for an init that died before it could answer: the step it reported on the report
/// pipe, or `cause`.
fn report_failure(report: BorrowedFd<'_>, cause: io::Error) -> SandboxError {
    match sys::spawn::read_report(report) {
        Ok(Some((stage, errno))) => reported(stage, errno),
        _ => SandboxError::Start {
            action: "start init".into(),
            source: cause,
        },
    }
}

/// The error for what init's child wrote on the report pipe: the step and the errno.
fn reported(stage: u32, errno: i32) -> SandboxError {
    let stage =
        Stage::from_code(stage).map_or_else(|| format!("step {stage}"), |s| format!("{s:?}"));
    SandboxError::Start {
        action: format!("prepare init ({stage})"),
        source: io::Error::from_raw_os_error(errno),
    }
}

/// The failure init's child reported before it got to wait for its maps, else `err`.
fn reported_or(report: BorrowedFd<'_>, err: SandboxError) -> SandboxError {
    match sys::spawn::read_report(report) {
        Ok(Some((stage, errno))) if Stage::from_code(stage) != Some(Stage::WaitForMaps) => {
            reported(stage, errno)
        }
        _ => err,
    }
}

#[cfg(test)]
mod tests;
