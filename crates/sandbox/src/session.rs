//! A session: one sandbox kept alive for a step attempt. [`Session::open`] checks the kernel's
//! layers (fail closed), gathers the host facts, clones init into fresh namespaces from the
//! spawner thread, writes the id maps and sends the setup; [`Session::exec`] runs one command in
//! it; [`Session::close`] (or drop) kills init, and with it — the kernel guarantees this for a
//! PID namespace's init — every process in the session, daemonised or not.

mod listen;
mod spawner;
mod watch;

pub use watch::{MemoryUsage, Tick, Watch};

use std::ffi::OsString;
use std::fs;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::cgroup::{self, Cgroup};
use crate::config::SessionConfig;
use crate::environment::{self, EnvInput};
use crate::error::SandboxError;
use crate::exec::{Capture, ExecOutcome, ExecRequest, ExitStatus, Stdin, Stream};
use crate::facts;
use crate::identity::{Identity, Privilege, SetGroups};
use crate::init;
use crate::probe::{Layer, Probe};
use crate::sys;
use crate::sys::fd::Poll;
use crate::sys::process::WorkloadStage;
use crate::sys::spawn::{Groups, ImageFds, InitImage, Spawned, Stage};
use crate::wire::{self, ExecSpec, FromInit, ToInit};

/// Every namespace a session gets. The network namespace has only `lo`.
const NAMESPACES: libc::c_int = libc::CLONE_NEWUSER
    | libc::CLONE_NEWNS
    | libc::CLONE_NEWPID
    | libc::CLONE_NEWNET
    | libc::CLONE_NEWIPC
    | libc::CLONE_NEWUTS;
// The cgroup namespace is not among them: init creates it itself once the host has moved it into
// the session's cgroup (see `init::run`), so the namespace is rooted at that group.

/// How long init may take to build the root before the session is given up.
const SETUP_TIMEOUT: Duration = Duration::from_secs(30);

/// The most bytes read from one output pipe per wake-up (a pipe holds 64 KiB by default, at most
/// 1 MiB).
const DRAIN_BUDGET: usize = 1 << 20;

/// After a timeout has killed a command's tree, how long to wait for init to report the exit
/// before the whole session is killed instead.
const KILL_GRACE: Duration = Duration::from_secs(5);

/// One live sandbox.
pub struct Session {
    control: OwnedFd,
    init: Spawned,
    workspace: PathBuf,
    identity: Identity,
    env: EnvInput,
    /// The session's cgroup, when caps were requested.
    cgroup: Option<Cgroup>,
    closed: bool,
}

impl Session {
    /// Starts a sandbox as `config` describes. Refuses (nothing runs) when a required layer is
    /// missing; see [`SandboxError::Refused`].
    pub fn open(config: SessionConfig) -> Result<Session, SandboxError> {
        let identity = facts::identity();
        // As root the workspace is idmapped through a user namespace of its own; its child starts
        // making it now, in parallel with everything up to `facts::gather` (see
        // `PendingUserNamespace`). Not worth it when one is cached; if it cannot start, `gather`
        // makes the namespace itself (and reports the error).
        let early_idmap = (identity.privilege == Privilege::Root && facts::no_idmap_cached())
            .then(sys::spawn::start_user_namespace)
            .and_then(Result::ok);
        // Caps first: a cap that cannot be enforced refuses before anything is spawned.
        let group = cgroup::create_for_session(&session_label(), &config.caps)
            .map_err(SandboxError::Cap)?;

        let (control, init_end) =
            sys::fd::socket_pair().map_err(SandboxError::start("create the control socket"))?;
        let (sync_read, sync_write) =
            sys::fd::pipe().map_err(SandboxError::start("create a pipe"))?;
        let (report_read, report_write) =
            sys::fd::pipe().map_err(SandboxError::start("create a pipe"))?;
        let null = OwnedFd::from(
            fs::File::open("/dev/null").map_err(SandboxError::start("open /dev/null"))?,
        );
        let groups = match identity.privilege {
            Privilege::Root => Groups::Clear,
            Privilege::Unprivileged => Groups::Keep,
        };
        let fds = ImageFds {
            exe: config.init.fd().as_fd(),
            control: init_end.as_fd(),
            sync: sync_read.as_fd(),
            report: report_write.as_fd(),
            null: null.as_fd(),
        };
        let image = InitImage::new(&fds, init::ARGV0, identity.uid, identity.gid, groups);
        let spawned = match spawner::clone_init(image, NAMESPACES, config.init_start) {
            Ok(spawned) => spawned,
            Err(source) => {
                if let Some(group) = group {
                    let _ = group.remove();
                }
                // A missing layer is the likely cause; name it and its remedy.
                refuse_missing_layers(identity.privilege)?;
                return Err(SandboxError::start("create the sandbox namespaces")(source));
            }
        };
        drop((init_end, sync_read, report_write, null));
        let session = Session {
            control,
            init: spawned,
            workspace: config.workspace.path().to_path_buf(),
            env: EnvInput {
                host: std::env::vars_os().collect(),
                home: identity.home.clone(),
                user: OsString::from(&identity.name),
                ..EnvInput::default()
            },
            identity,
            cgroup: group,
            closed: false,
        };

        // On any failure below, dropping `session` kills init (and removes the group).
        //
        // Fail closed: the probe runs now, while init's child is still making its namespaces (the
        // slowest step of a start, see `sys::spawn::clone_init`), rather than before the clone.
        // Nothing has run yet — init has built nothing and waits for its maps — so a refusal
        // here, which kills init, is still a refusal before anything runs.
        refuse_missing_layers(session.identity.privilege)?;
        if let Err(err) = write_maps(session.init.pid, &session.identity) {
            // A child that could not make its namespaces has exited already and said why; a live
            // one ends on the closed sync pipe, so reading its report cannot block.
            drop(sync_write);
            return Err(reported_or(report_read.as_fd(), err));
        }
        // Init waits for the sync byte before it execs, so it is in the group before it (or
        // anything it starts) runs a single instruction of its own.
        if let Some(group) = &session.cgroup {
            let pid = u32::try_from(session.init.pid).unwrap_or_default();
            group.add_process(pid).map_err(SandboxError::Cap)?;
        }
        sys::fd::write_all(sync_write.as_fd(), b"1")
            .map_err(|e| report_failure(report_read.as_fd(), e))?;
        drop(sync_write);
        // Init is now exec'ing (loading the binary takes a while); gather the host facts
        // meanwhile. Nothing depends on them before the setup message.
        let facts = facts::gather(&config, &session.identity, early_idmap)?;
        let borrowed: Vec<BorrowedFd<'_>> = facts.fds.iter().map(AsFd::as_fd).collect();
        wire::send(
            session.control.as_fd(),
            &ToInit::Setup(Box::new(facts.setup)),
            &borrowed,
        )
        .map_err(|e| report_failure(report_read.as_fd(), e))?;
        drop(facts.fds);
        let mut ready = [Poll {
            fd: session.control.as_raw_fd(),
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
        match wire::receive::<FromInit>(&session.control) {
            Ok(Some((FromInit::Ready, _))) => Ok(session),
            Ok(Some((FromInit::SetupFailed { message }, _))) => {
                Err(SandboxError::Setup { message })
            }
            Ok(Some((other, _))) => Err(SandboxError::Setup {
                message: format!("unexpected message from init: {other:?}"),
            }),
            Ok(None) => Err(report_failure(
                report_read.as_fd(),
                io::ErrorKind::UnexpectedEof.into(),
            )),
            Err(e) => Err(report_failure(report_read.as_fd(), e)),
        }
    }

    /// The workspace path (the same inside and outside).
    pub fn workspace(&self) -> &Path {
        &self.workspace
    }

    /// Who the sandboxed processes are.
    pub fn identity(&self) -> &Identity {
        &self.identity
    }

    /// Runs one command and waits for it, passing output chunks to `on_output` as they arrive.
    /// The command's completion is its own exit: background children it leaves keep running in
    /// the session (their later output is dropped), until the session closes.
    pub fn exec(
        &mut self,
        request: &ExecRequest,
        on_output: &mut dyn FnMut(Stream, &[u8]),
    ) -> Result<ExecOutcome, SandboxError> {
        self.exec_watched(request, None, on_output)
    }

    /// [`Session::exec`], calling `watch` every interval while the command runs; when it answers
    /// [`Tick::Stop`] the command's tree is killed as at a timeout, and the outcome's `stopped`
    /// says why.
    pub fn exec_watched(
        &mut self,
        request: &ExecRequest,
        mut watch: Option<Watch<'_>>,
        on_output: &mut dyn FnMut(Stream, &[u8]),
    ) -> Result<ExecOutcome, SandboxError> {
        let started = Instant::now();
        let oom_before = self.oom_kills();
        if request.argv.is_empty() {
            return Err(SandboxError::InvalidRequest {
                reason: "the command is empty",
            });
        }
        if request
            .argv
            .iter()
            .chain(request.env.iter().flat_map(|(k, v)| [k, v]))
            .any(|s| s.contains('\0'))
        {
            return Err(SandboxError::InvalidRequest {
                reason: "arguments and variables cannot contain NUL bytes",
            });
        }
        let mut input = self.env.clone();
        input.declared = request
            .env
            .iter()
            .map(|(k, v)| (OsString::from(k), OsString::from(v)))
            .collect();
        let env = environment::build(&input)
            .into_iter()
            .map(|(k, v)| {
                (
                    k.to_string_lossy().into_owned(),
                    v.to_string_lossy().into_owned(),
                )
            })
            .collect();
        let cwd = request
            .cwd
            .clone()
            .unwrap_or_else(|| self.workspace.clone());
        let spec = ExecSpec {
            argv: request.argv.clone(),
            cwd: cwd.clone(),
            env,
        };

        let pipe = || sys::fd::pipe().map_err(SandboxError::start("create a pipe"));
        let (out_read, out_write) = pipe()?;
        let (err_read, err_write) = pipe()?;
        let mut feeder = None;
        let stdin: OwnedFd = match &request.stdin {
            Stdin::Null => null()?,
            Stdin::Inherit => {
                match sys::fd::dup_stdin().map_err(SandboxError::start("pass standard input"))? {
                    Some(fd) => fd,
                    // No standard input here: the command gets end of file, as from /dev/null.
                    None => null()?,
                }
            }
            Stdin::Bytes(bytes) => {
                let (read, write) = pipe()?;
                let bytes = bytes.clone();
                // Written from a thread so a command that reads nothing cannot block us; a
                // command that exits early makes the write fail with EPIPE, which is fine.
                feeder = Some(std::thread::spawn(move || {
                    let _ = sys::fd::write_all(write.as_fd(), &bytes);
                }));
                read
            }
        };
        wire::send(
            self.control.as_fd(),
            &ToInit::Exec(spec),
            &[stdin.as_fd(), out_write.as_fd(), err_write.as_fd()],
        )
        .map_err(|e| SandboxError::Lost { source: Some(e) })?;
        drop((stdin, out_write, err_write));
        for fd in [&out_read, &err_read] {
            sys::fd::set_nonblocking(fd.as_fd())
                .map_err(SandboxError::start("configure an output pipe"))?;
        }

        let limit = request.capture_limit;
        let mut captures = [Capture::default(), Capture::default()];
        let mut open = [Some(out_read), Some(err_read)];
        let mut deadline = request.timeout.map(|t| started + t);
        let mut next_tick = watch.as_ref().map(|w| started + w.every);
        let mut timed_out = false;
        let mut stopped = None;
        // The command's tree has been told to die (timeout or watch); `deadline` is then the
        // grace for init to report it.
        let mut killing = false;
        let mut buf = vec![0u8; 64 << 10];
        let status = loop {
            let mut polls = vec![Poll {
                fd: self.control.as_raw_fd(),
                readable: false,
            }];
            for fd in open.iter().flatten() {
                polls.push(Poll {
                    fd: fd.as_raw_fd(),
                    readable: false,
                });
            }
            let wake = match (deadline, next_tick.filter(|_| !killing)) {
                (Some(d), Some(t)) => Some(d.min(t)),
                (d, t) => d.or(t),
            };
            let wait = wake.map_or(-1, |d| {
                d.saturating_duration_since(Instant::now())
                    .as_millis()
                    .min(i32::MAX as u128) as i32
            });
            sys::fd::poll(&mut polls, wait).map_err(|e| SandboxError::Lost { source: Some(e) })?;
            drain(&mut open, &mut captures, &mut buf, limit, on_output);
            if polls[0].readable {
                match wire::receive::<FromInit>(&self.control)
                    .map_err(|e| SandboxError::Lost { source: Some(e) })?
                {
                    None => return Err(SandboxError::Lost { source: None }),
                    Some((FromInit::Exited { code, signal }, _)) => {
                        break match (code, signal) {
                            (_, Some(signal)) => ExitStatus::Signal(signal),
                            (Some(code), None) => ExitStatus::Code(code),
                            (None, None) => ExitStatus::Code(0),
                        };
                    }
                    Some((FromInit::SpawnFailed { stage, errno }, _)) => {
                        let source = io::Error::from_raw_os_error(errno);
                        break match stage {
                            WorkloadStage::Exec
                                if errno == libc::ENOENT || errno == libc::ENOTDIR =>
                            {
                                ExitStatus::NotFound
                            }
                            WorkloadStage::Exec => ExitStatus::NotExecutable,
                            WorkloadStage::Directory => {
                                return Err(SandboxError::WorkingDirectory { path: cwd, source });
                            }
                            stage => return Err(SandboxError::Workload { stage, source }),
                        };
                    }
                    Some((other, _)) => {
                        return Err(SandboxError::Setup {
                            message: format!("unexpected message from init: {other:?}"),
                        });
                    }
                }
            }
            let now = Instant::now();
            let due = deadline.is_some_and(|d| now >= d);
            if killing {
                if due {
                    // Init did not report the killed command in time: end the whole session.
                    self.kill();
                    return Err(SandboxError::Lost { source: None });
                }
                continue;
            }
            if due {
                timed_out = true;
            } else if let (Some(w), Some(t)) = (watch.as_mut(), next_tick)
                && now >= t
            {
                next_tick = Some(now + w.every);
                if let Tick::Stop { reason } = (w.tick)(self) {
                    stopped = Some(reason);
                }
            }
            if timed_out || stopped.is_some() {
                killing = true;
                wire::send(self.control.as_fd(), &ToInit::KillTree, &[])
                    .map_err(|e| SandboxError::Lost { source: Some(e) })?;
                deadline = Some(Instant::now() + KILL_GRACE);
            }
        };
        // Whatever the command wrote before exiting is in the pipes now; take it without waiting
        // for background children that may hold the write ends.
        drain(&mut open, &mut captures, &mut buf, limit, on_output);
        drop(feeder);
        let [stdout, stderr] = captures;
        // An OOM kill is reported only when the command itself died of SIGKILL and the group's
        // OOM counter rose meanwhile: a SIGKILL from elsewhere, or an OOM kill of a background
        // process the command survived, is not blamed on the cap.
        let oom = match (&self.cgroup, status) {
            (Some(group), ExitStatus::Signal(libc::SIGKILL)) if self.oom_kills() > oom_before => {
                Some(group.oom_message())
            }
            _ => None,
        };
        Ok(ExecOutcome {
            status,
            timed_out,
            stdout,
            stderr,
            duration: started.elapsed(),
            oom,
            stopped,
        })
    }

    /// Ends the session: kills init and so every process in it, and waits until they are gone.
    pub fn close(mut self) {
        self.kill();
    }

    /// The group's OOM-kill count (0 without a memory cap or when it cannot be read).
    fn oom_kills(&self) -> u64 {
        self.cgroup
            .as_ref()
            .and_then(|group| group.oom_kills().ok())
            .unwrap_or(0)
    }

    fn kill(&mut self) {
        if self.closed {
            return;
        }
        self.closed = true;
        let _ = sys::process::pidfd_kill(self.init.pidfd.as_fd());
        let _ = sys::process::pidfd_wait(self.init.pidfd.as_fd());
        // Non-fatal: a group that cannot be removed now is removed as a leftover at the next
        // start (`cleanup_stale`).
        if let Some(group) = self.cgroup.take() {
            let _ = group.remove();
        }
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A label for the session's cgroup, unique within this process (`[a-z0-9_-]{1,64}`); the
/// group name adds the process's pid and start time.
fn session_label() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!("s{}", NEXT.fetch_add(1, Ordering::Relaxed))
}

/// Reads what each open pipe holds right now, closing those at end of file.
fn drain(
    open: &mut [Option<OwnedFd>; 2],
    captures: &mut [Capture; 2],
    buf: &mut [u8],
    limit: usize,
    on_output: &mut dyn FnMut(Stream, &[u8]),
) {
    for (index, stream) in [Stream::Stdout, Stream::Stderr].into_iter().enumerate() {
        // Bounded, so a background process that writes without pause can neither starve the
        // control socket nor keep the final drain (after the command exited) going forever.
        // Whatever the command itself wrote fits: it cannot have written more than a pipe holds
        // without us reading.
        let mut budget = DRAIN_BUDGET;
        while let Some(fd) = open[index].as_ref().filter(|_| budget > 0) {
            match sys::fd::read(fd.as_fd(), buf) {
                Ok(0) => open[index] = None,
                Ok(n) => {
                    budget = budget.saturating_sub(n);
                    on_output(stream, &buf[..n]);
                    captures[index].push(&buf[..n], limit);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(_) => open[index] = None,
            }
        }
    }
}

fn null() -> Result<OwnedFd, SandboxError> {
    let file = fs::File::open("/dev/null").map_err(SandboxError::start("open /dev/null"))?;
    Ok(OwnedFd::from(file))
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

/// Fails closed: the first missing required layer refuses the session, naming the layer and the
/// remedy. As root the idmapped workspace is required too (DESIGN §4: needed as root).
fn refuse_missing_layers(privilege: Privilege) -> Result<(), SandboxError> {
    let probe = Probe::detect_for_session();
    let mut missing: Vec<_> = probe.missing_required();
    if privilege == Privilege::Root && !probe.is_available(Layer::IdmappedMounts) {
        missing.push(probe.layer(Layer::IdmappedMounts));
    }
    match missing.first() {
        None => Ok(()),
        Some(status) => Err(SandboxError::Refused {
            layer: status.layer.as_str(),
            detail: status.detail.clone(),
            remedy: status
                .remedy
                .clone()
                .unwrap_or_else(|| "run `cordon doctor`".into()),
        }),
    }
}
