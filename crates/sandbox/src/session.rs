//! A session: one sandbox kept alive for a step attempt. [`Session::open`] clones init into fresh
//! namespaces (from the spawner thread), checks the kernel's layers (fail closed), writes the id
//! maps, gathers the host facts, sends the setup and waits for init to build the root. A caller
//! with work of its own to overlap opens in two halves instead, [`Session::start`] and
//! `Starting::open` (`starting.rs`). [`Session::exec`] runs one command in it; [`Session::close`]
//! (or drop) kills init, and with it — the kernel guarantees this for a PID namespace's init —
//! every process in the session, daemonised or not.

mod listen;
mod spawner;
mod starting;
mod watch;

pub use starting::Starting;
pub use watch::{MemoryUsage, Tick, Watch};

use std::ffi::OsString;
use std::fs;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::cgroup::Cgroup;
use crate::config::SessionConfig;
use crate::environment::{self, EnvInput};
use crate::error::SandboxError;
use crate::exec::{Capture, ExecOutcome, ExecRequest, ExitStatus, Stdin, Stream};
use crate::identity::{Identity, Privilege};
use crate::probe::{Layer, Probe};
use crate::sys;
use crate::sys::fd::Poll;
use crate::sys::process::WorkloadStage;
use crate::sys::spawn::Spawned;
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
/// The same while the user's keys are relayed (see the exec loop).
const RELAY_DRAIN_BUDGET: usize = 16 << 10;

/// After a timeout has killed a command's tree, how long to wait for init to report the exit
/// before the whole session is killed instead.
const KILL_GRACE: Duration = Duration::from_secs(5);

/// How long the launcher of a background process may take to fork it and exit.
const LAUNCH_TIMEOUT: Duration = Duration::from_secs(10);

/// The host's ends of a background process's standard streams ([`Session::spawn_background`]):
/// closing `stdin` gives it end of file; `stdout` and `stderr` end when it (and whatever it
/// started holding them) is gone.
#[derive(Debug)]
pub struct Background {
    pub stdin: OwnedFd,
    pub stdout: OwnedFd,
    pub stderr: OwnedFd,
}

/// One live sandbox.
pub struct Session {
    control: OwnedFd,
    init: Spawned,
    workspace: PathBuf,
    identity: Identity,
    env: EnvInput,
    /// Commands run so far (each gets its own bytecode directory).
    execs: u64,
    /// The session's cgroup, when caps were requested.
    cgroup: Option<Cgroup>,
    /// Whether init has reported the root built (see `Starting::open_without_waiting`).
    setup: SetupState,
    /// The caches mounted, kept for their shared lock: no `cordon cache clear` empties them
    /// while this session lives.
    caches: Option<crate::cache::Opened>,
    closed: bool,
}

/// Where init is with the setup message.
enum SetupState {
    /// Init reported the root built: commands can run.
    Ready,
    /// Init has the setup message but has not answered yet; `report` is the report pipe of its
    /// child, which says why it ended if it died before answering.
    Pending { report: OwnedFd },
}

impl Session {
    /// Starts a sandbox as `config` describes. Refuses (nothing runs) when a required layer is
    /// missing; see [`SandboxError::Refused`]. The same as [`Session::start`] then
    /// `Starting::open`, for a caller with nothing to do in between.
    pub fn open(config: SessionConfig) -> Result<Session, SandboxError> {
        Session::start(&config.init, config.init_start).open(config)
    }

    /// Waits until init has built the session's root, as [`Session::open`] does before it
    /// returns; reports the failure when it could not. Needed only for a session opened by
    /// `Starting::open_without_waiting` (its first command waits by itself).
    pub fn wait_ready(&mut self) -> Result<(), SandboxError> {
        let SetupState::Pending { report } = &self.setup else {
            return Ok(());
        };
        starting::await_ready(&self.control, report.as_fd())?;
        self.setup = SetupState::Ready;
        Ok(())
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
        let oom_before = self.oom_kills();
        let (env, cwd) = self.prepare(request)?;
        let terminal = request.stdin == Stdin::Terminal;
        // This process's stdin, when the command runs on a terminal: copied to the pty, and its
        // size followed.
        let user_terminal = std::io::stdin();
        let size = terminal
            .then(|| crate::terminal::window_size(user_terminal.as_fd()))
            .flatten();
        let spec = ExecSpec {
            argv: request.argv.clone(),
            cwd: cwd.clone(),
            env,
            terminal: terminal.then_some(size.unwrap_or(DEFAULT_TERMINAL)),
        };

        let pipe = || sys::fd::pipe().map_err(SandboxError::start("create a pipe"));
        let mut feeder = None;
        let mut open = [None, None];
        // A terminal on stdin is never handed to the command without `Stdin::Terminal`: what is
        // typed is copied into a pipe instead, so the command cannot write questions to the
        // terminal (whose answers would reach the shell after it ends) or change its settings.
        let mut stdin_pipe = None;
        let sent = if terminal {
            // Init makes the pty and sends its master once the command runs.
            wire::send(self.control.as_fd(), &ToInit::Exec(spec), &[])
        } else {
            let (out_read, out_write) = pipe()?;
            let (err_read, err_write) = pipe()?;
            let stdin: OwnedFd = match &request.stdin {
                Stdin::Null | Stdin::Terminal => null()?,
                // A background job's terminal is not its to read (`SIGTTIN`): no input.
                Stdin::Inherit
                    if std::io::IsTerminal::is_terminal(&user_terminal)
                        && !crate::terminal::is_foreground(user_terminal.as_fd()) =>
                {
                    null()?
                }
                Stdin::Inherit if std::io::IsTerminal::is_terminal(&user_terminal) => {
                    let (read, write) = pipe()?;
                    sys::fd::set_nonblocking(write.as_fd())
                        .map_err(SandboxError::start("configure the input pipe"))?;
                    stdin_pipe = Some(write);
                    read
                }
                Stdin::Inherit => {
                    match sys::fd::dup_stdin()
                        .map_err(SandboxError::start("pass standard input"))?
                    {
                        Some(fd) => fd,
                        // No standard input here: the command gets end of file, as from
                        // /dev/null.
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
            let sent = wire::send(
                self.control.as_fd(),
                &ToInit::Exec(spec),
                &[stdin.as_fd(), out_write.as_fd(), err_write.as_fd()],
            );
            drop((stdin, out_write, err_write));
            for fd in [&out_read, &err_read] {
                sys::fd::set_nonblocking(fd.as_fd())
                    .map_err(SandboxError::start("configure an output pipe"))?;
            }
            open = [Some(out_read), Some(err_read)];
            sent
        };
        if let Err(e) = sent {
            // A session opened without waiting whose setup failed: init reported why and exited,
            // so the send met a closed socket. That report, still buffered, is the error to show.
            self.wait_ready()?;
            return Err(SandboxError::Lost { source: Some(e) });
        }
        // A session opened without waiting learns here that its root is built: init reads this
        // command only after that, and never when building failed (it reports the failure and
        // exits instead).
        self.wait_ready()?;
        // The command's time (and its `timeout`) counts from here, not from before the setup.
        let started = Instant::now();
        let relaying = terminal || stdin_pipe.is_some();
        let mut pty = Pty {
            terminal,
            master: stdin_pipe,
            input: relaying.then(|| user_terminal.as_fd()),
            pending: Vec::new(),
            size,
            escapes: 0,
        };

        let limit = request.capture_limit;
        let mut captures = [Capture::default(), Capture::default()];
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
            let input_poll = pty.input.map(|fd| {
                polls.push(Poll {
                    fd: fd.as_raw_fd(),
                    readable: false,
                });
                polls.len() - 1
            });
            let wake = match (deadline, next_tick.filter(|_| !killing)) {
                (Some(d), Some(t)) => Some(d.min(t)),
                (d, t) => d.or(t),
            };
            // Relaying input, wake at least every 100 ms to follow the window's size and to
            // retry input the pty (or pipe) had no room for.
            let wake = match (relaying, wake) {
                (false, wake) => wake,
                (true, wake) => {
                    let soon = Instant::now() + TERMINAL_TICK;
                    Some(wake.map_or(soon, |w| w.min(soon)))
                }
            };
            let wait = wake.map_or(-1, |d| {
                d.saturating_duration_since(Instant::now())
                    .as_millis()
                    .min(i32::MAX as u128) as i32
            });
            sys::fd::poll(&mut polls, wait).map_err(|e| SandboxError::Lost { source: Some(e) })?;
            // While relaying keys, output is taken in small pieces so that typing (`^]` three
            // times included) is read between them even when the terminal is slow.
            let budget = if relaying {
                RELAY_DRAIN_BUDGET
            } else {
                DRAIN_BUDGET
            };
            drain(&mut open, &mut captures, &mut buf, limit, budget, on_output);
            if relaying {
                let typed = input_poll.is_some_and(|i| polls[i].readable);
                if pty.pump(typed, &mut buf) && stopped.is_none() && !killing {
                    stopped = Some(ESCAPE_STOPPED.to_owned());
                }
            }
            if polls[0].readable {
                match wire::receive::<FromInit>(&self.control)
                    .map_err(|e| SandboxError::Lost { source: Some(e) })?
                {
                    None => return Err(SandboxError::Lost { source: None }),
                    Some((FromInit::Terminal, mut fds)) if terminal && pty.master.is_none() => {
                        let master = fds.pop().ok_or_else(|| SandboxError::Setup {
                            message: "init sent no terminal".to_owned(),
                        })?;
                        sys::fd::set_nonblocking(master.as_fd())
                            .map_err(SandboxError::start("configure the terminal"))?;
                        // Its output is read as stdout; the same descriptor takes the input.
                        open[0] = Some(
                            master
                                .try_clone()
                                .map_err(SandboxError::start("configure the terminal"))?,
                        );
                        pty.master = Some(master);
                    }
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
        drain(
            &mut open,
            &mut captures,
            &mut buf,
            limit,
            DRAIN_BUDGET,
            on_output,
        );
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

    /// A command's environment and working directory, once the request is checked: a command,
    /// and no NUL byte in its arguments or variables.
    fn prepare(
        &mut self,
        request: &ExecRequest,
    ) -> Result<(Vec<(String, String)>, PathBuf), SandboxError> {
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
        let env = self.environment(request);
        let cwd = request
            .cwd
            .clone()
            .unwrap_or_else(|| self.workspace.clone());
        Ok((env, cwd))
    }

    /// The environment of the session's next command with `request.env` added.
    fn environment(&mut self, request: &ExecRequest) -> Vec<(String, String)> {
        self.execs += 1;
        let mut input = self.env.clone();
        input.exec = self.execs;
        input.declared = request
            .env
            .iter()
            .map(|(k, v)| (OsString::from(k), OsString::from(v)))
            .collect();
        environment::build(&input)
            .into_iter()
            .map(|(k, v)| {
                (
                    k.to_string_lossy().into_owned(),
                    v.to_string_lossy().into_owned(),
                )
            })
            .collect()
    }

    /// Starts `request.argv` in the background of the session (an MCP server, DESIGN §17) with
    /// pipes for its standard streams, and returns the host's ends once it runs. It is workload
    /// like any command — same namespaces, Landlock, seccomp, network and environment — started
    /// by a `/bin/sh` launcher that exits at once, so the session's next command runs beside it;
    /// it lives until it exits or the session closes (init's death kills it). `request.stdin`,
    /// `timeout` and `capture_limit` are not used.
    pub fn spawn_background(&mut self, request: &ExecRequest) -> Result<Background, SandboxError> {
        let program = request.argv.first().cloned().unwrap_or_default();
        let (env, cwd) = self.prepare(request)?;
        // The launcher's own streams are the pipes. A non-interactive shell gives an `&` job
        // /dev/null as stdin before its own redirections apply, so the pipe is kept on fd 3
        // first and handed over from there.
        let mut argv = vec![
            "/bin/sh".to_owned(),
            "-c".to_owned(),
            "exec 3<&0; \"$@\" <&3 3<&- &".to_owned(),
            "cordon-background".to_owned(),
        ];
        argv.extend(request.argv.iter().cloned());
        let spec = ExecSpec {
            argv,
            cwd: cwd.clone(),
            env,
            terminal: None,
        };
        let pipe = || sys::fd::pipe().map_err(SandboxError::start("create a pipe"));
        let (in_read, in_write) = pipe()?;
        let (out_read, out_write) = pipe()?;
        let (err_read, err_write) = pipe()?;
        let sent = wire::send(
            self.control.as_fd(),
            &ToInit::Exec(spec),
            &[in_read.as_fd(), out_write.as_fd(), err_write.as_fd()],
        );
        drop((in_read, out_write, err_write));
        if let Err(e) = sent {
            self.wait_ready()?;
            return Err(SandboxError::Lost { source: Some(e) });
        }
        self.wait_ready()?;
        let fail = |reason: String| SandboxError::Background {
            program: program.clone(),
            reason,
        };
        // Init answers the launcher's exec with its end (or why it could not start).
        let mut polls = [Poll {
            fd: self.control.as_raw_fd(),
            readable: false,
        }];
        let wait = LAUNCH_TIMEOUT.as_millis().min(i32::MAX as u128) as i32;
        sys::fd::poll(&mut polls, wait).map_err(|e| SandboxError::Lost { source: Some(e) })?;
        if !polls[0].readable {
            // The launcher only forks; one that does not end is killed with the session.
            self.kill();
            return Err(fail(format!(
                "its /bin/sh launcher did not finish within {} s",
                LAUNCH_TIMEOUT.as_secs()
            )));
        }
        match wire::receive::<FromInit>(&self.control)
            .map_err(|e| SandboxError::Lost { source: Some(e) })?
        {
            None => return Err(SandboxError::Lost { source: None }),
            Some((FromInit::Exited { code: Some(0), .. }, _)) => {}
            Some((FromInit::Exited { code, signal }, _)) => {
                return Err(fail(format!(
                    "its /bin/sh launcher ended with {}",
                    match (code, signal) {
                        (_, Some(signal)) => format!("signal {signal}"),
                        (code, None) => format!("status {}", code.unwrap_or(0)),
                    }
                )));
            }
            Some((FromInit::SpawnFailed { stage, errno }, _)) => {
                let source = io::Error::from_raw_os_error(errno);
                return Err(match stage {
                    WorkloadStage::Exec => fail(format!(
                        "the session has no usable /bin/sh to launch it ({source}); a background \
                         process needs one, so use an image that has a shell"
                    )),
                    WorkloadStage::Directory => {
                        SandboxError::WorkingDirectory { path: cwd, source }
                    }
                    stage => SandboxError::Workload { stage, source },
                });
            }
            Some((other, _)) => {
                return Err(SandboxError::Setup {
                    message: format!("unexpected message from init: {other:?}"),
                });
            }
        }
        Ok(Background {
            stdin: in_write,
            stdout: out_read,
            stderr: err_read,
        })
    }

    /// Ends the session: kills init and so every process in it, and waits until they are gone.
    pub fn close(mut self) {
        self.kill();
    }

    /// Ends the session of a process that exits right after (a one-shot `cordon exec`): kills
    /// init like [`Session::close`], but waits for it to die only while something else is still
    /// running in the session. Init is the reaper of its PID namespace, so its children are every
    /// other process the session holds; with none left, nothing in the sandbox can run once this
    /// returns, and init — which starts processes only when asked — dies without anyone waiting
    /// for its teardown (namespaces, mounts: ~0.2 ms), as bubblewrap's does. Its zombie is
    /// reaped when this process exits. A session with a cgroup is always waited for, so the group
    /// can be removed.
    pub fn close_for_exit(mut self) {
        let alone = self.cgroup.is_none() && {
            let pid = self.init.pid;
            // Reading fails without CONFIG_PROC_CHILDREN: then wait, as `close` does.
            fs::read(format!("/proc/{pid}/task/{pid}/children")).is_ok_and(|c| c.is_empty())
        };
        if alone {
            self.closed = true;
            let _ = sys::process::pidfd_kill(self.init.pidfd.as_fd());
        } else {
            self.kill();
        }
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
    budget: usize,
    on_output: &mut dyn FnMut(Stream, &[u8]),
) {
    for (index, stream) in [Stream::Stdout, Stream::Stderr].into_iter().enumerate() {
        // Bounded, so a background process that writes without pause can neither starve the
        // control socket nor keep the final drain (after the command exited) going forever.
        // Whatever the command itself wrote fits: it cannot have written more than a pipe holds
        // without us reading.
        let mut budget = budget;
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

/// The size a terminal command gets when this process's stdin reports none.
const DEFAULT_TERMINAL: crate::terminal::WindowSize =
    crate::terminal::WindowSize { rows: 24, cols: 80 };
/// How often a terminal command's window size is compared with the user's.
const TERMINAL_TICK: Duration = Duration::from_millis(100);
/// Typed input held while the pty has no room for it; past it, further input is dropped.
const MAX_PENDING_INPUT: usize = 64 << 10;

/// What a user stops a terminal command with: `^]` three times in a row (`Stdin::Terminal`
/// passes every other key, `^C` included, to the command, which may ignore them).
const ESCAPE: u8 = 0x1d;
const ESCAPES: u8 = 3;
/// The reason a command stopped by [`ESCAPE`] gives.
pub const ESCAPE_STOPPED: &str = "stopped from the terminal (^] three times)";

/// The host's end of the user's typing: into a terminal command's pty master
/// ([`Stdin::Terminal`]), or into the pipe a command gets for stdin when this process's stdin is
/// a terminal ([`Stdin::Inherit`]).
struct Pty<'a> {
    /// Whether the command runs on a pty (its size followed, the escape watched).
    terminal: bool,
    /// The pty master once init has sent it, or the stdin pipe's write end.
    master: Option<OwnedFd>,
    /// The user's terminal (this process's stdin) while it gives input.
    input: Option<BorrowedFd<'a>>,
    /// Input read but not yet taken by the pty.
    pending: Vec<u8>,
    /// The size last given to the pty.
    size: Option<crate::terminal::WindowSize>,
    /// How many [`ESCAPE`] bytes were typed in a row.
    escapes: u8,
}

impl Pty<'_> {
    /// Reads what the user typed (when `typed`), hands pending input on as far as it is taken,
    /// and passes on a change of the window's size. True when the user typed the escape.
    fn pump(&mut self, typed: bool, buf: &mut [u8]) -> bool {
        let mut escaped = false;
        if typed && let Some(input) = self.input {
            let room = MAX_PENDING_INPUT
                .saturating_sub(self.pending.len())
                .min(buf.len());
            match sys::fd::read(input, &mut buf[..room.max(1)]) {
                // End of input (`^D` on a terminal in its own mode, or a hang-up).
                Ok(0) | Err(_) => self.input = None,
                Ok(n) => {
                    if self.terminal {
                        for &byte in &buf[..n] {
                            self.escapes = if byte == ESCAPE { self.escapes + 1 } else { 0 };
                            escaped |= self.escapes >= ESCAPES;
                        }
                    }
                    if room > 0 {
                        self.pending.extend_from_slice(&buf[..n]);
                    }
                }
            }
        }
        let Some(master) = &self.master else {
            return escaped;
        };
        if self.terminal
            && let Some(size) = crate::terminal::window_size(std::io::stdin().as_fd())
            && Some(size) != self.size
            && crate::terminal::set_window_size(master.as_fd(), size).is_ok()
        {
            self.size = Some(size);
        }
        if !self.pending.is_empty() {
            match sys::fd::write_some(master.as_fd(), &self.pending) {
                Ok(n) => {
                    self.pending.drain(..n);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                // The reader is gone (the command and its children closed it).
                Err(_) => {
                    self.pending.clear();
                    self.input = None;
                }
            }
        }
        // A stdin pipe whose input ended is closed once drained: the command reads end of file.
        if !self.terminal && self.input.is_none() && self.pending.is_empty() {
            self.master = None;
        }
        escaped
    }
}

fn null() -> Result<OwnedFd, SandboxError> {
    let file = fs::File::open("/dev/null").map_err(SandboxError::start("open /dev/null"))?;
    Ok(OwnedFd::from(file))
}

/// Fails closed: the first missing required layer refuses the session, naming the layer and the
/// remedy. As root the idmapped workspace is required too (DESIGN §4: needed as root), and with an
/// environment image overlayfs in the user namespace (DESIGN §14).
fn refuse_missing_layers(privilege: Privilege, image: bool) -> Result<(), SandboxError> {
    let probe = Probe::detect_for_session();
    let mut missing: Vec<_> = probe.missing_required();
    if privilege == Privilege::Root && !probe.is_available(Layer::IdmappedMounts) {
        missing.push(probe.layer(Layer::IdmappedMounts));
    }
    if image && !probe.is_available(Layer::Overlayfs) {
        missing.push(probe.layer(Layer::Overlayfs));
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
